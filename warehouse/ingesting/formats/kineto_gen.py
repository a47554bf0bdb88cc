"""A deterministic generator of PyTorch-profiler (Kineto) Chrome traces, any size.

The same arguments always give the same bytes. A trace is ``steps`` iterations of a small
training step, inside a ``ProfilerStep#N`` user annotation (N counting from ``first_step``):
per kernel a ``cpu_op`` enclosing its ``cudaLaunchKernel`` runtime call (``External id`` and
``correlation`` linking operator, call and kernel), a flow pair (``s``/``f``) and the kernel
itself on one of two streams (so kernels overlap: kernel time > busy time), plus a memcpy per
step. Timestamps are written as Kineto does: microseconds with a
ns fraction, absolute epoch times (19 significant digits) or, with ``relative=True``, relative
to ``baseTimeNanoseconds``. ``factors`` scales a kernel's durations (planted regressions).

:func:`write` returns the ground truth (per kernel: calls and total ns, summed exactly), used
by the tests, the benchmark and the demo history.

``python -m warehouse.ingesting.formats.kineto_gen OUT --mb 500 [--gzip]`` writes a big one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

# (kernel name, mean duration in us): real shapes of names profilers write
KERNELS = (
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1>)", 3.2),
    ("ampere_sgemm_128x64_tn", 55.0),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>"
     "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)", 40.0),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
     "float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
     "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)", 12.5),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 80.0),
    ("triton_poi_fused_add_cos_sin_0", 1.76),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, "
     "float const*, cudnnTensorStruct, float*, float const*, float const*, float, float)", 20.0),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_"
     "tensor16x8x16_kernel", 33.0),
)
DEVICE_NAME = "NVIDIA A100-SXM4-80GB"
EPOCH_START_NS = 1_712_195_495_505_582_988  # 2024-04-04, a 19-digit ns epoch


class _Rng:
    """A tiny LCG (numbers identical on every platform and Python version)."""

    def __init__(self, seed: int):
        self.x = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)

    def unit(self) -> float:
        self.x = (self.x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.x >> 11) / float(1 << 53)


def _us(ns: int) -> str:
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


def _launch(op: str, name: str, corr: int, step: int, t: int, op_dur: int, launch_at: int,
            launch_dur: int, start: int, dur: int, stream: int) -> str:
    """One kernel launch as Kineto writes it: the operator ``op``, its ``cudaLaunchKernel``
    call, the flow pair and the kernel ``name`` on ``stream`` (times in ns)."""
    return (
        f',\n  {{\n    "ph": "X", "cat": "cpu_op", "name": "{op}", "pid": 4242, '
        f'"tid": 4242,\n    "ts": {_us(t)}, "dur": {_us(op_dur)},\n    "args": {{'
        f'"External id": {corr}, "Sequence number": {step}, "Fwd thread id": 0}}\n  }}'
        f',\n  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", '
        f'"pid": 4242, "tid": 4242,\n    "ts": {_us(launch_at)}, "dur": '
        f'{_us(launch_dur)},\n    "args": {{"External id": {corr}, "cbid": 211, '
        f'"correlation": {corr}}}\n  }}'
        f',\n  {{"ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": '
        f'{_us(launch_at)}, "cat": "ac2g", "name": "ac2g"}}'
        f',\n  {{\n    "ph": "X", "cat": "kernel", "name": {json.dumps(name)}, "pid": 0, '
        f'"tid": {stream},\n    "ts": {_us(start)}, "dur": {_us(dur)},\n    "args": {{'
        f'"External id": {corr}, "queued": 0, "device": 0, "context": 1, "stream": '
        f'{stream}, "correlation": {corr}, "registers per thread": 32, '
        f'"shared memory": 0, "grid": [108, 1, 1], "block": [256, 1, 1]}}\n  }}'
        f',\n  {{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": '
        f'{_us(start)}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}'
    )


def header(*, relative: bool, rank: int = 0, world_size: int = 1) -> str:
    devs = ",\n".join(
        f'    {{"id": {i}, "name": "{DEVICE_NAME}", "totalGlobalMem": 85097971712, '
        f'"computeMajor": 8, "computeMinor": 0, "numSms": 108}}' for i in range(2))
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n' + devs + "\n  ],\n"
        f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n'
        '  "cupti_version": 18,\n  "cuda_runtime_version": 12010,\n'
        '  "cuda_driver_version": 12020,\n'
        '  "traceEvents": [\n'
        '  {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, '
        '"args": {"name": "python"}}'
    )


def footer(*, relative: bool) -> str:
    tail = '\n  ],\n  "traceName": "generated.pt.trace.json",\n  "displayTimeUnit": "ms"'
    if relative:
        tail += f',\n  "baseTimeNanoseconds": {EPOCH_START_NS - EPOCH_START_NS % 10**9}'
    return tail + "\n}\n"


def _append(buf: list[str], text: str) -> int:
    buf.append(text)
    return len(text)  # names are ASCII: characters = bytes


def write(out, *, steps: int | None = None, target_bytes: int | None = None, seed: int = 0,
          relative: bool = False, factors: dict[str, float] | None = None,
          noise: float = 0.03, rank: int = 0, first_step: int = 1,
          first_correlation: int = 1) -> dict:
    """Write a trace to the binary file object ``out``; return the ground truth.

    Stops after ``steps`` steps or once ``target_bytes`` were written (whichever is given).
    """
    rng = _Rng(seed)
    factors = factors or {}
    origin = EPOCH_START_NS - EPOCH_START_NS % 10**9 if relative else 0
    t = EPOCH_START_NS - origin + 1_000_000  # cpu clock, ns in the file's time base
    gpu_free = {7: t, 13: t}
    truth: dict[str, list[int]] = {}
    written = 0
    corr = first_correlation - 1
    step = 0
    buf: list[str] = [header(relative=relative, rank=rank)]
    size = len(buf[0])
    while True:
        if steps is not None and step >= steps:
            break
        if target_bytes is not None and written + size >= target_bytes:
            break
        step_at, step_pos = t, len(buf)
        for k, (name, mean_us) in enumerate(KERNELS):
            corr += 1
            op_dur = 7_000 + int(rng.unit() * 20_000)  # encloses its launch (<= 6 us)
            launch_at = t + 1_000
            launch_dur = 2_000 + int(rng.unit() * 3_000)
            stream = 7 if k % 3 else 13
            dur = max(1, int(mean_us * 1000 * factors.get(name, 1.0)
                             * (1 + noise * (2 * rng.unit() - 1))))
            start = max(gpu_free[stream], launch_at + launch_dur + 500)
            gpu_free[stream] = start + dur
            c = truth.setdefault(name, [0, 0])
            c[0] += 1
            c[1] += dur
            size += _append(buf, _launch(f"aten::op_{k}", name, corr, step, t, op_dur,
                                         launch_at, launch_dur, start, dur, stream))
            t += op_dur + 500
        buf.insert(step_pos, f',\n  {{\n    "ph": "X", "cat": "user_annotation", "name": '
                   f'"ProfilerStep#{first_step + step}", "pid": 4242, "tid": 4242,\n    "ts": '
                   f'{_us(step_at)}, "dur": {_us(t - step_at)},\n    "args": {{"External id": '
                   f'{corr + 1_000_000_000}}}\n  }}')
        size += len(buf[step_pos])
        size += _append(
            buf,
            f',\n  {{\n    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> '
            f'Pinned)", "pid": 0, "tid": 7,\n    "ts": {_us(gpu_free[7])}, "dur": 1.5,\n    '
            f'"args": {{"device": 0, "context": 1, "stream": 7, "correlation": 0, "bytes": 4, '
            f'"memory bandwidth (GB/s)": 0.0027}}\n  }}')
        gpu_free[7] += 1_500
        t = max(t, max(gpu_free.values())) + 10_000
        step += 1
        if len(buf) > 2000:
            chunk = "".join(buf).encode()
            out.write(chunk)
            written += len(chunk)
            buf, size = [], 0
    buf.append(footer(relative=relative))
    chunk = "".join(buf).encode()
    out.write(chunk)
    written += len(chunk)
    return {"steps": step, "bytes": written,
            "kernels": {n: {"calls": c, "total_ns": ns} for n, (c, ns) in truth.items()}}


def write_file(path: str | Path, *, gz: bool = False, **kw) -> dict:
    """:func:`write` to ``path`` (gzip-compressed with ``gz``, deterministic: no mtime)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw:
        if gz:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as out:
                return write(out, **kw)
        return write(raw, **kw)


