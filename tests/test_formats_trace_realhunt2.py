"""Kineto readers on the shapes of real traces found in public repositories and issues (part 2;
part 1: tests/test_formats_trace_realhunt.py)."""

from __future__ import annotations

import json

import pytest

from tests.vendor_trace_checks import RUN
from warehouse.errors import FormatError
from warehouse.ingesting.formats import kineto, kineto_stream

# ------------------------------------------------ operators that never ended (negative dur)
# Kineto before PyTorch 1.13 wrote a CPU operator whose end the profiler never recorded with
# end 0, so dur = -start (pytorch/kineto#646, "guard against negative durations in Chrome trace
# generation", 2022-08: "the profiler may have 0 end time stamp"). pwh refused the whole trace
# ('a non-negative time'); such an event is now no row, counted in metadata.unended, and the
# rest of the trace reads. A kernel with a negative dur is still refused.


def _doc(neg_cat: str, n_good: int = 1) -> bytes:
    good = [{"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
             "ts": 1660000000000200 + 10 * i, "dur": 5 + i % 4,
             "args": {"device": 0, "stream": 7, "correlation": 100 + i}} for i in range(n_good)]
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
            "ts": 1660000000000050, "dur": 1000, "args": {"External id": 1}}
    unended = {"ph": "X", "cat": neg_cat, "name": "aten::copy_", "pid": 1, "tid": 1,
               "ts": 1660000000000100, "dur": -1660000000000100, "args": {"External id": 3}}
    events = [step, unended, *good]
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def _sums(p) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for e in p.tables["trace_events"].to_pylist():
        if e["kind"] == "kernel":
            c, t = out.get(e["name"], (0, 0))
            out[e["name"]] = (c + 1, t + e["dur_ns"])
    return out


def _plain(data: bytes) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for e in json.loads(data)["traceEvents"]:
        if e.get("cat") == "kernel":
            c, t = out.get(e["name"], (0, 0))
            out[e["name"]] = (c + 1, t + e["dur"] * 1000)
    return out


@pytest.mark.parametrize("scan", ["1", "0"], ids=["compiled", "msgspec"])
def test_an_operator_that_never_ended_is_counted_not_fatal(scan, monkeypatch, tmp_path):
    monkeypatch.setenv("PWH_KINETO_SCAN", scan)
    data = _doc("cpu_op")
    p = kineto.parse(data, "t.json", RUN)
    rows = p.tables["trace_events"].to_pylist()
    assert [(r["event_idx"], r["kind"]) for r in rows] == [(0, "annotation"), (2, "kernel")]
    meta = json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
    assert meta["unended"] == {"cpu_op": 1} and meta["kinds"] == {"annotation": 1, "kernel": 1}
    assert p.tables["trace_runs"]["event_count"][0].as_py() == 2
    assert _sums(p) == _plain(data)
    # streamed in small chunks (the operator in the first chunk of many) alike
    big = _doc("cpu_op", n_good=600)
    f = tmp_path / "t.json"
    f.write_bytes(big)
    ts = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096)
    tables = list(ts.tables())
    ev = [t for name, t in tables if name == "trace_events"]
    assert sum(t.num_rows for t in ev) == 601 and ts.summary["events"] == 601
    runs = dict(tables)["trace_runs"]
    assert json.loads(runs["metadata"][0].as_py())["unended"] == {"cpu_op": 1}


def test_two_parts_add_their_unended_counts(tmp_path):
    big = _doc("cpu_op", n_good=600)
    f = tmp_path / "t.json"
    f.write_bytes(big)
    cut = kineto_stream.split_point(str(f), len(big))
    assert cut is not None
    head = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096, stop=cut)
    tail = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096, start=cut + 1)
    rows = sum(t.num_rows for _n, t in head.tables()) + sum(t.num_rows for _n, t in tail.tables())
    _devs, runs, summary, _when, _offset = kineto_stream.merge_parts("t.json", head.facts,
                                                                     tail.facts)
    assert rows == summary["events"] == 601
    assert json.loads(runs["metadata"][0].as_py())["unended"] == {"cpu_op": 1}


@pytest.mark.parametrize("cat", ["kernel", "gpu_memcpy"])
def test_a_gpu_activity_with_a_negative_dur_is_still_refused(cat):
    with pytest.raises(FormatError, match=r"traceEvents\[1\]\.dur.*non-negative"):
        kineto.parse(_doc(cat), "t.json", RUN)


def test_a_negative_dur_that_does_not_end_at_0_is_still_refused():
    data = _doc("cpu_op").replace(b'"dur": -1660000000000100', b'"dur": -1.5')
    with pytest.raises(FormatError, match=r"traceEvents\[1\]\.dur.*non-negative"):
        kineto.parse(data, "t.json", RUN)


