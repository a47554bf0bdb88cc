"""Kineto (PyTorch profiler) traces: exact times, detection by content, every pitfall measured on
real files, and hostile input refused with file, location and rule (nothing half-written)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import duckdb
import pytest

from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader
from warehouse.ingesting.formats import kineto, kineto_gen, trace

RUN = "r" * 64


def kernel(name="k", ts=100, dur=50, **args) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, **args}}


def doc_bytes(events, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events}).encode()


def events_of(data: bytes) -> list[dict]:
    p = formats.parse(data, "t.json", RUN)
    return p.tables["trace_events"].to_pylist()


def trace_rows(s, sql: str, params=()):
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def raw_counts(s) -> dict[str, int]:
    if not s.warehouse.exists():
        return {}
    return {t.name: trace_rows(s, f"select count(*) from raw.{t.name}")[0][0]  # noqa: S608
            for t in trace.TABLES} | {"files": trace_rows(s, "select count(*) from raw.files")[0][0]}


# ------------------------------------------------------------------ exact times


def test_19_digit_epoch_ts_is_exact_integer_ns():
    # a float64 holds ~16 digits: 1712195495505582.988 would come back as ...582.9880371
    data = doc_bytes([kernel(ts=0, dur=0)]).replace(
        b'"ts": 0, "dur": 0', b'"ts": 1712195495505582.988, "dur": 4.928')
    p = formats.parse(data, "t.json", RUN)
    ev = p.tables["trace_events"].to_pylist()[0]
    assert (ev["start_ns"], ev["dur_ns"]) == (1712195495505582988, 4928)
    run = p.tables["trace_runs"].to_pylist()[0]
    assert (run["time_base"], run["origin_ns"]) == ("epoch", 0)
    assert p.captured_at == dt.datetime(2024, 4, 4, 1, 51, 35, 505582)


def test_relative_ts_with_base_time_and_capture_time_from_the_file_clock(wh, tmp_path):
    base = 1735632360000000000
    data = doc_bytes([kernel(ts=0, dur=0)], baseTimeNanoseconds=base).replace(
        b'"ts": 0, "dur": 0', b'"ts": 4203669603771.648, "dur": 6.88')
    ev = events_of(data)[0]
    assert (ev["start_ns"], ev["dur_ns"]) == (4203669603771648, 6880)
    f = tmp_path / "run" / "trace.bin"
    f.parent.mkdir()
    f.write_bytes(data)
    r = loader.ingest_file(wh, f)
    assert r.status == "ingested", r.message
    got = trace_rows(wh, "select captured_at, meta_source from raw.files")[0]
    # the base (floored to 3 months by libkineto) plus the first event's ts
    assert got == (dt.datetime(2025, 2, 17, 23, 47, 9, 603771), "default")
    assert trace_rows(wh, "select time_base, origin_ns from raw.trace_runs") == [
        ("relative", base)]
    # an explicit capture time still wins over the file's clock
    g = tmp_path / "run" / "trace2.bin"
    g.write_bytes(data + b" ")
    loader.ingest_file(wh, g, captured_at="2026-01-02T03:04:05Z")
    assert dt.datetime(2026, 1, 2, 3, 4, 5) in {
        r[0] for r in trace_rows(wh, "select captured_at from raw.files")}


@pytest.mark.parametrize("text,ns", [
    (b"7", 7000), (b"1.5", 1500), (b"0.001", 1), (b"2.100000", 2100), (b"0", 0)])
def test_decimal_microseconds_to_ns(text, ns):
    assert kineto.ns(text, "f", "$") == ns


@pytest.mark.parametrize("text,rule", [
    (b"8.1097E+14", "exponent"), (b"1.0004", "whole number of ns"), (b"-3", "non-negative"),
    (b'"12"', "a decimal number")])
def test_times_that_are_not_exact_ns_are_refused_naming_the_rule(text, rule):
    data = doc_bytes([kernel()]).replace(b'"dur": 50', b'"dur": ' + text)
    with pytest.raises(FormatError) as e:
        formats.parse(data, "t.json", RUN)
    assert e.value.json_path == "$.traceEvents[0].dur" and rule in str(e.value)


# ------------------------------------------------------------------ pitfalls of real files


def test_integers_above_int64_in_args_do_not_fail_the_file():
    big = 10159970886766084423
    data = doc_bytes([kernel(**{"Comms Id": big}), {
        "ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0, "tid": 1,
        "ts": 200, "dur": 100, "args": {"Comms Id": big * 10**20}}])
    evs = events_of(data)
    assert [e["kind"] for e in evs] == ["kernel", "cpu_op"]  # the CPU side is stored too
    assert json.loads(evs[0]["args"])["Comms Id"] == big  # kept exactly, as text
    assert json.loads(evs[1]["args"])["Comms Id"] == big * 10**20
    assert evs[1]["correlation"] is None


def test_kinds_positions_and_the_old_spelling_of_the_kernel_category():
    p = formats.parse(doc_bytes([
        {**kernel(), "cat": "Kernel"}, {**kernel(name="Memcpy HtoD"), "cat": "gpu_memcpy"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 100, "cat": "ac2g", "name": "ac2g"},
        {**kernel(name="Memset"), "cat": "gpu_memset"},
        {**kernel(name="aten::mm"), "cat": "cpu_op"},
        {**kernel(name="cudaLaunchKernel"), "cat": "cuda_runtime"},
        {**kernel(name="ProfilerStep#7"), "cat": "Operator"},
        {**kernel(name="ProfilerStep#8"), "cat": "user_annotation"},
        {**kernel(name="ProfilerStep#8"), "cat": "gpu_user_annotation"},
        {**kernel(name="Event Sync"), "cat": "cuda_sync"},
        {**kernel(name="foo.py(1): f"), "cat": "python_function"}]), "t.json", RUN)
    evs = p.tables["trace_events"].to_pylist()
    assert [(e["event_idx"], e["kind"]) for e in evs] == [
        (0, "kernel"), (1, "memcpy"), (3, "memset"), (4, "cpu_op"), (5, "runtime"),
        (6, "cpu_op"), (7, "annotation"), (8, "gpu_annotation"), (9, "sync"), (10, "other")]
    assert evs[0]["category"] == "Kernel" and [e["device"] for e in evs] == ["0"] * 10
    assert [e["name"] for e in evs][3:6] == ["aten::mm", "cudaLaunchKernel", "ProfilerStep#7"]
    meta = json.loads(p.tables["trace_runs"].to_pylist()[0]["metadata"])
    assert meta["kinds"] == {"annotation": 1, "cpu_op": 2, "gpu_annotation": 1, "kernel": 1,
                             "memcpy": 1, "memset": 1, "other": 1, "runtime": 1, "sync": 1}
    assert meta["phases"] == {"X": 10, "f": 1}


def test_kernel_without_runtime_partner_is_kept():
    # launched before the trace window opened: no cudaLaunchKernel with its correlation id
    evs = events_of(doc_bytes([kernel(correlation=99)]))
    assert evs[0]["kind"] == "kernel" and evs[0]["correlation"] == 99


def test_cpu_only_trace_is_a_run_without_kernels():
    p = formats.parse(doc_bytes([{**kernel(name="aten::add"), "cat": "cpu_op"}]), "t", RUN)
    assert p.summary["kernels"] == 0
    assert p.tables["trace_runs"].num_rows == 1


def test_gzip_is_detected_by_magic_bytes_not_by_name(wh, tmp_path):
    f = tmp_path / "s" / "looks_like.csv"
    f.parent.mkdir()
    f.write_bytes(gzip.compress(doc_bytes([kernel()])))
    r = loader.ingest_file(wh, f)
    assert (r.status, r.source_format) == ("ingested", "kineto_trace"), r.message
    assert trace_rows(wh, "select count(*) from raw.trace_events where kind = 'kernel'") == [(1,)]


def test_generated_trace_matches_its_ground_truth(tmp_path):
    f = tmp_path / "g.json"
    truth = kineto_gen.write_file(f, steps=3, seed=5)
    evs = [e for e in events_of(f.read_bytes()) if e["kind"] == "kernel"]
    got: dict[str, list[int]] = {}
    for e in evs:
        got.setdefault(e["name"], [0, 0])
        got[e["name"]][0] += 1
        got[e["name"]][1] += e["dur_ns"]
    assert got == {n: [v["calls"], v["total_ns"]] for n, v in truth["kernels"].items()}
    assert f.read_bytes() == (kineto_gen.write_file(tmp_path / "h.json", steps=3, seed=5)
                              and (tmp_path / "h.json").read_bytes())  # deterministic


def test_environment_and_host_identity_never_reach_the_tables():
    p = formats.parse(doc_bytes([kernel()], host_name="node7.corp", username="alice",
                                mast_job_environment="prod", INFO=["token=abc"],
                                distributedInfo={"rank": 3, "hostname": "x", "backend": "nccl"},
                                cuda_runtime_version=12010), "t", RUN)
    meta = p.tables["trace_runs"].to_pylist()[0]["metadata"]
    for secret in ("node7", "alice", "prod", "token", '"x"'):
        assert secret not in meta
    assert json.loads(meta)["cuda_runtime_version"] == 12010
    assert p.tables["trace_events"].to_pylist()[0]["rank"] == "3"


def test_trace_name_addresses_users_and_keys_never_reach_the_tables():
    """Review finding 3: PyTorch names the file <hostname>_<pid>.<time>.pt.trace.json under the
    user's folder, and launchers put MASTER_ADDR and the like next to the rank."""
    p = formats.parse(doc_bytes(
        [kernel()], traceName="/home/alice/runs/gpu-node-17.corp_4242.1700000000.pt.trace.json",
        distributedInfo={"backend": "nccl", "rank": 1, "world_size": 2,
                         "MASTER_ADDR": "10.1.2.3", "master_port": "29500", "node_ip": "10.9.9.9",
                         "USER": "bob", "user_home": "/u/bob", "hf_token": "hf_xyz",
                         "aws_secret_access_key": "AKIAxyz", "db_password": "hunter2",
                         "ssh_key": "ssh-rsa AAAA", "log_dir": "/scratch/bob/logs",
                         "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1],
                                        "hostname": "gpu-node-18"}]},
        cuda_runtime_version=12010), "t", RUN)
    meta = p.tables["trace_runs"].to_pylist()[0]["metadata"]
    for leak in ("alice", "gpu-node", "corp", "4242", "10.1.2.3", "29500", "10.9.9.9", "bob",
                 "hf_xyz", "AKIA", "hunter2", "ssh-rsa", "scratch", "traceName"):
        assert leak not in meta, leak
    kept = json.loads(meta)
    assert kept["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2,
                                       "pg_config": [{"pg_name": "0", "pg_size": 2,
                                                      "ranks": [0, 1]}]}
    assert kept["cuda_runtime_version"] == 12010 and kept["schemaVersion"] == 1


