"""Generated ``ncu --csv`` exports (both layouts) for the tests, ``make demo`` and the bench.

Written from NVIDIA's documented layout (see :mod:`.ncu_csv`): console lines around the table,
the identity columns with a host and an executable path (which must never reach the warehouse),
grouped thousands in values, a Speed Of Light ``Duration`` in ``usecond`` and
``gpu__time_duration.sum`` in ``nsecond``. Reproducible from ``seed``; ``plants`` multiplies one
metric of one kernel (``{(kernel, metric): factor}``) to plant a change.
"""

from __future__ import annotations

import csv
import io
import random

HOST = "gpu-node-17.example.internal"
PROCESS = "/home/alice/secret-project/bin/train_step"
SOL = "GPU Speed Of Light Throughput"
OCC = "Occupancy"
MEM = "Memory Workload Analysis"

# (section, name, unit, base value, relative noise, integer?)
CORE = (
    (SOL, "gpu__time_duration.sum", "nsecond", 120_000, 0.01, True),
    (SOL, "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", 61.5, 0.01, False),
    (SOL, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%", 48.2, 0.01,
     False),
    (SOL, "sm__cycles_elapsed.avg", "cycle", 168_000, 0.01, True),
    (OCC, "sm__warps_active.avg.pct_of_peak_sustained_active", "%", 71.3, 0.01, False),
    (MEM, "dram__bytes.sum", "byte", 52_428_800, 0.005, True),
    ("Launch Statistics", "launch__registers_per_thread", "register/thread", 96, 0.0, True),
)
KERNELS = (
    "void gemm_tn_kernel<float, 128, 128>(float const*, float const*, float*, int)",
    "layernorm_fwd_kernel(float*, float const*, int)",
    "Kernel",
)
DETAILS_HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                  "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name",
                  "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
                  "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]
RAW_IDENTITY = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                "Stream", "Block Size", "Grid Size", "Device", "CC"]


def _fmt(v: float, integer: bool) -> str:
    return f"{round(v):,}" if integer else f"{v:.2f}"


def launches(seed: int, *, kernels=KERNELS, per_kernel: int = 2, extra_metrics: int = 0,
             plants: dict | None = None) -> list[dict]:
    """Launch dicts ``{id, kernel, grid, block, metrics: [(section, name, unit, cell)]}``."""
    rnd = random.Random(seed)
    plants = plants or {}
    out = []
    for k, kernel in enumerate(kernels):
        for _ in range(per_kernel):
            metrics = []
            for section, name, unit, base, noise, integer in CORE:
                v = base * (1 + 0.5 * k) * rnd.gauss(1.0, noise) * plants.get((kernel, name), 1)
                if unit == "%":
                    v = min(v, 100.0)
                metrics.append((section, name, unit, _fmt(v, integer)))
            dur = next(float(c.replace(",", "")) for _, n, _, c in metrics
                       if n == "gpu__time_duration.sum")
            metrics.insert(1, (SOL, "Duration", "usecond", f"{dur / 1000:.3f}"))
            for i in range(extra_metrics):
                metrics.append(("Command line profiler metrics", f"pwh__synthetic_{i:04d}.sum",
                                "inst", str(rnd.randrange(1, 10**6))))
            out.append({"id": str(len(out)), "kernel": kernel, "grid": (64 * (k + 1), 1, 1),
                        "block": (256, 1, 1), "metrics": metrics})
    return out


def _dims(d) -> str:
    return f"({d[0]}, {d[1]}, {d[2]})"


def _ident(lc: dict) -> list[str]:
    return [lc["id"], "4242", PROCESS, HOST, lc["kernel"], "1", "7", _dims(lc["block"]),
            _dims(lc["grid"]), "0", "8.0"]


