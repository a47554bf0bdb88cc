"""ncu --csv shapes met in public repositories (second hunt, issue 21).

Each test names where the shape was seen. Real text is embedded only as small excerpts reduced
here (paths and host names shortened); the other files are written in the shape a real file
showed. Per-kernel calls and total_ns are checked against plain Python over the same CSV."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from decimal import Decimal

import pytest

from tests import vendor_trace_checks
from tests.vendor_trace_checks import RUN, ingest_one_and_roll_up
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import ncu, ncu_csv
from warehouse.ingesting.formats.ncu import TIME_SCALE


def _load(p):
    return vendor_trace_checks.load(p, ncu.TABLES)


def _parse(text: str, path: str = "ncu.csv"):
    data = text.encode()
    assert formats.detect(data, path) is ncu_csv
    return ncu_csv.parse(data, path, RUN)


def _independent(text: str) -> dict[str, tuple[int, int]]:
    """``kernel -> (calls, total_ns)`` by plain Python: every row whose ID is a number is a
    launch's row (a launch: its table and ID); its duration is gpu__time_duration.sum, else
    the SOL 'Duration'."""
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("==")]
    launches: dict[tuple[int, str], str] = {}
    dur: dict[tuple[int, str], int] = {}
    sol: dict[tuple[int, str], int] = {}
    table = 0
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        table += r["ID"] == "ID"  # a repeated header starts the next table
        if not r["ID"].isdigit():
            continue  # a repeated header (or a raw units row)
        key = (table, r["ID"])
        launches[key] = r["Kernel Name"]
        cells = ([(r["Metric Name"], r["Metric Unit"], r["Metric Value"])]
                 if "Metric Name" in r else [])
        for name, unit, value in cells:
            ns = int(Decimal(value.replace(",", "")) * 10 ** TIME_SCALE[unit]) \
                if name in ("gpu__time_duration.sum", "Duration") else None
            if name == "gpu__time_duration.sum":
                dur[key] = ns
            elif name == "Duration":
                sol[key] = ns
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for lid, kernel in launches.items():
        out[kernel][0] += 1
        out[kernel][1] += dur.get(lid, sol.get(lid, 0))
    return {k: (c, t) for k, (c, t) in out.items()}


def _rollup(tmp_path, name: str, text: str) -> dict[str, tuple[int, int]]:
    _, rows = ingest_one_and_roll_up(tmp_path, name, text.encode())
    return {kernel: (calls, total) for kernel, _, calls, total in rows}


# ---------------------------------------------------------------- Nsight Compute 2020, real
# Excerpt of nsight_cfd_097K.log as quoted in AndrewXu22/optimal_unified_memory readme.md (the
# XPlacer artifact; "2020-May-29"): the 2020 column set ('Kernel Time', no Block/Grid Size,
# Device, CC), section "GPU Speed Of Light", the duration only as its 'Duration' in nsecond.
XPLACER_2020 = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context",'
    '"Stream","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    + "".join(
        '"0","28439","cfd_000","127.0.0.1","cuda_compute_step_factor(int,float*,float*,float*)",'
        f'"2020-May-29 12:02:46","1","7",{row}\n' for row in (
            '"GPU Speed Of Light","Memory Frequency","cycle/second","768683274.02"',
            '"GPU Speed Of Light","Elapsed Cycles","cycle","10251"',
            '"GPU Speed Of Light","Duration","nsecond","8992"',
            '"Launch Statistics","Block Size","","192"',
            '"Launch Statistics","Grid Size","","506"',
            '"Occupancy","Achieved Occupancy","%","48.00"')))


def test_ncu_2020_details_export_rolls_up_like_plain_python(tmp_path):
    p = _parse(XPLACER_2020)
    (la,) = p.tables["ncu_launches"].to_pylist()
    assert (la["dur_ns"], la["metric_count"], la["grid"]) == (8992, 6, None)
    assert json.loads(la["extra"])["Kernel Time"] == "2020-May-29 12:02:46"
    want = _independent(XPLACER_2020)
    assert want == {"cuda_compute_step_factor(int,float*,float*,float*)": (1, 8992)}
    assert _rollup(tmp_path, "nsight_cfd_097K.log", XPLACER_2020) == want


# ------------------------------------------------------------------ ncu --nvtx: NVTX columns
# ncu --nvtx puts one column per NVTX range kind between 'Host Name' and 'Kernel Name' (the
# column list of a real details export quoted in a public script: 'thread Domain:Push/Pop_Range:
# PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg', 'Id:Domain:Start/Stop_Range:...'; cells like
# '1  "<default domain>:forward:none:none:none:none:none:none"'). In the raw layout they were
# read as metrics (a text 'metric' per launch) and the launch's nvtx stayed null.
PUSH = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
START = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
NVTX_CELL = '1  "<default domain>:forward:none:none:none:none:none:none"'


def _nvtx_raw() -> str:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["ID", "Process ID", "Process Name", "Host Name", PUSH, START, "Kernel Name",
                "Context", "Stream", "Block Size", "Grid Size", "Device", "CC",
                "dram__bytes.sum", "gpu__time_duration.sum"])
    w.writerow([""] * 13 + ["byte", "usecond"])
    w.writerow(["0", "73", "python", "h", NVTX_CELL, "", "gemm(int)", "1", "7", "(192, 1, 1)",
                "(2, 1, 74)", "0", "8.9", "1,024", "12.25"])
    w.writerow(["1", "73", "python", "h", "", "", "gemm(int)", "1", "7", "(192, 1, 1)",
                "(2, 1, 74)", "0", "8.9", "2,048", "10.50"])
    return buf.getvalue()


def test_nvtx_columns_of_a_raw_export_are_launch_ranges_not_metrics():
    text = _nvtx_raw()
    p = _parse(text)
    launches = p.tables["ncu_launches"].to_pylist()
    assert [la["dur_ns"] for la in launches] == [12250, 10500]
    assert [la["metric_count"] for la in launches] == [2, 2]
    assert json.loads(launches[0]["nvtx"]) == {PUSH: NVTX_CELL}
    assert launches[1]["nvtx"] is None
    names = set(p.tables["ncu_metrics"]["name"].to_pylist())
    assert names == {"dram__bytes.sum", "gpu__time_duration.sum"}
    rebuilt = list(csv.reader(io.StringIO(ncu_csv.rebuild(_load(p), RUN))))
    keep = [i for i, h in enumerate(next(csv.reader(io.StringIO(text))))
            if h not in ncu_csv.PRIVATE]
    assert rebuilt == [[r[i] for i in keep] for r in csv.reader(io.StringIO(text))]


def test_nvtx_columns_of_a_details_export_fill_the_launch_ranges():
    head = ('"ID","Process ID","Process Name","Host Name",'
            f'"{PUSH}","{START}","Kernel Name","Context","Stream","Section Name",'
            '"Metric Name","Metric Unit","Metric Value"\n')
    cell = NVTX_CELL.replace('"', '""')
    row = f'"0","73","python","h","{cell}","","gemm(int)","1","7","Command line profiler metrics",'
    p = _parse(head + row + '"gpu__time_duration.sum","nsecond","5,120"\n')
    (la,) = p.tables["ncu_launches"].to_pylist()
    assert (la["dur_ns"], json.loads(la["nvtx"])) == (5120, {PUSH: NVTX_CELL})


# ----------------------------------------------------- a table per process: repeated header
# ncu prints the results of each profiled process when it disconnects (--target-processes all;
# a log that two runs appended to): the header comes again before the next process's rows (and,
# in the raw layout, the units row). The repeated header was read as a launch 'ID' of a kernel
# named 'Kernel Name'.
HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n')


def _row(lid: int, pid: int, kernel: str, name: str, unit: str, value: str) -> str:
    return (f'"{lid}","{pid}","app","h","{kernel}","1","7","(256, 1, 1)","(64, 1, 1)","0",'
            f'"8.6","Command line profiler metrics","{name}","{unit}","{value}"\n')


PER_PROCESS = (
    "==PROF== Connected to process 100 (/bin/app)\n"
    "==PROF== Profiling \"scale\" - 0: 0%....50%....100% - 1 pass\n"
    "==PROF== Disconnected from process 100\n"
    + HEAD
    + _row(0, 100, "scale(float*)", "dram__bytes.sum", "byte", "4,096")
    + _row(0, 100, "scale(float*)", "gpu__time_duration.sum", "usecond", "3.49")
    + "==PROF== Connected to process 101 (/bin/app)\n"
    "==PROF== Disconnected from process 101\n"
    + HEAD
    + _row(1, 101, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,200")
    + _row(2, 101, "add(float*)", "gpu__time_duration.sum", "msecond", "0.002")
)


def test_a_header_repeated_per_process_is_not_a_launch(tmp_path):
    p = _parse(PER_PROCESS)
    launches = p.tables["ncu_launches"].to_pylist()
    assert [(la["launch_id"], la["kernel"], la["dur_ns"]) for la in launches] == [
        ("0", "scale(float*)", 3490), ("1", "scale(float*)", 1200), ("2", "add(float*)", 2000)]
    meta = json.loads(p.tables["ncu_runs"]["metadata"].to_pylist()[0])
    assert meta["repeated_headers"] == 1
    want = _independent(PER_PROCESS)
    assert want == {"scale(float*)": (2, 4690), "add(float*)": (1, 2000)}
    assert _rollup(tmp_path, "per_process.csv", PER_PROCESS) == want


def test_a_later_table_numbering_its_launches_from_0_again(tmp_path):
    # two runs appended to one log (`>>`): the second table's IDs start at 0 again; they are
    # other launches (were refused: "the same 'Process ID' on every row of launch ID '0'")
    text = (HEAD + _row(0, 100, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,000")
            + _row(1, 100, "add(float*)", "gpu__time_duration.sum", "nsecond", "700")
            + "==PROF== Disconnected from process 100\n"
            + HEAD + _row(0, 200, "scale(float*)", "gpu__time_duration.sum", "nsecond", "1,100")
            + _row(0, 200, "scale(float*)", "dram__bytes.sum", "byte", "64"))
    p = _parse(text)
    launches = p.tables["ncu_launches"].to_pylist()
    assert [(la["launch_id"], la["dur_ns"], la["metric_count"]) for la in launches] == [
        ("0", 1000, 1), ("1", 700, 1), ("0", 1100, 2)]
    want = _independent(text)
    assert want == {"scale(float*)": (2, 2100), "add(float*)": (1, 700)}
    assert _rollup(tmp_path, "appended.csv", text) == want
    rebuilt = list(csv.reader(io.StringIO(ncu_csv.rebuild(_load(p), RUN))))
    head = next(csv.reader(io.StringIO(HEAD)))
    assert len(rebuilt) == 2 + 4 and rebuilt[0] == rebuilt[3] == head[:2] + head[4:]


def test_a_raw_table_repeated_with_its_units_row():
    text = _nvtx_raw()
    head, units, first, second = text.splitlines()
    p = _parse("\n".join([head, units, first, head, units, second]) + "\n")
    assert [la["dur_ns"] for la in p.tables["ncu_launches"].to_pylist()] == [12250, 10500]
    other = units.replace('"usecond"', '"nsecond"')
    with pytest.raises(FormatError, match="line 5.*units differ"):
        _parse("\n".join([head, units, first, head, other, second]) + "\n")


def test_a_second_table_with_other_columns_is_refused_naming_its_line():
    other = HEAD.replace('"CC",', "")
    text = (HEAD + _row(0, 100, "k", "gpu__time_duration.sum", "nsecond", "5")
            + other + _row(1, 101, "k", "gpu__time_duration.sum", "nsecond", "5")
            .replace('"8.6",', ""))
    with pytest.raises(FormatError, match="line 3.*another with other columns"):
        _parse(text)


# ---------------------------------------------------- --print-summary: aggregates, refused
# The header ncu --import r.ncu-rep --csv --print-summary per-kernel wrote, as shown in a
# public project's documentation (Process ID .. CC, Invocations, Section Name, Metric Name,
# Metric Unit, Minimum, Maximum, Average). No ID column: it was 'no known format'; now it is
# refused naming what it is (aggregates over invocations, never launches).
SUMMARY = (
    '"Process ID","Process Name","Host Name","Kernel Name","Block Size","Grid Size","Device",'
    '"CC","Invocations","Section Name","Metric Name","Metric Unit","Minimum","Maximum",'
    '"Average"\n'
    '"109199","bench","127.0.0.1","saxpyKernel(float, const float *, float *, unsigned long)",'
    '"(256, 1, 1)","(4096, 1, 1)","0","11.0","14","GPU Speed Of Light Throughput","Duration",'
    '"usecond","2.59","3.10","2.71"\n')


@pytest.mark.parametrize(("text", "which"), [
    (SUMMARY, "per-kernel"),
    ("==PROF== Connected to process 7 (/bin/app)\n"
     + SUMMARY.replace('"Kernel Name",', "").replace('"saxpyKernel(float, const float *, '
                                                    'float *, unsigned long)",', ""),
     "per-gpu"),
])
def test_print_summary_tables_are_refused_naming_them(text, which):
    with pytest.raises(FormatError, match=f"--print-summary {which}.*not launches"):
        _parse(text, "summary.csv")


# --------------------------------------------------------------- not ncu --csv, named
# ncu without --csv (medav/gpu-pipes ncu_results/test_mlp/ncu-pipelined-825-ns.txt, reduced:
# the executable path shortened): the text page of one launch.
NCU_TEXT = (
    "==PROF== Connected to process 4159039 (/x/test_mlp_pl_cc.elf)\n"
    '==PROF== Profiling "testmlp_device" - 0: 0%....50%....100% - 6 passes\n'
    "NI: 1\n"
    "==PROF== Disconnected from process 4159039\n"
    "[4159039] test_mlp_pl_cc.elf@127.0.0.1\n"
    "  testmlp_device(int, __half *, __half *, void *) (3, 80, 1)x(32, 8, 1), Context 1, "
    "Stream 7, Device 0, CC 8.0\n"
    "    Section: Command line profiler metrics\n"
    "    ---------------------------------------- ----------- ------------\n"
    "    Metric Name                              Metric Unit Metric Value\n"
    "    ---------------------------------------- ----------- ------------\n"
    "    gpu__time_duration.sum                       msecond         2.42\n"
    "    ---------------------------------------- ----------- ------------\n")

# nvprof (AndrewXu22/optimal_unified_memory rodinia_3.1/cuda/cfd/kernel-level-measurement/
# lassen-log/output_000_097K.log, reduced): CUDA's legacy profiler, never Nsight Compute.
NVPROF = (
    "==135913== NVPROF is profiling process 135913, command: ./cfd_000 fvcorr.domn.097K\n"
    "==135913== Profiling application: ./cfd_000 fvcorr.domn.097K\n"
    "==135913== Profiling result:\n"
    "            Type  Time(%)      Time     Calls       Avg       Min       Max  Name\n"
    "                        %        ms                  ms        ms        ms\n"
    " GPU activities:    68.93  206.4477      6000  0.034407  0.031936  0.039584  "
    "cuda_compute_flux(int, int*, float*, float*, float*)\n")


@pytest.mark.parametrize(("text", "rule"), [
    (NCU_TEXT, "ncu's text output.*--csv"),
    (NVPROF, "nvprof output"),
    (NVPROF.replace("            Type", '"Type","Time(%)","Time","Calls","Avg","Min","Max",'
                    '"Name"\n#'), "nvprof output"),
])
def test_other_profiler_text_is_refused_naming_it(text, rule):
    with pytest.raises(FormatError, match=rule):
        _parse(text, "profile.log")


# ------------------------------------------------------- Windows PowerShell 5: UTF-16 + BOM
# `ncu --csv ... > out.csv` in Windows PowerShell 5 writes UTF-16LE with a byte-order mark and
# CRLF line ends (public ncu CSV readers detect it: "Tee-Object writes UTF-16LE on PS5"). It was
# 'no known format'.
def test_a_utf16_export_from_powershell_is_read(tmp_path):
    text = PER_PROCESS.replace("\n", "\r\n")
    data = "\ufeff".encode("utf-16-le") + text.encode("utf-16-le")
    assert formats.detect(data, "out.csv") is ncu_csv
    p = ncu_csv.parse(data, "out.csv", RUN)
    assert [la["dur_ns"] for la in p.tables["ncu_launches"].to_pylist()] == [3490, 1200, 2000]
    assert json.loads(p.tables["ncu_runs"]["metadata"].to_pylist()[0])["encoding"] == "utf-16"
    _, rows = ingest_one_and_roll_up(tmp_path, "out.csv", data)
    assert {k: (c, t) for k, _, c, t in rows} == _independent(PER_PROCESS)
    bad = data[:-2] + b"\x00\xd8"  # a lone surrogate at the end
    with pytest.raises(FormatError, match="UTF-16 text"):
        ncu_csv.parse(bad, "out.csv", RUN)


# ------------------------------------------ Nsight Compute 2025 on a B200 (CC 10.0), real
# Excerpt of the ncu capture embedded in microsoft/superbenchmark
# tests/benchmarks/micro_benchmarks/test_cublaslt_function.py (reduced: 7 of its rows, rule
# texts shortened): program output and an indented console line before the header, metric rows
# ended after 'Metric Value' and one empty field, rule rows, text values, Duration in 'ns'.
_SB_ID = ('"0","371693","cublaslt_gemm","127.0.0.1","cutlass3x_sm100_tensorop_s64x256x32gemm_'
          'f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_align4_1sm_bias_f16_relu_aux_scalemax",'
          '"1","7","(384, 1, 1)","(9, 32, 1)","0","10.0",')
SUPERBENCH_B200 = (
    "        ==PROF== Connected to process 371693 (/opt/superbench/bin/cublaslt_gemm)\n"
    "2208    2048    5608    0       358.154755      141.598150\n"
    "==PROF== Disconnected from process 371693\n"
    + HEAD.rstrip("\n") + ',"Rule Name","Rule Type","Rule Description",'
    '"Estimated Speedup Type","Estimated Speedup"\n'
    + _SB_ID + '"GPU Speed Of Light Throughput","DRAM Frequency","hz","3995313115.40",\n'
    + _SB_ID + '"GPU Speed Of Light Throughput","Duration","ns","406240",\n'
    + _SB_ID + '"SpeedOfLight","","","","SOLBottleneck","OPT","This workload exhibits low '
    'compute throughput and memory bandwidth utilization.","",""\n'
    + _SB_ID + '"Launch Statistics","Block Size","","384",\n'
    + _SB_ID + '"Launch Statistics","Cluster Scheduling Policy","","PolicySpread",\n'
    + _SB_ID + '"Occupancy","","","","TheoreticalOccupancy","OPT","The 3.00 theoretical warps '
    'per scheduler are below the hardware maximum of 16.","local","81.25"\n'
    + _SB_ID + '"Occupancy","Achieved Occupancy","%","15.53",\n')


def test_ncu_2025_b200_capture_rolls_up_like_plain_python(tmp_path):
    p = _parse(SUPERBENCH_B200)
    (la,) = p.tables["ncu_launches"].to_pylist()
    assert (la["dur_ns"], la["metric_count"], la["grid"], la["block"]) == (
        406240, 5, [9, 32, 1], [384, 1, 1])
    assert p.tables["ncu_rules"].num_rows == 2
    meta = json.loads(p.tables["ncu_runs"]["metadata"].to_pylist()[0])
    assert (meta["console_lines"], meta["preamble_lines"]) == (1, 2)
    text = p.tables["ncu_metrics"]["text_value"].to_pylist()
    assert "PolicySpread" in text
    want = _independent("\n".join(ln for ln in SUPERBENCH_B200.splitlines()
                                   if ln.startswith('"')))
    assert len(want) == 1 and list(want.values()) == [(1, 406240)]
    assert _rollup(tmp_path, "cublaslt_ncu.log", SUPERBENCH_B200) == want
