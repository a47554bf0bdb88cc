"""Quirks of real profiler outputs found in public repositories (each test writes a small
synthetic file of the same shape; no real file's content is embedded)."""

from __future__ import annotations

import csv
import io

import pytest

from tests.vendor_trace_checks import RUN, check_schema, load
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import ncu_csv, rocprof_csv, rocprof_stats


def _summaries(p) -> list[tuple[str, int, int]]:
    t = p.tables["trace_kernel_summaries"]
    return list(zip(t["name"].to_pylist(), t["calls"].to_pylist(), t["total_ns"].to_pylist(),
                    strict=True))


# ------------------------------------------------------- rocprof --stats, names unquoted
# Older rocprof wrote results.stats.csv with a quoted header and unquoted kernel names, the
# names' own commas included (a HIP build of Kokkos: ``void f<A, B>(View<int**>, ...),1,...``).

STATS_UNQUOTED = (
    '"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n'
    "void hip_launch<ParallelFor<loop(View<int**>, View<int*>)::{lambda(int)#1}, Policy>, "
    "1024u, 1u>(ParallelFor<loop(View<int**>, View<int*>)> const*),1,533600,533600,60.5\n"
    "init_lock_array_kernel_atomic(),2,11040,5520,1.2\n"
    "Unknown command type,4,0,0,0.0\n"
)


def test_rocprof_stats_unquoted_names_with_commas():
    data = STATS_UNQUOTED.encode()
    assert formats.detect(data, "s.csv") is rocprof_stats
    p = rocprof_stats.parse(data, "s.csv", RUN)
    check_schema(p)
    first = STATS_UNQUOTED.splitlines()[1].rsplit(",", 4)[0]
    assert _summaries(p) == [(first, 1, 533600), ("init_lock_array_kernel_atomic()", 2, 11040),
                             ("Unknown command type", 4, 0)]
    # the rebuilt table (names quoted now) reads back to the same rows
    rebuilt = list(csv.reader(io.StringIO(rocprof_stats.rebuild(load(p), RUN))))
    assert rebuilt[1][0] == first and rebuilt[1][1:3] == ["1", "533600"]


def test_rocprof_stats_unquoted_name_still_checks_the_numbers():
    bad = STATS_UNQUOTED.replace(",533600,533600,", ",5.3e5,533600,")
    with pytest.raises(FormatError, match="TotalDurationNs"):
        rocprof_stats.parse(bad.encode(), "s.csv", RUN)


# --------------------------------------------- ncu --csv details, short metric rows
# Newer Nsight Compute ends a details metric row right after 'Metric Value' with one empty
# field (``...,"us","6.75",``) while its rule rows fill every rule column.

NCU_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
            '"Metric Value","Rule Name","Rule Type","Rule Description",'
            '"Estimated Speedup Type","Estimated Speedup"\n')
NCU_ID = ('"0","4242","python3","127.0.0.1","gemv<int, float>(T13)","1","7","(32, 4, 1)",'
          '"(224, 1, 1)","0","12.0",')


def _ncu_short_rows() -> str:
    sol = "GPU Speed Of Light Throughput"
    return (NCU_HEAD
            + NCU_ID + f'"{sol}","Elapsed Cycles","cycle","13,485",\n'
            + NCU_ID + f'"{sol}","Duration","us","6.75",\n'
            + NCU_ID + '"SpeedOfLight","","","","SOLBottleneck","OPT","Grid too small.","",""\n'
            + NCU_ID + '"Occupancy","","","","TheoreticalOccupancy","OPT","Registers.",'
            '"global","80.34"\n')


def test_ncu_details_metric_rows_without_rule_cells():
    data = _ncu_short_rows().encode()
    assert formats.detect(data, "n.csv") is ncu_csv
    p = ncu_csv.parse(data, "n.csv", RUN)
    launches = p.tables["ncu_launches"].to_pylist()
    assert [(r["kernel"], r["dur_ns"], r["time_state"]) for r in launches] == [
        ("gemv<int, float>(T13)", 6750, "ok")]
    m = p.tables["ncu_metrics"]
    assert m["name"].to_pylist() == ["Elapsed Cycles", "Duration"]
    assert m["value"].to_pylist() == [13485.0, 6.75]
    rules = p.tables["ncu_rules"]
    assert rules["section"].to_pylist() == ["SpeedOfLight", "Occupancy"]
    assert '"Estimated Speedup": "80.34"' in rules["cells"].to_pylist()[1]


def test_ncu_details_short_row_missing_more_than_rule_cells_refused():
    text = _ncu_short_rows().replace('"Duration","us","6.75",', '"Duration","us"')
    with pytest.raises(FormatError, match="20 fields as in the header; found 14"):
        ncu_csv.parse(text.encode(), "n.csv", RUN)