def details(lcs: list[dict], *, rules: bool = True) -> str:
    """``ncu --csv --page details`` of ``lcs``, with ncu's console lines around it."""
    buf = io.StringIO()
    buf.write("==PROF== Connected to process 4242 (" + PROCESS + ")\n")
    for lc in lcs:
        buf.write(f"==PROF== Profiling \"{lc['kernel'][:40]}\" - {lc['id']}: 0%....50%....100%"
                  " - 9 passes\n")
    buf.write("==PROF== Disconnected from process 4242\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(DETAILS_HEADER)
    for lc in lcs:
        for section, name, unit, cell in lc["metrics"]:
            w.writerow(_ident(lc) + [section, name, unit, cell, "", "", "", "", ""])
        if rules:
            w.writerow(_ident(lc) + [SOL, "", "", "", "SOLBottleneck", "OPT",
                                     "Memory is more heavily utilized than Compute.",
                                     "global", "12.5"])
    return buf.getvalue()


def raw(lcs: list[dict]) -> str:
    """``ncu --csv --page raw`` of ``lcs`` (a column per metric, a units row)."""
    names: dict[str, str] = {}
    for lc in lcs:
        for _, name, unit, _ in lc["metrics"]:
            if name != "Duration":
                names.setdefault(name, unit)
    buf = io.StringIO()
    buf.write("==PROF== Connected to process 4242 (" + PROCESS + ")\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(RAW_IDENTITY + list(names))
    w.writerow([""] * len(RAW_IDENTITY) + list(names.values()))
    for lc in lcs:
        vals = {n: c for _, n, _, c in lc["metrics"]}
        w.writerow(_ident(lc) + [vals.get(n, "") for n in names])
    return buf.getvalue()


def history(n: int, *, seed: int = 7, change_at: int | None = None, layout: str = "details",
            **kw) -> list[str]:
    """``n`` consecutive exports; from ``change_at`` on the first kernel is 15 % slower and its
    SM throughput 20 % lower (the planted changes the demo report shows)."""
    out = []
    for i in range(n):
        plants = {}
        if change_at is not None and i >= change_at:
            plants = {(KERNELS[0], "gpu__time_duration.sum"): 1.15,
                      (KERNELS[0], "sm__cycles_elapsed.avg"): 1.15,
                      (KERNELS[0], "sm__throughput.avg.pct_of_peak_sustained_elapsed"): 0.8}
        lcs = launches(seed * 1000 + i, plants=plants, **kw)
        out.append(details(lcs) if layout == "details" else raw(lcs))
    return out


def write_history(folder, *, series: str = "gemm-ncu", labels: int = 8, repeats: int = 2,
                  plant_at: int = 5, factor: float = 1.15, seed: int = 0) -> dict:
    """A small history of ``ncu --csv`` exports for the demo: ``labels`` builds x ``repeats``
    runs with sidecars (series, label, captured_at one day apart); from label ``plant_at`` on,
    the first kernel takes ``factor`` times as long (duration and elapsed cycles) and its SM
    throughput drops to 0.8x. Returns ``{"plants", "expected"}`` in the shape of
    :func:`warehouse.synth.generate`'s ground truth (the duration change, in kernel_trends)."""
    import json
    from pathlib import Path

    folder = Path(folder) / series
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"n{i + 1:02d}" for i in range(labels)]
    for i, label in enumerate(names):
        plants = {}
        if i >= plant_at:
            plants = {(KERNELS[0], "gpu__time_duration.sum"): factor,
                      (KERNELS[0], "sm__cycles_elapsed.avg"): factor,
                      (KERNELS[0], "sm__throughput.avg.pct_of_peak_sustained_elapsed"): 0.8}
        for r in range(repeats):
            f = folder / f"{label}-{r}.csv"
            f.write_text(details(launches(seed * 1000 + i * 10 + r, plants=plants)))
            (folder / (f.name + ".meta.json")).write_text(json.dumps(
                {"series": series, "label": label,
                 "captured_at": f"2026-10-{i + 1:02d}T{8 + r:02d}:00:00Z"}))
    direction = "regressed" if factor > 1 else "improved"
    plant = {"series": series, "kernel": KERNELS[0], "factor": factor, "label": names[plant_at],
             "label_seq": plant_at, "direction": direction, "match": "kernel"}
    return {"plants": [plant], "expected": [{
        "series": series, "label": names[plant_at], "label_seq": plant_at,
        "direction": direction, "factor": factor, "kernel_kind": "ncu_kernel/ncu_csv",
        "kernel": KERNELS[0], "expected_delta_pct": (factor - 1) * 100}]}


def bench_kernels(n: int) -> tuple[str, ...]:
    """``n`` distinct demangled kernel names (``void bench_kernel_00<float>(float*, int)``…)."""
    return tuple(f"void bench_kernel_{k:02d}<float>(float*, int)" for k in range(n))


def write_export(folder, name: str, *, seed: int, series: str, label: str, captured_at: str,
                 kernels=KERNELS, per_kernel: int = 2, metrics: int = 0, layout: str = "raw",
                 plants: dict | None = None):
    """One export ``<folder>/<name>.csv`` of ``len(kernels) * per_kernel`` launches with its
    sidecar (``series``, ``label``, ``captured_at``); ``metrics``: metrics per launch in all
    (the core ones, then synthetic ``pwh__synthetic_NNNN.sum`` up to that count; 0: the core
    ones only). Returns the path. The histories of ``bench/ncu_build.py`` and the incremental
    tests are made of these."""
    import json
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lcs = launches(seed, kernels=kernels, per_kernel=per_kernel,
                   extra_metrics=max(metrics - len(CORE) - 1, 0), plants=plants)
    f = folder / f"{name}.csv"
    f.write_text(details(lcs) if layout == "details" else raw(lcs))
    (folder / (f.name + ".meta.json")).write_text(json.dumps(
        {"series": series, "label": label, "captured_at": captured_at}))
    return f
