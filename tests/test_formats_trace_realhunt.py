"""Kineto / Nsight Systems readers on the shapes of real files found in public repositories.

Each test embeds a small excerpt reduced by hand from the real file it cites (never a copy of
``../shared/samples``), ingests it in a temporary warehouse and compares pwh's per-kernel calls
and total ns, step count and GPU busy time with an independent plain-Python computation.
"""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from tests.vendor_trace_checks import RUN, ingest_one_and_roll_up
from warehouse.errors import FormatError
from warehouse.ingesting.formats import kineto, kineto_stream, nsys_sqlite


def union_ns(spans) -> int:
    """The length of the union of [start, end) intervals (GPU busy time), in plain Python."""
    total, cur = 0, None
    for a, b in sorted(spans):
        if cur is None or a > cur[1]:
            total += 0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (cur[1] - cur[0] if cur else 0)

def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def _plain(doc: dict) -> tuple[dict[str, tuple[int, int]], int, dict[str, int]]:
    """Per-kernel (calls, total ns), ProfilerStep count and per-device busy ns (union of the
    kernel/memcpy/memset intervals), computed here without pwh."""
    per, steps, ivs = {}, set(), {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "").lower()
        if cat == "kernel":
            c, s = per.get(e["name"], (0, 0))
            per[e["name"]] = (c + 1, s + _ns(e["dur"]))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"):
            ivs.setdefault(str(e["args"]["device"]), []).append(
                (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
        if e["name"].startswith("ProfilerStep#"):
            steps.add(e["name"])
    return per, len(steps), {d: union_ns(spans) for d, spans in ivs.items()}


def _pwh(tmp_path: Path, name: str, data: bytes):
    """pwh's per-kernel rollup, step count and whole-run busy ns per device."""
    from warehouse import db
    from warehouse.config import settings
    from warehouse.modelling import models

    run, rollup = ingest_one_and_roll_up(tmp_path, name, data)
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    with db.writer(s.warehouse) as con:
        models.build(con, select=["marts.step_times", "marts.gpu_timeline"])
    con = db.connect_rw(s.warehouse)
    try:
        steps = con.execute("select count(*) from marts.step_times where run_id = ?",
                            [run]).fetchone()[0]
        busy = dict(con.execute("select device, busy_ns from marts.gpu_timeline "
                                "where run_id = ? and step is null", [run]).fetchall())
    finally:
        con.close()
    per: dict[str, tuple[int, int]] = {}
    for kernel, _dev, calls, total in rollup:
        c, t = per.get(kernel, (0, 0))
        per[kernel] = (c + calls, t + total)
    return per, steps, busy


# --------------------------------------------------------------- Kineto: a real trace reads
# facebookresearch/HolisticTraceAnalysis tests/data/call_stack/backward_thread.json (PyTorch
# profiler, A100; reduced: args trimmed to the ids, one operator of each level kept).
HTA_BACKWARD = {"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#552", "pid": 3914,
     "tid": 3914, "ts": 1666149715033200, "dur": 413451, "args": {"External id": 49220}},
    {"ph": "X", "cat": "cpu_op", "name": "AddmmBackward0", "pid": 3914, "tid": 24922,
     "ts": 1666149715364324, "dur": 102, "args": {"External id": 67243}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 3914, "tid": 24922,
     "ts": 1666149715364330, "dur": 58, "args": {"External id": 67247}},
    {"ph": "X", "cat": "kernel",
     "name": "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
     "pid": 0, "tid": 7, "ts": 1666149715428509, "dur": 45,
     "args": {"External id": 2131433, "queued": 0, "device": 0, "context": 1, "stream": 7,
              "correlation": 2131433, "grid": [32, 1, 2], "block": [128, 1, 1]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3914,
     "tid": 24922, "ts": 1666149715364374, "dur": 10,
     "args": {"External id": 2131433, "cbid": 211, "correlation": 2131433}}],
    "distributedInfo": {"rank": 0}}


def test_hta_backward_thread_trace_agrees_with_plain_python(tmp_path):
    data = json.dumps(HTA_BACKWARD).encode()
    per, steps, busy = _pwh(tmp_path, "backward_thread.json", data)
    want_per, want_steps, want_busy = _plain(HTA_BACKWARD)
    assert per == want_per and steps == want_steps == 1
    assert busy == want_busy == {"0": 45_000}


# ------------------------------------------- Chrome traces that are not the PyTorch profiler's
# Read as Kineto they were runs with 0 kernels (their GPU work unseen). Shapes: a JAX/XLA trace
# (jax.profiler via TensorBoard's trace viewer: no cat, process names /device:GPU:0, as used by
# e.g. the motionjepa test of the public index), a TensorFlow timeline (tensorflow/python/client
# timeline.py: cat "Op" on '/device:GPU:0/stream:all Compute'), a Chrome/Perfetto trace of a
# program without GPU profiling (B/E pairs and complete events of its own categories).
JAX_TRACE = {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": [
    {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    {"ph": "M", "pid": 1, "tid": 9, "name": "thread_name",
     "args": {"name": "Stream #9(Compute)"}},
    {"ph": "X", "pid": 1, "tid": 9, "name": "fusion.12", "ts": 1000.5, "dur": 20.25,
     "args": {"long_name": "fusion.12 = f32[8]{0} fusion(p0)"}},
    {"ph": "X", "pid": 701, "tid": 1, "name": "train_step", "ts": 900, "dur": 300}]}
TF_TIMELINE = {"traceEvents": [
    {"name": "process_name", "ph": "M", "pid": 3,
     "args": {"name": "/device:GPU:0/stream:all Compute"}},
    {"ph": "X", "cat": "Op", "name": "MatMul", "pid": 3, "tid": 0, "ts": 1580000000000000,
     "dur": 57, "args": {"name": "dense/MatMul", "op": "MatMul"}}]}
CHROME_TRACE = {"traceEvents": [
    {"ph": "B", "cat": "toplevel", "name": "MessageLoop::RunTask", "pid": 7, "tid": 1, "ts": 5},
    {"ph": "E", "cat": "toplevel", "name": "MessageLoop::RunTask", "pid": 7, "tid": 1, "ts": 9},
    {"ph": "X", "cat": "v8", "name": "V8.Execute", "pid": 7, "tid": 1, "ts": 6, "dur": 2}]}


@pytest.mark.parametrize("doc", [JAX_TRACE, TF_TIMELINE, CHROME_TRACE],
                         ids=["jax", "tf-timeline", "chrome"])
def test_chrome_trace_of_another_tool_is_refused_naming_the_rule(doc, tmp_path):
    data = json.dumps(doc).encode()
    with pytest.raises(FormatError, match=r"PyTorch profiler \(Kineto\) trace.*neither"):
        kineto.parse(data, "t.json", RUN)
    # streamed (a big file) alike
    f = tmp_path / "t.json"
    f.write_bytes(data)
    ts = kineto_stream.TraceStream("t.json", str(f))
    with pytest.raises(FormatError, match="another tool"):
        list(ts.tables())


@pytest.mark.parametrize("keep", ["schemaVersion", "distributedInfo", "kernel", "Operator"])
def test_one_kineto_key_or_category_is_enough(keep):
    """A Kineto document key (schemaVersion since PyTorch 1.8, pytorch/kineto#105) or one
    event of a Kineto category (the old 'Operator' of 1.8 too) keeps the file a Kineto trace;
    an empty events array stays a run with 0 events."""
    doc = {"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f", "pid": 1,
                            "tid": 1, "ts": 1, "dur": 2}]}
    if keep in ("kernel", "Operator"):
        doc["traceEvents"].append({"ph": "X", "cat": keep, "name": "k", "pid": 0, "tid": 7,
                                   "ts": 3, "dur": 1, "args": {"device": 0}})
    else:
        doc[keep] = 1 if keep == "schemaVersion" else {"rank": 0}
    p = kineto.parse(json.dumps(doc).encode(), "t.json", RUN)
    assert p.summary["events"] == len(doc["traceEvents"])
    assert kineto.parse(b'{"traceEvents": []}', "e.json", RUN).summary["events"] == 0


