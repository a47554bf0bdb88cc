"""Bad input in Kineto traces (issue 20, goal "bad input"): what pwh does with each case, as
docs/formats.md ("Kineto traces: bad input") says.

* operators not properly nested on a thread: accepted, the defect recorded per event
  (``staging.trace_cpu_events.nesting_ok`` false, no guessed parent); kernels launched there
  are ``(unattributed)`` in ``marts.op_rollup``;
* correlation ids pointing nowhere: accepted, the defect recorded (``staging.trace_gpu_events``:
  the kernel's ``correlation`` kept, ``launch_idx`` null); the kernel counts for the whole run
  and as ``(unattributed)``, never in a step;
* events out of order: accepted (no defect: Kineto does not promise an order); ``event_idx``
  keeps the file's order and every figure is computed from times, so the marts equal those of
  the same events in time order;
* two files claiming one rank of a job: refused naming the file and the rule
  (tests/test_trace_jobs.py).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tests.conftest import ro
from warehouse import db
from warehouse.ingesting import loader
from warehouse.modelling import models


def X(cat, name, ts, dur, tid=1, **args):  # noqa: N802 - a Chrome-trace complete event
    e = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def kernel(name, ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7}}


def doc(events):
    return {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1}


def ingest(wh, path: Path, events) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc(events)))
    r = loader.ingest_file(wh, path)
    assert r.status == "ingested", r.message
    return r.sha256


def build(wh):
    with db.writer(wh.warehouse) as con:
        models.build(con)


def test_operators_not_properly_nested_are_accepted_with_the_defect_recorded(wh, tmp_path):
    events = [
        X("user_annotation", "ProfilerStep#1", 0, 1000),
        X("cpu_op", "aten::a", 100, 300),   # [100, 400)
        X("cpu_op", "aten::b", 200, 400),   # [200, 600): overlaps a, neither encloses
        X("cuda_runtime", "cudaLaunchKernel", 450, 10, correlation=1),  # inside b only
        X("cpu_op", "aten::ok", 100, 50, tid=2),  # another thread, properly nested
        X("cuda_runtime", "cudaLaunchKernel", 110, 10, tid=2, correlation=2),
        kernel("k_bad", 500, 20, 1),
        kernel("k_ok", 520, 20, 2),
    ]
    run = ingest(wh, tmp_path / "t" / "nest.json", events)
    build(wh)
    with ro(wh) as con:
        raw = con.execute("SELECT count(*) FROM raw.trace_events WHERE run_id = ?",
                          [run]).fetchone()[0]
        assert raw == len(events)  # nothing dropped: the raw layer keeps the file whole
        bad = con.execute("SELECT name, nesting_ok, parent_op_idx FROM staging.trace_cpu_events "
                          "WHERE run_id = ? AND tid = '1' AND NOT nesting_ok ORDER BY event_idx",
                          [run]).fetchall()
        assert bad, "the defect is recorded on the events of the badly nested thread"
        assert all(p is None for _, _, p in bad)  # never a guessed parent
        ok = con.execute("SELECT bool_and(nesting_ok) FROM staging.trace_cpu_events "
                         "WHERE run_id = ? AND tid = '2'", [run]).fetchone()[0]
        assert ok is True
        ops = dict(con.execute("SELECT name, op FROM staging.trace_gpu_events WHERE run_id = ?",
                               [run]).fetchall())
        assert ops == {"k_bad": None, "k_ok": "aten::ok"}
        roll = dict(con.execute("SELECT op, kernels FROM marts.op_rollup WHERE run_id = ? "
                                "AND kernels > 0", [run]).fetchall())
        assert roll == {"(unattributed)": 1, "aten::ok": 1}


def test_correlation_ids_pointing_nowhere_are_accepted_with_the_defect_recorded(wh, tmp_path):
    events = [
        X("user_annotation", "ProfilerStep#1", 0, 1000),
        X("cpu_op", "aten::mm", 10, 100),
        X("cuda_runtime", "cudaLaunchKernel", 20, 10, correlation=1),
        kernel("k_linked", 200, 30, 1),
        kernel("k_dangling", 300, 40, 999),  # no runtime call has correlation 999
    ]
    run = ingest(wh, tmp_path / "t" / "corr.json", events)
    build(wh)
    with ro(wh) as con:
        rows = con.execute("SELECT name, correlation, launch_idx, op, step FROM "
                           "staging.trace_gpu_events WHERE run_id = ? ORDER BY event_idx",
                           [run]).fetchall()
        assert rows == [("k_linked", 1, 2, "aten::mm", 1), ("k_dangling", 999, None, None, None)]
        roll = dict(con.execute("SELECT op, kernel_ns FROM marts.op_rollup WHERE run_id = ? "
                                "AND kernels > 0", [run]).fetchall())
        assert roll == {"aten::mm": 30_000, "(unattributed)": 40_000}
        whole = con.execute("SELECT kernels, busy_ns FROM marts.gpu_timeline WHERE run_id = ? "
                            "AND step IS NULL", [run]).fetchone()
        in_step = con.execute("SELECT kernels FROM marts.gpu_timeline WHERE run_id = ? "
                              "AND step = 1", [run]).fetchone()
        assert whole == (2, 70_000) and in_step == (1,)


def _figures(con, run):
    q = {
        "steps": "SELECT step, start_ns, duration_ns FROM marts.step_times WHERE run_id = ? "
                 "ORDER BY step",
        "gpu": "SELECT device, step, span_ns, busy_ns, idle_ns, compute_ns, communication_ns, "
               "memory_ns, comm_compute_overlap_ns FROM marts.gpu_timeline WHERE run_id = ? "
               "ORDER BY device, step NULLS FIRST",
        "ops": "SELECT op, kernels, kernel_ns, calls, cpu_ns FROM marts.op_rollup "
               "WHERE run_id = ? ORDER BY op",
    }
    return {k: con.execute(v, [run]).fetchall() for k, v in q.items()}


def test_events_out_of_order_give_the_figures_of_the_ordered_trace(wh, tmp_path):
    events = []
    for s in range(4):
        t = s * 1000
        events += [
            X("user_annotation", f"ProfilerStep#{s + 1}", t, 900),
            X("cpu_op", "aten::linear", t + 10, 200),
            X("cpu_op", "aten::mm", t + 20, 100),
            X("cuda_runtime", "cudaLaunchKernel", t + 30, 10, correlation=10 * s + 1),
            X("cpu_op", "aten::relu", t + 300, 50),
            X("cuda_runtime", "cudaLaunchKernel", t + 310, 10, correlation=10 * s + 2),
            kernel("gemm", t + 400, 100 + s, 10 * s + 1),
            kernel("ncclAllReduce", t + 450, 200, 10 * s + 2),
        ]
    shuffled = events[:]
    random.Random(20).shuffle(shuffled)
    assert shuffled != events
    ordered_run = ingest(wh, tmp_path / "a" / "ordered.json", events)
    shuffled_run = ingest(wh, tmp_path / "b" / "shuffled.json", shuffled)
    build(wh)
    with ro(wh) as con:
        a, b = _figures(con, ordered_run), _figures(con, shuffled_run)
        assert a == b and len(a["steps"]) == 4 and a["gpu"] and a["ops"]
        # the file's own order is kept: event_idx is the position in the shuffled file
        names = [r[0] for r in con.execute(
            "SELECT name FROM raw.trace_events WHERE run_id = ? ORDER BY event_idx",
            [shuffled_run]).fetchall()]
        assert names == [e["name"] for e in shuffled]
