"""The streamed path for big tile profiles gives exactly what the whole-document path gives:
the same rows, the same errors (file, JSON path, rule), the same atomicity and idempotency.

Big files are not needed to test it: the size threshold and the chunk size are lowered so that
small generated profiles stream through many chunks.
"""

from __future__ import annotations

import json
import re

import pytest

from bench import gen
from tests.conftest import PROFILE_SEED, counts, ro
from warehouse.ingesting import forking, loader, profile_stream, readers, writer
from warehouse.ingesting.formats import profile
from warehouse.ingesting.loader import ingest_file

STREAMED_TABLES = ("profile_runs", "profile_groups", "profile_samples", "profile_sample_metadata")


@pytest.fixture(params=["process", "thread"])
def streaming(request, monkeypatch):
    """Stream every profile, in chunks of ~4 KB (a few samples each), parsed in a forked
    process (the default) or in a thread of the loading process (``PWH_STREAM_PROCESS=0``).
    Yields the list of files whose ingestion the streamed path completed."""
    monkeypatch.setenv("PWH_STREAM_PROCESS", "1" if request.param == "process" else "0")
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(profile, "CHUNK_BYTES", 4096)
    done = []
    real = profile_stream.ProfileStream.tables

    def spy(self):
        yield from real(self)
        done.append(self.shown)  # the streaming reader read the whole file

    monkeypatch.setattr(profile_stream.ProfileStream, "tables", spy)
    return done


@pytest.fixture
def small_profile(tmp_path):
    p = tmp_path / "runs" / "p.json"
    gen.write_profile(p, 400, seed=3)
    return p


def _rows(s, table: str):
    con = ro(s)
    try:
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'raw' "
            "AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()]
        return con.execute(f"SELECT * FROM raw.{table} ORDER BY ALL").fetchall(), cols
    finally:
        con.close()


def test_streamed_rows_equal_whole_document_rows(tmp_path, small_profile, streaming, monkeypatch):
    from warehouse.config import settings

    a = settings(tmp_path / "a" / "w.duckdb")
    r = ingest_file(a, small_profile)
    assert r.status == "ingested", r.message
    assert streaming == [str(small_profile.resolve())]  # it did stream
    assert r.counts == {"groups": 3, "samples": 400, "metadata_pairs": 4400}
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 1 << 60)
    b = settings(tmp_path / "b" / "w.duckdb")
    assert ingest_file(b, small_profile).status == "ingested"
    assert len(streaming) == 1  # the second one did not
    for t in STREAMED_TABLES:
        assert _rows(a, t) == _rows(b, t), t
    con = ro(a)
    try:
        assert profile.rebuild(con, r.sha256) == json.loads(small_profile.read_bytes())
        f = con.execute("SELECT byte_size, parser_version, archive_path FROM raw.files").fetchone()
    finally:
        con.close()
    assert f[:2] == (small_profile.stat().st_size, profile.PARSER_VERSION)
    assert open(f[2], "rb").read() == small_profile.read_bytes()
    assert not list(a.archive_dir.glob(".*.tmp"))


def test_streamed_seed_round_trip_and_idempotency(wh, seeds, streaming):
    r = ingest_file(wh, seeds["profile"])
    assert r.status == "ingested" and streaming
    con = ro(wh)
    try:
        assert profile.rebuild(con, r.sha256) == json.loads(seeds["profile"].read_bytes())
    finally:
        con.close()
    before = counts(wh)
    again = ingest_file(wh, seeds["profile"])
    assert (again.status, again.message) == ("skipped", "already ingested")
    assert counts(wh) == before


def test_escapes_and_unusual_key_order_take_the_exact_string_path(tmp_path, streaming):
    """Escaped quotes, \\u escapes, braces and the split pattern inside strings, and keys in
    another order: still one correct row per value."""
    from warehouse.config import settings

    doc = json.loads(PROFILE_SEED.read_bytes())
    s0 = doc["samples"][0]
    s0["metadata"][0]["value"] = 'say "hi", {"physicalTile": 1} \\ done'
    s0["metadata"][1]["value"] = "caf\u00e9 \u2603"
    s1 = doc["samples"][1]
    doc["samples"][1] = {k: s1[k] for k in reversed(list(s1))}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc, indent=2))  # json.dumps escapes non-ASCII as \\u....
    wh = settings(tmp_path / "s" / "w.duckdb")
    r = ingest_file(wh, path)
    assert r.status == "ingested", r.message
    con = ro(wh)
    try:
        assert profile.rebuild(con, r.sha256) == doc
    finally:
        con.close()


