"""rocprofv3 ``results.json`` (rocprofiler-sdk tool, ``--output-format json``): a synthetic file
in the layout the tool's cereal writer produces (ROCm/rocprofiler-sdk
``source/lib/rocprofiler-sdk-tool/generateJSON.cpp``, ``cxx/serialization.hpp``)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.vendor_trace_checks import RUN, check_schema, ingest_one_and_roll_up, kernel_sums, load
from warehouse import db
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import rocprof_sdk_json
from warehouse.ingesting.loader import ingest_paths

CPU, GPU = 0x1001, 0x2002  # agent handles
Q1, Q2 = 0x7F00, 0x7F80  # queue handles
NAMES = {1: "vector_add(float const*, float const*, float*, int)",
         2: "void reduce<256>(double*, double*)",
         3: "transpose(float*, float const*, int, int)"}
MANGLED = {1: "_Z10vector_addPKfS0_Pfi.kd", 2: "_Z6reduceILi256EEvPdS0_.kd",
           3: "_Z9transposePfPKfii.kd"}
# (kernel_id, queue, start, end): six dispatches on two queues
DISPATCHES = [(1, Q1, 1_000_000_000_100, 1_000_000_001_337),
              (2, Q1, 1_000_000_002_000, 1_000_000_009_999),
              (1, Q2, 1_000_000_002_500, 1_000_000_003_001),
              (3, Q2, 1_000_000_010_000, 1_000_000_010_000),  # a 0 ns dispatch is valid
              (1, Q1, 1_000_000_011_000, 1_000_000_012_234),
              (2, Q2, 1_000_000_013_000, 1_000_000_020_007)]
WANT = {}
for _k, _q, _s, _e in DISPATCHES:
    _c, _t = WANT.get(NAMES[_k], (0, 0))
    WANT[NAMES[_k]] = (_c + 1, _t + _e - _s)
# strings.buffer_records: indexed by rocprofiler_buffer_tracing_kind_t
KINDS = [("NONE", []), ("HSA_CORE_API", ["hsa_init", "hsa_shut_down"]),
         ("HIP_RUNTIME_API", ["hipMalloc", "hipMemcpy", "hipLaunchKernel"]),
         ("MEMORY_COPY", ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST",
                          "MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"]),
         ("KERNEL_DISPATCH", ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE",
                              "KERNEL_DISPATCH_COMPLETE"])]


def _agent(handle: int, typ: int, node: int, type_id: int, name: str, product: str) -> dict:
    return {"size": 1024, "id": {"handle": handle}, "type": typ, "cpu_cores_count": 0,
            "simd_count": 0 if typ == 1 else 304, "name": name, "vendor_name": "AMD",
            "product_name": product, "model_name": "", "node_id": node,
            "logical_node_id": node, "logical_node_type_id": type_id,
            "mem_banks": [], "caches": [{"size": 32768, "level": 1}], "io_links": []}


def _symbol(kid: int) -> dict:
    if kid == 0:  # the tool fills the unused index 0 with an empty symbol
        return {"size": 0, "kernel_id": 0, "code_object_id": 0, "kernel_name": "",
                "formatted_kernel_name": "", "demangled_kernel_name": "",
                "truncated_kernel_name": ""}
    return {"size": 88, "kernel_id": kid, "code_object_id": 1, "kernel_name": MANGLED[kid],
            "kernel_object": 1234 + kid, "kernarg_segment_size": 32, "group_segment_size": 0,
            "private_segment_size": 0, "sgpr_count": 16, "arch_vgpr_count": 8,
            "formatted_kernel_name": NAMES[kid], "demangled_kernel_name": NAMES[kid],
            "truncated_kernel_name": NAMES[kid].split("(")[0]}


def _dispatch(i: int, kid: int, queue: int, start: int, end: int) -> dict:
    return {"size": 112, "kind": 4, "operation": 2, "thread_id": 4242,
            "correlation_id": {"internal": 10 + i, "external": 0},
            "start_timestamp": start, "end_timestamp": end,
            "dispatch_info": {"size": 64, "agent_id": {"handle": GPU},
                              "queue_id": {"handle": queue}, "kernel_id": kid,
                              "dispatch_id": i + 1, "private_segment_size": 0,
                              "group_segment_size": 0,
                              "workgroup_size": {"x": 256, "y": 1, "z": 1},
                              "grid_size": {"x": 1 << 20, "y": i + 1, "z": 1}}}


def doc() -> dict:
    proc = {
        "metadata": {"pid": 31337, "init_time": 999_999_000_000, "fini_time": 1_000_001_000_000,
                     "command": ["./app", "--token", "s3cret"], "config": {"kernel_trace": True}},
        "agents": [_agent(CPU, 1, 0, 0, "AMD EPYC 7763", "AMD EPYC 7763 64-Core Processor"),
                   _agent(GPU, 2, 1, 0, "gfx90a", "AMD Instinct MI250X")],
        "counters": [],
        "strings": {"callback_records": [],
                    "buffer_records": [{"kind": k, "operations": ops} for k, ops in KINDS],
                    "marker_api": [], "counters": {"dimension_ids": []}},
        "code_objects": [],
        "kernel_symbols": [_symbol(k) for k in range(4)],
        "callback_records": {"counter_collection": []},
        "buffer_records": {
            "kernel_dispatch": [_dispatch(i, *d) for i, d in enumerate(DISPATCHES)],
            "hip_api": [{"size": 48, "kind": 2, "operation": 2,
                         "correlation_id": {"internal": 10, "external": 0},
                         "start_timestamp": 1_000_000_000_010,
                         "end_timestamp": 1_000_000_000_090, "thread_id": 4242}],
            "hsa_api": [],
            "marker_api": [{"size": 48, "kind": 7, "operation": 1,
                            "correlation_id": {"internal": 99, "external": 0},
                            "start_timestamp": 1, "end_timestamp": 2, "thread_id": 4242}],
            "rccl_api": [],
            "memory_copy": [{"size": 72, "kind": 3, "operation": 2, "thread_id": 4242,
                             "correlation_id": {"internal": 7, "external": 0},
                             "start_timestamp": 1_000_000_000_000,
                             "end_timestamp": 1_000_000_000_050,
                             "dst_agent_id": {"handle": GPU}, "src_agent_id": {"handle": CPU},
                             "bytes": 4096}],
            "scratch_memory": []},
    }
    return {"rocprofiler-sdk-tool": [proc]}


def encode(d: dict) -> bytes:
    return json.dumps(d, indent=4).encode()  # cereal indents with spaces


def _events(p) -> list[dict]:
    return p.tables["trace_events"].to_pylist()


def test_dispatches_copies_and_api_calls_are_read():
    data = encode(doc())
    assert formats.detect(data, "whatever.txt") is rocprof_sdk_json  # content, not the name
    p = rocprof_sdk_json.parse(data, "results.json", RUN)
    check_schema(p)
    assert kernel_sums(p) == WANT
    ev = _events(p)
    kern = [e for e in ev if e["kind"] == "kernel"]
    assert [(e["start_ns"], e["dur_ns"]) for e in kern] == [(s, e - s)
                                                            for _, _, s, e in DISPATCHES]
    assert [e["stream"] for e in kern] == [str(q) for _, q, _, _ in DISPATCHES]
    assert {e["device"] for e in kern} == {"0"}  # the GPU's logical index, not its node id
    assert [e["correlation"] for e in kern] == list(range(10, 16))
    assert [e["mangled_name"] for e in kern] == [MANGLED[k] for k, *_ in DISPATCHES]
    assert {(e["pid"], e["tid"]) for e in ev} == {("31337", "4242")}
    assert json.loads(kern[1]["args"])["dispatch_info"]["grid_size"] == {"x": 1 << 20, "y": 2,
                                                                          "z": 1}
    (cp,) = [e for e in ev if e["kind"] == "memcpy"]
    assert (cp["name"], cp["device"], cp["dur_ns"], cp["correlation"]) == (
        "MEMORY_COPY_HOST_TO_DEVICE", "0", 50, 7)
    (rt,) = [e for e in ev if e["kind"] == "runtime"]
    assert (rt["name"], rt["category"], rt["correlation"]) == ("hipLaunchKernel", "hip_api", 10)
    assert len(ev) == 8  # the marker record is not read
    devs = p.tables["trace_devices"].to_pylist()
    assert [(d["device"], d["name"]) for d in devs] == [("0", "AMD Instinct MI250X")]
    run = p.tables["trace_runs"].to_pylist()[0]
    assert (run["tool"], run["time_base"]) == ("rocprofv3", "session")
    meta = json.loads(run["metadata"])
    assert meta["unread"] == {"marker_api": 1}
    assert "s3cret" not in run["metadata"]  # the command line stays out of the tables
    # lossless: every read record rebuilds as written
    back = rocprof_sdk_json.rebuild(load(p), RUN)
    recs = doc()["rocprofiler-sdk-tool"][0]["buffer_records"]
    assert back == [{s: recs[s] for s in ("kernel_dispatch", "memory_copy", "hip_api")}]


def test_kernels_reach_the_marts_per_kernel(tmp_path):
    from warehouse.config import settings

    _, got = ingest_one_and_roll_up(tmp_path, "results.json", encode(doc()))
    assert {k: (c, t) for k, _, c, t in got} == WANT
    assert {d for _, d, _, _ in got} == {"0"}
    con = db.connect_rw(settings(tmp_path / "state" / "warehouse.duckdb").warehouse)
    try:
        assert con.execute("select source_format from raw.trace_runs").fetchall() == [
            ("rocprof_sdk_json",)]
    finally:
        con.close()


def test_a_dispatch_ending_before_it_starts_is_refused_naming_the_rule(tmp_path):
    from warehouse.config import settings

    d = doc()
    rec = d["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][4]
    rec["end_timestamp"] = rec["start_timestamp"] - 1
    f = tmp_path / "in" / "results.json"
    f.parent.mkdir()
    f.write_bytes(encode(d))
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    (r,) = ingest_paths(s, [f])
    assert r.status == "failed"
    assert str(f) in r.message, r.message
    assert "buffer_records.kernel_dispatch[4].end_timestamp" in r.message, r.message
    assert "end_timestamp >= start_timestamp" in r.message, r.message
    con = db.connect_rw(s.warehouse)
    try:  # nothing half-written
        assert con.execute("select count(*) from raw.trace_events").fetchone() == (0,)
    finally:
        con.close()


def _broken(change) -> dict:
    d = copy.deepcopy(doc())
    change(d["rocprofiler-sdk-tool"][0])
    return d


@pytest.mark.parametrize("change,where,rule", [
    (lambda p: p["buffer_records"]["kernel_dispatch"][2].update(start_timestamp=1.5e12),
     r"kernel_dispatch\[2\]\.start_timestamp", "non-negative integer timestamp in ns"),
    (lambda p: p["buffer_records"]["kernel_dispatch"][0].update(start_timestamp=-1),
     r"kernel_dispatch\[0\]\.start_timestamp", "non-negative integer"),
    (lambda p: p["buffer_records"]["kernel_dispatch"][1]["dispatch_info"].update(kernel_id=9),
     r"kernel_dispatch\[1\]\.dispatch_info\.kernel_id", "a named entry of kernel_symbols"),
    (lambda p: p["buffer_records"]["kernel_dispatch"][1]["dispatch_info"].update(kernel_id=0),
     r"kernel_dispatch\[1\]\.dispatch_info\.kernel_id", "a named entry of kernel_symbols"),
    (lambda p: p["buffer_records"]["kernel_dispatch"][3]["dispatch_info"].update(
        agent_id={"handle": 5}), r"kernel_dispatch\[3\]\.dispatch_info\.agent_id",
     "an agent in this process's agents list"),
])
def test_a_broken_record_is_refused_naming_it_and_the_rule(change, where, rule):
    with pytest.raises(FormatError, match=where + ".*" + rule) as e:
        rocprof_sdk_json.parse(encode(_broken(change)), "results.json", RUN)
    assert e.value.path == "results.json"


def test_a_duplicate_key_in_a_record_is_refused():
    data = encode(doc()).replace(b'"bytes": 4096', b'"bytes": 4096, "bytes": 1', 1)
    with pytest.raises(FormatError, match=r"memory_copy\[0\].*unique object keys.*bytes"):
        rocprof_sdk_json.parse(data, "results.json", RUN)


def test_a_truncated_file_is_refused():
    data = encode(doc())
    assert formats.detect_head(data[:4096], "results.json") is rocprof_sdk_json
    with pytest.raises(FormatError, match="well-formed JSON.*truncated") as e:
        formats.parse(data[: len(data) // 2], "results.json", RUN)
    assert e.value.path == "results.json"


def test_a_file_past_the_whole_document_limit_is_refused(monkeypatch):
    data = encode(doc())
    monkeypatch.setattr(formats, "WHOLE_MAX", len(data) - 1)
    with pytest.raises(FormatError, match="PWH_WHOLE_MAX_BYTES") as e:
        formats.parse(data, "results.json", RUN)
    assert e.value.kind == "too_large"


def test_a_process_without_records_is_a_run_with_no_kernels():
    d = doc()
    d["rocprofiler-sdk-tool"][0]["buffer_records"] = {"kernel_dispatch": [], "hip_api": []}
    p = rocprof_sdk_json.parse(encode(d), "results.json", RUN)
    assert p.summary["kernels"] == 0 and p.tables["trace_runs"].num_rows == 1


@pytest.mark.parametrize("other", [
    {"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2}]},  # a Chrome trace
    {"rocprofiler-sdk-tools": [doc()["rocprofiler-sdk-tool"][0]]},  # a near miss
    {"tool": "rocprofiler-sdk-tool", "buffer_records": {"kernel_dispatch": []}},
])
def test_json_of_another_tool_is_not_claimed(other):
    data = encode(other)
    assert not rocprof_sdk_json.sniff(data, "results.json")
    try:
        fmt = formats.detect(data, "results.json")
    except FormatError as e:
        assert e.kind == "unknown_format"
    else:
        assert fmt is not rocprof_sdk_json
