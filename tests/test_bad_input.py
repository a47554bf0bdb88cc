"""Bad files: each gets a clear error naming the file, the JSON path and the rule; nothing is
half-written; the file is quarantined with a sidecar and logged in raw.ingest_errors."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED, counts, ro
from warehouse.ingesting.loader import ingest_file, ingest_paths

P = PROFILE_SEED.read_bytes()
A = AUDIT_SEED.read_bytes()


def _json(doc) -> bytes:
    return json.dumps(doc, indent=2).encode()


def _profile(mut) -> bytes:
    d = json.loads(P)
    mut(d)
    return _json(d)


def _audit(mut) -> bytes:
    d = json.loads(A)
    mut(d)
    return _json(d)


# (case id, bytes, regex the error must match (besides the file name))
CASES = [
    ("truncated", P[: len(P) // 2], r"well-formed JSON.*truncated"),
    ("empty", b"", r"empty file"),
    ("whitespace_only", b"  \n", r"empty file"),
    ("not_json", b"hello, this is a CSV,1,2\n", r"known source format: a JSON document"),
    ("neither_format", b'{"hello": "world", "rows_": []}', r"tile profile .* or a conv audit"),
    ("top_level_array", b"[1, 2, 3]", r"\$: a JSON object .*; found a JSON array of 3 items"),
    ("legacy_autograd_trace",  # torch.autograd.profiler's bare array of Chrome trace events
     b'[{"name": "aten::add", "ph": "X", "ts": 1, "dur": 2, "tid": 1, "pid": "CPU functions"}]',
     r"array of 1 trace event: .*legacy torch\.autograd\.profiler"),
    ("missing_field", _profile(lambda d: d["groups"][3].pop("p95Cycles")),
     r"\$\.groups\[3\]: Object missing required field `p95Cycles`"),
    ("wrong_type_number_as_string",
     _audit(lambda d: d["rows"][2].__setitem__("total_profiled_us", "3677.9")),
     r"\$\.rows\[2\]\.total_profiled_us: Expected `float`, got `str`"),
    ("wrong_type_sample", _profile(lambda d: d["samples"][1].__setitem__("duration", 1.5)),
     r"\$\.samples\[1\]\.duration: Expected `int`, got `float`"),
    ("wrong_type_metadata_value",
     _profile(lambda d: d["samples"][0]["metadata"][1].__setitem__("value", 505)),
     r"\$\.samples\[0\]\.metadata\[1\]\.value: Expected `str`, got `int`"),
    ("null_not_allowed", _profile(lambda d: d["groups"][0].__setitem__("meanCycles", None)),
     r"\$\.groups\[0\]\.meanCycles: Expected `float`, got `null`"),
    ("unknown_field", _audit(lambda d: d.__setitem__("extra", 1)),
     r"unknown field `extra`"),
    ("nan", P.replace(b'"profileSpanMs": 11.164092', b'"profileSpanMs": NaN'),
     r"well-formed JSON.*invalid character"),
    ("infinity", A.replace(b'"total_profiled_us": 10.495999999999999',
                           b'"total_profiled_us": Infinity'), r"well-formed JSON"),
    ("float_overflow", P.replace(b'"profileSpanMs": 11.164092', b'"profileSpanMs": 1e400'),
     r"\$\.profileSpanMs: Number out of range"),
    ("huge_integer", P.replace(b'"clockHz": 1500000000', b'"clockHz": ' + b"9" * 5000),
     r"\$\.clockHz: Integer value out of range"),
    ("duplicate_key", P.replace(b'"tileCount": 1472,', b'"tileCount": 1472,\n  "tileCount": 7,', 1),
     r"key 'tileCount' twice"),
    ("duplicate_key_deep", A.replace(b'"us": 2926.656,', b'"us": 2926.656, "us": 1.0,', 1),
     r"key 'us' twice"),
    ("invalid_utf8", P.replace(b'"exchange"', b'"exch\xffange"', 1), r"Invalid UTF-8"),
    ("lone_surrogate", A.replace(b'"elementwise_add"', b'"elementwise\\ud800add"', 1),
     r"well-formed JSON"),
    ("bom", b"\xef\xbb\xbf" + A, r"byte-order mark"),
    ("trailing_comma", A.rstrip()[:-1].rstrip() + b",\n}", r"trailing comma"),
    ("trailing_garbage", A + b"\n{}", r"trailing characters"),
    ("deep_nesting", b"[" * 5000 + b"]" * 5000, r"nested|Expected `object`"),
    ("dimensions_not_object",
     _profile(lambda d: d["groups"][0].__setitem__("dimensions", [])),
     r"\$\.groups\[0\]\.dimensions: an object"),
]


@pytest.mark.parametrize("case,data,pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_file_is_rejected_cleanly(wh, tmp_path, case, data, pattern):
    bad = tmp_path / "in" / f"{case}.json"
    bad.parent.mkdir()
    bad.write_bytes(data)
    before = counts(wh)
    r = ingest_file(wh, bad)
    assert r.status == "failed"
    assert str(bad) in r.message, r.message  # names the file
    assert re.search(pattern, r.message, re.S), r.message  # names the path and the rule
    after = counts(wh)
    assert after == before  # nothing half-written
    # quarantined with an error sidecar, and logged
    q = r.quarantine_path
    assert q is not None
    assert open(q, "rb").read() == data
    sidecar = json.loads(open(q + ".error.json").read())
    assert sidecar["message"] == r.message
    con = ro(wh)
    logged = con.execute("SELECT original_path, message FROM raw.ingest_errors").fetchall()
    con.close()
    assert logged == [(str(bad), r.message)]


def test_batch_continues_past_bad_files(wh, seeds, tmp_path):
    bad = seeds["profile"].parent / "zz_broken.json"
    bad.write_bytes(b'{"rows": [')
    results = ingest_paths(wh, [seeds["profile"].parent])
    assert [r.status for r in results] == ["ingested", "ingested", "failed"]
    assert counts(wh)["files"] == 2


def test_unreadable_file(wh, tmp_path):
    r = ingest_file(wh, tmp_path / "does-not-exist.json")
    assert r.status == "failed" and "does-not-exist.json" in r.message
    assert counts(wh)["files"] == 0


def test_bad_sidecar_is_a_clear_error(wh, seeds):
    side = seeds["audit"].with_name(seeds["audit"].name + ".meta.json")
    side.write_text('{"label": 5}')
    r = ingest_file(wh, seeds["audit"])
    assert r.status == "failed"
    assert str(side) in r.message and "label" in r.message
    assert counts(wh)["files"] == 0
