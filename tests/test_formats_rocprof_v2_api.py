"""rocprofv2's file-plugin trace CSVs beside its dispatch CSV (layouts of ROCm/rocprofiler
``plugin/file/file.cpp`` ``WriteHeader`` and its CHANGELOG example): the HIP / HSA API traces
(``Domain``, ``Function``[, ``Kernel_Name``], ``Start_Timestamp``, ``End_Timestamp``,
``Correlation_ID``, a blank line under the header) are API calls (kind ``runtime``), never kernel
dispatches; the HIP activity trace ``hcc_ops_trace`` (``Stop_Timestamp``) is refused naming the
column and what to ingest instead. Expected values come from the CSV module, never the parser."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.test_formats_nsys import claimed_by
from tests.vendor_trace_checks import RUN, check_schema, load
from warehouse.errors import FormatError
from warehouse.ingesting.formats import rocprof_csv

# hip_api_trace_<pid>.csv as the file plugin writes it (Kernel_Name empty but for launches)
HIP_API = (
    b'Domain,Function,Kernel_Name,Start_Timestamp,End_Timestamp,Correlation_ID\n'
    b'\n'
    b'HIP_API_DOMAIN,hipGetDeviceProperties,,316678074094190,316678074098929,1\n'
    b'HIP_API_DOMAIN,"hipMalloc",,316678074105702,316678074130851,2\n'
    b'HIP_API_DOMAIN,"hipLaunchKernel","helloworld(char*, char*)",316678074140000,'
    b'316678074150001,3\n'
    b'HIP_API_DOMAIN,hipDeviceSynchronize,,316678074150500,316678074150500,4\n'
)

# hsa_api_trace_<pid>.csv: no Kernel_Name column
HSA_API = (
    b'Domain,Function,Start_Timestamp,End_Timestamp,Correlation_ID\n'
    b'\n'
    b'HSA_API_DOMAIN,"hsa_agent_get_info",900000000000001,900000000000050,7\n'
    b'HSA_API_DOMAIN,"hsa_queue_create",900000000000100,900000000099999,8\n'
)

# hcc_ops_trace_<pid>.csv: HIP activity (kernels, copies, barriers), end column Stop_Timestamp
HCC_OPS = (
    b'Domain,Operation,Kernel_Name,Start_Timestamp,Stop_Timestamp,Correlation_ID\n'
    b'\n'
    b'HIP_OPS_DOMAIN,"KernelExecution","helloworld(char*, char*)",316678074160000,'
    b'316678074170000,3\n'
    b'HIP_OPS_DOMAIN,"CopyHostToDevice",,316678074180000,316678074190000,5\n'
)


def _rows(data: bytes) -> list[dict]:
    return [r for r in csv.DictReader(io.StringIO(data.decode())) if any(r.values())]


@pytest.mark.parametrize("data", [HIP_API, HSA_API], ids=["hip_api_trace", "hsa_api_trace"])
def test_v2_api_trace_is_runtime_calls_as_written(data):
    assert claimed_by(data) == ["rocprof_csv"]
    p = rocprof_csv.parse(data, "hip_api_trace_4242.csv", RUN)
    check_schema(p)
    rows = _rows(data)
    got = p.tables["trace_events"].to_pylist()
    assert len(got) == len(rows)
    for r, e in zip(rows, got, strict=True):
        assert (e["kind"], e["category"], e["name"]) == ("runtime", r["Domain"], r["Function"])
        assert e["start_ns"] == int(r["Start_Timestamp"])
        assert e["dur_ns"] == int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
        assert e["correlation"] == int(r["Correlation_ID"])
        args = json.loads(e["args"])
        assert args.get("Kernel_Name") == r.get("Kernel_Name")  # verbatim, never the name
        assert "Function" not in args
    assert p.summary.get("kernels", 0) == 0 and p.summary["runtime"] == len(rows)
    run = p.tables["trace_runs"].to_pylist()[0]
    assert run["tool"] == "rocprofv2"
    assert json.loads(run["metadata"])["file_kind"] == "api_trace.csv"
    # lossless: the table comes back (quoting and the blank line under the header aside)
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back == rows


def test_v2_launch_call_keeps_its_kernel_in_args_not_as_a_dispatch():
    p = rocprof_csv.parse(HIP_API, "hip_api_trace_4242.csv", RUN)
    launch = [e for e in p.tables["trace_events"].to_pylist() if e["name"] == "hipLaunchKernel"]
    assert len(launch) == 1 and launch[0]["kind"] == "runtime"
    assert json.loads(launch[0]["args"])["Kernel_Name"] == "helloworld(char*, char*)"


def test_v2_hcc_ops_trace_is_refused_naming_stop_timestamp():
    assert claimed_by(HCC_OPS) == ["rocprof_csv"]
    with pytest.raises(FormatError) as e:
        rocprof_csv.parse(HCC_OPS, "hcc_ops_trace_4242.csv", RUN)
    msg = str(e.value)
    assert "hcc_ops_trace_4242.csv" in msg
    for part in ("Stop_Timestamp", "hcc_ops_trace", "results_<pid>.csv", "kernel_trace.csv"):
        assert part in msg, msg


def test_v2_launch_only_api_trace_is_calls_not_dispatches():
    """A HIP API trace whose every call named a kernel (launches only): rocprof_csv/2 read it as
    kernel dispatches (hence rocprof_csv/3); it is API calls."""
    data = (b'Domain,Function,Kernel_Name,Start_Timestamp,End_Timestamp,Correlation_ID\n\n'
            b'HIP_API_DOMAIN,"hipLaunchKernel","k1(int*)",100,150,1\n'
            b'HIP_API_DOMAIN,"hipLaunchKernel","k2(int*)",200,260,2\n')
    p = rocprof_csv.parse(data, "hip_api_trace_1.csv", RUN)
    got = p.tables["trace_events"].to_pylist()
    assert [(e["kind"], e["name"]) for e in got] == [("runtime", "hipLaunchKernel")] * 2
    assert p.summary.get("kernels", 0) == 0
    assert p.parser_version == rocprof_csv.PARSER_VERSION
