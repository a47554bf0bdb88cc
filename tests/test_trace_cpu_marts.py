"""The CPU side of Kineto traces through the models: marts.step_times, marts.gpu_timeline and
marts.op_rollup against an independent computation in plain Python over the JSON (times read as
decimals, exact in integer ns), on every real sample in ``../shared/samples/kineto/`` (skipped
where absent), on generated traces and on a hand-made trace with the awkward cases (zero-length
operators at a sibling's end, nested operators, kernels without a launch, launches outside every
operator and every step, NCCL kernels overlapping compute, two devices)."""

from __future__ import annotations

import bisect
import decimal
import gzip
import json
import random
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from warehouse import db
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen
from warehouse.modelling import models

SAMPLES = ROOT.parent / "shared" / "samples" / "kineto"
SAMPLE_FILES = sorted(SAMPLES.glob("*.json.gz")) if SAMPLES.is_dir() else []

RUNTIME = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "hip_api", "cuda_api"}
GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
       "memset": "memset"}
STEP = re.compile(r"\AProfilerStep#([0-9]+)\Z")


def _ns(v) -> int:
    d = decimal.Decimal(str(v)) * 1000
    assert d == d.to_integral_value()
    return int(d)


def _text(v) -> str | None:
    return None if v is None else str(v)


def expected(doc: dict) -> dict:
    """The three marts' figures, computed from the document alone."""
    rank = _text((doc.get("distributedInfo") or {}).get("rank"))
    ops, calls, steps, gpu = defaultdict(list), {}, {}, []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X":
            continue
        cat = str(e.get("cat") or "").lower()
        name = e["name"]
        s = _ns(e["ts"])
        end = s + _ns(e["dur"])
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        thread = (_text(e.get("pid")), _text(e.get("tid")))
        if cat in ("cpu_op", "operator", "user_annotation"):
            m = STEP.match(name)
            if m:
                n = int(m.group(1))
                a, b = steps.get(n, (s, end))
                steps[n] = (min(a, s), max(b, end))
            elif cat != "user_annotation":
                ops[thread].append((s, end, i, name))
        elif cat in RUNTIME:
            c = args.get("correlation")
            if isinstance(c, int) and c not in calls:
                calls[c] = (s, end, i, thread)
        elif cat in GPU:
            kind = GPU[cat]
            bare = name.lower().removeprefix("void ")
            cls = ("memory" if kind != "kernel" else "communication"
                   if bare.startswith(("nccl", "rccl", "msccl")) else "compute")
            c = args.get("correlation")
            gpu.append({"kind": kind, "name": name, "device": _text(args.get("device")),
                        "start": s, "end": end, "cls": cls,
                        "launch": calls.get(c) if isinstance(c, int) else None, "corr": c})
    # a launch listed after its kernel still counts: resolve launches after the pass
    for g in gpu:
        if g["launch"] is None and isinstance(g["corr"], int):
            g["launch"] = calls.get(g["corr"])
    arrays = {t: tuple(np.array([o[k] for o in v], dtype=np.int64) for k in range(3))
              for t, v in ops.items()}

    def innermost(s, end, thread):
        """The operator enclosing [s, end) with the latest start, then the earliest end, then
        the latest file position; an operator encloses what starts before its end (a
        zero-length operator: what lies at its instant)."""
        if thread not in arrays:
            return None
        os_, oe, oi = arrays[thread]
        m = (os_ <= s) & (oe >= end) & ((s < oe) | (oe == os_))
        cand = np.flatnonzero(m)
        if not len(cand):
            return None
        best = max(cand.tolist(), key=lambda k: (int(os_[k]), -int(oe[k]), int(oi[k])))
        return ops[thread][best][3]

    starts = sorted((a, -b, n) for n, (a, b) in steps.items())  # by start, then the longer
    by_start = {}
    for a, nb, n in starts:
        by_start.setdefault(a, (-nb, n))
        if (-nb, n) > by_start[a]:
            by_start[a] = (-nb, n)
    keys = sorted(by_start)

    def step_of(t):
        k = bisect.bisect_right(keys, t) - 1
        if k < 0:
            return None
        b, n = by_start[keys[k]]
        return n if t < b else None

    for g in gpu:
        g["op"] = g["step"] = None
        if g["launch"] is not None:
            ls, le, _, th = g["launch"]
            g["op"] = innermost(ls, le, th)
            g["step"] = step_of(ls)

    def union(iv):
        total, reach = 0, None
        for a, b in sorted(iv):
            if reach is None or a > reach:
                total += b - a
                reach = b
            elif b > reach:
                total += b - reach
                reach = b
        return total

    timeline = {}
    groups = defaultdict(list)
    for g in gpu:
        groups[(g["device"], None)].append(g)
        if g["step"] is not None:
            groups[(g["device"], g["step"])].append(g)
    for key, gs in groups.items():
        iv = {c: [(g["start"], g["end"]) for g in gs if g["cls"] == c]
              for c in ("compute", "communication", "memory")}
        span = max(g["end"] for g in gs) - min(g["start"] for g in gs)
        busy = union([(g["start"], g["end"]) for g in gs])
        cc = union(iv["compute"] + iv["communication"])
        timeline[key] = {"span_ns": span, "busy_ns": busy, "idle_ns": span - busy,
                         "compute_ns": union(iv["compute"]),
                         "communication_ns": union(iv["communication"]),
                         "memory_ns": union(iv["memory"]),
                         "comm_compute_overlap_ns": union(iv["compute"])
                         + union(iv["communication"]) - cc}
    rollup = defaultdict(lambda: [0, 0, 0, 0])
    for g in gpu:
        if g["kind"] == "kernel":
            r = rollup[g["op"] or "(unattributed)"]
            r[0] += 1
            r[1] += g["end"] - g["start"]
    for v in ops.values():
        for s, end, _, name in v:
            r = rollup[name]
            r[2] += 1
            r[3] += end - s
    return {"rank": rank,
            "steps": {n: (a, b - a) for n, (a, b) in steps.items()},
            "timeline": timeline,
            "rollup": {k: tuple(v) for k, v in rollup.items()}}


