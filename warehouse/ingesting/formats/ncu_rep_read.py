"""The child process of :mod:`.ncu_rep`: read one ``.ncu-rep`` with NVIDIA's ``ncu_report``.

Run as a script (``python -I -S ncu_rep_read.py <report>``: ``forking.Isolated``), never
imported by the warehouse: the native reader may crash, hang or eat memory on a hostile file,
and only this process pays. It limits its own address space and CPU time first
(``PWH_NCU_MEM_MB``, ``PWH_NCU_CPU_S``), turns core dumps off, finds ``ncu_report`` and
``msgspec`` where the parent found them (``PWH_READER_PATH``: it runs without ``site``), then
writes one msgpack document to stdout:
``{"version", "ranges", "launches": [{range, action, function, demangled, mangled, workload,
nvtx, names, units, values, texts, written, instances}]}``. Exit 3 with a one-line reason on
stderr when the reader refuses the file; any other death is judged by the parent.
"""

import os
import resource
import sys


def _limit() -> None:
    mem = int(os.environ.get("PWH_NCU_MEM_MB", "1024")) << 20  # the parent always sets it (ncu_rep.MEM_MB)
    cpu = int(os.environ.get("PWH_NCU_CPU_S", "300"))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))


def _nvtx(action):
    st = action.nvtx_state()
    if st is None:
        return None
    out = {}
    for d in st.domains():
        dom = st.domain_by_id(d)
        if dom is None:
            continue
        pp, se = list(dom.push_pop_ranges()), list(dom.start_end_ranges())
        if pp or se:
            out[dom.name() or str(d)] = {"push_pop": pp, "start_end": se}
    return out or None


def read(path: str) -> dict:
    import ncu_report

    ctx = ncu_report.load_report(path)
    imetric = ncu_report.IMetric
    k_str, k_dbl, k_flt = imetric.ValueKind_STRING, imetric.ValueKind_DOUBLE, imetric.ValueKind_FLOAT
    k_u32, k_u64 = imetric.ValueKind_UINT32, imetric.ValueKind_UINT64
    iaction = ncu_report.IAction
    launches = []
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            names = sorted(a.metric_names())
            units, values, texts, written, inst = [], [], [], [], []
            for n in names:
                m = a.metric_by_name(n)
                k = m.kind()
                v = t = w = None
                if k in (k_dbl, k_flt):
                    v = m.as_double()
                elif k in (k_u32, k_u64):
                    i = m.as_uint64()
                    v = float(i)
                    if int(v) != i:
                        w = str(i)
                elif k == k_str:
                    t = m.as_string()
                    if t is None:
                        t = ""
                units.append(m.unit())
                values.append(v)
                texts.append(t)
                written.append(w)
                inst.append(m.num_instances())
            launches.append({
                "range": ri, "action": ai,
                "function": a.name(iaction.NameBase_FUNCTION),
                "demangled": a.name(iaction.NameBase_DEMANGLED),
                "mangled": a.name(iaction.NameBase_MANGLED),
                "workload": int(a.workload_type()),
                "nvtx": _nvtx(a),
                "names": names, "units": units, "values": values, "texts": texts,
                "written": written, "instances": inst,
            })
    return {"version": _version(ncu_report), "ranges": ctx.num_ranges(), "launches": launches}


def _version(module) -> str | None:
    """The installed ``ncu-report`` version, from its ``.dist-info`` folder name (importing
    ``importlib.metadata`` would cost this process ~0.15 s)."""
    site = os.path.dirname(os.path.dirname(module.__file__))
    try:
        names = os.listdir(site)
    except OSError:
        return None
    for n in names:
        if n.startswith("ncu_report-") and n.endswith(".dist-info"):
            return n[len("ncu_report-"):-len(".dist-info")]
    return None


def _path() -> None:
    """The folders of the installed packages this script imports (``PWH_READER_PATH``, set by
    the parent: the interpreter runs without ``site``, which saves ~20 ms of its start)."""
    for d in os.environ.get("PWH_READER_PATH", "").split(os.pathsep):
        if d and d not in sys.path:
            sys.path.append(d)


def main(argv: list[str]) -> int:
    _limit()
    _path()
    import msgspec

    try:
        doc = read(argv[1])
    except MemoryError:
        sys.stderr.write("the report reader ran out of its memory limit\n")
        return 3
    except Exception as exc:  # noqa: BLE001 - the reader's own refusal, reported as one line
        msg = " ".join(str(exc).split())[:300] or type(exc).__name__
        sys.stderr.write(f"ncu_report could not read the report: {msg}\n")
        return 3
    out = msgspec.msgpack.encode(doc)
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