# ------------------------------------------------ nsys SQLite export of early 2021 (and older)
# Before mid-2021 an export keeps its GPUs in TARGET_INFO_CUDA_GPU (keyed by the kernels'
# deviceId: nsys 2021.1.1's own reports join it USING(deviceId); extra-p/extrap
# extrap/fileio/file_reader/nv_reader/nsys_db.py reads TARGET_INFO_CUDA_GPU or TARGET_INFO_GPU)
# and has no ENUM_* tables (the 2021.1.1 reports spell the copy kinds in SQL). pwh read no
# device and named a copy '[CUDA memcpy kind 1]' instead of '[CUDA memcpy Host-to-Device]', a
# stream synchronisation 'syncType 3' instead of 'Stream sync'.
EARLY_2021 = """
create table StringIds (id integer primary key, value text not null);
create table META_DATA_EXPORT (name text, value text);
create table TARGET_INFO_CUDA_GPU (id integer, deviceId integer, name text,
    numMultiprocessors integer, computeCapabilityMajor integer, computeCapabilityMinor integer,
    numThreadsPerWarp integer, maxWarpsPerMultiprocessor integer);
create table CUPTI_ACTIVITY_KIND_KERNEL (start integer not null, end integer not null,
    deviceId integer not null, contextId integer, streamId integer, correlationId integer,
    globalPid integer, demangledName integer not null, shortName integer not null,
    gridX integer, blockX integer);
create table CUPTI_ACTIVITY_KIND_MEMCPY (start integer not null, end integer not null,
    deviceId integer not null, contextId integer, streamId integer, correlationId integer,
    globalPid integer, bytes integer, copyKind integer not null);
create table CUPTI_ACTIVITY_KIND_RUNTIME (start integer not null, end integer not null,
    eventClass integer, globalTid integer, correlationId integer, nameId integer not null);
create table CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start integer not null, end integer not null,
    deviceId integer, contextId integer, streamId integer, correlationId integer,
    globalPid integer, syncType integer);
"""
KERNELS = [(1_000, 6_000, 0, 7, 11, 1), (4_000, 9_500, 0, 14, 12, 2), (20_000, 20_750, 0, 7, 13, 1),
           (30_000, 31_000, 1, 7, 14, 2)]