def test_plain_chunks_take_the_fast_string_path(small_profile, monkeypatch):
    """A profile as profilers write it (no escapes, usual key order) has its string columns
    sliced from the JSON text and its keys proven unique per chunk: no chunk is left for the
    slow re-check. (A constrained field type once hid the string slots and silently tripled
    the parse time of every full-size profile.)"""
    import mmap

    monkeypatch.setattr(profile, "CHUNK_BYTES", 4096)
    assert set(profile._SAMPLE_STR_SLOTS) == {"kind", "operation", "kernel"}
    stream = profile.SampleStream(str(small_profile), str(small_profile))
    with open(small_profile, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        chunks = sum(1 for t, _ in stream.tables(mm) if t == "profile_samples")
    finally:
        mm.close()
    assert chunks > 10 and stream.samples == 400
    assert stream.unproven == []


def test_streamed_load_restores_duckdb_threads(tmp_path, small_profile, streaming):
    """The load runs with fewer DuckDB threads while the parser process works; a caller's
    connection gets its own setting back."""
    from warehouse import db
    from warehouse.config import settings

    s = settings(tmp_path / "t" / "w.duckdb")
    con = db.connect_rw(s.warehouse)
    try:
        db.ensure_schema(con)
        con.execute("SET threads = 3")
        assert ingest_file(s, small_profile, con=con).status == "ingested"
        assert streaming  # it did stream
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 3
    finally:
        con.close()


def test_many_chunks_keep_sample_positions(tmp_path, small_profile, streaming, monkeypatch):
    monkeypatch.setattr(profile, "CHUNK_BYTES", 1500)  # about one sample per chunk
    from warehouse.config import settings

    wh = settings(tmp_path / "s" / "w.duckdb")
    r = ingest_file(wh, small_profile)
    assert r.status == "ingested", r.message
    con = ro(wh)
    try:
        idx = [x[0] for x in con.execute(
            "SELECT sample_idx FROM raw.profile_samples ORDER BY sample_idx").fetchall()]
        assert idx == list(range(400))
        assert profile.rebuild(con, r.sha256) == json.loads(small_profile.read_bytes())
    finally:
        con.close()


def _mutated(small: bytes, old: bytes, new: bytes, nth: int) -> bytes:
    """Replace the ``nth`` occurrence of ``old``."""
    at = -1
    for _ in range(nth + 1):
        at = small.index(old, at + 1)
    return small[:at] + new + small[at + len(old):]


P = PROFILE_SEED.read_bytes()
# (case, bytes, pattern of the error): errors inside samples, found in some chunk
SAMPLE_CASES = [
    ("wrong_type_late_sample", _mutated(P, b'"duration": 48552', b'"duration": 1.5', 2),
     r"\$\.samples\[2\]\.duration: Expected `int`, got `float`"),
    ("metadata_value_not_string", _mutated(P, b'"value": "505"', b'"value": 505', 1),
     r"\$\.samples\[1\]\.metadata\[1\]\.value: Expected `str`, got `int`"),
    ("nan_in_sample", _mutated(P, b'"offset": 273174', b'"offset": NaN', 0),
     r"well-formed JSON.*invalid character"),
    ("duplicate_key_in_sample", _mutated(P, b'"epoch": 1,', b'"epoch": 1, "epoch": 2,', 2),
     r"key 'epoch' twice"),
    ("duplicate_key_in_pair", _mutated(P, b'"name": "reason",', b'"name": "reason", "name": "x",', 0),
     r"key 'name' twice"),
    ("unknown_field_in_sample", _mutated(P, b'"epoch": 1,', b'"epoch": 1, "extra": 0,', 1),
     r"unknown field `extra`"),
    ("missing_field_in_sample", _mutated(P, b'"phase": 33,\n', b"", 0),
     r"\$\.samples\[1\]: Object missing required field `phase`"),
    ("trailing_comma_in_samples", P.rstrip()[:-1].rstrip()[:-1].rstrip() + b",\n  ]\n}",
     r"well-formed JSON"),
    ("invalid_utf8_in_sample", _mutated(P, b'"compute"', b'"comp\xffute"', 1), r"Invalid UTF-8"),
    ("header_error", P.replace(b'"clockHz": 1500000000', b'"clockHz": "fast"'),
     r"\$\.clockHz: Expected `int`, got `str`"),
]


@pytest.mark.parametrize("exact_errors", [True, False], ids=["reparsed", "streamed"])
@pytest.mark.parametrize("case,data,pattern", SAMPLE_CASES, ids=[c[0] for c in SAMPLE_CASES])
def test_streamed_errors(wh, tmp_path, streaming, monkeypatch, case, data, pattern, exact_errors):
    """Errors name the file, the document's JSON path and the rule, whether the file is parsed
    again whole for the message (files up to EXACT_ERRORS_MAX_BYTES) or not; nothing is written,
    no temp file is left behind."""
    monkeypatch.setattr(profile_stream, "EXACT_ERRORS_MAX_BYTES", (1 << 40) if exact_errors else 0)
    bad = tmp_path / "in" / f"{case}.json"
    bad.parent.mkdir()
    bad.write_bytes(data)
    r = ingest_file(wh, bad)
    assert r.status == "failed"
    assert str(bad) in r.message, r.message
    assert re.search(pattern, r.message, re.S), r.message
    assert counts(wh) == dict.fromkeys(counts(wh), 0)
    assert not list(wh.archive_dir.glob("*")) if wh.archive_dir.exists() else True
    assert open(r.quarantine_path, "rb").read() == data
    assert r.sha256 is None or len(r.sha256) == 64


@pytest.mark.parametrize("case,data,pattern", SAMPLE_CASES[:6], ids=[c[0] for c in SAMPLE_CASES[:6]])
def test_streamed_error_is_the_whole_document_error(wh, tmp_path, monkeypatch, case, data,
                                                    pattern):
    """The streamed message matches the whole-document message word for word (same JSON path,
    same line and column)."""
    bad = tmp_path / f"{case}.json"
    bad.write_bytes(data)
    whole = ingest_file(wh, bad).message
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(profile_stream, "EXACT_ERRORS_MAX_BYTES", 0)
    monkeypatch.setattr(profile, "CHUNK_BYTES", 2048)
    streamed = ingest_file(wh, bad).message
    if case.startswith("duplicate_key"):  # the stream names the chunk's sample range
        whole, streamed = (re.sub(r"at \$\S*:", "at $:", x) for x in (whole, streamed))
    assert streamed == whole


def test_error_while_loading_rolls_back(wh, small_profile, streaming, monkeypatch):
    """A failure in the DuckDB writer thread after some chunks were inserted leaves no trace."""
    import numpy as np
    import pyarrow as pa

    real = profile.sample_batches
    n = {"calls": 0}

    def bad_fifth(*a, **kw):
        stab, mtab = real(*a, **kw)
        n["calls"] += 1
        if n["calls"] == 5:  # same schema, but DuckDB refuses the bytes: the INSERT fails
            rows = stab.num_rows
            bad = pa.StringArray.from_buffers(
                rows, pa.py_buffer(np.arange(rows + 1, dtype=np.int32)),
                pa.py_buffer(b"\xff" * rows))
            stab = stab.set_column(stab.schema.get_field_index("kind"), "kind", bad)
        return stab, mtab

    monkeypatch.setattr(profile, "sample_batches", bad_fifth)
    # one INSERT per batch: some succeed first
    monkeypatch.setattr(profile_stream.ProfileStream, "INSERT_BYTES_THREAD", 1)
    monkeypatch.setattr(profile_stream.ProfileStream, "INSERT_BYTES_PROCESS", 1)
    r = ingest_file(wh, small_profile)  # a database error is this file's failure, not a crash
    assert r.status == "failed" and "cannot write the run of" in r.message, r.message
    assert r.quarantine_path is None  # the file is fine: it is not quarantined
    # (the counter lives in the parser process when the parse runs in one: not checked here)
    assert counts(wh) == dict.fromkeys(counts(wh), 0)
    assert not list(wh.archive_dir.glob("*"))
    monkeypatch.setattr(profile, "sample_batches", real)
    assert ingest_file(wh, small_profile).status == "ingested"
    assert counts(wh)["profile_samples"] == 400


def test_staged_file_streams_in_place(wh, small_profile, streaming):
    """A file already in the archive (the Dagster path stages it there) is not copied again."""
    from warehouse.ingesting.landing import ingest_staged, stage

    sha = stage(wh, small_profile)
    before = sorted(p.name for p in wh.archive_dir.iterdir())
    r = ingest_staged(wh, sha)
    assert r.status == "ingested", r.message
    assert sorted(p.name for p in wh.archive_dir.iterdir()) == before
    con = ro(wh)
    try:
        assert con.execute("SELECT archive_path FROM raw.files").fetchone()[0] == str(
            wh.archive_dir / f"{sha}.json")
    finally:
        con.close()


def test_other_layouts_fall_back_to_the_whole_document(wh, tmp_path, streaming):
    """samples not last is parsed whole, with the same rows."""
    doc = json.loads(PROFILE_SEED.read_bytes())
    moved = {"samples": doc.pop("samples"), **doc}
    data = json.dumps(moved).encode()
    with pytest.raises(profile.NotStreamable):
        list(profile.SampleStream("x").tables(bytearray(data)))
    p = tmp_path / "samples_first.json"
    p.write_bytes(data)
    r = ingest_file(wh, p)
    assert r.status == "ingested", r.message
    assert not streaming  # the whole-document path did it
    con = ro(wh)
    try:
        assert profile.rebuild(con, r.sha256) == moved
    finally:
        con.close()


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_streamed_load_keeps_no_batch_it_has_inserted(tmp_path, monkeypatch, mode):
    """DuckDB keeps every Python object a query scanned alive until the transaction ends, and a
    file is one transaction: batches must be handed over so that they can be freed at once, or
    memory grows with the sample count. Checked through the Arrow memory still allocated (and,
    parsed in a process, the received bytes still referenced) after each INSERT."""
    import gc
    import tracemalloc

    import pyarrow as pa

    from warehouse.config import settings

    p = tmp_path / "runs" / "big.json"
    gen.write_profile(p, 20_000, seed=5)
    monkeypatch.setenv("PWH_STREAM_PROCESS", "1" if mode == "process" else "0")
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(profile_stream.ProfileStream, "INSERT_BYTES_THREAD", 256 << 10)
    monkeypatch.setattr(profile_stream.ProfileStream, "INSERT_BYTES_PROCESS", 256 << 10)
    monkeypatch.setattr(profile, "CHUNK_BYTES", 128 << 10)
    sent, held = [], []
    real = writer.Writer.insert

    def insert(self, tname, table, sha):
        sent.append(table.nbytes)
        real(self, tname, table, sha)
        del table
        held.append(pa.total_allocated_bytes() + tracemalloc.get_traced_memory()[0])

    monkeypatch.setattr(writer.Writer, "insert", insert)
    tracemalloc.start()
    try:
        gc.collect()
        r = ingest_file(settings(tmp_path / "w" / "w.duckdb"), p)
    finally:
        tracemalloc.stop()
    assert r.status == "ingested", r.message
    assert len(sent) >= 20 and sum(sent) >= 8 << 20, (len(sent), sum(sent))
    # what is held may include batches queued for the writer, but must not grow as they go in
    quarter = len(held) // 4
    growth = max(held[-quarter:]) - min(held[:quarter])
    assert growth < sum(sent) / 4, (growth, sum(sent), held)


@pytest.mark.parametrize("streamed", [True, False])
def test_after_forks_work_runs_once_the_parser_is_forked(wh, small_profile, monkeypatch,
                                                         streamed):
    """``pwh lake ingest`` starts its catalog thread through ``loader.after_forks``: that work
    must run after the parser process is forked (a thread must never exist at a fork), and also
    on the whole-document path, which forks nothing."""
    monkeypatch.setenv("PWH_STREAM_PROCESS", "1")
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0 if streamed else 1 << 40)
    order: list[str] = []
    real = forking.fork_child

    def fork(child):
        order.append("fork")
        return real(child)

    monkeypatch.setattr(forking, "fork_child", fork)
    loader.after_forks(lambda: order.append("after"))
    res = ingest_file(wh, small_profile)
    assert res.status == "ingested", res.message
    assert order == (["fork", "after"] if streamed else ["after"])
    loader.forks_done()  # nothing left to run
    assert order == (["fork", "after"] if streamed else ["after"])
