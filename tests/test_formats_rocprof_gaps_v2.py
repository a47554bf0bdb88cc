"""rocprofv2 gaps of review (rocprof_csv/4).

*One dispatch per XCC.* On MI300 with ``ROCPROFILER_INDIVIDUAL_XCC_MODE`` (rocprofiler-compute sets
it for every MI300 run) rocprofv2 writes ``xcc_count`` records per dispatch (ROCm/rocprofiler
``src/core/hsa/queues/queue.cpp``; CHANGELOG 5.7: "dumped per-xcc as separate records but with
same record-id and kernel dispatch info"); the file plugin (``plugin/file/file.cpp``) adds an
``XCC_Index`` column before the counters when counters are collected, else the rows are
identical. A dispatch counts once, its span the earliest start .. latest end of its rows.

*The file plugin's async-copy and roctx traces* (``WriteHeader``): ``Domain,Operation,
Start_Timestamp,Stop_Timestamp,Correlation_ID`` (memory operations) and ``Domain,ROCTX_ID,Message,
Timestamp`` (one instant per roctx call: refused). Expected values come from the CSV module."""

from __future__ import annotations

import csv
import io

import pytest

from tests.test_formats_nsys import claimed_by
from tests.vendor_trace_checks import RUN, check_schema, kernel_sums, load
from warehouse.errors import FormatError
from warehouse.ingesting.formats import rocprof_csv

V2_HEAD = ("Dispatch_ID,GPU_ID,Queue_ID,PID,TID,Grid_Size,Workgroup_Size,LDS_Per_Workgroup,"
           "Scratch_Per_Workitem,Arch_VGPR,Accum_VGPR,SGPR,Wave_Size,Kernel_Name,Start_Timestamp,"
           "End_Timestamp,Correlation_ID")
DISPATCHES = [  # (Dispatch_ID, kernel, start, end, correlation)
    (1, "vecAdd(float*, float*, int)", 5_000_000, 5_012_500, 3),
    (2, "reduce(float*, int) [clone .kd]", 5_020_000, 5_020_900, 4),
]


def _row(d, xcc=None, waves=None):
    i, name, start, end, corr = d
    row = [i, 2, 0, 4242, 4242, 1048576, 256, 0, 0, 16, 0, 24, 64, name, start, end, corr]
    return row + ([] if xcc is None else [xcc, waves])


def _csv(rows, head=V2_HEAD, blank=False) -> bytes:
    buf = io.StringIO()
    buf.write(head + "\n" + ("\n" if blank else ""))
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


# counters collected: XCC_Index then the counter, a blank line under the header; 8 XCCs
WITH_COUNTERS = _csv([_row(d, x, 100 + x) for d in DISPATCHES for x in range(8)],
                     V2_HEAD + ",XCC_Index,SQ_WAVES", blank=True)
# timestamps only (rocprofiler-compute's timestamps pass): identical rows, no XCC_Index
TIMESTAMPS = _csv([_row(d) for d in DISPATCHES for _ in range(8)])


@pytest.mark.parametrize("data", [WITH_COUNTERS, TIMESTAMPS], ids=["xcc_index", "identical"])
def test_dispatch_written_per_xcc_counts_once(data):
    assert claimed_by(data) == ["rocprof_csv"]
    p = rocprof_csv.parse(data, "results_4242.csv", RUN)
    check_schema(p)
    assert kernel_sums(p) == {n: (1, e - s) for _, n, s, e, _ in DISPATCHES}
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["start_ns"], e["correlation"], e["device"]) for e in ev] == [
        (s, c, "2") for _, _, s, _, c in DISPATCHES]
    assert p.parser_version == "rocprof_csv/5"
    # lossless: every XCC row rebuilds as written (the blank line under the header aside)
    back = rocprof_csv.rebuild(load(p), RUN)
    assert back == data.decode().replace("\n\n", "\n", 1)


def test_per_xcc_rows_span_earliest_start_to_latest_end():
    d = DISPATCHES[0]
    rows = [_row(d, 0, 1), _row((d[0], d[1], d[2] - 40, d[3] - 10, d[4]), 1, 2),
            _row((d[0], d[1], d[2] + 5, d[3] + 70, d[4]), 2, 3)]
    p = rocprof_csv.parse(_csv(rows, V2_HEAD + ",XCC_Index,SQ_WAVES"), "r.csv", RUN)
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["start_ns"], e["dur_ns"]) for e in ev] == [(d[2] - 40, d[3] + 70 - (d[2] - 40))]


def test_per_xcc_rows_apart_still_one_dispatch_and_rebuild_in_order():
    a, b = DISPATCHES
    rows = [_row(a, 0, 1), _row(b, 0, 5), _row(a, 1, 2), _row(b, 1, 6)]
    data = _csv(rows, V2_HEAD + ",XCC_Index,SQ_WAVES")
    p = rocprof_csv.parse(data, "r.csv", RUN)
    assert kernel_sums(p) == {n: (1, e - s) for _, n, s, e, _ in DISPATCHES}
    assert rocprof_csv.rebuild(load(p), RUN) == data.decode()