def write_history(folder: str | Path, *, series: str = "resnet-kineto", labels: int = 10,
                  repeats: int = 3, plant_at: int = 7, plant_kernel: str = KERNELS[1][0],
                  factor: float = 1.5, seed: int = 0) -> dict:
    """A small history of traces for the demo: ``labels`` builds x ``repeats`` runs, each
    with a sidecar (series, label, captured_at one day apart); from label ``plant_at`` on,
    ``plant_kernel`` takes ``factor`` times as long. Returns ``{"plants", "expected"}`` in
    the shape of :func:`warehouse.synth.generate`'s ground truth."""
    folder = Path(folder)
    names = [f"k{i + 1:02d}" for i in range(labels)]
    for i, label in enumerate(names):
        for r in range(repeats):
            f = folder / series / f"{label}-{r}.pt.trace.json"
            factors = {plant_kernel: factor} if i >= plant_at else {}
            write_file(f, steps=3, seed=seed * 1000 + i * 10 + r, factors=factors, noise=0.01,
                       relative=bool(r % 2))
            when = f"2026-11-{i + 1:02d}T{8 + r:02d}:00:00Z"
            (f.parent / (f.name + ".meta.json")).write_text(json.dumps(
                {"series": series, "label": label, "captured_at": when}))
    direction = "regressed" if factor > 1 else "improved"
    plant = {"series": series, "kernel": plant_kernel, "factor": factor,
             "label": names[plant_at], "label_seq": plant_at, "direction": direction,
             "match": "kernel"}
    return {"plants": [plant], "expected": [{
        "series": series, "label": names[plant_at], "label_seq": plant_at,
        "direction": direction, "factor": factor, "kernel_kind": "trace_kernel/kineto_trace",
        "kernel": plant_kernel, "expected_delta_pct": (factor - 1) * 100}]}