# ---------------------------------------------- rocprof counter collection, long form
# rocprofiler-compute's pmc_perf.csv from a rocpd database (and rocprofv3's
# counter_collection.csv) carry Kernel_Name and Start/End_Timestamp like a dispatch list, but one
# row per dispatch *and counter*: read as dispatches, each dispatch counted once per counter.

PMC_LONG = (
    "GPU_ID,Dispatch_ID,Grid_Size,Workgroup_Size,Kernel_Name,Start_Timestamp,End_Timestamp,"
    "Kernel_ID,Counter_Name,Counter_Value\n"
    '2,1,1048576,256,"copy(double*, int)",1000,9000,12,SQ_WAVES,16384.0\n'
    '2,1,1048576,256,"copy(double*, int)",1000,9000,12,TCC_HIT_sum,12.0\n'
    '2,2,1048576,256,"copy(double*, int)",20000,27000,12,SQ_WAVES,16384.0\n'
    '2,2,1048576,256,"copy(double*, int)",20000,27000,12,TCC_HIT_sum,10.0\n'
)


def test_rocprof_counter_collection_long_form_refused():
    data = PMC_LONG.encode()
    assert formats.detect(data, "pmc_perf.csv") is rocprof_csv
    with pytest.raises(FormatError, match="counter collection in long form") as e:
        rocprof_csv.parse(data, "pmc_perf.csv", RUN)
    assert e.value.path == "pmc_perf.csv"


def test_rocprof_dispatch_csv_with_counter_columns_still_read():
    # wide counters (one column per counter, one row per dispatch) stay a dispatch list
    wide = ("Dispatch_ID,Kernel_Name,GPU_ID,SQ_WAVES,Start_Timestamp,End_Timestamp\n"
            '0,"copy(double*, int)",2,16384,1000,9000\n1,"copy(double*, int)",2,16384,20000,27000\n')
    p = rocprof_csv.parse(wide.encode(), "pmc_perf_0.csv", RUN)
    assert p.tables["trace_events"]["dur_ns"].to_pylist() == [8000, 7000]


# ------------------------------------------------- a text file starting with "["
# A console capture of ``nsys profile --stats=true`` (its column tables, not CSV) starts with
# "[6/8] Executing 'cuda_gpu_kern_sum' stats report": no JSON, so no JSON rule applies.

CONSOLE = ("[6/8] Executing 'cuda_gpu_kern_sum' stats report\n\n"
           " Time (%)  Total Time (ns)  Instances  Avg (ns)  Name\n"
           " --------  ---------------  ---------  --------  ----\n"
           "    100.0        1,831,281      1,010   1,813.1  vectorAdd(const float *, int)\n")


def test_console_text_starting_with_a_bracket_refused_as_text():
    with pytest.raises(FormatError, match="found a text file that is neither") as e:
        formats.detect(CONSOLE.encode(), "stats.txt")
    assert e.value.kind == "unknown_format"


def test_json_array_still_refused_by_the_json_rules():
    with pytest.raises(FormatError, match="object"):
        formats.detect(b'[{"ph": "X"}]', "a.json")


# ------------------------------------------------- rocprof counters without timestamps
# rocprof -i counters.txt without --timestamp on writes a results.csv of counters per dispatch
# and no time at all: refused naming the missing timestamps (was: "no known format").

COUNTERS_ONLY = ("Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,sig,obj,"
                 "LDSBankConflict,LDSInsts\n"
                 '0,"init_kernel",8,0,0,12811,12811,207667200,256,0,0,0x0,0x7fbf2296d680,'
                 "0.0000000000,0.0000000000\n")


def test_rocprof_counters_without_timestamps_refused_naming_them():
    with pytest.raises(FormatError, match="'BeginNs'/'EndNs'.*--timestamp on") as e:
        formats.parse(COUNTERS_ONLY.encode(), "results.csv", RUN)
    assert e.value.kind == "schema"


# ------------------------------------------------------ ncu --csv in a non-English locale
# ncu run in a Spanish locale writes "2.508.800" (dots group digits) and "19,66" (decimal
# comma); the same file's "4.750" means 4750, which was read as 4.75 (and a duration "2.000"
# nsecond as 2 ns). Such a file is refused naming the rule.

LOCALE_HEAD = ('"ID","Process ID","Kernel Name","Section Name","Metric Name","Metric Unit",'
               '"Metric Value"\n')


@pytest.mark.parametrize("cell", ["2.508.800", "19,66", "1.234,5"])
def test_ncu_csv_non_english_locale_refused(cell):
    text = (LOCALE_HEAD
            + '"0","77","k(int)","Command line profiler metrics","dram__bytes.sum","byte",'
            '"4.750"\n'
            + f'"0","77","k(int)","Command line profiler metrics","m.pct","%","{cell}"\n')
    with pytest.raises(FormatError, match="LC_ALL=C") as e:
        formats.parse(text.encode(), "ncu.csv", RUN)
    assert "line 3" in str(e.value)


