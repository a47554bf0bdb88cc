"""``nsys stats --report cuda_gpu_trace --format csv``: one row per kernel, memcpy and memset on
the GPU, read by ``nsys_trace_csv`` into ``raw.trace_events`` (kinds ``kernel`` / ``memcpy`` /
``memset``, ``correlation`` = ``CorrId``, device and stream), summed by the models, rebuilt
losslessly, and refused naming the file and the rule when a time is broken.

The CSVs are written here in nsys's column layouts (current: ``Throughput (MB/s)`` and
``GreenCtx``; older: ``Throughput (MBps)``, no ``GreenCtx``); expected values come from the
rows this module writes, never from the parser."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter

import pytest

from tests.vendor_trace_checks import RUN, check_schema, ingest_one_and_roll_up, load
from warehouse import db
from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import nsys_trace_csv
from warehouse.ingesting.loader import ingest_paths

NEW = ["Start (ns)", "Duration (ns)", "CorrId", "GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ",
       "Reg/Trd", "StcSMem (MB)", "DymSMem (MB)", "Bytes (MB)", "Throughput (MB/s)", "SrcMemKd",
       "DstMemKd", "Device", "Ctx", "GreenCtx", "Strm", "Name"]
OLD = [c for c in NEW if c != "GreenCtx"]
OLD[OLD.index("Throughput (MB/s)")] = "Throughput (MBps)"
GEMM = "void gemm_kernel<float, 128>(const float *, float *, int)"
RELU = "relu_kernel"
DEV = "NVIDIA A100-SXM4-80GB (0)"
# (start, dur, corr, name, stream, grid/block or None, bytes, src, dst)
ROWS = [
    (1_000_000, 1_500, 101, "[CUDA memcpy Host-to-Device]", "7", None, "4.194", "Pageable",
     "Device"),
    (1_010_000, 20_001, 103, GEMM, "7", (128, 4, 1, 256, 1, 1), "", "", ""),
    (1_012_000, 3_333, 105, RELU, "13", (64, 1, 1, 512, 1, 1), "", "", ""),
    (1_040_000, 20_457, 107, GEMM, "7", (128, 4, 1, 256, 1, 1), "", "", ""),
    (1_041_000, 800, 109, "[CUDA memset]", "13", None, "1.048", "Device", ""),
    (1_050_000, 3_401, 111, RELU, "13", (64, 1, 1, 512, 1, 1), "", "", ""),
    (1_070_000, 19_999, 113, GEMM, "13", (128, 4, 1, 256, 1, 1), "", "", ""),
]
WANT_KERNELS = {GEMM: (3, 20_001 + 20_457 + 19_999), RELU: (2, 3_333 + 3_401)}


def gpu_trace_csv(columns: list[str] = NEW, *, preamble: bool = True, next_report: bool = True,
                  rows=ROWS) -> bytes:
    buf = io.StringIO()
    if preamble:
        buf.write("Processing [report1.sqlite] with [/opt/nvidia/nsys/reports/cuda_gpu_trace.py]"
                  "... \n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for start, dur, corr, name, strm, grid, mb, src, dst in rows:
        kernel = grid is not None
        r = {"Start (ns)": start, "Duration (ns)": dur, "CorrId": corr, "CorrID": corr,
             "Reg/Trd": 64 if kernel else "", "StcSMem (MB)": "0.000" if kernel else "",
             "DymSMem (MB)": "0.049" if kernel else "", "Bytes (MB)": mb,
             "Throughput (MB/s)": "" if kernel else "2796.202",
             "Throughput (MBps)": "" if kernel else "2796.202", "SrcMemKd": src,
             "DstMemKd": dst, "Device": DEV, "Ctx": 1, "GreenCtx": "", "Strm": strm,
             "Name": name}
        for c, v in zip(("GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ"), grid or [""] * 6,
                        strict=True):
            r[c] = v
        w.writerow([r[c] for c in columns])
    if next_report:  # a console capture of several reports: the next one is not read
        buf.write("\nProcessing [report1.sqlite] with [/opt/nvidia/nsys/reports/osrt_sum.py]"
                  "... \n ** OS Runtime Summary (osrt_sum):\n\nTime (%),Total Time (ns)\n")
    return buf.getvalue().encode()


def _table(data: bytes) -> list[dict]:
    """The CSV table's rows as csv reads them (preamble and the next report left out)."""
    text = data.decode()
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Start"))
    body = []
    for ln in lines[start:]:
        if not ln.strip():
            break
        body.append(ln)
    return list(csv.DictReader(io.StringIO("".join(body))))


def _events(p) -> list[dict]:
    return p.tables["trace_events"].to_pylist()


@pytest.mark.parametrize("columns", [NEW, OLD], ids=["current", "older"])
def test_a_gpu_trace_is_read_row_by_row(columns):
    data = gpu_trace_csv(columns)
    assert formats.detect(data, "whatever.txt") is nsys_trace_csv  # content, not the name
    p = nsys_trace_csv.parse(data, "gpu.csv", RUN)
    check_schema(p)
    ev = _events(p)
    assert [(e["kind"], e["name"], e["start_ns"], e["dur_ns"], e["correlation"], e["stream"])
            for e in ev] == [
        ("kernel" if g else "memcpy" if "memcpy" in n else "memset", n, s, d, c, st)
        for s, d, c, n, st, g, *_ in ROWS]
    assert {e["device"] for e in ev} == {"0"}
    assert {e["category"] for e in ev} == {"cuda_gpu_trace"}
    devices = p.tables["trace_devices"].to_pylist()
    assert [(d["device"], d["name"]) for d in devices] == [("0", "NVIDIA A100-SXM4-80GB")]
    a = json.loads(ev[1]["args"])
    assert (a["Device"], a["GrdX"], a["BlkX"], a["Ctx"], a["Strm"]) == (DEV, "128", "256", "1",
                                                                        "7")
    assert "Name" not in a
    assert json.loads(ev[0]["args"])["Bytes (MB)"] == "4.194"
    assert p.summary["kernels"] == 5 and p.summary["memcpy"] == 1 and p.summary["memset"] == 1
    meta = json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
    assert meta["report"] == "cuda_gpu_trace" and meta["columns"] == columns
    assert meta["preamble_lines"] == 1 and meta["next_report_at_line"] == len(ROWS) + 4
    # lossless: rebuild returns the table as nsys wrote it
    back = nsys_trace_csv.rebuild(load(p), RUN)
    assert list(csv.DictReader(io.StringIO(back))) == _table(data)
    assert back.splitlines()[0].split(",") == columns