COPIES = [(500, 1_500, 0, 7, 10, 1), (9_000, 12_000, 0, 7, 15, 2)]


def _early_2021_export() -> bytes:
    con = sqlite3.connect(":memory:")
    con.executescript(EARLY_2021)
    con.executemany("insert into StringIds values (?, ?)", [
        (1, "void gemm<float>(float *)"), (2, "ampere_sgemm_128x64_nn"), (3, "cudaLaunchKernel")])
    con.executemany("insert into META_DATA_EXPORT values (?, ?)", [
        ("EXPORT_PRODUCT_VERSION", "2021.1.1.66")])
    con.executemany("insert into TARGET_INFO_CUDA_GPU values (?, ?, ?, ?, ?, ?, ?, ?)", [
        (0, 0, "Tesla V100-SXM2-16GB", 80, 7, 0, 32, 64),
        (1, 1, "Tesla V100-SXM2-16GB", 80, 7, 0, 32, 64)])
    for s, e, dev, stream, corr, name in KERNELS:
        con.execute("insert into CUPTI_ACTIVITY_KIND_KERNEL values (?,?,?,1,?,?,7,?,?,64,128)",
                    (s, e, dev, stream, corr, name, name))
        con.execute("insert into CUPTI_ACTIVITY_KIND_RUNTIME values (?,?,1,7,?,3)",
                    (s - 400, s - 100, corr))
    for s, e, dev, stream, corr, kind in COPIES:
        con.execute("insert into CUPTI_ACTIVITY_KIND_MEMCPY values (?,?,?,1,?,?,7,4096,?)",
                    (s, e, dev, stream, corr, kind))
    con.execute("insert into CUPTI_ACTIVITY_KIND_SYNCHRONIZATION values "
                "(12000, 12500, 0, 1, 7, 16, 7, 3)")
    con.commit()
    return con.serialize()