def test_ncu_csv_english_grouping_and_text_values_still_read():
    text = (LOCALE_HEAD
            + '"0","77","k(int)","Command line profiler metrics","dram__bytes.sum","byte",'
            '"2,508,800"\n'
            + '"0","77","k(int)","Command line profiler metrics","gpu__time_duration.sum",'
            '"nsecond","2,000"\n'
            + '"0","77","k(int)","Command line profiler metrics","x.ratio","","n/a"\n')
    p = ncu_csv.parse(text.encode(), "ncu.csv", RUN)
    assert p.tables["ncu_metrics"]["value"].to_pylist() == [2508800.0, 2000.0, None]
    assert p.tables["ncu_launches"]["dur_ns"].to_pylist() == [2000]


# ------------------------------------------------ rocprofv2 / omniperf MI300 dispatch CSV
# rocprofv2's file plugin (and omniperf's MI300 timestamps.csv) spell the ids Queue_ID, PID,
# TID and Correlation_ID: they were not read (stream, pid, tid and correlation left null).

V2_HEAD = ("Dispatch_ID,GPU_ID,Queue_ID,PID,TID,Grid_Size,Workgroup_Size,Kernel_Name,"
           "Start_Timestamp,End_Timestamp,Correlation_ID\n")


def test_rocprofv2_dispatch_csv_ids_read():
    text = (V2_HEAD + '1,2,1,1103031,1103032,1048576,256,"vecCopy(double*, int) (.kd)",'
            "810970000000000,810970000008653,7\n")
    p = rocprof_csv.parse(text.encode(), "timestamps.csv", RUN)
    e = p.tables["trace_events"].to_pylist()[0]
    assert (e["dur_ns"], e["device"], e["stream"], e["pid"], e["tid"], e["correlation"]) == (
        8653, "2", "1", "1103031", "1103032", 7)


# ------------------------------------------- rocprof statistics that are not about kernels
# rocprofv3 --stats writes domain_stats.csv and hip_api_stats.csv with the header of
# kernel_stats.csv: they were read as kernels ("HIP_API" a kernel of 24044 calls).

STATS_HEAD = '"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'


@pytest.mark.parametrize("rows, rule", [
    ('"HIP_API",240,1660103,6917.1,90.0,79,297454,1941.9\n'
     '"KERNEL_DISPATCH",30,184000,6133.3,10.0,500,9000,12.5\n', "domain_stats.csv"),
    ('"hipMemcpy",105,1248355,11889.1,75.2,4271,16960,5945.0\n'
     '"hipLaunchKernel",502,928555,1849.7,24.8,1030,5012,1080.1\n', "API statistics"),
    ('"MEMORY_COPY_HOST_TO_DEVICE",48,2411520,50240.0,71.40,49920,51200,320.1\n'
     '"MEMORY_COPY_DEVICE_TO_HOST",24,965632,40234.6,28.60,39936,41216,290.7\n',
     "memory statistics"),
])
def test_rocprof_non_kernel_statistics_refused(rows, rule):
    with pytest.raises(FormatError, match=rule):
        rocprof_stats.parse((STATS_HEAD + rows).encode(), "stats.csv", RUN)


def test_rocprof_kernel_statistics_with_api_like_names_still_read():
    # kernels that merely look like API names or domains are kernels
    rows = ('"hipSaxpy",10,5000,500.0,50.0,400,600,10.0\n'
            '"TRANSPOSE_COPY",10,5000,500.0,50.0,400,600,10.0\n'
            '"__amd_rocclr_fillBufferAligned",1,5920,5920.0,0.1,5920,5920,0.0\n')
    p = rocprof_stats.parse((STATS_HEAD + rows).encode(), "kernel_stats.csv", RUN)
    assert [n for n, _, _ in _summaries(p)] == ["hipSaxpy", "TRANSPOSE_COPY",
                                                  "__amd_rocclr_fillBufferAligned"]


# ------------------------------------------------ rocprof results.json, numbered lanes
# Older tblextr writes lane names with their section number ("0 CPU HIP API", seen in AMD's
# own merge_jsons.py): "1 GPU0" lanes carried no kernels (a HIP-traced dispatch, args dev-id,
# read as "other") and "2 COPY" no copies.