def test_the_gpu_trace_correlates_with_the_api_trace():
    """CorrId of a kernel = CorrID of the cudaLaunchKernel in cuda_api_trace (a GPU trace
    spelled ``CorrID`` is still a GPU trace, never taken for an API trace)."""
    api = io.StringIO()
    w = csv.writer(api, lineterminator="\n")
    w.writerow(["Start (ns)", "Duration (ns)", "Name", "Result", "CorrID", "Pid", "Tid", "T-Pri",
                "Thread Name"])
    for s, _, c, n, *_ in ROWS:
        w.writerow([s - 5000, 2000, "cudaMemcpyAsync" if n.startswith("[") else
                    "cudaLaunchKernel", 0, c, 4242, 4243, 20, "python3"])
    calls = _events(nsys_trace_csv.parse(api.getvalue().encode(), "api.csv", RUN))
    spelled = [c if c != "CorrId" else "CorrID" for c in NEW]
    for cols in (NEW, spelled):
        gpu = _events(nsys_trace_csv.parse(gpu_trace_csv(cols), "gpu.csv", RUN))
        by_corr = {e["correlation"]: e["name"] for e in calls}
        assert [(by_corr[e["correlation"]], e["kind"]) for e in gpu] == [
            ("cudaMemcpyAsync" if n.startswith("[") else "cudaLaunchKernel",
             "kernel" if g else "memcpy" if "memcpy" in n else "memset")
            for _, _, _, n, _, g, *_ in ROWS]


def test_kernels_reach_the_marts_per_kernel(tmp_path):
    from warehouse.config import settings

    run, got = ingest_one_and_roll_up(tmp_path, "report1_cuda_gpu_trace.csv", gpu_trace_csv())
    assert {k: (c, t) for k, _, c, t in got} == WANT_KERNELS
    assert {d for _, d, _, _ in got} == {"0"}
    con = db.connect_rw(settings(tmp_path / "state" / "warehouse.duckdb").warehouse)
    try:
        kinds = Counter(k for (k,) in con.execute("select kind from raw.trace_events").fetchall())
        assert kinds == {"kernel": 5, "memcpy": 1, "memset": 1}
        per_stream = dict(con.execute(
            "select stream, sum(calls)::bigint from staging.trace_kernels where run_id = ? "
            "group by stream", [run]).fetchall())
        assert per_stream == {"7": 2, "13": 3}
    finally:
        con.close()


def _with(data: bytes, row: int, column: str, value: str) -> bytes:
    text = data.decode()
    head, _, rest = text.partition("\n")
    rows = list(csv.reader(io.StringIO(rest)))
    header = rows[0]
    rows[row][header.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return (head + "\n" + buf.getvalue()).encode()


def test_a_broken_duration_refuses_the_file_naming_it_and_the_rule(tmp_path):
    from warehouse.config import settings

    f = tmp_path / "in" / "gpu.csv"
    f.parent.mkdir()
    f.write_bytes(_with(gpu_trace_csv(next_report=False), 2, "Duration (ns)", "2.0457E+04"))
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    (r,) = ingest_paths(s, [f])
    assert r.status == "failed"
    assert str(f) in r.message, r.message
    assert "line 4, column 'Duration (ns)'" in r.message and "scientific notation" in r.message
    con = db.connect_rw(s.warehouse)
    try:  # nothing half-written
        assert con.execute("select count(*) from raw.trace_events").fetchone() == (0,)
    finally:
        con.close()


@pytest.mark.parametrize("change,rule", [
    (lambda d: _with(d, 2, "Duration (ns)", "-5"), r"line 4, column 'Duration \(ns\)'.*"
     "non-negative"),
    (lambda d: _with(d, 2, "BlkY", ""), r"line 4, column 'BlkY'.*whole grid and block"),
    (lambda d: _with(d, 1, "Name", "mystery_op"), r"line 3, column 'GrdX'.*'\[CUDA memcpy"),
    (lambda d: _with(d, 1, "CorrId", "x1"), r"line 3, column 'CorrId'.*an integer of ids"),
    (lambda d: d.replace(b"Start (ns)", b"Start (us)").replace(b"Duration (ns)",
                                                                b"Duration (us)"),
     r"times in exact nanoseconds.*'Start \(us\)'"),
    # the nsys 2021 layout: Start in seconds (microsecond resolution)
    (lambda d: d.replace(b"Start (ns),Duration (ns)", b"Start(sec),Duration(nsec)"),
     r"times in exact nanoseconds.*'Start\(sec\)'.*nsys 2021"),
])
def test_a_bad_gpu_trace_is_refused_naming_the_rule(change, rule):
    data = change(gpu_trace_csv(next_report=False))
    assert formats.detect(data, "gpu.csv") is nsys_trace_csv
    with pytest.raises(FormatError, match=rule) as exc:
        nsys_trace_csv.parse(data, "gpu.csv", RUN)
    assert "gpu.csv" in str(exc.value)