def test_early_2021_nsys_export_devices_and_copies(tmp_path):
    data = _early_2021_export()
    p = nsys_sqlite.parse(data, "r.sqlite", RUN)
    assert [(d["device"], d["name"]) for d in p.tables["trace_devices"].to_pylist()] == [
        ("0", "Tesla V100-SXM2-16GB"), ("1", "Tesla V100-SXM2-16GB")]
    copies = [e["name"] for e in p.tables["trace_events"].to_pylist() if e["kind"] == "memcpy"]
    assert copies == ["[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]"]
    syncs = [e["name"] for e in p.tables["trace_events"].to_pylist() if e["kind"] == "sync"]
    assert syncs == ["Stream sync"]  # ENUM_CUPTI_SYNC_TYPE's label, as a newer export
    # per-kernel sums and GPU busy time against plain Python on the same rows
    names = {1: "void gemm<float>(float *)", 2: "ampere_sgemm_128x64_nn"}
    want: dict[str, tuple[int, int]] = {}
    spans: dict[str, list] = {}
    for s, e, _dev, _stream, _corr, name in KERNELS:
        c, t = want.get(names[name], (0, 0))
        want[names[name]] = (c + 1, t + e - s)
    for s, e, dev, *_ in KERNELS + COPIES:
        spans.setdefault(str(dev), []).append((s, e))
    busy = {dev: union_ns(iv) for dev, iv in spans.items()}
    per, steps, got_busy = _pwh(tmp_path, "r.sqlite", data)
    assert per == want and steps == 0
    assert got_busy == busy == {"0": 11_500 + 750, "1": 1_000}


# ------------------------------------------------------- Kineto of an Intel XPU (PTI) trace
# An XPU trace's launch calls are cat "xpu_runtime" (urEnqueueKernelLaunch, PTI's runtime-API
# view), which the kernel names by correlation; libkineto include/ActivityType.h lists
# xpu_runtime/xpu_driver/xpu_sync, mtia_runtime and privateuse1_runtime/_driver beside
# cuda_runtime. pwh read them as 'other': no kernel had a launch, so none lay in a step or under
# its operator. Shape of a public write-up of a real XPU trace (aten::addmm External id 5,
# urEnqueueKernelLaunch correlation 4131, gemm_kernel 8.96 us), inside a ProfilerStep.
XPU_TRACE = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 5, "tid": 5,
     "ts": 95786069990.000, "dur": 60000, "args": {"External id": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 5, "tid": 5,
     "ts": 95786069998.433, "dur": 44332.734, "args": {"External id": 5, "Sequence number": 1}},
    {"ph": "X", "cat": "xpu_runtime", "name": "urEnqueueKernelLaunch", "pid": 5, "tid": 5,
     "ts": 95786113648.115, "dur": 640.29, "args": {"External id": 5, "correlation": 4131}},
    {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 1,
     "ts": 95786114294.336, "dur": 8.96,
     "args": {"External id": 5, "correlation": 4131, "device": 0}},
    {"ph": "X", "cat": "xpu_sync", "name": "urQueueFinish", "pid": 5, "tid": 5,
     "ts": 95786114300.000, "dur": 5, "args": {}}]}


