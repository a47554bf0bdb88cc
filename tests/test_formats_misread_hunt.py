"""Profiler outputs pwh must not read as something they are not (``nsys stats`` reports).

Each header below is the one nsys's own report script selects (``"Total Time:dur_ns"`` is
written ``Total Time (ns)`` by ``nsys stats --format csv``), from the report scripts that ship
with Nsight Systems, as copied in singularitti/nsys-recipe ``src/nsys_recipe/reports/*.py``
(``mpi_event_sum.py``, ``cuda_gpu_kern_gb_sum.py``, ``vulkan_api_trace.py``). The rows are
made up, small, in the layout those scripts write.
"""

from __future__ import annotations

import json

import pytest

from tests.vendor_trace_checks import check_schema, load
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import nsys_csv, nsys_trace_csv

KERN_SUM = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
            "StdDev (ns),Name\n")
# mpi_event_sum.py: Time, Total Time, Instances, Avg, Med, Min, Max, StdDev, Source, Name
MPI_EVENT_SUM = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
                 "StdDev (ns),Source,Name\n"
                 "80.0,4000,2,2000.0,2000.0,1000,3000,1414.2,collectives,MPI_Allreduce\n"
                 "20.0,1000,1,1000.0,1000.0,1000,1000,0.0,p2p,MPI_Send\n")
# cuda_gpu_kern_gb_sum.py: the kernel summary with GridXYZ and BlockXYZ before Name
GB_SUM = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
          "StdDev (ns),GridXYZ,BlockXYZ,Name\n"
          "60.0,600,2,300.0,300.0,200,400,141.4,  64    1    1, 256    1    1,gemm\n"
          "40.0,400,1,400.0,400.0,400,400,0.0,  32    1    1, 256    1    1,gemm\n")
# vulkan_api_trace.py: Start, Duration, Name, Event Class, Context, CorrID, Pid, Tid, T-Pri,
# Thread Name
VULKAN_API_TRACE = ("Start (ns),Duration (ns),Name,Event Class,Context,CorrID,Pid,Tid,T-Pri,"
                    "Thread Name\n"
                    "1000,50,vkQueueSubmit,54,1,7,100,101,0,main\n")
CUDA_API_TRACE = ("Start (ns),Duration (ns),Name,Result,CorrID,Pid,Tid,T-Pri,Thread Name\n"
                  "1000,50,cudaLaunchKernel,0,7,100,101,0,main\n")


def col(parsed, table: str, name: str) -> list:
    return parsed.tables[table].column(name).to_pylist()


def meta_of(parsed) -> dict:
    return json.loads(col(parsed, "trace_runs", "metadata")[0])


def _detected(text: str):
    mod, payload = formats.detect_payload(text.encode(), "report.csv")
    return mod, payload


def test_mpi_event_sum_is_refused_naming_the_report_not_read_as_kernels():
    mod, payload = _detected(MPI_EVENT_SUM)
    assert mod is nsys_csv  # it has a kernel summary's Total Time, Instances and Name
    with pytest.raises(FormatError, match=r"mpi_event_sum") as e:
        mod.parse(payload, "report.csv", "r1")
    assert "'Source'" in str(e.value) and e.value.kind == "schema"


def test_mpi_event_sum_after_a_console_preamble_is_refused_too():
    text = ("Processing [r.sqlite] with [/opt/nsys/reports/mpi_event_sum.py]... \n\n"
            " ** MPI Event Summary (mpi_event_sum):\n\n" + MPI_EVENT_SUM)
    mod, payload = _detected(text)
    with pytest.raises(FormatError, match=r"mpi_event_sum"):
        mod.parse(payload, "report.csv", "r1")


def test_a_column_no_kernel_summary_has_is_refused_naming_it():
    text = KERN_SUM.rstrip("\n") + ",Category\n1.0,10,1,10.0,10.0,10,10,0.0,k,X\n"
    with pytest.raises(FormatError, match=r"'Category'.*no nsys stats kernel summary"):
        nsys_csv.parse(text.encode(), "report.csv", "r1")


def test_the_kernel_summary_itself_is_still_read():
    text = KERN_SUM + "100.0,30,3,10.0,10.0,5,15,5.0,\"void k<float>(float*)\"\n"
    parsed = nsys_csv.parse(text.encode(), "report.csv", "r1")
    meta = meta_of(parsed)
    assert meta["report"] == "cuda_gpu_kern_sum"
    assert col(parsed, "trace_kernel_summaries", "calls") == [3]


def test_the_hidden_quartile_columns_of_the_2024_script_are_a_kernel_summary_s_own():
    # cuda_gpu_kern_sum.py (2024) selects summary.q1 AS "_Q1", summary.q3 AS "_Q3" after Name
    text = KERN_SUM.rstrip("\n") + ",_Q1,_Q3\n100.0,30,3,10.0,10.0,5,15,5.0,k,8,12\n"
    parsed = nsys_csv.parse(text.encode(), "report.csv", "r1")
    assert col(parsed, "trace_kernel_summaries", "calls") == [3]


def test_the_2021_gpukernsum_layout_is_still_read():
    text = ("Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name\n"
            "100.0,30,3,10.0,5,15,5.0,k\n")
    parsed = nsys_csv.parse(text.encode(), "report.csv", "r1")
    assert col(parsed, "trace_kernel_summaries", "total_ns") == [30]


def test_grid_block_summary_is_read_as_kernels_and_named():
    parsed = nsys_csv.parse(GB_SUM.encode(), "report.csv", "r1")
    meta = meta_of(parsed)
    assert meta["report"] == "cuda_gpu_kern_gb_sum"
    assert col(parsed, "trace_kernel_summaries", "name") == ["gemm", "gemm"]
    assert col(parsed, "trace_kernel_summaries", "calls") == [2, 1]
    check_schema(parsed)
    assert nsys_csv.rebuild(load(parsed), "r1") == GB_SUM  # grid and block kept in extra


def test_vulkan_api_trace_is_refused_not_read_as_cuda_api_calls():
    mod, payload = _detected(VULKAN_API_TRACE)
    assert mod is nsys_trace_csv
    with pytest.raises(FormatError, match=r"vulkan_api_trace.*'Event Class'"):
        mod.parse(payload, "report.csv", "r1")


def test_an_api_trace_with_a_column_cuda_api_trace_lacks_is_refused_naming_it():
    text = CUDA_API_TRACE.replace("Thread Name\n", "Thread Name,Queue\n").replace(
        "main\n", "main,3\n")
    with pytest.raises(FormatError, match=r"'Queue'.*no cuda_api_trace"):
        nsys_trace_csv.parse(text.encode(), "report.csv", "r1")


def test_cuda_api_trace_is_still_read():
    parsed = nsys_trace_csv.parse(CUDA_API_TRACE.encode(), "report.csv", "r1")
    meta = meta_of(parsed)
    assert meta["report"] == "cuda_api_trace"
    assert col(parsed, "trace_events", "kind") == ["runtime"]


def test_parser_versions_name_the_change():
    assert nsys_csv.PARSER_VERSION == "nsys_kern_sum_csv/2"
    assert nsys_trace_csv.PARSER_VERSION == "nsys_trace_csv/4"
