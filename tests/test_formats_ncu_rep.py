"""Nsight Compute reports (``.ncu-rep``) through ``ncu_report`` in a child process: the real
samples against their ground truth, losslessness, privacy, hostile files and the batch."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import pytest

from tests import vendor_trace_checks
from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader
from warehouse.ingesting.formats import ncu, ncu_gen, ncu_rep

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples" / "ncu_rep"
RUN = "ef" * 32
REPORTS = sorted(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else []
needs_reader = pytest.mark.skipif(not ncu_rep.available(), reason="ncu_report not installed")
needs_samples = pytest.mark.skipif(not REPORTS, reason=f"no reports in {SAMPLES}")


def _params():
    return [pytest.param(p, id=p.name) for p in REPORTS] or [
        pytest.param(None, marks=pytest.mark.skip(reason=f"no reports in {SAMPLES}"))]


def _load(p):
    return vendor_trace_checks.load(p, ncu.TABLES)


@needs_reader
@pytest.mark.parametrize("sample", _params())
def test_sample_matches_ground_truth(sample):
    exp = json.loads(Path(str(sample) + ".expected.json").read_text())
    data = sample.read_bytes()
    assert formats.detect(data, str(sample)) is ncu_rep
    p = ncu_rep.parse(data, str(sample), RUN)
    launches = p.tables["ncu_launches"].to_pylist()
    got: dict = {}
    for la in launches:
        key = (la["function_name"], la["demangled_name"])
        calls, total = got.get(key, (0, None))
        got[key] = (calls + 1, total if la["dur_ns"] is None else (total or 0) + la["dur_ns"])
    assert got == {(k["name"], k["demangled"]): (k["calls"], k["total_ns"])
                   for k in exp["per_kernel"]}
    assert [la["metric_count"] for la in launches] == exp["n_metrics_per_action"]
    assert sorted({la["device_name"] for la in launches}) == sorted(exp["devices"])
    for la, a in zip(launches, exp["actions"], strict=True):
        assert la["kernel"] == la["demangled_name"] and la["function_name"] == a["name"]
        assert la["time_state"] == a["gpu_time_state"]
        assert la["dur_ns"] == a["gpu_time_ns"]
        want_grid = None if None in a["grid"] else [int(g) for g in a["grid"]]
        assert la["grid"] == want_grid
        assert (la["block"] is None) == (None in a["block"])
    runs = p.tables["ncu_runs"].to_pylist()[0]
    assert runs["untimed_launches"] == sum(k["calls"] - k["calls_timed"]
                                           for k in exp["per_kernel"])
    assert runs["metric_rows"] == sum(exp["n_metrics_per_action"])


@needs_reader
@needs_samples
def test_rebuild_is_what_the_reader_read_and_nothing_private_is_kept():
    sample = min(REPORTS, key=lambda p: p.stat().st_size)
    data = sample.read_bytes()
    p = ncu_rep.parse(data, str(sample), RUN)
    rebuilt = ncu_rep.rebuild(_load(p), RUN)
    doc = ncu_rep.read_report(data, str(sample))
    assert len(rebuilt["launches"]) == len(doc["launches"])
    for got, a in zip(rebuilt["launches"], doc["launches"], strict=True):
        assert (got["function"], got["demangled"], got["mangled"]) == (
            a["function"], a["demangled"], a["mangled"])
        want = {n: (u, v, t, w, i) for n, u, v, t, w, i in zip(
            a["names"], a["units"], a["values"], a["texts"], a["written"], a["instances"],
            strict=True)}
        assert got["metrics"].keys() == want.keys()
        for name, (u, v, t, w, i) in want.items():
            gu, gv, gt, gw, gi = got["metrics"][name]
            assert (gu, gt, gw, gi) == (u, t, w, i)
            assert gv == v or (v != v and gv != gv), name  # NaN stays NaN
    dump = json.dumps({t: p.tables[t].to_pylist() for t in p.tables}, default=str)
    for secret in ("127.0.0.1", "/root/", "cutlass_workspace", "974ee2de314f0"):
        assert secret not in dump


def _hostile(sample: bytes, kind: str) -> bytes:
    rnd = random.Random(kind)
    if kind == "truncated":
        return sample[: len(sample) // 2]
    if kind == "bitflip":
        b = bytearray(sample)
        for _ in range(64):
            b[rnd.randrange(8, len(b))] ^= 1 << rnd.randrange(8)
        return bytes(b)
    if kind == "random":
        return ncu_rep.MAGIC + rnd.randbytes(4096)
    if kind == "magic_only":
        return ncu_rep.MAGIC
    if kind == "header_only":
        return sample[:300]
    raise AssertionError(kind)


@needs_reader
@needs_samples
@pytest.mark.parametrize("kind", ["truncated", "bitflip", "random", "magic_only",
                                  "header_only"])
def test_hostile_reports_are_refused_naming_the_file(kind):
    data = _hostile(REPORTS[0].read_bytes(), kind)
    try:
        p = ncu_rep.parse(data, "hostile.ncu-rep", RUN)
    except FormatError as exc:
        assert "hostile.ncu-rep" in str(exc)
    else:  # a flipped bit inside a value: the reader may read it, never crash the parent
        assert kind == "bitflip" and p.tables["ncu_launches"].num_rows > 0


def _fake_child(tmp_path, monkeypatch, body: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(body)
    monkeypatch.setattr(ncu_rep, "CHILD", script)
    monkeypatch.setattr(ncu_rep, "check_framing", lambda data, path: 0)


def test_a_reader_killed_by_a_signal_is_a_refusal(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    monkeypatch.setattr(ncu_rep, "available", lambda: True)
    with pytest.raises(FormatError, match="crash.ncu-rep.*SIGSEGV"):
        ncu_rep.parse(ncu_rep.MAGIC + b"\0" * 64, "crash.ncu-rep", RUN)


def test_a_hanging_reader_is_stopped_after_the_time_limit(tmp_path, monkeypatch):
    _fake_child(tmp_path, monkeypatch, "import time\ntime.sleep(60)\n")
    monkeypatch.setattr(ncu_rep, "available", lambda: True)
    monkeypatch.setenv("PWH_NCU_TIMEOUT_S", "1")
    with pytest.raises(FormatError, match="hang.ncu-rep.*within 1 s"):
        ncu_rep.parse(ncu_rep.MAGIC + b"\0" * 64, "hang.ncu-rep", RUN)


def test_a_reader_over_its_memory_limit_is_a_refusal(tmp_path, monkeypatch):
    script = tmp_path / "child.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(ncu_rep.CHILD.parent)!r})\n"
                      "import ncu_rep_read\nncu_rep_read._limit()\nx = bytearray(1 << 30)\n")
    monkeypatch.setattr(ncu_rep, "CHILD", script)
    monkeypatch.setattr(ncu_rep, "check_framing", lambda data, path: 0)
    monkeypatch.setattr(ncu_rep, "available", lambda: True)
    monkeypatch.setenv("PWH_NCU_MEM_MB", "256")
    with pytest.raises(FormatError, match="mem.ncu-rep"):
        ncu_rep.parse(ncu_rep.MAGIC + b"\0" * 64, "mem.ncu-rep", RUN)


def test_without_the_reader_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(ncu_rep, "available", lambda: False)
    with pytest.raises(FormatError, match=r"r.ncu-rep.*'ncu' extra"):
        ncu_rep.parse(ncu_rep.MAGIC + b"\x02\0\0\0\x08\x07", "r.ncu-rep", RUN)


@needs_reader
@needs_samples
def test_a_batch_keeps_going_past_hostile_reports(wh, tmp_path):
    good = REPORTS[0]
    files = {"a_trunc.ncu-rep": _hostile(good.read_bytes(), "truncated"),
             "b_good.ncu-rep": good.read_bytes(),
             "c_empty.ncu-rep": b"",
             "d_random.ncu-rep": _hostile(good.read_bytes(), "random"),
             "e_export.csv": ncu_gen.details(ncu_gen.launches(5)).encode()}
    for name, data in files.items():
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_bytes(data)
    results = {Path(r.path).name: r for r in loader.ingest_paths(wh, [tmp_path / "in"])}
    assert {n: r.status for n, r in results.items()} == {
        "a_trunc.ncu-rep": "failed", "b_good.ncu-rep": "ingested", "c_empty.ncu-rep": "failed",
        "d_random.ncu-rep": "failed", "e_export.csv": "ingested"}
    assert "a_trunc.ncu-rep" in results["a_trunc.ncu-rep"].message
    assert "truncated" in results["a_trunc.ncu-rep"].message
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        n = con.execute("select count(*) from raw.ncu_launches").fetchone()[0]
        assert n == json.loads(Path(str(good) + ".expected.json").read_text())["n_actions"] + 6
    finally:
        con.close()