def test_xpu_launches_put_kernels_in_their_step_and_operator(tmp_path):
    from warehouse import db
    from warehouse.config import settings
    from warehouse.modelling import models

    data = json.dumps(XPU_TRACE).encode()
    kinds = kineto.parse(data, "x.json", RUN).tables["trace_events"]["kind"].to_pylist()
    assert kinds == ["annotation", "cpu_op", "runtime", "kernel", "sync"]
    per, steps, busy = _pwh(tmp_path, "x.json", data)
    want_per, want_steps, want_busy = _plain(XPU_TRACE)
    assert per == want_per == {"gemm_kernel": (1, 8_960)}
    assert steps == want_steps == 1 and busy == want_busy
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    with db.writer(s.warehouse) as con:
        models.build(con, select=["marts.op_rollup"])
    con = db.connect_rw(s.warehouse)
    try:
        step_busy = con.execute("select step, busy_ns from marts.gpu_timeline "
                                "where step is not null").fetchall()
        ops = con.execute("select op, kernels from marts.op_rollup where kernels > 0").fetchall()
    finally:
        con.close()
    assert step_busy == [(0, 8_960)]
    assert ops == [("aten::addmm", 1)]


# ------------------------------------------- early Kineto's bare inf / N/A: refused, reason named
# pytorch/kineto#105 (PyTorch 1.8, 2021-03): a 0-ns copy's "memory bandwidth (GB/s)": inf, the
# trace as the issue quotes it (a Memcpy of cat "Memcpy", tid "stream 7"); kineto#131/#133: N/A
# written unquoted. JSON has no such value: the file is refused, and now says why.
KINETO_105 = b"""{
  "schemaVersion": 1,
  "traceEvents": [
  {
    "ph": "X", "cat": "Memcpy",
    "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
    "ts": 1614800519473220, "dur": 0,
    "args": {
      "device": 0, "context": 1,
      "stream": 7, "correlation": 20002, "external id": 3981,
      "bytes": 200, "memory bandwidth (GB/s)": inf
    }
  }
]}"""


@pytest.mark.parametrize("bad", [b"inf", b"N/A"])
def test_early_kineto_bare_values_are_refused_naming_the_defect(bad, tmp_path):
    data = KINETO_105.replace(b": inf", b": " + bad)
    with pytest.raises(FormatError, match=r"line 11.*a bare '" + bad.decode()
                       + r"'.*memory bandwidth.*kineto#105") as e:
        kineto.parse(data, "k.json", RUN)
    assert e.value.kind == "malformed"
    # streamed, the bad event in a later chunk than the first
    good = (b'{"ph": "X", "cat": "Memcpy", "name": "m", "pid": 0, "tid": 7, "ts": 1, "dur": 1, '
            b'"args": {"device": 0}},\n')
    big = data.replace(b'"traceEvents": [\n', b'"traceEvents": [\n' + good * 400)
    f = tmp_path / "k.json"
    f.write_bytes(big)
    with pytest.raises(FormatError, match="a bare '" + bad.decode() + "'"):
        list(kineto_stream.TraceStream("k.json", str(f), chunk_bytes=4096).tables())
    # quoted, as the fix wrote it, the trace reads: one copy, no kernel
    p = kineto.parse(data.replace(b": " + bad, b': "' + bad + b'"'), "k.json", RUN)
    assert p.tables["trace_events"]["kind"].to_pylist() == ["memcpy"]