# ------------------------------------------------ Windows paths written without escaping
# pytorch/pytorch#98432 (PyTorch 2.0.0 on Windows, with_stack=True), the trace as the issue
# quotes it: python_function names hold file paths with single backslashes, which JSON has no
# escape for (also pytorch/pytorch#60187, #92988, #104841; fixed by pytorch/kineto#754). The
# file is refused as malformed JSON, and now says why.
WINDOWS_98432 = br"""{
  "schemaVersion": 1,
  "traceEvents": [
    {
      "ph": "X", "cat": "python_function", "name": "torch\cuda\__init__.py(219): _lazy_init", "pid": 21428, "tid": 45960,
      "ts": 1680718159986758, "dur": 1,
      "args": {
        "Ev Idx": 44212, "Python id": 37118, "Python parent id": 37117
      }
    }
  ]
}"""


def test_unescaped_windows_paths_are_refused_naming_the_defect(tmp_path):
    with pytest.raises(FormatError, match=r"line 5.*backslash that starts no JSON escape"
                       r".*torch\\cuda.*pytorch/pytorch#60187") as e:
        kineto.parse(WINDOWS_98432, "w.json", RUN)
    assert e.value.kind == "malformed"
    good = (b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, '
            b'"ts": 1680718159986000, "dur": 1},\n')
    f = tmp_path / "w.json"
    f.write_bytes(WINDOWS_98432.replace(b'"traceEvents": [\n', b'"traceEvents": [\n'
                                        + good * 300))
    with pytest.raises(FormatError, match="backslash that starts no JSON escape"):
        list(kineto_stream.TraceStream("w.json", str(f), chunk_bytes=4096).tables())
    # the paths' backslashes doubled, the trace reads (one python_function row)
    fixed = WINDOWS_98432.replace(b"\\", b"\\\\")
    rows = kineto.parse(fixed, "w.json", RUN).tables["trace_events"].to_pylist()
    assert [r["name"] for r in rows] == ["torch\\cuda\\__init__.py(219): _lazy_init"]


# ------------------------------------------------ nsys cuda_gpu_trace as real captures print it
# Shapes quoted from real nsys output in public test code: a capture opening with a blank line
# and nsys's NOTICE about an existing SQLite export before 'Processing [...]' (V100, 2026), the
# GreenCtx column of nsys 2024+, a copy row without grid, a memset row with only SrcMemKd, a
# quoted kernel signature with commas (RTX 5000 Ada). No defect: pins the reading.
NOTICE_GPU_TRACE = (
    "\n"
    "NOTICE: Existing SQLite export found: reports/x.sqlite\n"
    "        It is assumed file was previously exported from: reports/x.nsys-rep\n"
    "        Consider using --force-export=true if needed.\n"
    "\n"
    "Processing [reports/x.sqlite] with [cuda_gpu_trace.py]... \n"
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),"
    "DymSMem (MB),Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
    "1134711990,661398,123,,,,,,,,,,4.194,6337.593,Pinned,Device,"
    "NVIDIA RTX 5000 Ada Generation Laptop GPU (0),1,,13,[CUDA memcpy Host-to-Device]\n"
    "1136125733,7072,128,4096,1,1,256,1,1,16,0.000,0.000,,,,,"
    "NVIDIA RTX 5000 Ada Generation Laptop GPU (0),1,,13,"
    "\"vernier::bench::demo::<unnamed>::saxpyKernel(float, const float *, float *, "
    "unsigned long)\"\n"
    "1136200000,800,344,,,,,,,,,,0.000,340.000,Device,,"
    "NVIDIA RTX 5000 Ada Generation Laptop GPU (0),1,,7,[CUDA memset]\n"
    "1136300000,7000,129,4096,1,1,256,1,1,16,0.000,0.000,,,,,"
    "NVIDIA RTX 5000 Ada Generation Laptop GPU (0),1,,13,"
    "\"vernier::bench::demo::<unnamed>::saxpyKernel(float, const float *, float *, "
    "unsigned long)\"\n")


def test_real_nsys_gpu_trace_capture_rolls_up_like_plain_python(tmp_path):
    import csv
    import io

    from tests.vendor_trace_checks import ingest_one_and_roll_up

    _run, rollup = ingest_one_and_roll_up(tmp_path, "gt.csv", NOTICE_GPU_TRACE.encode())
    body = NOTICE_GPU_TRACE[NOTICE_GPU_TRACE.index("Start (ns)"):]
    want: dict[str, tuple[int, int]] = {}
    for r in csv.DictReader(io.StringIO(body)):
        if r["GrdX"]:
            c, t = want.get(r["Name"], (0, 0))
            want[r["Name"]] = (c + 1, t + int(r["Duration (ns)"]))
    assert {k: (c, t) for k, dev, c, t in rollup if dev == "0"} == want
    assert want == {"vernier::bench::demo::<unnamed>::saxpyKernel(float, const float *, "
                    "float *, unsigned long)": (2, 14_072)}
