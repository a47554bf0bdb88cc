"""Streamed Kineto ingestion (plain and gzip): the same rows as the whole-document path, one
transaction, bad streams refused and quarantined with nothing written. Small generated files,
cut into many tiny chunks (the chunk and block sizes are lowered for the test)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest

from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader, readers
from warehouse.ingesting.formats import kineto_columns, kineto_gen, kineto_stream, trace

COLS = {"trace_events": "event_idx", "trace_runs": "run_id", "trace_devices": "device",
        "trace_kernel_summaries": "row_idx"}


@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(kineto_stream, "_BLOCK", 4096)
    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)


def rows(s, run_id: str) -> dict[str, list]:
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        return {t: con.execute(f"select * exclude (run_id) from raw.{t} "  # noqa: S608
                               f"where run_id = ? order by {o}", [run_id]).fetchall()
                for t, o in COLS.items()}
    finally:
        con.close()


def _tricky(tmp_path: Path) -> Path:
    """A trace whose names contain the event boundary ``}, {`` and whose last keys follow the
    events array (as Kineto writes traceName and baseTimeNanoseconds)."""
    f = tmp_path / "tricky.json"
    kineto_gen.write_file(f, steps=30, seed=3, relative=True)
    text = f.read_text().replace('"triton_poi_fused_add_cos_sin_0"',
                                 '"triton_0 }, {\\"x\\": [1]}, { ]"')
    f.write_text(text)
    return f


def test_streamed_rows_equal_the_whole_document_path(tmp_path, tiny_chunks, monkeypatch, capfd):
    from warehouse.config import settings

    plain = _tricky(tmp_path)
    gz = tmp_path / "tricky.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    streamed = settings(tmp_path / "streamed" / "w.duckdb")
    whole = settings(tmp_path / "whole" / "w.duckdb")
    monkeypatch.setenv("PWH_DEBUG_TIMING", "1")
    r1 = loader.ingest_file(streamed, plain)
    r2 = loader.ingest_file(streamed, gz)
    assert (r1.status, r2.status) == ("ingested", "ingested"), (r1.message, r2.message)
    assert capfd.readouterr().err.count("TraceReader (kineto_trace)") == 2
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 1 << 60)
    w1 = loader.ingest_file(whole, plain)
    w2 = loader.ingest_file(whole, gz)
    assert (w1.sha256, w2.sha256) == (r1.sha256, r2.sha256)
    for run in (r1.sha256, r2.sha256):
        got, want = rows(streamed, run), rows(whole, run)
        assert got == want
        assert len(got["trace_events"]) > 100
    assert r1.counts == w1.counts
    # many event batches for one file: the chunking really happened
    stream = kineto_stream.TraceStream(str(plain), str(plain))
    batches = [name for name, _ in stream.tables()]
    assert batches.count(trace.EVENTS.name) > 5
    assert batches[-2:] == [trace.DEVICES.name, trace.RUNS.name]
    con = duckdb.connect(str(streamed.warehouse), read_only=True)
    try:  # the file's own clock (baseTimeNanoseconds, after the events array) was read
        when = con.execute("select distinct captured_at from raw.files").fetchall()
        first = con.execute("select min(start_ns) from raw.trace_events where kind in "
                            f"{tuple(kineto_columns.GPU_KINDS)}").fetchone()[0]
        names = con.execute("select count(*) from raw.trace_events where name like "
                            "'triton_0 }, {%'").fetchone()[0]
    finally:
        con.close()
    base_ns = kineto_gen.EPOCH_START_NS - kineto_gen.EPOCH_START_NS % 10**9
    # the base plus the first GPU/runtime event's ts (the base alone is floored to 3 months)
    assert when == [(dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=(base_ns + first)
                                                             // 1000),)]
    assert names == 2 * 30


def test_compiled_scanner_gives_the_rows_of_the_msgspec_path(tmp_path, tiny_chunks, monkeypatch):
    """The same trace streamed with the compiled scanner (kineto_scan) and without it
    (PWH_KINETO_SCAN=0): the same rows; and the scanner really took the chunks."""
    from warehouse.config import settings
    from warehouse.ingesting.formats import kineto_scan

    f = tmp_path / "g.json"
    kineto_gen.write_file(f, steps=40, seed=11)
    got = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("PWH_KINETO_SCAN", mode)
        s = settings(tmp_path / f"scan{mode}" / "w.duckdb")
        r = loader.ingest_file(s, f)
        assert r.status == "ingested", r.message
        got[mode] = rows(s, r.sha256)
    assert got["1"] == got["0"] and len(got["1"]["trace_events"]) > 100
    taken = []
    real = kineto_scan.add_chunk
    monkeypatch.setattr(kineto_scan, "add_chunk", lambda c, b: taken.append(real(c, b))
                        or taken[-1])
    for mode, want in (("1", True), ("0", False)):
        monkeypatch.setenv("PWH_KINETO_SCAN", mode)
        taken.clear()
        assert sum(n == trace.EVENTS.name for n, _ in kineto_stream.TraceStream(
            str(f), str(f)).tables()) > 5
        assert taken and set(taken) == {want}, mode


def test_streamed_text_that_is_not_utf8_is_refused(tmp_path, tiny_chunks):
    """A byte that is not UTF-8 inside a value kept verbatim (args) deep in the stream: msgspec
    does not look inside such values, DuckDB would refuse the row; refused, located, quarantined,
    nothing written."""
    f = tmp_path / "g.json"
    kineto_gen.write_file(f, steps=20, seed=6)
    data = f.read_bytes()
    k = data.rfind(b'"queued": 0')
    bad = data[:k] + b'"queued": "' + bytes([0xFF]) + b'"' + data[k + len(b'"queued": 0'):]
    s, r = _streamed(tmp_path, "notutf8", bad)
    assert r.status == "failed" and "UTF-8" in r.message and "$.traceEvents[" in r.message, \
        r.message
    assert r.quarantine_path
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        assert con.execute("select count(*) from raw.trace_events").fetchone() == (0,)
        assert con.execute("select count(*) from raw.files").fetchone() == (0,)
    finally:
        con.close()


@pytest.mark.parametrize("damage,where", [
    (lambda b: b[: len(b) - 200], "byte"),  # gzip truncated
    (lambda b: b[:60] + bytes(x ^ 0xA5 for x in b[60:90]) + b[90:], "byte"),  # corrupt
])
def test_bad_gzip_stream_is_refused_and_nothing_is_written(tmp_path, tiny_chunks, damage, where):
    from warehouse.config import settings

    s = settings(tmp_path / "w" / "w.duckdb")
    f = tmp_path / "in" / "t.json.gz"
    kineto_gen.write_file(f, gz=True, steps=20, seed=4)
    f.write_bytes(damage(f.read_bytes()))
    r = loader.ingest_file(s, f)
    assert r.status == "failed" and where in r.message and "gzip" in r.message, r.message
    assert r.quarantine_path and Path(r.quarantine_path).exists()
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        assert con.execute("select count(*) from raw.files").fetchone() == (0,)
        assert con.execute("select count(*) from raw.trace_events").fetchone() == (0,)
    finally:
        con.close()
    assert not list((s.archive_dir).glob(".*.tmp"))


def test_streamed_schema_error_names_the_event(tmp_path, tiny_chunks):
    from warehouse.config import settings

    s = settings(tmp_path / "w" / "w.duckdb")
    f = tmp_path / "in" / "t.json"
    kineto_gen.write_file(f, steps=20, seed=4)
    data = f.read_bytes()
    k = data.rfind(b'"dur": ')  # the last complete event's dur: late in the stream
    f.write_bytes(data[:k] + b'"dur": -1.5' + data[data.index(b",", k):])
    r = loader.ingest_file(s, f)
    assert r.status == "failed", r.message
    assert "$.traceEvents[" in r.message and "non-negative" in r.message, r.message


def test_registry_refuses_what_no_format_reads(tmp_path):
    db = tmp_path / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("create table t (x)")
    con.commit()
    con.close()
    with pytest.raises(FormatError) as e:  # claimed by its magic, refused by the nsys reader
        formats.parse(db.read_bytes(), str(db), "0" * 64)
    assert e.value.kind == "unknown_format" and "SQLite" in str(e.value)
    with pytest.raises(FormatError) as e:  # text no format claims: the formats it could be
        formats.detect(b"alpha,beta\n1,2\n", "x.json")
    assert e.value.kind == "unknown_format" and "rocprof_csv" in str(e.value)
    with pytest.raises(FormatError) as e:  # a gzip of something unknown: judged inside
        formats.detect(gzip.compress(json.dumps({"a": 1}).encode()), "x.gz")
    assert "inside gzip" in str(e.value)


def _streamed(tmp_path, name: str, data: bytes):
    from warehouse.config import settings

    s = settings(tmp_path / name / "w.duckdb")
    f = tmp_path / f"{name}.json"
    f.write_bytes(data)
    return s, loader.ingest_file(s, f)


def test_streamed_duplicate_key_is_refused_and_odd_but_valid_keys_are_not(tmp_path, tiny_chunks):
    """The streamed duplicate-key proof (colon counts, no backslash in the chunk): a repeated
    key deep in the stream is refused; an unknown key and a blank before a colon are not
    duplicates (the exact check runs and accepts them, rows as the whole-document path)."""
    f = tmp_path / "g.json"
    kineto_gen.write_file(f, steps=20, seed=6)
    data = f.read_bytes()
    assert b"\\" not in data
    k = data.rfind(b'"cat": "kernel"')  # late in the stream
    dup = data[:k] + b'"dur": 1, ' + data[k:]
    _, r = _streamed(tmp_path, "dup", dup)
    assert r.status == "failed" and "unique object keys" in r.message, r.message
    assert "$.traceEvents[" in r.message
    odd = data[:k] + b'"extra_key" : {"a": 1}, ' + data[k:]
    s, r = _streamed(tmp_path, "odd", odd)
    assert r.status == "ingested", r.message
    n = rows(s, r.sha256)["trace_events"]
    assert len(n) > 100


@pytest.mark.parametrize("texts", [
    [b"7", b"1.5", b"0.001", b"0", b"1712195495505582.988", b"12.34", b"9223372036854775.807"],
    [b"1.5", b"2.100000"],  # sub-ns zeros: the exact path
    [b"3", b"-1.25"],  # a sign: the exact path (ts may be negative)
])
def test_vectorised_decimal_times_equal_the_exact_conversion(texts):
    import msgspec

    raws = [msgspec.Raw(t) for t in texts]
    got = trace.decimal_ns_array(raws, "f", lambda k: f"$[{k}]", negative=True).tolist()
    assert got == [trace.decimal_ns(t, "f", "$", negative=True) for t in texts]


def test_vectorised_decimal_times_refuse_what_the_exact_conversion_refuses():
    import msgspec

    for bad, rule in ((b"1.0004", "whole number of ns"), (b"8.1097E+14", "exponent"),
                      (b'"12"', "a decimal number"), (b"9223372036854775.808", "BIGINT")):
        with pytest.raises(FormatError) as e:
            trace.decimal_ns_array([msgspec.Raw(b"1.5"), msgspec.Raw(bad)], "f",
                                   lambda k: f"$[{k}].dur")
        assert e.value.json_path == "$[1].dur" and rule in str(e.value), str(e.value)


def test_ids_in_args_as_written_and_correlation_within_bigint():
    from warehouse.ingesting.formats import kineto

    def ev(args: bytes) -> dict:
        return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1,
                "dur": 1, "args": json.loads(args) if args else None}

    args = [b'{"device": 0, "stream": "s7", "correlation": 5}',
            b'{"correlation": 99999999999999999999}', b'{"correlation": 1.5}',
            b'{"device": null, "correlation": -3}']
    evs = [ev(a) for a in args]
    data = json.dumps({"traceEvents": evs}).encode()
    got = formats.parse(data, "t.json", "r" * 64).tables["trace_events"].to_pylist()
    assert [(e["device"], e["stream"], e["correlation"]) for e in got] == [
        ("0", "s7", 5), (None, None, None), (None, None, None), (None, None, -3)]
    big = [ev(b'{"correlation": 5}'), ev(b'{"correlation": 10000000000000000000}')]
    got = formats.parse(json.dumps({"traceEvents": big}).encode(), "t.json",
                        "r" * 64).tables["trace_events"].to_pylist()
    assert [e["correlation"] for e in got] == [5, None]  # above BIGINT: null, not wrapped
    assert kineto.colons(b'{"a": "x:y"}') == 2


_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}
_K = json.dumps(_KERNEL)[:-1]  # a kernel event without its closing brace: args follow
_DEV = '{"deviceProperties":[{"id":0,"id":1,"name":"A100"}],"traceEvents":[' + _K + "}]}"
_ARGS = '{"traceEvents":[' + _K + "}," + _K + ',"args":{"device":0,"stream":7,"device":1}}]}'
_NESTED = '{"traceEvents":[' + _K + ',"args":{"n":{"a":1,"a":2},"device":0}}]}'


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("doc, where, key", [
    (_DEV, r"\$\.deviceProperties", "id"),
    (_ARGS, r"\$\.traceEvents\[1\]\.args", "device"),
    (_NESTED, r"\$\.traceEvents\[0\]\.args", "a"),
], ids=["device_properties", "args", "nested_args"])
def test_a_repeated_key_inside_args_or_the_header_is_refused(tmp_path, monkeypatch, doc, where,
                                                             key, streamed):
    # the ids (device, stream) are read from args by a decoder that keeps the last key: a file
    # repeating one would be stored with a device it does not unambiguously name
    import re

    from warehouse.config import settings

    if streamed:
        monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)
    p = tmp_path / "dup.json"
    p.write_text(doc)
    s = settings(tmp_path / "w" / "w.duckdb")
    r = loader.ingest_file(s, p)
    assert r.status == "failed", r
    assert re.search(where, r.message) and f"the key {key!r} twice" in r.message, r.message
    assert r.quarantine_path is not None


def test_streamed_cpu_only_trace_is_a_run_with_zero_kernels(tmp_path, tiny_chunks):
    from warehouse.config import settings

    ops = [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 2,
            "ts": 1000 + i, "dur": 1, "args": {"Sequence number": i}} for i in range(2000)]
    f = tmp_path / "cpu.pt.trace.json"
    f.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ops}))
    assert f.stat().st_size > 20 * 8192  # many chunks
    s = settings(tmp_path / "w" / "w.duckdb")
    r = loader.ingest_file(s, f)
    assert r.status == "ingested", r.message
    got = rows(s, r.sha256)
    assert len(got["trace_events"]) == 2000 and got["trace_kernel_summaries"] == []
    assert len(got["trace_runs"]) == 1
    assert json.loads(got["trace_runs"][0][-1])["kinds"] == {"cpu_op": 2000}
    with duckdb.connect(str(s.warehouse), read_only=True) as con:
        assert con.execute("select count(*), count(distinct name), min(kind), max(kind) "
                           "from raw.trace_events where run_id = ?", [r.sha256]).fetchone() \
            == (2000, 2000, "cpu_op", "cpu_op")


# ----------------------------------------------------------------- two parser processes


def test_two_parser_processes_only_where_they_pay(monkeypatch):
    from warehouse.ingesting import trace_stream
    from warehouse.ingesting.formats import kineto_scan

    big = trace_stream.SPLIT_MIN_BYTES
    cases = [  # PWH_TRACE_SPLIT, scanner built, cores, size -> split
        ("", True, 2, big, False), ("", True, 4, big, True), ("", False, 2, big, True),
        ("", True, 8, big - 1, False), ("1", True, 2, big, True), ("0", False, 8, big, False),
        ("1", True, 2, big - 1, False)]
    for mode, scanner, cpus, size, want in cases:
        monkeypatch.setenv("PWH_TRACE_SPLIT", mode)
        monkeypatch.setattr(kineto_scan, "available", lambda s=scanner: s)
        monkeypatch.setattr(trace_stream.os, "sched_getaffinity", lambda _, n=cpus: set(range(n)))
        assert trace_stream.split_wanted(size) is want, (mode, scanner, cpus, size)
    monkeypatch.delattr(trace_stream.os, "sched_getaffinity")  # not Linux: the machine's count
    monkeypatch.setattr(trace_stream.os, "cpu_count", lambda: 8)
    monkeypatch.setenv("PWH_TRACE_SPLIT", "")
    assert trace_stream.split_wanted(big) is True


@pytest.fixture
def split(monkeypatch, tiny_chunks):
    """Plain traces parsed by two processes (head and tail part); records the cuts made."""
    from warehouse.ingesting import trace_stream

    monkeypatch.setattr(trace_stream, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setenv("PWH_TRACE_SPLIT", "1")
    cuts: list = []
    real = kineto_stream.split_point

    def spy(file, size):
        cuts.append(real(file, size))
        return cuts[-1]

    monkeypatch.setattr(kineto_stream, "split_point", spy)
    return cuts


def _whole_rows(tmp_path, monkeypatch, f: Path, name: str):
    from warehouse.config import settings

    with monkeypatch.context() as m:
        m.setattr(readers, "STREAM_MIN_BYTES", 1 << 60)
        s = settings(tmp_path / name / "w.duckdb")
        r = loader.ingest_file(s, f)
    return s, r


def test_two_parser_processes_give_the_rows_of_one(tmp_path, split, monkeypatch):
    from warehouse.config import settings

    f = _tricky(tmp_path)
    s = settings(tmp_path / "split" / "w.duckdb")
    r = loader.ingest_file(s, f)
    assert r.status == "ingested", r.message
    assert len(split) == 1 and split[0] is not None  # really cut in two
    ws, w = _whole_rows(tmp_path, monkeypatch, f, "whole")
    assert (w.sha256, w.counts) == (r.sha256, r.counts)
    got, want = rows(s, r.sha256), rows(ws, w.sha256)
    assert got == want and len(got["trace_events"]) > 100
    assert [e[0] for e in got["trace_events"]] == sorted({e[0] for e in got["trace_events"]})
    assert not list(s.archive_dir.glob(".*.tmp"))  # the spool file is gone

    def clock(st):  # the file's own clock (baseTimeNanoseconds, in the tail part's keys)
        con = duckdb.connect(str(st.warehouse), read_only=True)
        try:
            return con.execute("select captured_at from raw.files").fetchall()
        finally:
            con.close()

    assert clock(s) == clock(ws) and clock(s)[0][0] is not None


def test_a_cut_inside_a_name_is_found_and_the_file_parsed_in_one_part(tmp_path, split,
                                                                        monkeypatch):
    from warehouse.config import settings
    from warehouse.ingesting import trace_stream

    f = _tricky(tmp_path)
    data = f.read_bytes()
    inside = data.index(b"triton_0 }, {", len(data) // 2) + len(b"triton_0 }")
    assert data[inside:inside + 1] == b","
    monkeypatch.setattr(kineto_stream, "split_point", lambda file, size: inside)
    calls = []
    real = trace_stream.TraceReader.start

    def spy(self):
        calls.append(self.split)
        return real(self)

    monkeypatch.setattr(trace_stream.TraceReader, "start", spy)
    s = settings(tmp_path / "split" / "w.duckdb")
    r = loader.ingest_file(s, f)
    assert r.status == "ingested", r.message
    assert calls == [True, False]  # the bad cut was noticed, then one part
    ws, w = _whole_rows(tmp_path, monkeypatch, f, "whole")
    assert rows(s, r.sha256) == rows(ws, w.sha256)


def _break_dur(data: bytes, k: int) -> bytes:
    """``data`` with the ``dur`` at or after offset ``k`` made negative."""
    k = data.index(b'"dur": ', k)
    return data[:k] + b'"dur": -1.5' + data[data.index(b",", k):]


@pytest.mark.parametrize("where", ["tail", "both"])
def test_two_parser_processes_report_the_first_error_in_document_order(tmp_path, split,
                                                                        monkeypatch, where):
    from warehouse.config import settings

    f = tmp_path / "t.json"
    kineto_gen.write_file(f, steps=40, seed=4)
    data = f.read_bytes()
    bad = _break_dur(data, len(data) * 3 // 4)
    if where == "both":
        bad = _break_dur(bad, len(data) // 4)
    f.write_bytes(bad)
    s = settings(tmp_path / "split" / "w.duckdb")
    r = loader.ingest_file(s, f)
    assert r.status == "failed" and split[0] is not None
    # the tail part's rows went to DuckDB while it was parsed: all rolled back
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        assert con.execute("select count(*) from raw.files").fetchone() == (0,)
        assert con.execute("select count(*) from raw.trace_events").fetchone() == (0,)
        assert con.execute("select count(*) from raw.ingest_errors").fetchone() == (1,)
    finally:
        con.close()
    assert r.quarantine_path and not list(s.archive_dir.glob(".*.tmp"))
    _, w = _whole_rows(tmp_path, monkeypatch, f, "whole")
    # the same message as one part (the tail's event index counts from the document's start)
    assert r.message.replace(str(f), "F") == w.message.replace(str(f), "F"), (r.message,
                                                                            w.message)
    assert "$.traceEvents[" in r.message and "non-negative" in r.message