# A training step for the scenario histories (``warehouse/trace_scenarios.py``): per operator
# (name, kernel, mean duration in us, stream). Kernels queue on stream 7 back to back from the
# first launch to the last (the GPU is the bottleneck); aten::mm runs beside them on stream 13
# and the allreduce on a communication stream (21), both ending well before stream 7 does, so a
# slower mm kernel or collective changes neither the GPU span nor its idle time.
STEP_OPS = (
    ("aten::addmm", KERNELS[2][0], 40.0, 7),
    ("aten::mm", KERNELS[1][0], 55.0, 13),
    ("nccl:all_reduce", KERNELS[4][0], 60.0, 21),
    ("aten::fill_", KERNELS[0][0], 3.2, 7),
    ("aten::mean", KERNELS[3][0], 12.5, 7),
    ("aten::add", KERNELS[5][0], 1.76, 7),
    ("aten::cudnn_batch_norm", KERNELS[6][0], 20.0, 7),
    ("aten::bmm", KERNELS[7][0], 33.0, 7),
)
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def write_training(out, *, steps: int = 4, seed: int = 0, rank: int = 0, world_size: int = 1,
                   relative: bool = False, factors: dict[str, float] | None = None,
                   swap: dict[str, str] | None = None, stall_ns: int = 0,
                   slowdown: float = 1.0, noise: float = 0.03, run_noise: float = 0.02,
                   cpu_jitter_ns: int = 1000) -> dict:
    """Write one rank's trace of a small training job (:data:`STEP_OPS`) to ``out``.

    Each ``ProfilerStep#N`` (contiguous, N from 1) holds: the input pipeline (a
    ``DataLoader`` user annotation, 2 us plus ``stall_ns``: the GPU waits meanwhile), one
    ``cpu_op`` per operator enclosing its ``cudaLaunchKernel`` (``External id``,
    ``correlation``, flow events), a DtoH memcpy after the last kernel, and a
    ``cudaDeviceSynchronize`` until the GPU is done; then 10 us of host work (the optimizer)
    before the next step. ``factors`` scales an operator's kernel durations, ``swap`` gives an
    operator another kernel name (a library picked another kernel), ``slowdown`` stretches
    every duration of this rank (a straggler: steps, kernels and gaps alike). Noise: kernels
    +-``noise`` each, +-``run_noise`` for the whole run, host durations +-``cpu_jitter_ns``.

    Returns the ground truth: steps, per operator its kernel name, calls and kernel ns, and the
    figures ``marts.trace_trends`` derives (mean step ns, GPU span/busy/communication ns).
    """
    rng = _Rng(seed * 7919 + rank * 104729 + 17)
    factors, swap = factors or {}, swap or {}
    origin = EPOCH_START_NS - EPOCH_START_NS % 10**9 if relative else 0
    t = EPOCH_START_NS - origin + 1_000_000
    run_f = 1 + run_noise * (2 * rng.unit() - 1)

    def host(base: int) -> int:
        return int((base + int(rng.unit() * cpu_jitter_ns)) * slowdown)

    gpu_free = {7: t, 13: t, 21: t}
    activity: list[tuple[int, int]] = []
    comm: list[tuple[int, int]] = []
    ops: dict[str, dict] = {}
    step_ns = []
    corr = 0
    buf: list[str] = [header(relative=relative, rank=rank, world_size=world_size)]
    for step in range(steps):
        step_at, step_pos = t, len(buf)
        loader_ns = host(2_000) + int(stall_ns * slowdown)
        buf.append(f',\n  {{\n    "ph": "X", "cat": "user_annotation", "name": "{LOADER}", '
                   f'"pid": 4242, "tid": 4242,\n    "ts": {_us(t)}, "dur": {_us(loader_ns)},\n'
                   f'    "args": {{"External id": {corr + 2_000_000_000 + step}}}\n  }}')
        t += loader_ns
        for op, kernel, mean_us, stream in STEP_OPS:
            corr += 1
            op_dur = host(7_000)
            launch_at = t + int(1_000 * slowdown)
            launch_dur = host(2_000)
            dur = max(1, int(mean_us * 1000 * factors.get(op, 1.0) * run_f * slowdown
                             * (1 + noise * (2 * rng.unit() - 1))))
            start = max(gpu_free[stream], launch_at + launch_dur + 500)
            gpu_free[stream] = start + dur
            name = swap.get(op, kernel)
            o = ops.setdefault(op, {"kernel": name, "calls": 0, "kernel_ns": 0})
            o["calls"] += 1
            o["kernel_ns"] += dur
            activity.append((start, start + dur))
            if stream == 21:
                comm.append((start, start + dur))
            buf.append(_launch(op, name, corr, step, t, op_dur, launch_at, launch_dur, start,
                               dur, stream))
            t += op_dur + int(500 * slowdown)
        copy_at, copy_ns = gpu_free[7], int(1_500 * slowdown)
        buf.append(
            f',\n  {{\n    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> '
            f'Pinned)", "pid": 0, "tid": 7,\n    "ts": {_us(copy_at)}, "dur": {_us(copy_ns)},'
            f'\n    "args": {{"device": 0, "context": 1, "stream": 7, "correlation": 0, '
            f'"bytes": 4, "memory bandwidth (GB/s)": 0.0027}}\n  }}')
        gpu_free[7] += copy_ns
        activity.append((copy_at, copy_at + copy_ns))
        sync_end = max(t + int(1_000 * slowdown), max(gpu_free.values())) + int(500 * slowdown)
        buf.append(f',\n  {{\n    "ph": "X", "cat": "cuda_runtime", "name": '
                   f'"cudaDeviceSynchronize", "pid": 4242, "tid": 4242,\n    "ts": {_us(t)}, '
                   f'"dur": {_us(sync_end - t)},\n    "args": {{"cbid": 165, "correlation": '
                   f'{corr + 1_500_000_000}}}\n  }}')
        t = sync_end + host(10_000)
        step_ns.append(t - step_at)
        buf.insert(step_pos, f',\n  {{\n    "ph": "X", "cat": "user_annotation", "name": '
                   f'"ProfilerStep#{step + 1}", "pid": 4242, "tid": 4242,\n    "ts": '
                   f'{_us(step_at)}, "dur": {_us(t - step_at)},\n    "args": {{"External id": '
                   f'{corr + 1_000_000_000}}}\n  }}')
    buf.append(footer(relative=relative))
    data = "".join(buf).encode()
    out.write(data)
    first = min(a for a, _ in activity)
    last = max(b for _, b in activity)
    return {"steps": steps, "bytes": len(data), "ops": ops,
            "step_ns": sum(step_ns) / len(step_ns), "span_ns": last - first,
            "busy_ns": _union_ns(activity), "communication_ns": _union_ns(comm)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write a deterministic Kineto (PyTorch profiler) "
                                "trace of a given size.")
    p.add_argument("out", help="output file (.json or .json.gz)")
    p.add_argument("--mb", type=float, default=None, help="target size in MB (uncompressed)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 100)")
    p.add_argument("--gzip", action="store_true", help="gzip the output")
    p.add_argument("--relative", action="store_true", help="relative ts + baseTimeNanoseconds")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    steps = a.steps if a.steps is not None or a.mb is not None else 100
    truth = write_file(a.out, gz=a.gzip, steps=steps, seed=a.seed, relative=a.relative,
                       target_bytes=int(a.mb * 1e6) if a.mb else None)
    print(f"wrote {a.out}: {truth['steps']} steps, {truth['bytes']} bytes uncompressed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