def actual(con, run_id: str) -> dict:
    steps = {n: (a, d) for n, a, d in con.execute(
        "select step, start_ns, duration_ns from marts.step_times where run_id = ?",
        [run_id]).fetchall()}
    cols = ("span_ns", "busy_ns", "idle_ns", "compute_ns", "communication_ns", "memory_ns",
            "comm_compute_overlap_ns")
    timeline = {(r[0], r[1]): dict(zip(cols, r[2:], strict=True)) for r in con.execute(
        f"select device, step, {', '.join(cols)} from marts.gpu_timeline "  # noqa: S608
        "where run_id = ?", [run_id]).fetchall()}
    rollup = {r[0]: (r[1], r[2], r[3], int(r[4])) for r in con.execute(
        "select op, kernels, kernel_ns, calls, cpu_ns from marts.op_rollup where run_id = ?",
        [run_id]).fetchall()}
    ranks = {r[0] for r in con.execute(
        "select rank from marts.step_times where run_id = ? union all "
        "select rank from marts.gpu_timeline where run_id = ?", [run_id, run_id]).fetchall()}
    return {"steps": steps, "timeline": timeline, "rollup": rollup, "ranks": ranks}


def _ev(cat, name, ts, dur, pid=1, tid=1, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def _kernel(name, ts, dur, corr, device=0, stream=7):
    return _ev("kernel", name, ts, dur, pid=device, tid=stream, device=device, stream=stream,
               correlation=corr)


HAND = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 5, "world_size": 8},
    "traceEvents": [
        _ev("user_annotation", "ProfilerStep#3", 0, 100),
        _ev("cpu_op", "aten::linear", 1, 40),
        _ev("cpu_op", "aten::addmm", 2, 20),
        _ev("cuda_runtime", "cudaLaunchKernel", 3, 2, correlation=1),
        _ev("cpu_op", "aten::view", 22, 0),  # zero length at addmm's end, copy_'s start
        _ev("cpu_op", "aten::copy_", 22, 10),  # starts at addmm's end: a sibling
        _ev("cuda_runtime", "cudaMemcpyAsync", 23, 1, correlation=2),
        _ev("cuda_runtime", "cudaLaunchKernel", 45, 1, correlation=3),  # in the step, no op
        _ev("cpu_op", "nccl:all_reduce", 50, 30),
        _ev("cuda_runtime", "cudaLaunchKernel", 51.5, 1, correlation=4),
        _ev("user_annotation", "ProfilerStep#4", 100, 50.25),
        _ev("cpu_op", "aten::mm", 101, 10),
        _ev("cuda_runtime", "cudaLaunchKernel", 102, 1, correlation=5),
        _ev("cpu_op", "aten::mm", 120, 10, tid=2),  # another thread
        _ev("cuda_runtime", "cudaLaunchKernel", 121, 1, tid=2, correlation=6),
        _ev("cuda_runtime", "cudaLaunchKernel", 200, 1, correlation=7),  # after every step
        _kernel("gemm_a", 10, 30, 1),
        _ev("gpu_memcpy", "Memcpy HtoD", 30, 5, pid=0, tid=9, device=0, stream=9,
            correlation=2),
        _kernel("elementwise", 46, 4, 3),
        _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 35, 40.5, 4, stream=11),
        _kernel("gemm_b", 110, 10, 5),
        _kernel("gemm_b", 125, 10, 6, device=1),
        _kernel("late", 210, 1, 7),
        _kernel("orphan", 300, 2, 99),  # its launch is not in the trace
        _ev("kernel", "no_args", 400, 1, pid=0, tid=7),
    ],
}


