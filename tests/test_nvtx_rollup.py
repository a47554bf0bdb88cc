"""NVTX / roctx ranges as the operators of Nsight Systems and rocprof runs (issue 20, items 1
and 3): ``staging.trace_cpu_events`` nests the runtime calls and ranges of a thread in its
NVTX push/pop ranges (depth, innermost range, ``nesting_ok``) and ``marts.op_rollup`` gives
each kernel to the innermost range enclosing the runtime call that launched it.

Expected values come from plain Python over the export itself (``sqlite3`` reads
``NVTX_EVENTS``, ``CUPTI_ACTIVITY_KIND_RUNTIME`` and ``CUPTI_ACTIVITY_KIND_KERNEL``), never from
the parser or the models; for ``nsys stats nvtx_pushpop_trace`` CSVs from nsys's own nesting
columns (``Lvl``, ``ParentId``)."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from tests import gen_vendor_traces as gen
from tests.vendor_trace_checks import samples
from warehouse import db
from warehouse.ingesting import loader
from warehouse.modelling import models

# launches 10 us apart: the generator's ranges around each (4 us before its kernel) nest
KS = [gen.K(k.name, k.device, k.stream, 1_000_000 + 10_000 * i, k.dur_ns)
      for i, k in enumerate(gen.kernels(6, 40))]
MODELS = ["staging.trace_cpu_events", "staging.trace_gpu_events", "marts.op_rollup"]


def _ingest_and_build(wh, path: Path) -> str:
    r = loader.ingest_file(wh, path)
    assert r.status == "ingested", r.message
    con = db.connect_rw(wh.warehouse)
    try:
        models.build(con, select=MODELS)
    finally:
        con.close()
    return r.sha256


def _q(wh, sql: str, *params) -> list[tuple]:
    from tests.conftest import ro

    with ro(wh) as c:
        return c.execute(sql, list(params)).fetchall()


def _encloses(r, start: int, end: int) -> bool:
    """The documented rule: r = (start, end, ...) starts at or before and ends at or after the
    event, which does not start at r's end (touching is disjoint) unless r has no length."""
    return r[0] <= start and r[1] >= end and (start < r[1] or r[0] == r[1])


