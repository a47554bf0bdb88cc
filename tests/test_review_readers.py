"""Review of the reader changes: real-world outputs the new readers refused (synthetic
reproductions of their shape; no real file's content is embedded)."""

from __future__ import annotations

import json

import pytest

from tests.vendor_trace_checks import RUN, check_schema, load
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import nsys_trace_csv

# ------------------------------------------------ nsys stats cuda_gpu_trace of a CPU-only run
# `nsys stats -r cuda_gpu_trace -f csv` on an export without kernels, memcpys or memsets prints
# nsys's "SKIPPED: <file> does not contain GPU trace data." instead of a table (as
# cuda_gpu_kern_sum prints "... does not contain CUDA kernel data.", read as 0 kernels). The
# console capture was refused as "a text file of no known format".

PROC = "Processing [/tmp/r.sqlite] with [/opt/nsys/host-linux-x64/reports/{}.py]... \n"
SKIPPED = "SKIPPED: /tmp/r.sqlite does not contain GPU trace data.\n"
API_SUM = ("\n ** CUDA API Summary (cuda_api_sum):\n\n"
           "Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
           "Name\n96.6,24720,272,90.8,11.0,7,1572,17.2,cudaGetDeviceCount\n")
API_TRACE = ("Start (ns),Duration (ns),Name,Result,CorrID,Pid,Tid,T-Pri,Thread Name\n"
             "1000,500,cudaGetDeviceCount,0,1,100,100,20,python\n")


@pytest.mark.parametrize("text", [
    SKIPPED,
    PROC.format("cuda_gpu_trace") + SKIPPED,
    PROC.format("cuda_gpu_trace") + SKIPPED + "\n",
    (PROC.format("cuda_gpu_trace") + SKIPPED).replace("\n", "\r\n"),
    # another report follows in the same console capture
    PROC.format("cuda_gpu_trace") + SKIPPED + PROC.format("cuda_api_sum") + API_SUM,
], ids=["bare", "announced", "blank-after", "crlf", "next-report"])
def test_nsys_skipped_gpu_trace_is_a_run_with_0_kernels(text):
    data = text.encode()
    assert formats.detect(data, "gpu_trace.txt") is nsys_trace_csv
    p = formats.parse(data, "gpu_trace.txt", RUN)
    check_schema(p)
    assert p.tables["trace_events"].num_rows == 0
    assert p.tables["trace_runs"]["aggregated"].to_pylist() == [False]
    meta = json.loads(p.tables["trace_runs"]["metadata"].to_pylist()[0])
    assert (meta["report"], meta["skipped"]) == ("cuda_gpu_trace",
                                                 "does not contain GPU trace data")
    assert "/tmp/r.sqlite" not in json.dumps(meta)  # the line's path is not stored
    assert nsys_trace_csv.rebuild(load(p), RUN) == ""  # nsys wrote no table


def test_nsys_skipped_gpu_trace_then_garbage_refused():
    text = PROC.format("cuda_gpu_trace") + SKIPPED + "something else\n"
    with pytest.raises(FormatError, match="nothing but blank lines after"):
        formats.parse(text.encode(), "gpu_trace.txt", RUN)


def test_skipped_gpu_trace_before_an_api_trace_still_reads_the_api_trace():
    # a report this module reads, anywhere in the capture's head, is read as before
    text = (PROC.format("cuda_gpu_trace") + SKIPPED + PROC.format("cuda_api_trace") + "\n"
            + API_TRACE)
    p = formats.parse(text.encode(), "capture.txt", RUN)
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["kind"], e["name"], e["dur_ns"]) for e in ev] == [
        ("runtime", "cudaGetDeviceCount", 500)]


def test_other_skipped_messages_are_not_a_gpu_trace():
    text = PROC.format("cuda_api_trace") + "SKIPPED: /tmp/r.sqlite does not contain CUDA " \
        "trace data.\n"
    with pytest.raises(FormatError, match="no known format|neither"):
        formats.parse(text.encode(), "api_trace.txt", RUN)