def _write_inputs(folder: Path) -> list[Path]:
    files = []
    f = folder / "hand.pt.trace.json"
    f.write_text(json.dumps(HAND))
    files.append(f)
    shuffled = dict(HAND, traceEvents=random.Random(3).sample(HAND["traceEvents"],
                                                                len(HAND["traceEvents"])))
    f = folder / "hand_shuffled.pt.trace.json"  # events out of order: the same figures
    f.write_text(json.dumps(shuffled))
    files.append(f)
    for seed, relative in ((3, False), (4, True)):
        g = folder / f"gen{seed}.pt.trace.json"
        kineto_gen.write_file(g, steps=6, seed=seed, relative=relative, first_step=40 + seed)
        files.append(g)
    return files + SAMPLE_FILES


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from warehouse.config import settings

    root = tmp_path_factory.mktemp("cpu-marts")
    s = settings(root / "state" / "warehouse.duckdb")
    files = _write_inputs(root)
    results = loader.ingest_paths(s, files)
    assert [r.status for r in results] == ["ingested"] * len(files), [r.message for r in results]
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, {Path(r.path).name: (Path(r.path), r.sha256) for r in results}
    con.close()


def _doc(path: Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, parse_float=decimal.Decimal)


NAMES = ["hand.pt.trace.json", "hand_shuffled.pt.trace.json", "gen3.pt.trace.json", "gen4.pt.trace.json"] + [
    f.name for f in SAMPLE_FILES]


@pytest.mark.parametrize("name", NAMES, ids=lambda n: n[:40])
def test_marts_equal_an_independent_computation(built, name):
    con, runs = built
    path, run_id = runs[name]
    want, got = expected(_doc(path)), actual(con, run_id)
    assert got["steps"] == want["steps"]
    assert got["timeline"] == want["timeline"]
    assert got["rollup"] == want["rollup"]
    assert got["ranks"] <= {want["rank"]}


def test_the_hand_made_trace_reads_as_designed(built):
    """The definitions on a trace small enough to check by eye (the figures above are
    computed, these are written down)."""
    con, runs = built
    got = actual(con, runs["hand.pt.trace.json"][1])
    assert got["steps"] == {3: (0, 100_000), 4: (100_000, 50_250)}
    r = got["rollup"]
    assert r["aten::addmm"][:2] == (1, 30_000)  # gemm_a, launched inside addmm
    assert r["aten::mm"] == (2, 20_000, 2, 20_000)  # both threads
    assert r["nccl:all_reduce"][:2] == (1, 40_500)
    assert r["aten::copy_"][:2] == (0, 0)  # its call launched a memcpy: not a kernel
    assert r["(unattributed)"] == (4, 4_000 + 1_000 + 2_000 + 1_000, 0, 0)
    assert r["aten::view"] == (0, 0, 1, 0)
    step3 = got["timeline"][("0", 3)]
    # gemm_a [10, 40), memcpy [30, 35), elementwise [46, 50), nccl [35, 75.5) on device 0
    assert step3["span_ns"] == 65_500 and step3["busy_ns"] == 65_500
    assert step3["compute_ns"] == 34_000 and step3["communication_ns"] == 40_500
    assert step3["memory_ns"] == 5_000 and step3["comm_compute_overlap_ns"] == 9_000
    whole = got["timeline"][("0", None)]
    assert whole["span_ns"] == 302_000 - 10_000  # to the orphan kernel's end
    assert whole["idle_ns"] == whole["span_ns"] - whole["busy_ns"]
    assert got["timeline"][(None, None)]["busy_ns"] == 1_000  # the kernel without args


def test_events_out_of_order_give_the_same_figures(built):
    con, runs = built
    a = actual(con, runs["hand.pt.trace.json"][1])
    b = actual(con, runs["hand_shuffled.pt.trace.json"][1])
    assert a == b and a["rollup"]["aten::addmm"][0] == 1