def expected_from_export(path: Path) -> dict:
    """Per thread the push/pop ranges' nesting, per runtime call its enclosing ranges, per
    kernel its range, and the rollup: from the SQLite file alone."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        ranges = con.execute(
            "select t.start, t.end, t.rowid, t.globalTid, coalesce(t.text, s.value, ''), "
            "t.domainId from NVTX_EVENTS t left join StringIds s on s.id = t.textId "
            "where t.eventType = 59 and t.end is not null order by t.rowid").fetchall()
        calls = con.execute(
            "select r.start, r.end, r.rowid, r.globalTid, r.correlationId "
            "from CUPTI_ACTIVITY_KIND_RUNTIME r order by r.rowid").fetchall()
        kernels = con.execute(
            "select k.start, k.end, k.correlationId from CUPTI_ACTIVITY_KIND_KERNEL k "
            "order by k.rowid").fetchall()
    finally:
        con.close()
    by_tid, by_dom = defaultdict(list), defaultdict(list)
    for r in ranges:
        by_tid[r[3]].append(r)
        by_dom[r[3], r[5]].append(r)
    # nesting of the ranges with a stack per thread and NVTX domain (push/pop ranges form a
    # stack per thread per domain), in order of start, then end descending, then rowid
    dom_ok, range_parent = {}, {}
    for key, rs in by_dom.items():
        rs.sort(key=lambda r: (r[0], -r[1], r[2]))
        stack, ok = [], True
        for r in rs:
            while stack and not _encloses(stack[-1], r[0], r[1]):
                stack.pop()
            if stack and stack[-1][1] < r[1]:
                ok = False  # r starts inside the top and ends after it: not properly nested
            range_parent[r[2]] = (len(stack), stack[-1][4] if stack else None)
            stack.append(r)
        dom_ok[key] = ok
    # a thread's runtime calls are placed only where every domain of the thread is nested
    nested_ok = {tid: all(ok for (t, _), ok in dom_ok.items() if t == tid) for tid in by_tid}
    # a runtime call: every range of its thread (any domain) that encloses it (brute force);
    # the innermost: latest start, then earliest end, then last in the file
    call_info = {}
    for s, e, rowid, tid, corr in calls:
        enc = [r for r in by_tid.get(tid, ()) if _encloses(r, s, e)]
        inner = max(enc, key=lambda r: (r[0], -r[1], r[2])) if enc else None
        call_info[rowid] = (len(enc), inner[4] if inner else None, tid, corr, s, e - s)
    first_call = {}
    for _rowid, info in sorted(call_info.items()):
        first_call.setdefault(info[3], info)
    rollup = defaultdict(lambda: [0, 0, 0, 0])
    kernel_op = []
    for s, e, corr in kernels:
        info = first_call.get(corr)
        op = None
        if info is not None and nested_ok.get(info[2], True):
            op = info[1]
        kernel_op.append((s, e - s, op))
        key = op if op is not None else "(unattributed)"
        rollup[key][0] += 1
        rollup[key][1] += e - s
    for r in ranges:
        rollup[r[4]][2] += 1
        rollup[r[4]][3] += r[1] - r[0]
    return {"ranges": ranges, "range_parent": range_parent, "nested_ok": nested_ok,
            "dom_ok": dom_ok,
            "calls": call_info, "kernel_op": kernel_op,
            "rollup": {k: tuple(v) for k, v in rollup.items()}}


@pytest.mark.parametrize("sample", samples("nsys_sqlite", (".sqlite",)))
def test_sample_nvtx_nesting_and_rollup_equal_an_independent_computation(wh, tmp_path, sample):
    want = expected_from_export(sample)
    run = _ingest_and_build(wh, sample)
    assert want["ranges"] and all(want["nested_ok"].values())
    # runtime calls: how many push/pop ranges enclose each and which is the innermost
    got = _q(wh, "select c.tid, c.start_ns, c.dur_ns, e.correlation, c.depth, c.parent_op, "
             "c.nesting_ok from staging.trace_cpu_events c join raw.trace_events e on "
             "e.run_id = c.run_id and e.event_idx = c.event_idx where c.run_id = ? and "
             "c.kind = 'runtime' order by c.event_idx", run)
    assert [(int(t), s, d, corr, depth, parent, ok) for t, s, d, corr, depth, parent, ok in got] \
        == [(tid, s, d, corr, n, inner, True) for n, inner, tid, corr, s, d in
            want["calls"].values()]
    attributed = sum(1 for n, *_ in want["calls"].values() if n)
    assert 0 < attributed < len(want["calls"])  # the sample has calls inside and outside ranges
    # the ranges themselves: depth and parent range, exact per range
    got = _q(wh, "select c.start_ns, c.end_ns, c.tid, c.name, c.depth, c.parent_op "
             "from staging.trace_cpu_events c where c.run_id = ? and c.is_operator "
             "order by c.event_idx", run)
    assert [(s, e, int(t), n) for s, e, t, n, *_ in got] == [
        (r[0], r[1], r[3], r[4]) for r in want["ranges"]]
    assert [tuple(g[4:]) for g in got] == [want["range_parent"][r[2]] for r in want["ranges"]]
    # kernels: the innermost range enclosing their launching call
    got = _q(wh, "select start_ns, dur_ns, op from staging.trace_gpu_events where run_id = ? "
             "and kind = 'kernel' order by event_idx", run)
    assert got == want["kernel_op"]
    assert len({op for *_, op in got if op}) >= 2
    rollup = _q(wh, "select op, kernels, kernel_ns, calls, cpu_ns, rank from marts.op_rollup "
                "where run_id = ?", run)
    assert {r[0]: tuple(r[1:5]) for r in rollup} == want["rollup"]
    assert {r[5] for r in rollup} == {None}


def test_generated_export_rollup_by_nvtx_range(wh, tmp_path):
    """The generator's layout (gen.nsys_nvtx): per kernel a range ``step <i>`` (3500 ns)
    enclosing ``launch`` (2700 ns) enclosing the cudaLaunchKernel call; a start/end range over
    everything on another thread (no operator: no row), a range without a message (500 ns)."""
    f = tmp_path / "gen.sqlite"
    f.write_bytes(gen.nsys_sqlite(KS, cpu_side=True))
    run = _ingest_and_build(wh, f)
    rollup = {r[0]: tuple(r[1:]) for r in _q(
        wh, "select op, kernels, kernel_ns, calls, cpu_ns from marts.op_rollup where run_id = ?",
        run)}
    want = {"launch": (len(KS), sum(k.dur_ns for k in KS), len(KS), 2700 * len(KS)),
            "": (0, 0, 1, 500)}
    want.update({f"step {i}": (0, 0, 1, 3500) for i in range(len(KS))})
    assert rollup == want
    depth = _q(wh, "select name, depth, parent_op from staging.trace_cpu_events where "
               "run_id = ? and kind = 'runtime'", run)
    assert depth == [("cudaLaunchKernel_v7000", 2, "launch")] * len(KS)
    # the start/end range is a row, never an operator, and breaks no nesting
    assert _q(wh, "select is_operator, depth, nesting_ok from staging.trace_cpu_events where "
              "run_id = ? and name = 'whole run'", run) == [(False, 0, True)]


def test_ranges_not_properly_nested_are_flagged_and_their_kernels_unattributed(wh, tmp_path):
    """A push/pop range of the default domain (``domainId`` 0, the domain of the ``step <i>``
    ranges) that starts inside ``step 0`` and ends inside ``step 1``: that domain's stack is
    broken, so the thread is flagged, no parent is guessed, its kernels go to
    ``(unattributed)``."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    tid = con.execute("select globalTid from NVTX_EVENTS where text = 'step 0'").fetchall()[0][0]
    con.execute("insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "values (?, ?, 59, 'straddles', ?, 0)",
                (KS[0].start_ns - 600, KS[1].start_ns - 3800, tid))
    con.commit()
    f = tmp_path / "bad.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    run = _ingest_and_build(wh, f)
    # the default domain's ranges and the thread's runtime calls are flagged, nothing placed
    assert _q(wh, "select bool_or(nesting_ok), count(parent_op), count(depth), count(*) from "
              "staging.trace_cpu_events where run_id = ? and tid = ? and (kind = 'runtime' "
              "or name like 'step %' or name = 'straddles')", run, str(tid)) == [
        (False, 0, 0, 2 * len(KS) + 1)]
    # the 'launch' ranges (domain 7, "my.domain") are a stack of their own, still nested
    assert _q(wh, "select bool_and(nesting_ok), count(depth), count(*) from "
              "staging.trace_cpu_events where run_id = ? and name = 'launch'", run) == [
        (True, len(KS), len(KS))]
    rollup = dict(_q(wh, "select op, kernels from marts.op_rollup where run_id = ? and "
                     "kernels > 0", run))
    assert rollup == {"(unattributed)": len(KS)}


