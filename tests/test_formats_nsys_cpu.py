"""Nsight Systems export, the CPU side (issue 20, item 1): NVTX ranges (kind ``annotation``)
with their domain and thread, CUDA runtime/driver API calls (kind ``runtime``) linked to the
kernels they launched by ``correlation``, CUDA synchronisations (kind ``sync``); and SQLite
files read on disk by ``sqlite_stream.SqliteReader`` (issue 24, item 2: an export past the
whole-document limit ingests, with the rows ``parse`` finds in memory).

Expected values come from SQLite itself (queries on the file), never from the parser."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests import gen_vendor_traces as gen
from tests.vendor_trace_checks import RUN, check_schema, load, samples
from warehouse import db
from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader, readers, sqlite_stream
from warehouse.ingesting.formats import nsys_sqlite, tracebuild

KS = gen.kernels(5, 40)
EVENT_COLS = ("event_idx", "kind", "category", "name", "mangled_name", "device", "stream",
              "rank", "pid", "tid", "start_ns", "dur_ns", "correlation", "args")


def _rows(parsed, kind: str) -> list[dict]:
    ev = parsed.tables["trace_events"]
    return ev.filter(pc.equal(ev["kind"], kind)).to_pylist()


def _sql(path: Path, q: str, *a) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q, a).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("sample", samples("nsys_sqlite", (".sqlite",)))
def test_sample_cpu_side_equals_sqlite(sample):
    """Every NVTX range, API call and synchronisation of a real export, names verbatim and
    times exact, counted and summed by SQLite itself."""
    p = nsys_sqlite.parse(sample.read_bytes(), sample.name, RUN)
    check_schema(p)
    ann = _rows(p, "annotation")
    want = _sql(sample, "select coalesce(t.text, s.value), t.start, t.end - t.start, "
                "cast(t.globalTid as text) from NVTX_EVENTS t left join StringIds s on "
                "s.id = t.textId where t.eventType in (59, 60) and t.end is not null "
                "order by t.rowid")
    assert len(want) > 1000
    assert [(r["name"], r["start_ns"], r["dur_ns"], r["tid"]) for r in ann] == want
    assert {r["category"] for r in ann} == {"NVTX_EVENTS"}
    rt = _rows(p, "runtime")
    want = _sql(sample, "select s.value, r.start, r.end - r.start, r.correlationId, "
                "cast(r.globalTid as text) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s "
                "on s.id = r.nameId order by r.rowid")
    assert [(r["name"], r["start_ns"], r["dur_ns"], r["correlation"], r["tid"])
            for r in rt] == want
    # runtime and driver calls alike (eventClass 0 / 1 of the sample)
    assert {json.loads(r["args"])["eventClass"] for r in rt} == {0, 1}
    sync = _rows(p, "sync")
    want = _sql(sample, "select e.label, y.start, y.end - y.start, y.correlationId from "
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y join ENUM_CUPTI_SYNC_TYPE e on "
                "e.id = y.syncType order by y.rowid")
    assert [(r["name"], r["start_ns"], r["dur_ns"], r["correlation"]) for r in sync] == want
    # the links: every kernel whose launch is in the file finds its API call by correlation
    linked = _sql(sample, "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL k join "
                  "CUPTI_ACTIVITY_KIND_RUNTIME r on r.correlationId = k.correlationId")[0][0]
    calls = {r["correlation"] for r in rt}
    assert sum(k["correlation"] in calls for k in _rows(p, "kernel")) == linked > 0
    meta = json.loads(p.tables["trace_runs"].column("metadata")[0].as_py())
    n = _sql(sample, "select count(*) from NVTX_EVENTS where eventType = 59")[0][0]
    assert meta["nvtx"]["NvtxPushPopRange"] == n
    assert p.summary["annotation"] == len(ann) and p.summary["sync"] == len(sync)


def test_generated_nvtx_ranges_domains_threads_and_what_is_not_a_row():
    data = gen.nsys_sqlite(KS, cpu_side=True)
    p = nsys_sqlite.parse(data, "cpu.sqlite", RUN)
    check_schema(p)
    ann = _rows(p, "annotation")
    tid = str((4242 << 24) + 1)
    steps = [r for r in ann if r["name"].startswith("step ")]
    launches = [r for r in ann if r["name"] == "launch"]  # the registered string (textId)
    assert len(steps) == len(launches) == len(KS)
    for i, (s, la, k) in enumerate(zip(steps, launches, KS, strict=True)):
        assert s["name"] == f"step {i}" and s["tid"] == la["tid"] == tid
        assert (s["start_ns"], s["dur_ns"]) == (k.start_ns - 4000, 3500)
        assert json.loads(la["args"])["domain"] == gen.NVTX_DOMAIN
        assert json.loads(s["args"])["domain"] is None  # the default domain
        # nesting by time on one thread: step encloses launch encloses the runtime call
        assert s["start_ns"] <= la["start_ns"] and (la["start_ns"] + la["dur_ns"]
                                                   <= s["start_ns"] + s["dur_ns"])
    whole = [r for r in ann if r["name"] == "whole run"]
    assert len(whole) == 1 and whole[0]["tid"] == str((4242 << 24) + 2)
    assert json.loads(whole[0]["args"])["endGlobalTid"] == (4242 << 24) + 1
    assert [r["name"] for r in ann].count("") == 1  # a range without a message
    names = {r["name"] for r in ann}
    assert "a mark" not in names and "never popped" not in names and gen.NVTX_DOMAIN not in names
    meta = json.loads(p.tables["trace_runs"].column("metadata")[0].as_py())
    assert meta["nvtx"] == {"eventType 34": 1, "NvtxPushPopRange": 2 * len(KS) + 1,
                            "NvtxPushPopRange never ended": 1, "NvtxStartEndRange": 1,
                            "eventType 75": 1}
    sync = _rows(p, "sync")
    assert [r["name"] for r in sync] == [("Stream sync", "Context sync")[i % 2]
                                         for i in range(len(KS))]
    # rebuild: each NVTX row as the table has it (registered strings resolved)
    con = load(p)
    rows = nsys_sqlite.rebuild(con, RUN)["NVTX_EVENTS"]
    assert [r["text"] for r in rows][:3] == [f"step {0}", None, "step 1"]
    assert rows[1]["textId"] == "launch"


def test_the_cpu_side_nests_in_the_staging_model(wh, tmp_path):
    """Through pwh: the runtime calls of a generated export sit on the NVTX ranges' thread in
    staging.trace_cpu_events (annotations and API calls, one time line per thread), nested in
    the push/pop ranges (launches 10 us apart: each kernel's ranges end before the next's;
    tests/test_nvtx_rollup.py checks the nesting itself)."""
    from tests.conftest import ro
    from warehouse.modelling import models

    ks = [gen.K(k.name, k.device, k.stream, 1_000_000 + 10_000 * i, k.dur_ns)
          for i, k in enumerate(KS)]
    f = tmp_path / "cpu.sqlite"
    f.write_bytes(gen.nsys_sqlite(ks, cpu_side=True))
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    con = db.connect_rw(wh.warehouse)
    try:
        models.build(con, select=["staging.trace_cpu_events"])
    finally:
        con.close()
    with ro(wh) as c:
        kinds = dict(c.execute("select kind, count(*) from staging.trace_cpu_events "
                               "group by kind").fetchall())
        assert kinds == {"annotation": 2 * len(KS) + 2, "runtime": len(KS)}
        ok = c.execute("select bool_and(nesting_ok) from staging.trace_cpu_events").fetchone()
        assert ok == (True,)


def test_a_bad_nvtx_range_is_refused_naming_the_row():
    con = sqlite3.connect(":memory:")
    con.deserialize(gen.nsys_sqlite(KS, cpu_side=True))
    con.execute("update NVTX_EVENTS set end = start - 1 where rowid = 5")
    con.commit()
    with pytest.raises(FormatError, match=r"table NVTX_EVENTS, rowid 5, column end: .*end >= "
                       "start"):
        nsys_sqlite.parse(con.serialize(), "bad.sqlite", RUN)
    con.execute("update NVTX_EVENTS set end = start + 1, textId = 99999 where rowid = 5")
    con.commit()
    with pytest.raises(FormatError, match=r"rowid 5, column textId: a StringIds id"):
        nsys_sqlite.parse(con.serialize(), "bad.sqlite", RUN)


# ------------------------------------------------------------ read on disk (issue 24, item 2)


def _warehouse_events(s, run_id: str) -> list[tuple]:
    con = db.connect_rw(s.warehouse)
    try:
        return con.execute(f"select {', '.join(EVENT_COLS)} from raw.trace_events "  # noqa: S608
                           "where run_id = ? order by event_idx", [run_id]).fetchall()
    finally:
        con.close()


def _parsed_events(p) -> list[tuple]:
    ev = p.tables["trace_events"]
    return list(zip(*(ev.column(c).to_pylist() for c in EVENT_COLS), strict=True))


def test_every_sqlite_file_is_read_on_disk(tmp_path):
    f = tmp_path / "a.sqlite"
    f.write_bytes(gen.nsys_sqlite(KS[:3]))
    assert readers.candidates(f, f.stat().st_size) == [sqlite_stream.SqliteReader]
    g = tmp_path / "a.sqlite.gz"  # compressed: read whole (decompressed), as before
    import gzip

    g.write_bytes(gzip.compress(f.read_bytes()))
    assert sqlite_stream.SqliteReader not in readers.candidates(g, g.stat().st_size)


def test_an_export_past_the_whole_document_limit_ingests_as_parsed(wh, tmp_path, monkeypatch):
    """A 1 MiB whole-document limit, a ~5 MiB export (events, NVTX ranges and a padding table
    nobody reads): ingested from the file on disk, the same rows as ``parse`` of its bytes;
    a JSON document of that size is still refused by the limit."""
    monkeypatch.setattr(formats, "WHOLE_MAX", 1 << 20)
    monkeypatch.setattr(tracebuild, "FLUSH_ROWS", 1 << 12)  # several batches
    ks = gen.kernels(8, 3000)
    data = gen.nsys_sqlite(ks, cpu_side=True, padding_mib=4)
    assert len(data) > 4 << 20  # four times the limit
    f = tmp_path / "big.sqlite"
    f.write_bytes(data)
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    p = nsys_sqlite.parse(data, str(f), r.sha256)
    assert _warehouse_events(wh, r.sha256) == _parsed_events(p)
    assert len(_parsed_events(p)) > 4 * 3000
    con = db.connect_rw(wh.warehouse)
    try:
        run = con.execute("select event_count, metadata from raw.trace_runs where run_id = ?",
                          [r.sha256]).fetchone()
        assert run[0] == p.tables["trace_events"].num_rows
        assert json.loads(run[1]) == json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
        pv = con.execute("select parser_version from raw.files").fetchone()
        assert pv == (nsys_sqlite.PARSER_VERSION,)
    finally:
        con.close()
    j = tmp_path / "big.json"  # the limit is in force for what is read whole
    j.write_bytes(b'{"rows": [], "audit_sha256": "' + b"x" * (2 << 20) + b'"}')
    r = loader.ingest_file(wh, j)
    assert r.status == "failed" and "a file of at most 1 MiB to read whole" in r.message


def test_the_reader_sends_events_before_the_run_ends(tmp_path, monkeypatch, wh):
    """Batches go to the writer as SQLite yields them: several ``trace_events`` items before
    the run row, none carrying ``run_id`` (the writer binds the identity)."""
    from warehouse.ingesting.snapshot import Snapshot, stat_key

    monkeypatch.setattr(tracebuild, "FLUSH_ROWS", 1 << 10)
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 1 << 10)
    f = tmp_path / "e.sqlite"
    f.write_bytes(gen.nsys_sqlite(gen.kernels(2, 2000), cpu_side=True))
    snap = Snapshot.copy(wh, f, stat_key(f))
    try:
        reader = sqlite_stream.SqliteReader(snap, str(f))
        got = [(n, t.num_rows, "run_id" in t.schema.names) for n, t in reader.tables()]
    finally:
        snap.discard()
    first_run = [n for n, *_ in got].index("trace_runs")
    assert sum(n == "trace_events" for n, *_ in got[:first_run]) >= 5
    assert not any(has for *_, has in got)
    assert reader.parser_version == nsys_sqlite.PARSER_VERSION


@pytest.mark.parametrize("case", ["garbled", "not_nsys"])
def test_a_bad_sqlite_file_on_disk_is_refused_naming_it(wh, tmp_path, case):
    data = bytearray(gen.nsys_sqlite(gen.kernels(4, 400)))
    if case == "garbled":
        con = sqlite3.connect(":memory:")
        con.deserialize(bytes(data))
        root = con.execute("select rootpage from sqlite_master where name = "
                           "'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
        data[(root - 1) * 4096:root * 4096] = b"\xee" * 4096
        rule = "readable.*malformed"
    else:
        con = sqlite3.connect(":memory:")
        con.execute("create table t (x)")
        con.commit()
        data = bytearray(con.serialize())
        rule = "an Nsight Systems export"
    f = tmp_path / f"{case}.sqlite"
    f.write_bytes(bytes(data))
    r = loader.ingest_file(wh, f)
    assert r.status == "failed"
    assert str(f) in r.message and __import__("re").search(rule, r.message), r.message
    c = db.connect_rw(wh.warehouse)
    try:
        assert c.execute("select count(*) from raw.trace_events").fetchone() == (0,)
    finally:
        c.close()


def test_same_rows_whatever_the_batch_sizes(monkeypatch):
    data = gen.nsys_sqlite(KS, cpu_side=True)
    small = _parsed_events(nsys_sqlite.parse(data, "x", RUN))
    monkeypatch.setattr(nsys_sqlite, "BATCH_ROWS", 7)
    monkeypatch.setattr(tracebuild, "FLUSH_ROWS", 5)
    assert _parsed_events(nsys_sqlite.parse(data, "x", RUN)) == small
    assert Counter(r[1] for r in small) == {"annotation": 2 * len(KS) + 2, "runtime": len(KS),
                                            "kernel": len(KS), "sync": len(KS), "memcpy": 1}


# ------------------------------------------------------------ nsys stats CSV reports


def test_cuda_api_trace_csv_calls_link_to_the_exports_kernels():
    from tests.test_formats_nsys import claimed_by
    from warehouse.ingesting.formats import nsys_trace_csv

    data = gen.nsys_api_trace_csv(KS)
    assert formats.detect(data, "api.csv") is nsys_trace_csv
    assert claimed_by(data) == []  # none of the kernel formats takes it
    p = nsys_trace_csv.parse(data, "api.csv", RUN)
    check_schema(p)
    import csv
    import io

    text = data.decode()
    rows = list(csv.DictReader(io.StringIO(text[text.index("\n") + 1:])))
    got = _rows(p, "runtime")
    assert [(e["name"], e["start_ns"], e["dur_ns"], e["correlation"], e["pid"], e["tid"])
            for e in got] == [(r["Name"], int(r["Start (ns)"]), int(r["Duration (ns)"]),
                               int(r["CorrID"]), r["Pid"], r["Tid"]) for r in rows]
    meta = json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
    assert meta["report"] == "cuda_api_trace" and meta["preamble_lines"] == 1
    # the same calls as the export's runtime rows: CorrIDs reach the export's kernels
    export = nsys_sqlite.parse(gen.nsys_sqlite(KS), "x.sqlite", RUN)
    kernel_corr = {e["correlation"] for e in _rows(export, "kernel")}
    assert {e["correlation"] for e in got} == kernel_corr
    back = list(csv.DictReader(io.StringIO(nsys_trace_csv.rebuild(load(p), RUN))))
    assert back == rows


def test_nvtx_pushpop_trace_csv_keeps_nsys_nesting():
    import csv
    import io

    from warehouse.ingesting.formats import nsys_trace_csv

    data = gen.nsys_nvtx_trace_csv(KS)
    assert formats.detect(data, "nvtx.csv") is nsys_trace_csv
    p = nsys_trace_csv.parse(data, "nvtx.csv", RUN)
    check_schema(p)
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    got = _rows(p, "annotation")
    assert [(e["name"], e["start_ns"], e["dur_ns"], e["tid"]) for e in got] == [
        (r["Name"], int(r["Start (ns)"]), int(r["End (ns)"]) - int(r["Start (ns)"]), r["TID"])
        for r in rows]
    lvl = [(json.loads(e["args"])["Lvl"], json.loads(e["args"])["ParentId"]) for e in got]
    assert lvl[:2] == [("0", ""), ("1", "1")]
    assert list(csv.DictReader(io.StringIO(nsys_trace_csv.rebuild(load(p), RUN)))) == rows


@pytest.mark.parametrize("col,value,rule", [
    ("Duration (ns)", "3501", r"line 2, column 'Duration \(ns\)'.*= End \(ns\) - Start"),
    ("Start (ns)", "1.2E+06", r"line 2, column 'Start \(ns\)'.*scientific notation"),
    ("End (ns)", "5", r"line 2, column 'End \(ns\)'.*End \(ns\) >= Start \(ns\)"),
])
def test_a_bad_nvtx_trace_row_is_refused(col, value, rule):
    import csv
    import io

    from warehouse.ingesting.formats import nsys_trace_csv

    rows = list(csv.reader(io.StringIO(gen.nsys_nvtx_trace_csv(KS[:2]).decode())))
    rows[1][rows[0].index(col)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    with pytest.raises(FormatError, match=rule):
        nsys_trace_csv.parse(buf.getvalue().encode(), "nvtx.csv", RUN)


def test_an_nsys_sqlite_1_run_is_rederived_with_its_cpu_side(wh, tmp_path):
    """A run ingested by nsys_sqlite/1 (no NVTX or sync rows, the earlier metadata) gains its
    CPU side by `pwh rederive`, from the archived file, read on disk: the rows equal a fresh
    parse."""
    from warehouse.ingesting import rederive

    f = tmp_path / "old.sqlite"
    f.write_bytes(gen.nsys_sqlite(KS, cpu_side=True))
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    con = db.connect_rw(wh.warehouse)
    try:  # what nsys_sqlite/1 wrote
        con.execute("delete from raw.trace_events where kind in ('annotation', 'sync')")
        con.execute("update raw.trace_runs set event_count = (select count(*) from "
                    "raw.trace_events), metadata = '{}'")
        con.execute("update raw.files set parser_version = 'nsys_sqlite/1'")
    finally:
        con.close()
    rep = rederive.rederive(wh)
    assert [o.status for o in rep.outcomes] == ["rederived"], [o.message for o in rep.outcomes]
    p = nsys_sqlite.parse(f.read_bytes(), str(f), r.sha256)
    assert _warehouse_events(wh, r.sha256) == _parsed_events(p)
    con = db.connect_rw(wh.warehouse)
    try:
        assert con.execute("select parser_version from raw.files").fetchone() == (
            nsys_sqlite.PARSER_VERSION,)
    finally:
        con.close()


def test_a_wal_mode_export_reads_alike_on_disk_and_in_memory(wh, tmp_path):
    """An export left in WAL mode (header bytes 18-19 = 2), its -wal file not beside it: the
    on-disk reader (immutable) and ``parse`` of its bytes read the same rows, and nothing is
    written next to the file; a truncated file is refused by both."""
    import shutil

    src = tmp_path / "src.sqlite"
    src.write_bytes(gen.nsys_sqlite(KS, cpu_side=True))
    con = sqlite3.connect(src)
    assert con.execute("pragma journal_mode = wal").fetchall() == [("wal",)]
    con.close()
    d = tmp_path / "in"
    d.mkdir()
    f = d / "wal.sqlite"
    shutil.copyfile(src, f)
    data = f.read_bytes()
    assert data[18:20] == b"\x02\x02"
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    assert _warehouse_events(wh, r.sha256) == _parsed_events(
        nsys_sqlite.parse(data, str(f), r.sha256))
    assert sorted(p.name for p in d.iterdir()) == ["wal.sqlite"]  # no -wal, -shm, journal
    t = d / "truncated.sqlite"
    t.write_bytes(data[: len(data) // 2])
    r = loader.ingest_file(wh, t)
    assert r.status == "failed" and "a readable SQLite database" in r.message, r.message
    with pytest.raises(FormatError, match="a readable SQLite database"):
        nsys_sqlite.parse(t.read_bytes(), str(t), RUN)