def test_nesting_of_the_cpu_side(built):
    con, runs = built
    rows = dict(((n, s), (d, p, ok)) for n, s, d, p, ok in con.execute(
        "select name, start_ns, depth, parent_op, nesting_ok from staging.trace_cpu_events "
        "where run_id = ?", [runs["hand.pt.trace.json"][1]]).fetchall())
    # an operator encloses [start, end): a zero-length operator at one's end lies outside it,
    # at one's start inside it
    assert rows[("aten::view", 22_000)] == (2, "aten::copy_", True)
    assert rows[("aten::copy_", 22_000)] == (1, "aten::linear", True)
    assert rows[("cudaMemcpyAsync", 23_000)] == (2, "aten::copy_", True)
    assert rows[("cudaLaunchKernel", 3_000)] == (2, "aten::addmm", True)
    assert rows[("ProfilerStep#3", 0)] == (0, None, True)


def _ingest_doc(tmp_path: Path, name: str, doc: dict):
    """``doc`` written as ``name`` and ingested into a fresh warehouse; its settings."""
    from warehouse.config import settings

    f = tmp_path / name
    f.write_text(json.dumps(doc))
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    [r] = loader.ingest_paths(s, [f])
    assert r.status == "ingested", r.message
    return s


def test_operators_not_properly_nested_are_flagged_not_guessed(tmp_path):
    doc = {"traceEvents": [
        _ev("cpu_op", "a", 0, 10), _ev("cpu_op", "b", 5, 10),  # b overlaps a's end
        _ev("cuda_runtime", "cudaLaunchKernel", 6, 1, correlation=1),
        _kernel("k", 20, 1, 1),
        _ev("cpu_op", "c", 0, 10, tid=2),
        _ev("cuda_runtime", "cudaLaunchKernel", 1, 1, tid=2, correlation=2),
        _kernel("k2", 30, 1, 2)]}
    s = _ingest_doc(tmp_path, "bad.pt.trace.json", doc)
    with db.writer(s.warehouse) as con:
        models.build(con)
        got = dict(con.execute("select tid, bool_and(nesting_ok) from staging.trace_cpu_events "
                               "group by tid").fetchall())
        assert got == {"1": False, "2": True}
        assert con.execute("select count(*) from staging.trace_cpu_events where tid = '1' and "
                           "(depth is not null or parent_op is not null)").fetchone() == (0,)
        rollup = dict(con.execute("select op, kernels from marts.op_rollup").fetchall())
        assert rollup["(unattributed)"] == 1 and rollup["c"] == 1


def test_templated_and_msccl_collectives_are_communication(tmp_path):
    """A templated NCCL kernel demangles with its return type ('void ncclKernel<...>(...)': NCCL
    2.x, Meta's NCCLX), MSCCL's are mscclKernel_*: communication like ncclDevKernel_*, never
    compute; a kernel that merely mentions nccl later in its name stays compute."""
    names = ["void ncclKernel<(ncclFunc_t)4, float, FuncSum<float>, 1, 0>(ncclWorkElem)",
             "mscclKernel_Sum_float_LL128(int, int, void*)", "VOID RCCLKERNEL_X", "my_nccl_copy"]
    doc = {"schemaVersion": 1, "traceEvents": [
        _kernel(n, 100 * i, 10 + i, i + 1) for i, n in enumerate(names)]}
    s = _ingest_doc(tmp_path, "coll.pt.trace.json", doc)
    with db.writer(s.warehouse) as con:
        models.build(con, select=["marts.gpu_timeline"])
        got = dict(con.execute("select name, kernel_class from staging.trace_gpu_events"
                               ).fetchall())
        assert got == {names[0]: "communication", names[1]: "communication",
                       names[2]: "communication", names[3]: "compute"}
        assert con.execute("select communication_ns, compute_ns from marts.gpu_timeline "
                           "where device = '0' and step is null").fetchone() == (
            10_000 + 11_000 + 12_000, 13_000)
        assert expected(doc)["timeline"][("0", None)]["communication_ns"] == 33_000


def test_timeline_and_rollup_checks_pass_and_catch_a_broken_figure(tmp_path):
    from warehouse import checks
    from warehouse.config import settings

    f = tmp_path / "hand.pt.trace.json"
    f.write_text(json.dumps(HAND))
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    [r] = loader.ingest_paths(s, [f])
    with db.writer(s.warehouse) as con:
        models.build(con)
        results = checks.validate_run(con, r.sha256)
        assert {"gpu_timeline_invariants", "op_rollup_invariants"} <= {x.suite for x in results}
        assert all(x.success for x in results), [x for x in results if not x.success]
        con.execute("update marts.gpu_timeline set idle_ns = idle_ns + 1 where step = 3")
        con.execute("update marts.op_rollup set kernel_ns = kernel_ns + 1 where op = 'aten::mm'")
        bad = {x.rule for x in checks.validate_run(con, r.sha256) if not x.success}
    assert bad == {"busy_ns + idle_ns = span_ns and idle_ns >= 0",
                   "the rows' kernels and kernel_ns sum to the run's kernels and kernel time in "
                   "raw.trace_events"}
