"""Kernel traces and Nsight Compute exports made to provoke choices, for tests/test_determinism*.

Every file carries ties that a model could break by row order, thread count or build path:

- Kineto training jobs of two ranks (``kineto_gen.write_training``; the job from a sidecar):
  ranks with exactly equal step times (the "slowest rank" of ``marts.step_times``), a twin
  operator with the same start and end as another (which one encloses the other: file
  position), two more launches at the same ns as another (equal-time launches) of two
  kernels with equal start and duration on two streams (rank ties by kernel name, identical
  intervals in the GPU unions);
- a Kineto trace whose timestamps are whole microseconds but whose kernel durations are not,
  starting near 0 µs: HolisticTraceAnalysis does not round it, so the HTA marts add
  fractional microseconds (floating-point sums);
- Nsight Systems SQLite exports with NVTX (``tests/gen_vendor_traces.nsys_sqlite``) and rocprof
  ``results.db`` files with roctx ranges, whose kernels tie in start and duration: tied
  runtime calls and tied push/pop ranges on one thread;
- ``ncu --csv`` exports (``ncu_gen``) where launches of a kernel, two kernels' totals and two
  runs of a label carry equal values.

:func:`write_all` writes them with their sidecars and returns the paths.
"""

from __future__ import annotations

import io
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

from tests import gen_vendor_traces as gen
from warehouse.ingesting.formats import kineto_gen, ncu_gen

TWIN_OP = "aten::twin_op"
TIED_KERNELS = ("tied_kernel_b", "tied_kernel_a")  # equal start and duration, b first in file


# ------------------------------------------------------------------------------ Kineto
def _dump(v) -> str:
    """JSON text of ``v`` with Decimal numbers written exactly (as Kineto writes them)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",\n".join(_dump(x) for x in v) + "]"
    if isinstance(v, Decimal):
        return format(v, "f")
    return json.dumps(v)


def _training(**kw) -> dict:
    buf = io.BytesIO()
    kineto_gen.write_training(buf, **kw)
    return json.loads(buf.getvalue(), parse_float=Decimal)


def _with_ties(doc: dict, twin_first: bool) -> dict:
    """A twin of the first operator (same start and end; before it in the file or after it)
    and two more launches at the same ns as the first launch, of two kernels with the first
    kernel's start and duration on streams 7 and 13."""
    ev = doc["traceEvents"]
    i_op = next(i for i, e in enumerate(ev) if e.get("cat") == "cpu_op")
    twin = dict(ev[i_op], name=TWIN_OP, args=dict(ev[i_op]["args"], **{"External id": 777}))
    ev.insert(i_op if twin_first else i_op + 1, twin)
    launch = next(e for e in ev if e.get("name") == "cudaLaunchKernel")
    kernel = next(e for e in ev if e.get("cat") == "kernel")
    extra = []
    for n, (name, stream) in enumerate(zip(TIED_KERNELS, (7, 13), strict=True)):
        corr = 900_001 + n
        extra.append(dict(launch, args=dict(launch["args"], correlation=corr,
                                            **{"External id": corr})))
        extra.append(dict(kernel, name=name, tid=stream,
                          args=dict(kernel["args"], correlation=corr, stream=stream,
                                    **{"External id": corr})))
    i_launch = ev.index(launch)
    ev[i_launch + 1: i_launch + 1] = extra
    return doc


def _unrounded(doc: dict) -> dict:
    """Times scaled by 1000 (ns become whole µs), starting at 1 µs, and a fraction of a µs
    (a function of its start) added to each kernel's duration: HTA keeps such a trace
    unrounded."""
    ev = doc["traceEvents"]
    t0 = min(e["ts"] for e in ev if e.get("ph") != "M")
    for e in ev:
        if e.get("ph") == "M":
            continue
        e["ts"] = (e["ts"] - t0) * 1000 + 1
        if "dur" in e:
            e["dur"] = e["dur"] * 1000
            if e.get("cat") == "kernel":  # kernels tied in start stay tied in duration
                e["dur"] += Decimal(f"0.{(int(e['ts']) * 389) % 1000:03d}")
    return doc