# ------------------------------------------------------- PaddlePaddle's Kineto look-alike
# paddle/fluid/platform/profiler/chrometracing_logger.cc (PaddlePaddle/Paddle): schemaVersion
# "1.0.0", displayTimeUnit, span_indx, deviceProperties, then events of cat Operator / Kernel /
# Memcpy / CudaRuntime / ProfileStep named "%s[%.3f ms]" (every call of a kernel its own name:
# read as Kineto, a kernel called twice was two kernels), launches paired by "correlation id",
# the array closed by an empty event {} and followed by ExtraInfo.
PADDLE_TRACE = b"""
  {
    "schemaVersion": "1.0.0",
    "displayTimeUnit": "ms",
    "span_indx": "0",
    "deviceProperties": [
    {
       "id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 4294967295,
      "computeMajor": 7, "computeMinor": 0
    }],
    "traceEvents": [
  {
    "name": "ProfileStep#3[12.345 ms]", "pid": 4242, "tid": "4242(Python)",
    "ts": 1660000000000, "dur": 12345.000,
    "ph": "X", "cat": "ProfileStep",
    "cname": "thread_state_runnable",
    "args": {
      "start_time": "0.000 us",
      "end_time": "12345.000 us"
    }
  },
  {
    "name": "volta_sgemm_128x64_nn[0.012 ms]", "pid": 0, "tid": 7,
    "ts": 1660000000100, "dur": 12.288,
    "ph": "X", "cat": "Kernel",
    "cname": "rail_animation",
    "args": {
      "start_time": "100.000 us",
      "end_time": "112.288 us",
      "device": 0, "context": 1,
      "stream": 7, "correlation id": 11
    }
  },
  {
    "name": "volta_sgemm_128x64_nn[0.013 ms]", "pid": 0, "tid": 7,
    "ts": 1660000000200, "dur": 12.544,
    "ph": "X", "cat": "Kernel",
    "cname": "rail_animation",
    "args": {
      "start_time": "200.000 us",
      "end_time": "212.544 us",
      "device": 0, "context": 1,
      "stream": 7, "correlation id": 12
    }
  },
  {}
  ],
  "ExtraInfo": {
     "4242": "MainThread"
  }
  }
"""


def test_paddle_profiler_trace_is_refused_naming_the_tool(tmp_path):
    with pytest.raises(FormatError, match="PaddlePaddle's profiler trace.*span_indx"):
        kineto.parse(PADDLE_TRACE, "p.paddle_trace.json", RUN)
    f = tmp_path / "p.json"
    f.write_bytes(PADDLE_TRACE)
    with pytest.raises(FormatError, match="PaddlePaddle"):
        list(kineto_stream.TraceStream("p.json", str(f)).tables())


@pytest.mark.parametrize("scan", ["1", "0"], ids=["compiled", "msgspec"])
def test_an_event_without_ph_is_counted_not_a_crash(scan, tmp_path, monkeypatch):
    """An event written without ``ph`` (the empty ``{}`` PaddlePaddle's logger closes its array
    with) crashed the reader (internal TypeError: the phase counts had a null key); it is
    counted under '(none)' in metadata.phases and read as no row, whole and streamed."""
    monkeypatch.setenv("PWH_KINETO_SCAN", scan)
    doc = (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", '
           b'"pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0}}, {}]}')
    p = kineto.parse(doc, "e.json", RUN)
    meta = json.loads(p.tables["trace_runs"]["metadata"][0].as_py())
    assert meta["phases"] == {"(none)": 1, "X": 1} and p.summary["events"] == 1
    f = tmp_path / "e.json"
    f.write_bytes(doc)
    ts = kineto_stream.TraceStream("e.json", str(f))
    runs = dict(ts.tables())["trace_runs"]
    assert json.loads(runs["metadata"][0].as_py())["phases"] == {"(none)": 1, "X": 1}


# --------------------------------------------- nsys stats CSV redirected by Windows PowerShell 5
# A public write-up profiling dotLLM on Windows (Nsight Systems 2024.6.2, commands run in
# PowerShell) shows this cuda_gpu_kern_sum (4 of its 15 rows kept). `nsys stats ... --format csv
# > kern.csv` in Windows PowerShell 5 writes the console's text as UTF-16 with a byte-order mark:
# pwh refused such a file as 'a text file that is neither' known format.
DOTLLM_KERN_SUM = (
    "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\r\n"
    "50.1,99385786,32,3105805.8,3041179.0,2987340,3777790,216832.4,flash_attention_prefill_f16\r\n"
    "19.0,37727461,193,195479.1,93278.0,22207,3320037,266509.9,dequant_q4_k_f16\r\n"
    "16.2,32179988,128,251406.2,249467.5,113790,390073,135318.3,"
    "ampere_fp16_s1688gemm_fp16_64x128_sliced1x2_ldg8_f2f_tn\r\n"
    "0.0,1632,1,1632.0,1632.0,1632,1632,0.0,convert_f16_to_f32\r\n")
