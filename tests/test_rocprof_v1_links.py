"""rocprof v1 (issue 20, item 1): the HIP API calls of a ``results.db`` linked to the dispatches
they launched, and its roctx ranges as the run's operators (``marts.op_rollup``); what
``results.json`` cannot link.

``tblextr`` (rocprofiler's ``bin/tblextr.py``) writes a HIP call's correlation id as the
``Index`` of its ``HIP`` row and of the ``OPS`` rows it launched (paired by ``Index`` and
``pid``), and roctx ranges to the ``rocTX`` table (push/pop on the thread's lane, start/stop on
lane 0, a mark as a 1 ns row). Expected values come from ``sqlite3`` queries on the file and
plain Python, never from the parser or the models."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pyarrow.compute as pc

from tests import gen_vendor_traces as gen
from tests.vendor_trace_checks import RUN, check_schema
from warehouse import db
from warehouse.ingesting import loader, rederive
from warehouse.ingesting.formats import rocprof_db, rocprof_json
from warehouse.modelling import models

# launches 10 us apart (the generator's hipLaunchKernel runs 5 to 4 us before its kernel)
KS = [gen.K(k.name, k.device, k.stream, 1_000_000 + 10_000 * i, k.dur_ns)
      for i, k in enumerate(gen.kernels(11, 12))]
TID = 4242


def _db(mutate=None) -> bytes:
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.rocprof_results_db(KS))
    if mutate:
        mutate(con)
        con.commit()
    data = con.serialize()
    con.close()
    return data


def _with_roctx(con) -> None:
    """A rocTX table as tblextr writes it: per kernel a push/pop range ``iter <i>`` around its
    hipLaunchKernel, an outer push/pop range ``train`` around all, a start/stop range (lane 0,
    overlapping everything) and a mark (1 ns)."""
    con.execute('CREATE TABLE rocTX ("BeginNs" INTEGER, "EndNs" INTEGER, "pid" INTEGER, '
                '"tid" INTEGER, "Name" TEXT, "Index" INTEGER, "__section" INTEGER, '
                '"__lane" INTEGER)')
    rows = [(KS[0].start_ns - 20_000, KS[-1].start_ns + 20_000, "train")]
    rows += [(k.start_ns - 6000, k.start_ns - 3500, f"iter {i}") for i, k in enumerate(KS)]
    ins = "insert into rocTX values (?,?,?,?,?,?,?,?)"
    for n, (b, e, name) in enumerate(rows):
        con.execute(ins, (b, e, str(TID), TID, name, n, 0, TID))
    con.execute(ins, (KS[1].start_ns - 5500, KS[3].start_ns + 1, str(TID), TID, "async work",
                      len(rows), 0, 0))
    con.execute(ins, (KS[2].start_ns - 4500, KS[2].start_ns - 4499, str(TID), TID, "a mark",
                      len(rows) + 1, 0, TID))


def _events(parsed, table: str) -> list[dict]:
    ev = parsed.tables["trace_events"]
    return ev.filter(pc.equal(ev["category"], table)).to_pylist()


def _meta(parsed) -> dict:
    return json.loads(parsed.tables["trace_runs"]["metadata"][0].as_py())


def test_hip_calls_link_to_the_ops_they_launched():
    """HIP rows carry their Index as correlation; an OPS / COPY row the HIP row of the same
    Index and pid, so the kernels find their launch; an HSA async copy never does."""

    def hsa_copy(con):  # an HSA async copy whose Index (HSA numbering) equals a HIP call's
        con.execute('insert into COPY ("BeginNs", "EndNs", "Name", "pid", "tid", "Index") '
                    "values (5, 9, 'async-copy', 4242, 4242, 3)")

    data = _db(hsa_copy)
    p = rocprof_db.parse(data, "results.db", RUN)
    check_schema(p)
    con = sqlite3.connect(":memory:")
    con.deserialize(data)
    hip = con.execute('select "Index" from HIP order by rowid').fetchall()
    ops = con.execute('select (select h."Index" from HIP h where h."Index" = o."Index" and '
                      'h.pid = o.pid) from OPS o order by rowid').fetchall()
    con.close()
    assert [e["correlation"] for e in _events(p, "HIP")] == [i for (i,) in hip]
    assert [e["correlation"] for e in _events(p, "OPS")] == [i for (i,) in ops]
    assert [e["correlation"] for e in _events(p, "OPS") if e["kind"] == "other"] == [None]
    assert [e["correlation"] for e in _events(p, "COPY")] == [None, None]
    assert {e["correlation"] for e in _events(p, "KERN")} == {None}
    launched = {e["correlation"] for e in _events(p, "HIP")}
    kernels = [e for e in p.tables["trace_events"].to_pylist() if e["kind"] == "kernel"]
    assert len(kernels) == len(KS) and all(k["correlation"] in launched for k in kernels)
    assert _meta(p)["correlation"].startswith("HIP.Index")


def test_the_link_needs_the_same_pid_and_a_hip_traced_copy_is_linked():
    """tblextr pairs an operation with the HIP call of the same ``(Index, pid)``: a dispatch of
    another process with a HIP call's Index is not that call's; a HIP-traced copy in ``COPY``
    (``Name`` ``"CopyHostToDevice"``, its Index a HIP call's) is linked like a kernel."""

    def rows(con):
        con.execute('insert into OPS ("BeginNs", "EndNs", "dev-id", "queue-id", "Name", "pid", '
                    '"tid", "Index") values (7, 8, 0, 0, \'"other_process_kernel"\', 4343, '
                    "4343, 0)")
        con.execute('insert into COPY ("BeginNs", "EndNs", "Name", "pid", "tid", "Index") '
                    "values (9, 11, '\"CopyHostToDevice\"', 4242, 4242, 1)")

    p = rocprof_db.parse(_db(rows), "results.db", RUN)
    ops = [(e["name"], e["correlation"]) for e in _events(p, "OPS")]
    assert ops[-1] == ("other_process_kernel", None)
    assert ops[0] == (KS[0].name, 0)  # pid 4242: HIP Index 0's dispatch
    assert [(e["start_ns"], e["correlation"]) for e in _events(p, "COPY")] == [(5, None),
                                                                             (9, 1)]


def test_two_numberings_of_index_link_nothing():
    """A second process numbering its calls from 0 again: an Index alone no longer names one
    call, so nothing is linked (the rows are kept) and the metadata says why."""

    def second_process(con):
        con.execute('insert into HIP ("BeginNs", "EndNs", "pid", "tid", "Name", "Index") '
                    "values (1, 2, 4343, 4343, 'hipMalloc', 0)")

    p = rocprof_db.parse(_db(second_process), "results.db", RUN)
    assert {e["correlation"] for e in p.tables["trace_events"].to_pylist()} == {None}
    assert len(_events(p, "HIP")) == len(KS) + 1
    assert "repeat" in _meta(p)["correlation"]


def test_a_hip_table_without_pid_links_nothing():
    """The pairing is by ``(Index, pid)``: a HIP table without a ``pid`` column pairs nothing
    (SQLite would take a missing ``"pid"`` for the text 'pid'; the metadata must not say
    linked)."""
    p = rocprof_db.parse(_db(lambda con: con.execute('ALTER TABLE HIP DROP COLUMN "pid"')),
                         "results.db", RUN)
    assert {e["correlation"] for e in p.tables["trace_events"].to_pylist()} == {None}
    assert _meta(p)["correlation"] == "none: the HIP table has no pid column"


def _expected_rollup(path: Path) -> dict[str, tuple[int, int, int, int]]:
    """op -> (kernels, kernel_ns, calls, cpu_ns), from the file: each OPS kernel's HIP call (same
    Index and pid), the innermost push/pop range (lane = tid, longer than 1 ns) on its thread
    enclosing that call."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ranges = con.execute('select "BeginNs", "EndNs", rowid, "tid", "Name" from rocTX where '
                         '"__lane" != 0 and "EndNs" - "BeginNs" > 1').fetchall()
    kernels = con.execute(
        'select o."EndNs" - o."BeginNs", h."BeginNs", h."EndNs", h."tid" from OPS o left join '
        'HIP h on h."Index" = o."Index" and h.pid = o.pid where o."Name" != \'"<barrier '
        'packet>"\'').fetchall()
    con.close()
    out = defaultdict(lambda: [0, 0, 0, 0])
    for dur, s, e, tid in kernels:
        enc = [r for r in ranges if r[3] == tid and r[0] <= s and r[1] >= e and s < r[1]]
        op = max(enc, key=lambda r: (r[0], -r[1], r[2]))[4] if enc else "(unattributed)"
        out[op][0] += 1
        out[op][1] += dur
    for b, e, _, _, name in ranges:
        out[name][2] += 1
        out[name][3] += e - b
    return {k: tuple(v) for k, v in out.items()}


def test_roctx_ranges_attribute_the_kernels_through_pwh(wh, tmp_path):
    f = tmp_path / "results.db"
    f.write_bytes(_db(_with_roctx))
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    con = db.connect_rw(wh.warehouse)
    try:
        models.build(con, select=["marts.op_rollup"])
        rollup = {row[0]: tuple(row[1:]) for row in con.execute(
            "select op, kernels, kernel_ns, calls, cpu_ns from marts.op_rollup").fetchall()}
        marks = con.execute("select name, is_operator, nesting_ok from staging.trace_cpu_events "
                            "where kind = 'annotation' and name in ('a mark', 'async work') "
                            "order by name").fetchall()
    finally:
        con.close()
    want = _expected_rollup(f)
    assert rollup == want
    assert {k for k, v in want.items() if v[0]} == {f"iter {i}" for i in range(len(KS))}
    assert marks == [("a mark", False, True), ("async work", False, True)]


def test_a_rocprof_db_1_run_is_rederived_with_links_and_ranges(wh, tmp_path):
    f = tmp_path / "results.db"
    f.write_bytes(_db(_with_roctx))
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    cols = "event_idx, kind, category, name, start_ns, dur_ns, pid, tid, correlation"
    con = db.connect_rw(wh.warehouse)
    try:  # what rocprof_db/1 wrote: no rocTX rows, no correlation
        con.execute("delete from raw.trace_events where category = 'rocTX'")
        con.execute("update raw.trace_events set correlation = null")
        con.execute("update raw.trace_runs set event_count = (select count(*) from "
                    "raw.trace_events)")
        con.execute("update raw.files set parser_version = 'rocprof_db/1'")
    finally:
        con.close()
    rep = rederive.rederive(wh)
    assert [o.status for o in rep.outcomes] == ["rederived"], [o.message for o in rep.outcomes]
    fresh = rocprof_db.parse(f.read_bytes(), str(f), r.sha256).tables["trace_events"]
    con = db.connect_rw(wh.warehouse)
    try:
        got = con.execute(f"select {cols} from raw.trace_events order by event_idx").fetchall()  # noqa: S608
        version = con.execute("select parser_version from raw.files").fetchall()
    finally:
        con.close()
    assert got == list(zip(*(fresh.column(c).to_pylist() for c in cols.split(", ")),
                           strict=True))
    assert any(row[1] == "annotation" for row in got) and version == [("rocprof_db/2",)]


def test_results_json_has_no_correlation_to_read():
    """rocprof v1 results.json: tblextr's dump_json drops the Index column from every event,
    so HIP calls and kernels are kept unlinked (correlation null), never guessed."""
    p = rocprof_json.parse(gen.rocprof_results_json(KS, hip_trace=True), "results.json", RUN)
    ev = p.tables["trace_events"].to_pylist()
    assert {e["kind"] for e in ev} >= {"runtime", "kernel"}
    assert {e["correlation"] for e in ev} == {None}
