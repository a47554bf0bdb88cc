"""rocprof gaps of review: rocprofv3's memory_copy_trace.csv read as copies (rocprof_csv/5, at the
end) and (rocprof_stats_csv/4) rocprofv3's other statistics files that share
the header of ``kernel_stats.csv`` are refused naming what they are, never read as kernels.

``marker_api_stats.csv`` (ROCm/rocprofiler-sdk ``source/lib/rocprofiler-sdk-tool/
generateStats.cpp``): a row per roctx message (``roctxMarkA``: 0 ns, ``tool.cpp`` writes a mark
with end = start; ``roctxRangePushA`` / ``roctxRangeStartA``: the range's time) or per roctx
function for the other calls (``roctxGetThreadId``, ``roctxNameOsThread``, …).
``rocdecode_api_stats.csv`` / ``rocjpeg_api_stats.csv`` (``domain_type.cpp``): a row per
rocDecode / rocJPEG function."""

from __future__ import annotations

import pytest

from tests.vendor_trace_checks import RUN
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import rocprof_stats

HEAD = '"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'

# ranges named by their messages, a mark (0 ns) and the thread-id query
MARKER_MARK = ('"phase:decode",12,350880000,29240000.0,80.1,29000000,29500000,120000.0\n'
               '"graph:compute",12,87000000,7250000.0,19.9,7000000,7500000,100000.0\n'
               '"step: 3",1,0,0.0,0.0,0,0,0.0\n')
MARKER_FN = ('"phase:decode",12,350880000,29240000.0,99.9,29000000,29500000,120000.0\n'
             '"roctxGetThreadId",2,900,450.0,0.1,400,500,50.0\n')
ROCDECODE = ('"rocDecDecodeFrame",300,90000000,300000.0,90.0,250000,400000,1000.0\n'
             '"rocDecCreateDecoder",1,10000000,10000000.0,10.0,10000000,10000000,0.0\n')
ROCJPEG = ('"rocJpegDecode",50,5000000,100000.0,83.3,90000,110000,500.0\n'
           '"rocJpegCreate",1,1000000,1000000.0,16.7,1000000,1000000,0.0\n')


@pytest.mark.parametrize("rows,match", [
    (MARKER_MARK, r"marker_api_stats.*'step: 3' took 0 ns"),
    (MARKER_FN, r"marker_api_stats.*roctxGetThreadId"),
    (ROCDECODE, r"API statistics.*rocDecDecodeFrame"),
    (ROCJPEG, r"API statistics.*rocJpegDecode"),
], ids=["marker_mark", "marker_function", "rocdecode", "rocjpeg"])
def test_rocprofv3_other_statistics_refused(rows, match):
    data = (HEAD + rows).encode()
    assert formats.detect(data, "x_stats.csv") is rocprof_stats
    with pytest.raises(FormatError, match=match) as e:
        rocprof_stats.parse(data, "/runs/1234_marker_api_stats.csv", RUN)
    assert e.value.kind == "schema"
    assert "1234_marker_api_stats.csv" in str(e.value)


def test_kernel_statistics_with_time_still_read():
    # kernels named like messages, every one with time: kernel statistics as before
    rows = ('"phase_decode_kernel",12,350880000,29240000.0,99.9,29000000,29500000,120000.0\n'
            '"roctx_like_kernel(float*)",2,900,450.0,0.1,400,500,50.0\n')
    p = rocprof_stats.parse((HEAD + rows).encode(), "kernel_stats.csv", RUN)
    t = p.tables["trace_kernel_summaries"]
    assert t["name"].to_pylist() == ["phase_decode_kernel", "roctx_like_kernel(float*)"]
    assert t["calls"].to_pylist() == [12, 2]
    assert p.parser_version == "rocprof_stats_csv/4"


def test_v1_statistics_without_min_max_not_taken_for_marks():
    # v1 results.stats.csv has no MaxNs: a 0 ns kernel there stays a kernel
    rows = '"k0",1,0,0,0.0\n"k1",2,10,5,100.0\n'
    head = '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'
    p = rocprof_stats.parse((head + rows).encode(), "results.stats.csv", RUN)
    assert p.tables["trace_kernel_summaries"]["name"].to_pylist() == ["k0", "k1"]


# ------------------------------------------------ rocprofv3 memory_copy_trace.csv (rocprof_csv/5)
# rocprofiler-sdk generateCSV.cpp: Kind, Direction, Source_Agent_Id, Destination_Agent_Id,
# Correlation_Id, Start_Timestamp, End_Timestamp (the rocpd CSV adds Guid and Stream_Id); it was
# no known format. Copies as memcpy rows, the GPU end as device (as rocprof_sdk_json does).
MCOPY = (
    b'"Kind","Direction","Source_Agent_Id","Destination_Agent_Id","Correlation_Id",'
    b'"Start_Timestamp","End_Timestamp"\n'
    b'"MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",0,2,11,1000,1600\n'
    b'"MEMORY_COPY","MEMORY_COPY_DEVICE_TO_HOST","GPU 1","CPU 0",12,2000,2900\n'
    b'"MEMORY_COPY","MEMORY_COPY_DEVICE_TO_DEVICE","Agent 2","Agent 3",13,3000,3050\n'
    b'"MEMORY_COPY","MEMORY_COPY_HOST_TO_HOST",0,0,14,4000,4001\n'
)


def test_rocprofv3_memory_copy_trace_is_copies():
    import csv
    import io

    from tests.test_formats_nsys import claimed_by
    from tests.vendor_trace_checks import check_schema, kernel_sums, load
    from warehouse.ingesting.formats import rocprof_csv

    assert claimed_by(MCOPY) == ["rocprof_csv"]
    p = rocprof_csv.parse(MCOPY, "memory_copy_trace.csv", RUN)
    check_schema(p)
    rows = list(csv.DictReader(io.StringIO(MCOPY.decode())))
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["kind"], e["category"], e["name"], e["start_ns"], e["dur_ns"], e["correlation"])
            for e in ev] == [
        ("memcpy", r["Kind"], r["Direction"], int(r["Start_Timestamp"]),
         int(r["End_Timestamp"]) - int(r["Start_Timestamp"]), int(r["Correlation_Id"]))
        for r in rows]
    assert [e["device"] for e in ev] == ["2", "1", "Agent 3", None]
    assert kernel_sums(p) == {}
    assert p.tables["trace_runs"].to_pylist()[0]["tool"] == "rocprofv3"
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back == rows