def kineto_files(folder: Path) -> list[Path]:
    """Series ``det-kineto``: three labels, each a job of two ranks; series ``det-hta``: two
    unrounded runs of one label."""
    out = []
    runs = (  # (label, rank, write_training settings, twin operator first?)
        ("v0", 0, {"noise": 0, "run_noise": 0, "cpu_jitter_ns": 0}, True),
        ("v0", 1, {"noise": 0, "run_noise": 0, "cpu_jitter_ns": 0}, None),
        ("v1", 1, {"seed": 1, "slowdown": 1.05}, None),
        ("v1", 0, {"seed": 1}, False),
        ("v2", 0, {"noise": 0, "run_noise": 0, "cpu_jitter_ns": 0, "seed": 2}, False),
        ("v2", 1, {"noise": 0, "run_noise": 0, "cpu_jitter_ns": 0, "seed": 2}, True),
    )
    for n, (label, rank, kw, twin_first) in enumerate(runs):
        doc = _training(steps=3, rank=rank, world_size=2, **kw)
        if twin_first is not None:
            doc = _with_ties(doc, twin_first)
        p = folder / f"kineto_{label}_rank{rank}.pt.trace.json"
        p.write_text(_dump(doc))
        _sidecar(p, series="det-kineto", label=label, job=f"train-{label}",
                 captured_at=f"2026-03-0{1 + n // 2}T00:00:0{n % 2}Z")
        out.append(p)
    for n in range(2):
        doc = _unrounded(_with_ties(_training(steps=3, seed=10 + n, relative=True), n == 0))
        p = folder / f"kineto_unrounded_{n}.pt.trace.json"
        p.write_text(_dump(doc))
        _sidecar(p, series="det-hta", label="v0", captured_at=f"2026-03-01T00:00:0{n}Z")
        out.append(p)
    return out


# ---------------------------------------------------------------- Nsight Systems, rocprof
def _tied_dispatches(variant: int) -> list[gen.K]:
    """Kernels whose start and duration tie: two at the same ns on two streams (their launch
    calls and enclosing ranges tie too), and two names whose totals tie."""
    a, b, c, d = gen._NAMES[:4]  # noqa: SLF001 - the generator's real kernel names
    t = 2_000_000
    ks = [gen.K(a, 0, 7, t, 40_000), gen.K(b, 0, 8, t, 40_000),
          gen.K(c, 1, 7, t + 60_000, 25_000), gen.K(d, 1, 7, t + 100_000, 15_000),
          gen.K(d, 0, 9, t + 130_000, 10_000), gen.K(a, 1, 8, t + 160_000, 30_000 + variant)]
    if variant:
        ks.append(gen.K(c, 0, 7, t + 200_000, 40_000))
    return ks


def _with_roctx(data: bytes, ks: list[gen.K]) -> bytes:
    """A rocTX table as rocprof's tblextr writes it: per dispatch a push/pop range ``iter <i>``
    around its hipLaunchKernel (tied dispatches: tied ranges) and an outer range."""
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    con.execute('CREATE TABLE rocTX ("BeginNs" INTEGER, "EndNs" INTEGER, "pid" INTEGER, '
                '"tid" INTEGER, "Name" TEXT, "Index" INTEGER, "__section" INTEGER, '
                '"__lane" INTEGER)')
    rows = [(ks[0].start_ns - 20_000, ks[-1].start_ns + 20_000, "train")]
    rows += [(k.start_ns - 6000, k.start_ns - 3500, f"iter {i}") for i, k in enumerate(ks)]
    for n, (b, e, name) in enumerate(rows):
        con.execute("insert into rocTX values (?,?,?,?,?,?,?,?)",
                    (b, e, "4242", 4242, name, n, 0, 4242))
    con.commit()
    out = con.serialize()
    con.close()
    return out


def vendor_files(folder: Path) -> list[Path]:
    out = []
    for v in range(2):
        ks = _tied_dispatches(v)
        p = folder / f"nsys_{v}.sqlite"
        p.write_bytes(gen.nsys_sqlite(ks, cpu_side=True))
        _sidecar(p, series="det-nsys", label=f"v{v}", captured_at=f"2026-03-0{1 + v}T00:00:00Z")
        out.append(p)
        p = folder / f"rocprof_{v}" / "results.db"
        p.parent.mkdir()
        p.write_bytes(_with_roctx(gen.rocprof_results_db(ks), ks))
        _sidecar(p, series="det-rocprof", label=f"v{v}",
                 captured_at=f"2026-03-0{1 + v}T00:00:00Z")
        out.append(p)
    return out


# ------------------------------------------------------------------------- Nsight Compute
def _tied_launches(seed: int) -> list[dict]:
    """Two launches per kernel; a kernel's second launch equals its first, and the second
    kernel's values equal the first kernel's (equal totals)."""
    lcs = ncu_gen.launches(seed)
    for i in (1, 2, 3):
        lcs[i]["metrics"] = list(lcs[0]["metrics"])
    return lcs


def ncu_files(folder: Path) -> list[Path]:
    """Series ``det-ncu``: two labels of two runs; the runs of label v0 hold equal values (they
    differ in a console line only)."""
    out = []
    for n, (label, seed) in enumerate((("v0", 3), ("v0", 3), ("v1", 4), ("v1", 5))):
        p = folder / f"ncu_{n}.csv"
        p.write_text(f"==PROF== determinism export {n}\n" + ncu_gen.details(_tied_launches(seed)))
        _sidecar(p, series="det-ncu", label=label, captured_at=f"2026-03-0{1 + n // 2}T00:00:0{n}Z")
        out.append(p)
    return out


def _sidecar(p: Path, **meta) -> None:
    p.with_name(p.name + ".meta.json").write_text(json.dumps(meta))


def write_all(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return kineto_files(folder) + vendor_files(folder) + ncu_files(folder)
