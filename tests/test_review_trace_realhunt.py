"""Review of the trace reader changes of the real-file hunt (kineto_trace/3): defects found in
them, each test failing before its fix."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re

import pytest

from tests.vendor_trace_checks import RUN, SAMPLES
from warehouse.ingesting.formats import kineto, kineto_stream

# ------------------------------------------------ the capture time of a CPU-only trace
# HTA's tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz (a CPU-only
# torch.profiler trace of a gloo job, reduced here by hand): baseTimeNanoseconds 1719853884000000000
# is libkineto's base floored to its 3-month interval (2024-07-01 17:11:24 UTC), the events lie
# 1212075.5 s later (2024-07-15 17:52:39 UTC; the file is named Jul_15_10_52_41, the job's local
# time). kineto_trace/3 took the capture time as the base plus the first GPU/runtime event, so a
# trace without one kept the floored base: 14 days early, ordering CPU-only runs wrongly.
CPU_ONLY_BASE = 1719853884000000000


def _cpu_only(n: int = 4, *, base: bool = True, origin_us: str = "1212075525586.016") -> bytes:
    first = origin_us
    ev = [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
           "tid": "PyTorch Profiler", "ts": first, "dur": 1289526.102,
           "args": {"Op count": 0}},
          {"name": "process_name", "ph": "M", "ts": first, "pid": 1074, "tid": 0,
           "args": {"name": "pyper:trainer:8:2"}}]
    for i in range(n):
        ev.append({"ph": "X", "cat": "User_annotation", "name": "gloo:all_reduce", "pid": 1074,
                   "tid": 3554, "ts": f"{int(first.split('.')[0]) + 22767 + 1000 * i}.304",
                   "dur": 173209.713, "args": {"External id": 10 + i}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1074, "tid": 3554,
                   "ts": f"{int(first.split('.')[0]) + 1287303 + 10 * i}.31", "dur": 2.503,
                   "args": {"External id": 100 + i}})
    doc = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev}
    if base:
        doc["traceName"] = "rank-34.pt.trace.json"
        doc["baseTimeNanoseconds"] = CPU_ONLY_BASE
    # ts as the file writes them (numbers, not strings)
    return re.sub(r'"ts": "([0-9.]+)"', r'"ts": \1', json.dumps(doc)).encode()


def _when(ns: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=ns // 1000)


@pytest.mark.parametrize("scan", ["1", "0"], ids=["compiled", "msgspec"])
def test_a_cpu_only_trace_takes_its_capture_time_from_its_first_event(scan, monkeypatch,
                                                                       tmp_path):
    monkeypatch.setenv("PWH_KINETO_SCAN", scan)
    data = _cpu_only()
    assert json.loads(data)["traceEvents"][2]["ts"] == 1212075548353.304  # numbers
    want = _when(CPU_ONLY_BASE + 1212075525586016)
    assert want == dt.datetime(2024, 7, 15, 17, 52, 39, 525586)
    p = kineto.parse(data, "t.json", RUN)
    assert p.summary["kernels"] == 0 and p.captured_at == want
    # streamed in small chunks, and in two parts, alike
    big = _cpu_only(400)
    f = tmp_path / "t.json"
    f.write_bytes(big)
    assert kineto.parse(big, "t.json", RUN).captured_at == want
    ts = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096)
    list(ts.tables())
    assert ts.captured_at == want
    cut = kineto_stream.split_point(str(f), len(big))
    head = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096, stop=cut)
    tail = kineto_stream.TraceStream("t.json", str(f), chunk_bytes=4096, start=cut + 1)
    list(head.tables())
    list(tail.tables())
    *_rest, when, _offset = kineto_stream.merge_parts("t.json", head.facts, tail.facts)
    assert when == want


def test_a_cpu_only_epoch_trace_has_its_capture_time():
    """A CPU-only trace of PyTorch before baseTimeNanoseconds (absolute epoch ts): its clock is
    its first event, as for a trace with GPU work (it had none: captured_at None)."""
    data = _cpu_only(base=False, origin_us="1657000000000000.016")
    p = kineto.parse(data, "t.json", RUN)
    assert p.captured_at == _when(1657000000000000016)
    assert p.tables["trace_runs"]["time_base"][0].as_py() == "epoch"


def test_a_trace_with_gpu_work_still_takes_its_first_gpu_event():
    """The CPU side does not move the clock of a trace with GPU/runtime events (as before)."""
    doc = json.loads(_cpu_only())
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                               "ts": 1212075600000.5, "dur": 3,
                               "args": {"device": 0, "stream": 7, "correlation": 1}})
    p = kineto.parse(json.dumps(doc).encode(), "t.json", RUN)
    assert p.captured_at == _when(CPU_ONLY_BASE + 1212075600000500)


def test_hta_cpu_only_sample_capture_time():
    f = SAMPLES / "kineto" / "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    if not f.exists():
        pytest.skip("sample absent")
    p = kineto.parse(gzip.decompress(f.read_bytes()), f.name, RUN)
    assert p.captured_at == dt.datetime(2024, 7, 15, 17, 52, 39, 525586)


# ------------------------------------------------ checked, no defect: a UTF-8 BOM after UTF-16
# 45fbe67 made tracecsv decode UTF-16 with its byte-order mark; a UTF-8 file with its mark
# (PowerShell 7's Out-File -Encoding utf8BOM, Excel's "CSV UTF-8") must still read as the plain
# text, each nsys CSV reader and its SKIPPED report alike.
@pytest.mark.parametrize("bom,encoding", [(b"\xef\xbb\xbf", "utf-8"), (b"", "utf-16"),
                                          (b"\xfe\xff", "utf-16-be")])
def test_nsys_csvs_read_alike_in_every_encoding_with_its_mark(bom, encoding):
    from tests.test_formats_trace_realhunt import DOTLLM_KERN_SUM, GPU_TRACE
    from warehouse.ingesting import formats
    from warehouse.ingesting.formats import nsys_csv, nsys_trace_csv

    def rows(mod, text):
        data = bom + text.encode(encoding)
        assert formats.detect(data, "x.csv") is mod
        return _all_rows(mod.parse(data, "x.csv", RUN))

    def _all_rows(p):
        ev = [r for name in sorted(p.tables) for r in p.tables[name].to_pylist()]
        return p.summary, sorted(json.dumps(e, sort_keys=True, default=str) for e in ev)

    for mod, text in ((nsys_csv, DOTLLM_KERN_SUM), (nsys_trace_csv, GPU_TRACE),
                      (nsys_csv, "SKIPPED: x.sqlite does not contain CUDA kernel data.\r\n")):
        assert rows(mod, text) == _all_rows(mod.parse(text.encode(), "x.csv", RUN))
