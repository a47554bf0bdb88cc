"""Review of the rocprof gap fixes (rocprof_csv/4, /5; rocprof_stats_csv/4): cases the first
tests left open.

*The per-XCC merge key.* rocprofv2's ``Dispatch_ID`` is one process-wide record counter
(ROCm/rocprofiler ``src/core/hsa/queues/queue.cpp``: ``GetUniqueRecordId()`` per intercepted
dispatch, every XCC record of it carrying that id, the queue's ``gpu_index`` and ``queue_id``);
rows are one dispatch only when process, GPU and queue match too. The first tests covered the
process; a merge that ignored the GPU or the queue would fold two dispatches into one.

*rocpd's memory-copy CSV* (rocprofiler-sdk ``source/lib/python/rocpd/source/csv.cpp``): ``Guid``,
``Kind``, ``Direction``, ``Stream_Id``, ``Source_Agent_Id``, ``Destination_Agent_Id``,
``Correlation_Id``, ``Start_Timestamp``, ``End_Timestamp``. Expected values come from the CSV
module and plain Python, never from the reader."""

from __future__ import annotations

import csv
import io
import random

import pytest

from tests.vendor_trace_checks import RUN, check_schema, kernel_sums, load
from warehouse.ingesting.formats import rocprof_csv

V2_HEAD = ["Dispatch_ID", "GPU_ID", "Queue_ID", "PID", "TID", "Grid_Size", "Workgroup_Size",
           "LDS_Per_Workgroup", "Scratch_Per_Workitem", "Arch_VGPR", "Accum_VGPR", "SGPR",
           "Wave_Size", "Kernel_Name", "Start_Timestamp", "End_Timestamp", "Correlation_ID"]


def _csv(header: list[str], rows: list[list]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode()


def _row(disp, gpu, queue, pid, name, start, end, corr):
    return [disp, gpu, queue, pid, pid, 1024, 256, 0, 0, 8, 0, 16, 64, name, start, end, corr]


@pytest.mark.parametrize("other", ["gpu", "queue"])
def test_same_dispatch_id_on_another_gpu_or_queue_is_another_dispatch(other):
    # one process, Dispatch_ID 1 on two GPUs (or two queues of one GPU): two dispatches
    a = _row(1, 2, 0, 4242, "k(int)", 1_000, 1_500, 7)
    b = _row(1, 3 if other == "gpu" else 2, 1 if other == "queue" else 0, 4242, "k(int)",
             2_000, 2_900, 7)
    data = _csv(V2_HEAD, [a, b])
    p = rocprof_csv.parse(data, "results_4242.csv", RUN)
    assert kernel_sums(p) == {"k(int)": (2, 500 + 900)}
    assert "xcc_rows" not in p.tables["trace_runs"].to_pylist()[0]["metadata"]
    assert rocprof_csv.rebuild(load(p), RUN) == data.decode()


def test_per_xcc_rows_shuffled_across_processes_gpus_and_queues():
    # 2 processes x 2 GPUs x 2 queues, Dispatch_IDs reused across them, 8 XCC rows per dispatch
    # with their own counter values, every row shuffled: each dispatch counts once, with its
    # own time, and the file rebuilds row for row
    rnd = random.Random(20261205)
    dispatches, rows = [], []
    for pid in (4242, 4343):
        for gpu in (2, 3):
            for queue in (0, 1):
                for disp in (1, 2, 3):
                    name = rnd.choice(["gemm(float*)", "axpy(int, float*)", "__amd_rocclr_fill"])
                    start = rnd.randrange(10**12, 10**12 + 10**9)
                    end = start + rnd.randrange(1, 10**6)
                    dispatches.append((name, end - start))
                    rows += [_row(disp, gpu, queue, pid, name, start, end, disp) + [x, 100 + x]
                             for x in range(8)]
    rnd.shuffle(rows)
    data = _csv(V2_HEAD + ["XCC_Index", "SQ_WAVES"], rows)
    p = rocprof_csv.parse(data, "results.csv", RUN)
    check_schema(p)
    want: dict[str, tuple[int, int]] = {}
    for name, dur in dispatches:
        n, t = want.get(name, (0, 0))
        want[name] = (n + 1, t + dur)
    assert kernel_sums(p) == want
    assert rocprof_csv.rebuild(load(p), RUN) == data.decode()


ROCPD_MCOPY = (
    b'"Guid","Kind","Direction","Stream_Id","Source_Agent_Id","Destination_Agent_Id",'
    b'"Correlation_Id","Start_Timestamp","End_Timestamp"\n'
    b'"g-1","MEMORY_COPY","MEMORY_COPY_HOST_TO_DEVICE",3,"CPU 0","GPU 1",21,5000,5800\n'
    b'"g-1","MEMORY_COPY","MEMORY_COPY_DEVICE_TO_HOST",3,"GPU 1","CPU 0",22,6000,6400\n'
    b'"g-1","MEMORY_COPY","MEMORY_COPY_DEVICE_TO_DEVICE",4,"Agent 2","Agent 3",23,7000,7010\n'
)


def test_rocpd_memory_copy_csv_is_copies_on_their_stream():
    p = rocprof_csv.parse(ROCPD_MCOPY, "out_memory_copy_trace.csv", RUN)
    check_schema(p)
    rows = list(csv.DictReader(io.StringIO(ROCPD_MCOPY.decode())))
    ev = p.tables["trace_events"].to_pylist()
    assert [(e["kind"], e["name"], e["stream"], e["correlation"], e["start_ns"], e["dur_ns"])
            for e in ev] == [
        ("memcpy", r["Direction"], r["Stream_Id"], int(r["Correlation_Id"]),
         int(r["Start_Timestamp"]), int(r["End_Timestamp"]) - int(r["Start_Timestamp"]))
        for r in rows]
    # the GPU end: destination of H2D and D2D, source of D2H; 'GPU <n>' is device <n>
    assert [e["device"] for e in ev] == ["1", "1", "Agent 3"]
    assert kernel_sums(p) == {}
    back = list(csv.DictReader(io.StringIO(rocprof_csv.rebuild(load(p), RUN))))
    assert back == rows
