"""The rules that decide where trace values tie (docs/analyst-guide.md, "Where values meet"),
checked on the tied files of tests/gen_tied_traces.py; tests/test_determinism.py builds the same
files with the other histories incrementally, in full, in shuffled raw order and on other thread
counts. Also: the verdict engine's result does not depend on the order of the cells it is handed
(marts.kernel_trends hands them unordered)."""

from __future__ import annotations

import random

import pytest

from tests import gen_tied_traces
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.modelling import models, verdicts


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tied")
    files = gen_tied_traces.write_all(root / "files")
    s = settings(root / "w" / "warehouse.duckdb")
    runs = {}
    with db.writer(s.warehouse) as con:
        for p in files:
            r = loader.ingest_file(s, p, con=con)
            assert r.status == "ingested", r.message
            runs[f"{p.parent.name}/{p.name}" if p.name == "results.db" else p.name] = r.sha256
        con.execute("set threads = 2")
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, runs
    con.close()


def _kineto(label: str, rank: int) -> str:
    return f"kineto_{label}_rank{rank}.pt.trace.json"


def test_the_slowest_rank_of_tied_ranks_is_the_lowest(built):
    con, runs = built
    rows = con.execute("select label, rank, run_id, step, duration_ns, slowest_rank, "
                       "slowest_run_id, slowest_duration_ns, job_ranks from marts.step_times "
                       "where series = 'det-kineto' order by label, step, rank").fetchall()
    assert len(rows) == 3 * 3 * 2
    for label, rank, run_id, _, dur, slowest, slowest_run, slowest_ns, ranks in rows:
        assert run_id == runs[_kineto(label, int(rank))] and ranks == 2
        if label in ("v0", "v2"):  # the two ranks' steps take exactly as long
            assert dur == slowest_ns
            assert (slowest, slowest_run) == ("0", runs[_kineto(label, 0)]), (label, rank)
        else:  # rank 1 is a straggler
            assert dur <= slowest_ns
            assert (slowest, slowest_run) == ("1", runs[_kineto(label, 1)]), (label, rank)


def test_of_two_operators_with_the_same_start_and_end_the_first_in_the_file_encloses(built):
    """The twin of the first aten::addmm (same start and end) encloses it when written before
    it, else it is the innermost operator of the launches inside (its kernel and the two tied
    ones)."""
    con, runs = built
    kernels = dict(con.execute(
        "select run_id || op, kernels from marts.op_rollup where op in (?, 'aten::addmm')",
        [gen_tied_traces.TWIN_OP]).fetchall())
    twin_first = {_kineto("v0", 0): True, _kineto("v1", 0): False, _kineto("v2", 0): False,
                  _kineto("v2", 1): True, "kineto_unrounded_0.pt.trace.json": True,
                  "kineto_unrounded_1.pt.trace.json": False}
    for name, first in twin_first.items():
        twin = kernels.get(runs[name] + gen_tied_traces.TWIN_OP, 0)
        addmm = kernels[runs[name] + "aten::addmm"]
        assert (twin, addmm) == ((0, 5) if first else (3, 2)), name
    # tied push/pop ranges of nsys and rocprof: the later one in the file is inside the other
    nested = con.execute(
        "select c.run_id, c.name, c.parent_op from staging.trace_cpu_events as c where "
        "c.is_operator and c.name in ('step 1', 'iter 1')").fetchall()
    assert sorted((n, p) for _, n, p in nested) == [("iter 1", "iter 0")] * 2 + [
        ("step 1", "step 0")] * 2


def test_equal_time_launches_and_kernels_tied_in_time(built):
    con, runs = built
    rows = con.execute("select run_id, name, launch_idx, launch_start_ns, op, start_ns, dur_ns "
                       "from staging.trace_gpu_events where name like 'tied_kernel_%' "
                       "order by run_id, name").fetchall()
    assert len(rows) == 2 * 6
    for a, b in zip(rows[::2], rows[1::2], strict=True):
        # each its own launch (by correlation), both at the same ns, under the same operator
        assert a[2] != b[2] and a[3] == b[3] and a[4] == b[4] and a[5:] == b[5:]
    # equal totals rank by kernel name
    ranks = con.execute("select run_id, kernel, rank_in_run, total_us from "
                        "marts.kernel_run_rollup where kernel like 'tied_kernel_%' and run_id "
                        "in (select run_id from staging.runs where series = 'det-kineto') "
                        "order by run_id, kernel").fetchall()
    assert len(ranks) == 2 * 4
    for a, b in zip(ranks[::2], ranks[1::2], strict=True):
        assert a[1:] == ("tied_kernel_a", b[2] - 1, b[3]), (a, b)