def test_nvtx_pushpop_trace_csv_nesting_equals_nsys_own_columns(wh, tmp_path):
    """``nsys stats --report nvtx_pushpop_trace``: the staging depth is nsys's ``Lvl`` and the
    parent range's ``RangeId`` its ``ParentId``, range by range."""
    f = tmp_path / "nvtx.csv"
    f.write_bytes(gen.nsys_nvtx_trace_csv(KS))
    run = _ingest_and_build(wh, f)
    rows = _q(wh, "select c.depth, c.nesting_ok, c.is_operator, e.args::varchar, p.args::varchar "
              "from staging.trace_cpu_events c join raw.trace_events e on e.run_id = c.run_id "
              "and e.event_idx = c.event_idx left join raw.trace_events p on p.run_id = "
              "c.run_id and p.event_idx = c.parent_op_idx where c.run_id = ? "
              "order by c.event_idx", run)
    assert len(rows) == 2 * len(KS)
    for depth, ok, is_op, args, parent in rows:
        a = json.loads(args)
        assert ok and is_op and depth == int(a["Lvl"])
        assert (json.loads(parent)["RangeId"] if parent else "") == a["ParentId"]


def test_a_start_end_range_across_push_pop_ranges_breaks_no_nesting(wh, tmp_path):
    """An NVTX start/end range on the launching thread that starts inside ``step 0`` and ends
    inside ``step 1`` (start/end ranges may overlap anything): a row with no depth or parent,
    the thread still properly nested, every kernel still attributed."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    tid = con.execute("select globalTid from NVTX_EVENTS where text = 'step 0'").fetchall()[0][0]
    con.execute("insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "values (?, ?, 60, 'async', ?, 0)", (KS[0].start_ns - 600, KS[1].start_ns - 3800,
                                                    tid))
    con.commit()
    f = tmp_path / "free.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    run = _ingest_and_build(wh, f)
    assert _q(wh, "select is_operator, depth, parent_op, nesting_ok from "
              "staging.trace_cpu_events where run_id = ? and name = 'async'", run) == [
        (False, None, None, True)]
    assert _q(wh, "select bool_and(nesting_ok) from staging.trace_cpu_events where run_id = ?",
              run) == [(True,)]
    rollup = dict(_q(wh, "select op, kernels from marts.op_rollup where run_id = ? and "
                     "kernels > 0", run))
    assert rollup == {"launch": len(KS)}


def test_rocprofv3_marker_ranges_nest_the_hip_calls_of_their_thread(wh, tmp_path):
    """A rocprofv3 API trace (gen.rocprof_api_trace_csv: per kernel a roctx range ``step <i>``
    enclosing its hipLaunchKernel on one thread, an HSA call on another, a zero-length
    profiler-control marker): the HIP calls at depth 1 in their range, the HSA calls at 0."""
    f = tmp_path / "api_trace.csv"
    f.write_bytes(gen.rocprof_api_trace_csv(KS))
    run = _ingest_and_build(wh, f)
    got = _q(wh, "select name, depth, parent_op, nesting_ok from staging.trace_cpu_events "
             "where run_id = ? and not is_operator order by event_idx", run)
    hip = [g for g in got if g[0] == "hipLaunchKernel"]
    assert hip == [("hipLaunchKernel", 1, f"step {i}", True) for i in range(len(KS))]
    assert {g[1:] for g in got if g[0].startswith("hsa_")} == {(0, None, True)}
    assert _q(wh, "select count(*) from staging.trace_cpu_events where run_id = ? and "
              "is_operator", run) == [(len(KS),)]


def _with_range(domain: int, create: bool, tmp_path: Path) -> tuple[Path, int]:
    """The generated export plus a push/pop range of ``domain`` on the launching thread that
    starts inside ``step 0`` (after its ``launch``) and ends inside ``step 1`` (before its
    ``launch``); ``create``: the domain is named by an NvtxDomainCreate event."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    tid = con.execute("select globalTid from NVTX_EVENTS where text = 'step 0'").fetchall()[0][0]
    if create:
        con.execute("insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                    "values (0, NULL, 75, 'NCCL', ?, ?)", (tid, domain))
    con.execute("insert into NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "values (?, ?, 59, 'lib range', ?, ?)",
                (KS[0].start_ns - 600, KS[1].start_ns - 3800, tid, domain))
    con.commit()
    f = tmp_path / f"dom{domain}.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    return f, tid


def test_ranges_of_two_domains_may_overlap_on_one_thread(wh, tmp_path):
    """NVTX push/pop ranges form a stack per thread per domain: a range of a library's own
    domain (``domainId`` 9) crossing ``step 0`` / ``step 1`` (default domain) breaks no nesting;
    every kernel keeps its innermost range; each range is nested within its own domain only;
    the model equals the plain-Python computation over the export."""
    f, tid = _with_range(9, True, tmp_path)
    want = expected_from_export(f)
    assert len({d for _, d in want["dom_ok"]}) == 3 and all(want["dom_ok"].values())
    run = _ingest_and_build(wh, f)
    assert _q(wh, "select bool_and(nesting_ok), count(*) from staging.trace_cpu_events "
              "where run_id = ? and tid = ?", run, str(tid))[0][0] is True
    assert dict(_q(wh, "select op, kernels from marts.op_rollup where run_id = ? and "
                   "kernels > 0", run)) == {"launch": len(KS)}
    got = _q(wh, "select c.start_ns, c.end_ns, c.tid, c.name, c.depth, c.parent_op "
             "from staging.trace_cpu_events c where c.run_id = ? and c.is_operator "
             "order by c.event_idx", run)
    order = sorted(want["ranges"], key=lambda r: r[2])
    assert [(s, e, int(t), n) for s, e, t, n, *_ in got] == [(r[0], r[1], r[3], r[4])
                                                             for r in order]
    assert [tuple(g[4:]) for g in got] == [want["range_parent"][r[2]] for r in order]
    # 'lib range' has no parent of its own domain although it starts inside step 0
    assert ("lib range", 0, None) in [(g[3], g[4], g[5]) for g in got]
    calls = _q(wh, "select start_ns, depth, parent_op from staging.trace_cpu_events "
               "where run_id = ? and kind = 'runtime' order by start_ns", run)
    assert [(s, d, p) for s, d, p in calls] == [
        (info[4], info[0], info[1]) for info in sorted(want["calls"].values(),
                                                        key=lambda i: i[4])]
    assert _q(wh, "select kernel_op from (select list(op order by event_idx) as kernel_op "
              "from staging.trace_gpu_events where run_id = ? and kind = 'kernel')", run) == [
        ([op for *_, op in want["kernel_op"]],)]


def test_innermost_range_over_domains_latest_start_wins(wh, tmp_path):
    """A runtime call inside ranges of two domains gets the one that starts last, whatever its
    domain: a domain-9 range starting after ``launch`` (domain 7) and ending after it encloses
    the first launch call; ties of start go to the earlier end, then the later row."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    tid, lstart, lend = con.execute(
        "select globalTid, start, end from NVTX_EVENTS where textId is not null "
        "order by start limit 1").fetchall()[0]
    call = con.execute("select start, end from CUPTI_ACTIVITY_KIND_RUNTIME "
                       "order by start limit 1").fetchall()[0]
    assert lstart < call[0] - 2 and call[1] < lend
    rows = [(lstart + 1, lend + 5, "later start", 9),      # wins: latest start
            (lstart + 1, lend + 9, "same start, ends later", 11),
            (lstart - 1, call[1] + 1, "earlier start", 13)]
    for s, e, text, dom in rows:
        con.execute("insert into NVTX_EVENTS (start, end, eventType, text, globalTid, "
                    "domainId) values (?, ?, 59, ?, ?, ?)", (s, e, text, tid, dom))
    con.commit()
    f = tmp_path / "inner.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    want = expected_from_export(f)
    run = _ingest_and_build(wh, f)
    first = _q(wh, "select depth, parent_op, nesting_ok from staging.trace_cpu_events where "
               "run_id = ? and kind = 'runtime' order by start_ns limit 1", run)
    assert first == [(5, "later start", True)]
    info = min(want["calls"].values(), key=lambda i: i[4])
    assert (info[0], info[1]) == (5, "later start")


def test_emit_nvtx_range_messages_are_one_op_per_operator(wh, tmp_path):
    """PyTorch's ``emit_nvtx`` names a range ``<op>, seq = <n>, op_id = <n>, sizes = [...],
    input_op_ids = [...]`` (torch/csrc/profiler/util.cpp ``getNvtxStr``; each suffix optional):
    marts.op_rollup reports one op per operator name, staging keeps every message verbatim. A
    message that only looks alike (no number after ``seq =``) is no such suffix. A range named
    ``(unattributed)`` merges with the unattributed row (docs/formats.md)."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    steps = con.execute("select rowid from NVTX_EVENTS where text like 'step %' "
                        "order by start").fetchall()
    launches = con.execute("select rowid from NVTX_EVENTS where textId is not null "
                           "and eventType = 59 order by start").fetchall()
    assert len(steps) == len(launches) == len(KS)
    inners = set()
    for i, ((srow,), (lrow,)) in enumerate(zip(steps, launches, strict=True)):
        outer = (f"aten::linear, seq = {i}, op_id = {2 * i + 1}, sizes = [[16, 32], [8, 32], "
                 f"[8]], input_op_ids = [({2 * i}, 0)]")
        inner = [f"aten::addmm, seq = {i}, op_id = {2 * i + 2}, sizes = [[8], [16, 32], [32, 8]]",
                 f"aten::addmm, op_id = {2 * i + 2}",  # sequence_nr -1: no seq
                 "aten::addmm, sizes = [[16, 32]]",
                 "aten::addmm"][i % 4]
        inners.add(inner)
        con.execute("update NVTX_EVENTS set text = ? where rowid = ?", (outer, srow))
        con.execute("update NVTX_EVENTS set text = ?, textId = null where rowid = ?",
                    (inner, lrow))
    con.execute("update NVTX_EVENTS set text = 'loop, seq = next' where eventType = 59 "
                "and text is null and textId is null")
    con.commit()
    f = tmp_path / "emit_nvtx.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    run = _ingest_and_build(wh, f)
    rollup = {r[0]: tuple(r[1:]) for r in _q(
        wh, "select op, kernels, kernel_ns, calls, cpu_ns from marts.op_rollup where run_id = ?",
        run)}
    n = len(KS)
    assert rollup == {"aten::addmm": (n, sum(k.dur_ns for k in KS), n, 2700 * n),
                      "aten::linear": (0, 0, n, 3500 * n),
                      "loop, seq = next": (0, 0, 1, 500)}
    # staging keeps the messages verbatim: every outer range's message is its own
    assert _q(wh, "select count(distinct name), count(distinct parent_op) from "
              "staging.trace_cpu_events where run_id = ? and is_operator and name like "
              "'aten::linear%'", run) == [(n, 0)]
    assert {r[0] for r in _q(wh, "select distinct op from staging.trace_gpu_events where "
                             "run_id = ? and kind = 'kernel'", run)} == inners
    assert len(inners) == n // 4 * 2 + 2  # every seq / op_id message differs


def test_a_range_named_unattributed_merges_with_the_unattributed_row(wh, tmp_path):
    """docs/formats.md: a range literally named ``(unattributed)`` shares the row of the
    kernels no range encloses: its calls and cpu_ns add to that row."""
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    con.execute("update NVTX_EVENTS set text = '(unattributed)' where eventType = 59 "
                "and text is null and textId is null")
    # the first kernel loses its launching call: unattributed
    corr = con.execute("select correlationId from CUPTI_ACTIVITY_KIND_RUNTIME order by start "
                       "limit 1").fetchall()[0][0]
    con.execute("delete from CUPTI_ACTIVITY_KIND_RUNTIME where correlationId = ?", (corr,))
    con.commit()
    f = tmp_path / "named.sqlite"
    f.write_bytes(con.serialize())
    con.close()
    run = _ingest_and_build(wh, f)
    first = min(KS, key=lambda k: k.start_ns)
    assert _q(wh, "select kernels, kernel_ns, calls, cpu_ns from marts.op_rollup where "
              "run_id = ? and op = '(unattributed)'", run) == [(1, first.dur_ns, 1, 500)]