# ------------------------------------------------ rocprofv3 rccl_api_stats.csv
# rocprofv3 --rccl-trace --stats writes rccl_api_stats.csv with the header of kernel_stats.csv,
# one row per RCCL function: it was read as kernel statistics ("ncclAllReduce" a kernel), as the
# HIP/HSA API statistics were before rocprof_stats_csv/2.

STATS_HEAD = '"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'
RCCL_STATS = ('"ncclAllReduce",400,9120000,22800.0,71.2,9000,1502000,81000.5\n'
              '"ncclCommInitRankConfig",1,3400000,3400000.0,26.5,3400000,3400000,0.0\n'
              '"ncclGroupEnd",20,300000,15000.0,2.3,9000,41000,9000.0\n')


def test_rocprof_rccl_api_statistics_refused():
    from warehouse.ingesting.formats import rocprof_stats

    data = (STATS_HEAD + RCCL_STATS).encode()
    assert formats.detect(data, "rccl_api_stats.csv") is rocprof_stats
    with pytest.raises(FormatError, match="API statistics.*ncclAllReduce") as e:
        rocprof_stats.parse(data, "rccl_api_stats.csv", RUN)
    assert e.value.kind == "schema"


def test_rocprof_rccl_kernels_still_kernel_statistics():
    # RCCL's own kernels (names truncated by --truncate-kernels) are kernels
    from warehouse.ingesting.formats import rocprof_stats

    rows = ('"ncclDevKernel_Generic",400,9120000,22800.0,90.0,9000,1502000,81000.5\n'
            '"ncclKernel_AllReduce_RING_LL_Sum_float",10,1000000,100000.0,10.0,90000,110000,'
            '5000.0\n')
    p = rocprof_stats.parse((STATS_HEAD + rows).encode(), "kernel_stats.csv", RUN)
    t = p.tables["trace_kernel_summaries"]
    assert t["name"].to_pylist() == ["ncclDevKernel_Generic",
                                     "ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert t["calls"].to_pylist() == [400, 10]


# ------------------------------------------------ rocprof v1 results.copy_stats.csv
# rocprof --hip-trace --stats (v1) writes results.copy_stats.csv with the header of
# results.stats.csv, one row per copy direction (CopyHostToDevice, CopyDeviceToHost): it was read
# as kernel statistics, as rocprofv3's memory_copy_stats.csv was before rocprof_stats_csv/2.

V1_HEAD = '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'


@pytest.mark.parametrize("rows", [
    '"CopyHostToDevice",3,1537046,512348,66.1\n"CopyDeviceToHost",1,788480,788480,33.9\n',
    "CopyDeviceToHost,1,788480,788480,100.0\n",
])
def test_rocprof_v1_copy_statistics_refused(rows):
    from warehouse.ingesting.formats import rocprof_stats

    data = (V1_HEAD + rows).encode()
    assert formats.detect(data, "results.copy_stats.csv") is rocprof_stats
    with pytest.raises(FormatError, match="memory statistics.*Copy") as e:
        rocprof_stats.parse(data, "results.copy_stats.csv", RUN)
    assert e.value.kind == "schema"


def test_rocprof_v1_kernels_named_like_copies_still_kernel_statistics():
    from warehouse.ingesting.formats import rocprof_stats

    rows = ('"CopyKernel",3,1537046,512348,66.1\n"CopyDeviceToDevice",1,788480,788480,33.9\n'
            '"CopyHostToDevice",1,10,10,0.0\n"vecAdd(float*, int)",1,10,10,0.0\n')
    p = rocprof_stats.parse((V1_HEAD + rows).encode(), "results.stats.csv", RUN)
    assert p.tables["trace_kernel_summaries"]["name"].to_pylist() == [
        "CopyKernel", "CopyDeviceToDevice", "CopyHostToDevice", "vecAdd(float*, int)"]