def _union(intervals) -> int:
    total, reach = 0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def assert_unions(con, what: str = "") -> None:
    """gpu_timeline's unions and trace_devices' busy time equal plain Python's over the
    activities (tests/test_determinism.py checks them after every kind of build too)."""
    acts: dict = {}
    for run, dev, cls, kind, a, b in con.execute(
            "select run_id, device, kernel_class, kind, start_ns, end_ns from "
            "staging.trace_gpu_events").fetchall():
        for s in ("all", cls) + (("comm_compute",) if cls != "memory" else ()) + (
                ("kernel",) if kind == "kernel" else ()):
            acts.setdefault((run, dev, s), []).append((a, b))
    rows = con.execute("select run_id, device, busy_ns, compute_ns, communication_ns, "
                       "memory_ns, comm_compute_overlap_ns from marts.gpu_timeline where step "
                       "is null").fetchall()
    assert len(rows) == len({(r, d) for r, d, _ in acts}), what
    for run, dev, busy, compute, comm, memory, overlap in rows:
        u = {s: _union(acts.get((run, dev, s), [])) for s in
             ("all", "compute", "communication", "memory", "comm_compute")}
        assert (busy, compute, comm, memory, overlap) == (
            u["all"], u["compute"], u["communication"], u["memory"],
            u["compute"] + u["communication"] - u["comm_compute"]), (what, run, dev)
    for run, dev, busy in con.execute("select run_id, device, busy_ns from "
                                      "staging.trace_devices where busy_ns is not null"
                                      ).fetchall():
        assert busy == _union(acts[(run, dev, "kernel")]), (what, run, dev)


def test_activities_with_the_same_start_and_end_are_counted_once(built):
    """Every run has two kernels with the same start and end: merged into one island, never
    counted twice (whichever the sort puts first)."""
    con, runs = built
    assert_unions(con)
    # nsys, rocprof: the tied pair (40 us each) and a kernel of 10 us on device 0
    busy = dict(con.execute("select run_id, busy_ns from staging.trace_devices where device = "
                            "'0'").fetchall())
    assert [busy[runs[n]] for n in ("nsys_0.sqlite", "rocprof_0/results.db")] == [50_000] * 2


def test_hta_sums_of_fractional_microseconds_are_exact(built):
    """A trace HTA leaves unrounded adds fractional microseconds: each sum (a kernel type's
    sum_us, the merged COMPUTATION groups' compute_time_us) is the double nearest the exact
    decimal sum (plain floating-point sums gave 118448.08300000001 and 220464.71500000003 here,
    and may differ in any order of addition)."""
    con, runs = built
    ids = [runs[f"kineto_unrounded_{n}.pt.trace.json"] for n in range(2)]
    sums = con.execute("select sum_us from marts.hta_kernel_type_breakdown where run_id in "
                       "(?, ?) union all select compute_time_us from "
                       "marts.hta_temporal_breakdown where run_id in (?, ?)", ids + ids).fetchall()
    values = [v for (v,) in sums]
    assert len(values) >= 6
    assert any(v != round(v) for v in values)  # fractional: the unrounded path
    assert all(round(v, 9) == v for v in values), values


def test_the_verdict_engine_ignores_the_order_of_its_cells():
    """pwh_judge_series gets a series' cells in whatever order the list aggregate made: its
    result must not depend on it (run-wide factors, candidate changes, change points)."""
    rng = random.Random(3)
    runs = {seq: [f"r{seq}-{i}" for i in range(3)] for seq in range(8)}
    run_f = {r: rng.uniform(0.95, 1.05) for rs in runs.values() for r in rs}
    cells = []
    for k in range(7):
        for seq, rs in runs.items():
            step = 1.3 if k == 2 and seq >= 5 else 1.0
            cells.append({"kind": "kernel", "key": f"k{k}", "label": f"v{seq}", "label_seq": seq,
                          "values": [100.0 * (k + 1) * step * run_f[r] * rng.uniform(0.99, 1.01)
                                     for r in rs], "runs": rs})
    want = verdicts.judge_series(cells)
    assert any(r["verdict"] == "regressed" for r in want)  # the engine had something to decide
    for _ in range(5):
        rng.shuffle(cells)
        assert verdicts.judge_series(cells) == want


def test_the_tied_files_cover_every_trace_and_ncu_model(built):
    con, _ = built
    project = models.load_project()
    empty = [n for n in project.order
             if not con.execute(f"select count(*) from {n}").fetchone()[0]]  # noqa: S608
    assert set(empty) <= {"staging.audit_signatures", "staging.audit_kernels",
                          "staging.profile_kernels", "staging.profile_samples",
                          "marts.audit_category_rollup"}, empty