def test_scrub_drops_secret_address_user_and_path_keys_at_any_depth():
    dropped = ["MASTER_ADDR", "master_port", "MasterAddress", "hostname", "HOST", "node_name",
               "USER", "username", "user_id", "GH_TOKEN", "client_secret", "PASSWORD", "api_key",
               "SECRET_KEY", "ip", "node_ip", "log_dir", "cwd", "HOME", "PATH", "file_name",
               "traceName", "email", "cmdline", "env"]
    kept = ["rank", "world_size", "backend", "pg_name", "pg_size", "ranks", "nccl_version",
            "schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "record_shapes",
            "duration", "profile_memory", "device", "report", "support"]
    obj = {k: 1 for k in dropped + kept}
    assert trace.scrub({"outer": [obj]}) == {"outer": [{k: 1 for k in kept}]}


# ------------------------------------------------------------------ hostile input


def _hostile(tmp_path) -> dict[str, bytes]:
    good = doc_bytes([kernel(), kernel(name="other", ts=300)])
    gz = gzip.compress(good)
    return {
        "truncated.json": good[: len(good) // 2],
        "corrupt.json.gz": gz[:20] + bytes(b ^ 0x55 for b in gz[20:40]) + gz[40:],
        "truncated.json.gz": gz[: len(gz) - 10],
        "nan_dur.json": good.replace(b'"dur": 50', b'"dur": NaN', 1),
        "negative_dur.json": good.replace(b'"dur": 50', b'"dur": -50', 1),
        "huge_name.json": doc_bytes([kernel(name="k" * (1 << 20))]),
        "duplicate_key.json": good.replace(b'"ph": "X",', b'"ph": "X", "ph": "X",', 1),
        "no_ts.json": good.replace(b'"ts": 100, ', b"", 1),
        # inside a value kept verbatim (args): msgspec does not look, DuckDB would refuse it
        "not_utf8.json": good.replace(b'"stream": 7', b'"stream": "\xff"', 1),
    }


def test_hostile_traces_are_refused_with_file_location_and_rule(wh, tmp_path):
    d = tmp_path / "hostile"
    d.mkdir()
    expect = {  # file -> (location, a word of the rule)
        "truncated.json": ("$", "well-formed JSON"),
        "corrupt.json.gz": ("byte", "gzip"),
        "truncated.json.gz": ("byte", "truncated"),
        "nan_dur.json": ("$", "well-formed JSON"),
        "negative_dur.json": ("$.traceEvents[0].dur", "non-negative"),
        "huge_name.json": ("$.traceEvents[0].name", "length <="),
        "duplicate_key.json": ("$", "unique object keys"),
        "no_ts.json": ("$.traceEvents[0]", "with ts"),
        "not_utf8.json": ("byte", "UTF-8 text"),
    }
    for name, data in _hostile(tmp_path).items():
        (d / name).write_bytes(data)
    results = {Path(r.path).name: r for r in loader.ingest_paths(wh, [d])}
    assert set(results) == set(expect)
    for name, (where, rule) in expect.items():
        r = results[name]
        assert r.status == "failed", name
        assert name in r.message and where in r.message and rule in r.message, r.message
        assert r.quarantine_path and Path(r.quarantine_path).exists()
    counts = raw_counts(wh)
    assert counts["files"] == 0 and all(v == 0 for v in counts.values()), counts
    errs = trace_rows(wh, "select count(*) from raw.ingest_errors")[0][0]
    assert errs == len(expect)


def test_content_decides_the_format(tmp_path):
    # a JSON object without traceEvents is not a trace, whatever its name
    with pytest.raises(FormatError) as e:
        formats.detect(b'{"schemaVersion": 1, "events": []}', "x.pt.trace.json")
    assert e.value.kind == "unknown_format" and "kineto_trace" in str(e.value)
    assert formats.detect(doc_bytes([]), "profile.csv") is kineto