GPU_TRACE = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),"
    "DymSMem (MB),Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name\r\n"
    "4264916060,7168,812,476,1,1,256,1,1,32,0.000,0.000,,,,,NVIDIA GeForce RTX 4090 (0),1,7,"
    "embedding_lookup_f16\r\n"
    "4335643882,3105805,830,119,32,1,128,1,1,96,0.016,0.000,,,,,NVIDIA GeForce RTX 4090 (0),1,7,"
    "flash_attention_prefill_f16\r\n"
    "4546316527,21247,1201,,,,,,,,,,0.008,376.5,Device,Pageable,NVIDIA GeForce RTX 4090 (0),1,7,"
    "[CUDA memcpy Device-to-Host]\r\n")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_powershell_utf16_nsys_stats_csv_reads_like_utf8(encoding, tmp_path):
    bom = b"" if encoding == "utf-16" else b"\xfe\xff"
    data = bom + DOTLLM_KERN_SUM.encode(encoding)
    assert data[:2] in (b"\xff\xfe", b"\xfe\xff")
    _run, rollup = ingest_one_and_roll_up(tmp_path, "kern.csv", data)
    want = {}
    for line in DOTLLM_KERN_SUM.splitlines()[1:]:
        f = line.split(",")
        want[f[8]] = (int(f[2]), int(f[1]))
    assert {k: (c, t) for k, _d, c, t in rollup} == want


def test_powershell_utf16_nsys_gpu_trace_and_skipped_report(tmp_path):
    from warehouse.ingesting import formats
    from warehouse.ingesting.formats import nsys_csv, nsys_trace_csv

    data = GPU_TRACE.encode("utf-16")
    assert formats.detect(data, "t.csv") is nsys_trace_csv
    ev = nsys_trace_csv.parse(data, "t.csv", RUN).tables["trace_events"].to_pylist()
    assert [(e["kind"], e["name"], e["dur_ns"], e["device"]) for e in ev] == [
        ("kernel", "embedding_lookup_f16", 7168, "0"),
        ("kernel", "flash_attention_prefill_f16", 3105805, "0"),
        ("memcpy", "[CUDA memcpy Device-to-Host]", 21247, "0")]
    skipped = "SKIPPED: C:\\r\\x.sqlite does not contain CUDA kernel data.\r\n".encode("utf-16")
    assert formats.detect(skipped, "s.csv") is nsys_csv
    assert nsys_csv.parse(skipped, "s.csv", RUN).summary["kernels"] == 0
    with pytest.raises(FormatError, match="line 5.*UTF-16 text"):
        nsys_csv.parse(DOTLLM_KERN_SUM.encode("utf-16")[:-3] + b"\x00\xd8" + b"\n\x00",
                       "k.csv", RUN)


def test_early_export_whose_gpu_table_lacks_device_id_reads_without_devices(tmp_path):
    """An export older still, whose TARGET_INFO_CUDA_GPU has no deviceId (no key to the kernels'
    devices): read as before nsys_sqlite/3, its devices those of its events without names, never
    refused."""
    con = sqlite3.connect(":memory:")
    con.deserialize(_early_2021_export())
    con.executescript("create table g as select id, name from TARGET_INFO_CUDA_GPU; "
                      "drop table TARGET_INFO_CUDA_GPU; "
                      "alter table g rename to TARGET_INFO_CUDA_GPU;")
    p = nsys_sqlite.parse(con.serialize(), "r.sqlite", RUN)
    assert [(d["device"], d["name"]) for d in p.tables["trace_devices"].to_pylist()] == [
        ("0", None), ("1", None)]
    assert sum(e["kind"] == "kernel" for e in p.tables["trace_events"].to_pylist()) == len(KERNELS)