NUMBERED = (
    '{ "traceEvents":[{}\n'
    ',{"args":{"name":"0 CPU HIP API"},"ph":"M","pid":2,"name":"process_name"}\n'
    ',{"args":{"name":"1 GPU0"},"ph":"M","pid":6,"name":"process_name"}\n'
    ',{"args":{"name":"2 COPY"},"ph":"M","pid":1,"name":"process_name"}\n'
    ',{"ph":"X","name":"hipLaunchKernel","pid":"2","tid":"77","ts":"10","dur":"3",\n'
    '  "args":{"BeginNs":"10000","EndNs":"13500"}}\n'
    ',{"ph":"X","name":"saxpy(float*, int)","pid":"6","tid":"0","ts":"20","dur":"4",\n'
    '  "args":{"dev-id":"0","queue-id":"0","BeginNs":"20000","EndNs":"24321",'
    '"DurationNs":"4321"}}\n'
    ',{"ph":"X","name":"CopyHostToDevice","pid":"1","tid":"0","ts":"30","dur":"1",\n'
    '  "args":{"BeginNs":"30000","EndNs":"31250"}}\n'
    ']}\n')


def test_rocprof_results_json_numbered_lanes():
    from warehouse.ingesting.formats import rocprof_json

    data = NUMBERED.encode()
    assert formats.detect(data, "results.json") is rocprof_json
    ev = rocprof_json.parse(data, "results.json", RUN).tables["trace_events"].to_pylist()
    assert [(e["kind"], e["name"], e["dur_ns"], e["device"]) for e in ev] == [
        ("runtime", "hipLaunchKernel", 3500, None),
        ("kernel", "saxpy(float*, int)", 4321, "0"),
        ("memcpy", "CopyHostToDevice", 1250, None)]


# ------------------------------------------------ rocprofv2 file plugin: blank line first
# rocprofv2's file plugin writes results.csv as the v1 header, an empty line, then the rows
# (",0,<begin>,<end>,0" at the end): the blank line was taken for the end of the table.

V2_PLUGIN = ("Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,"
             "accum_vgpr,sgpr,wave_size,DispatchNs,BeginNs,EndNs,CompleteNs\n"
             "\n"
             '1,"vecAdd(float*, int)",1,0,0,4242,4243,1048576,256,0,0,8,0,16,64,0,1000,5500,0\n'
             '2,"vecAdd(float*, int)",1,0,1,4242,4243,1048576,256,0,0,8,0,16,64,0,6000,9000,0\n')


def test_rocprofv2_blank_line_under_header():
    p = formats.parse(V2_PLUGIN.encode(), "results.csv", RUN)
    assert p.tables["trace_events"]["dur_ns"].to_pylist() == [4500, 3000]


def test_blank_line_between_rows_still_ends_the_table():
    two = V2_PLUGIN + "\n" + V2_PLUGIN.splitlines()[2] + "\n"
    with pytest.raises(FormatError, match="more rows follow the blank line"):
        formats.parse(two.encode(), "results.csv", RUN)


# ------------------------------------------- nsys stats: several reports in one capture
# `nsys stats -r cuda_gpu_kern_sum -r cuda_api_sum -f csv` to stdout announces each report with
# "Processing [...] with [...]...": a kernel summary followed by another report was refused
# (the next report's lines read as rows).

NSYS_PROC = "Processing [/tmp/r.sqlite] with [/opt/nsys/reports/{}.py]... \n"
KERN_SUM = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
            "Name\n60.0,6000,6,1000.0,1000.0,900,1100,10.0,kern_a\n"
            "40.0,4000,4,1000.0,1000.0,900,1100,10.0,\"kern_b(int, float)\"\n")
API_SUM = ("Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
           "Name\n96.6,24720,272,90.8,11.0,7,1572,17.2,cudaMalloc\n")


@pytest.mark.parametrize("blank", ["", "\n"])
def test_nsys_kern_sum_followed_by_another_report(blank):
    text = (NSYS_PROC.format("cuda_gpu_kern_sum") + KERN_SUM + blank
            + NSYS_PROC.format("cuda_api_sum") + API_SUM)
    p = formats.parse(text.encode(), "stats.csv", RUN)
    assert _summaries(p) == [("kern_a", 6, 6000), ("kern_b(int, float)", 4, 4000)]


def test_nsys_kern_sum_garbage_after_the_table_still_refused():
    text = NSYS_PROC.format("cuda_gpu_kern_sum") + KERN_SUM + "Processing stopped\n"
    with pytest.raises(FormatError, match="9 fields"):
        formats.parse(text.encode(), "stats.csv", RUN)


def test_nsys_skipped_kern_sum_followed_by_another_report():
    text = (NSYS_PROC.format("cuda_gpu_kern_sum")
            + "SKIPPED: /tmp/r.sqlite does not contain CUDA kernel data.\n"
            + NSYS_PROC.format("cuda_api_sum") + API_SUM)
    p = formats.parse(text.encode(), "stats.csv", RUN)
    assert _summaries(p) == []
    assert p.tables["trace_runs"]["aggregated"].to_pylist() == [True]