def test_rows_of_one_dispatch_naming_another_kernel_refused():
    a = DISPATCHES[0]
    rows = [_row(a, 0, 1), _row((a[0], "other_kernel", a[2], a[3], a[4]), 1, 2)]
    with pytest.raises(FormatError, match=r"line 3, column 'Kernel_Name'.*line 2.*XCC") as e:
        rocprof_csv.parse(_csv(rows, V2_HEAD + ",XCC_Index,SQ_WAVES"), "r.csv", RUN)
    assert e.value.kind == "schema"


def test_same_dispatch_id_in_another_process_is_another_dispatch():
    a = DISPATCHES[0]
    other = _row(a)
    other[3] = 777  # PID
    p = rocprof_csv.parse(_csv([_row(a), other]), "timestamps.csv", RUN)
    assert kernel_sums(p) == {a[1]: (2, 2 * (a[3] - a[2]))}


ASYNC_COPY = (
    b"Domain,Operation,Start_Timestamp,Stop_Timestamp,Correlation_ID\n"
    b"\n"
    b'HSA_OPS_DOMAIN,"COPY",316678074160000,316678074170000,5\n'
    b'HSA_OPS_DOMAIN,"COPY",316678074180000,316678074180750,6\n'
    b'HSA_OPS_DOMAIN,"BARRIER",316678074190000,316678074190010,7\n'
)


def test_v2_async_copy_trace_is_memory_copies():
    assert claimed_by(ASYNC_COPY) == ["rocprof_csv"]
    p = rocprof_csv.parse(ASYNC_COPY, "async_copy_trace_4242.csv", RUN)
    check_schema(p)
    rows = [r for r in csv.DictReader(io.StringIO(ASYNC_COPY.decode())) if any(r.values())]
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["kind"], e["category"], e["name"], e["start_ns"], e["dur_ns"], e["correlation"])
            for e in ev] == [
        ("memcpy" if r["Operation"] == "COPY" else "other", r["Domain"], r["Operation"],
         int(r["Start_Timestamp"]), int(r["Stop_Timestamp"]) - int(r["Start_Timestamp"]),
         int(r["Correlation_ID"])) for r in rows]
    assert kernel_sums(p) == {}
    run = p.tables["trace_runs"].to_pylist()[0]
    assert run["tool"] == "rocprofv2"
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back == rows


def test_v2_roctx_trace_refused_naming_the_rule():
    data = (b"Domain,ROCTX_ID,Message,Timestamp\n\n"
            b'ROCTX_DOMAIN,0,"step 1",316678074160000\n'
            b"ROCTX_DOMAIN,0,,316678074170000\n")
    assert claimed_by(data) == ["rocprof_csv"]
    with pytest.raises(FormatError, match="roctx trace.*push, pop or mark") as e:
        rocprof_csv.parse(data, "roctx_trace_4242.csv", RUN)
    assert e.value.kind == "schema"
    assert "roctx_trace_4242.csv" in str(e.value)


# rocprofv3 Agent_Id by --agent-index (rocprofiler-sdk lib/output/metadata.cpp get_agent_index):
# type-relative "GPU <n>" is the logical GPU index (device n, as v1's gpu-id and the v3 JSON);
# a node id ("Agent <n>", early rocprofv3's bare number) cannot be mapped without agent_info.csv
V3_HEAD = ('"Guid","Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id",'
           '"Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp","End_Timestamp"\n')


@pytest.mark.parametrize("agent,device", [("GPU 1", "1"), ("Agent 3", "Agent 3"), ("3", "3")])
def test_rocprofv3_agent_id_as_device(agent, device):
    data = (V3_HEAD + f'"g1","KERNEL_DISPATCH","{agent}",1,0,77,1,9,"k(int)",5,100,250\n').encode()
    p = rocprof_csv.parse(data, "kernel_trace.csv", RUN)
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["device"], e["dur_ns"]) for e in ev] == [(device, 150)]
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back[0]["Agent_Id"] == agent


def test_per_xcc_dispatches_roll_up_once(tmp_path):
    # end to end: the marts count each MI300 dispatch once, not once per XCC
    from tests.vendor_trace_checks import ingest_one_and_roll_up

    _, rows = ingest_one_and_roll_up(tmp_path, "results_4242.csv", WITH_COUNTERS)
    assert sorted(rows) == sorted((n, "2", 1, e - s) for _, n, s, e, _ in DISPATCHES)


def test_v2_async_copy_trace_ingests_as_a_run_without_kernels(tmp_path):
    from tests.vendor_trace_checks import ingest_one_and_roll_up

    _, rows = ingest_one_and_roll_up(tmp_path, "async_copy_trace_4242.csv", ASYNC_COPY)
    assert rows == []
