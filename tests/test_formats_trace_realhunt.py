"""Kineto / Nsight Systems readers on the shapes of real files found in public repositories.

Each test embeds a small excerpt reduced by hand from the real file it cites (never a copy of
``../shared/samples``), ingests it in a temporary warehouse and compares pwh's per-kernel calls
and total ns, step count and GPU busy time with an independent plain-Python computation.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from tests.vendor_trace_checks import RUN, ingest_one_and_roll_up
from warehouse.errors import FormatError
from warehouse.ingesting.formats import kineto, kineto_stream


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
    busy = {}
    for d, spans in ivs.items():
        total, cur = 0, None
        for a, b in sorted(spans):
            if cur is None or a > cur[1]:
                total += 0 if cur is None else cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        busy[d] = total + (cur[1] - cur[0] if cur else 0)
    return per, len(steps), busy


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
