"""Kineto (PyTorch profiler) trace goals of issue 13, measured as ratios in one run.

    python -m bench.run --only kineto            # full size: 10k events, 500 MB, 2 GB+ (plain, gzip)
    python -m bench.run --only kineto --quick    # tiny inputs, keeps the harness working
    PWH_BENCH_KINETO=500 python -m bench.run --only kineto   # only some parts: 10k, 500, big

* 10k-event trace through ``pwh ingest``: <= 0.5 s for the **whole process** (interpreter
  start, imports, warehouse creation, ingest, exit; judged), its CPU time beside it, the same
  into an existing warehouse (a copy holding another trace; what creating one costs), and the
  whole process of a Python importing only what any ingest must (:data:`IMPORT_FLOOR`). The package's bytecode is compiled first, as an
  installed package carries it: with ``PYTHONDONTWRITEBYTECODE=1`` (set in some environments)
  every run would otherwise compile ~45 modules from source (~60 ms);
* ingest of a generated 500 MB trace <= 2x a typed msgspec decode of the same file, both as
  whole processes (``bench/kineto_refs.py``; the decode call alone is reported beside it).
  Since issue 20 the ingest keeps the CPU side too (every complete event is a row: the
  generator writes an operator per kernel and a ``ProfilerStep#N`` per step), and the floor
  decodes every event of the document, CPU events included (its typed ``Event`` covers all);
  ``pwh`` as configured by default (on 2 cores with the compiled scanner: one parser process,
  ``trace_stream.split_wanted``), and beside it with two (``PWH_TRACE_SPLIT=1``) and without
  the compiled scanner (``PWH_KINETO_SCAN=0``: every chunk through msgspec), interleaved;
* a generated 2 GB+ trace, plain and gzip: streamed, peak RSS <= 1 GiB (the ``pwh`` process
  plus its forked parser, a sum of peaks).

Inputs come from :mod:`warehouse.ingesting.formats.kineto_gen` (deterministic).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from warehouse.ingesting.formats import kineto_gen

SIZES = {  # level -> (steps of the 10k-event trace, MB of the "500 MB" trace, MB of the big one)
    "quick": (250, 4, 8),
    "full": (250, 500, 2100),
}
GIB = 1 << 30


def goals(work: Path, level: dict, log) -> list:
    from bench.run import stream_env

    name = level.get("name", "full")
    steps, mid_mb, big_mb = SIZES.get(name, SIZES["full"])
    reps = level["reps"]
    rows: list = []
    env = stream_env(level)
    parts = set(os.environ.get("PWH_BENCH_KINETO", "10k,500,big").split(","))
    if "10k" in parts:
        rows += _ten_k(work, steps, name, reps, log)
    if "500" in parts:
        rows += _mid(work, mid_mb, reps, env, log)
    if "big" in parts:
        rows += _big(work, big_mb, env, log)
    return rows


# What any `pwh ingest` of a trace imports (and a floor for its whole process): the interpreter
# with DuckDB, PyArrow (and with it NumPy) and msgspec, nothing else.
IMPORT_FLOOR = "import duckdb, pyarrow, msgspec"


def _ten_k(work: Path, steps: int, name: str, reps: int, log) -> list:
    from bench.ncu import wall_cpu
    from bench.run import PWH, PY, Row, median

    # 10k events
    f = work / "kineto_10k.pt.trace.json"
    kineto_gen.write_file(f, steps=steps, seed=11)
    events = sum(1 for _ in json.loads(f.read_bytes())["traceEvents"])
    compile_package()
    wh = work / "wh_k10k"
    cmd = [PWH, "--warehouse", str(wh / "w.duckdb"), "ingest", "-q", str(f)]
    wall_cpu(cmd)  # warm-up: the OS page cache, not counted
    # an existing warehouse (holding another, small trace), copied fresh for each run
    held = work / "kineto_small.pt.trace.json"
    kineto_gen.write_file(held, steps=3, seed=5)
    template, old = work / "wh_k10k_template", work / "wh_k10k_existing"
    shutil.rmtree(template, ignore_errors=True)
    wall_cpu([PWH, "--warehouse", str(template / "w.duckdb"), "ingest", "-q", str(held)])
    into_old = [PWH, "--warehouse", str(old / "w.duckdb"), "ingest", "-q", str(f)]
    walls, cpus, fl_w, fl_c, ex_w, ex_c = [], [], [], [], [], []
    for _ in range(5 if name == "full" else max(reps, 3)):
        shutil.rmtree(wh, ignore_errors=True)  # a new warehouse each time
        w, c = wall_cpu(cmd)
        walls.append(w)
        cpus.append(c)
        shutil.rmtree(old, ignore_errors=True)
        shutil.copytree(template, old)
        w, c = wall_cpu(into_old)
        ex_w.append(w)
        ex_c.append(c)
        w, c = wall_cpu([PY, "-c", IMPORT_FLOOR])
        fl_w.append(w)
        fl_c.append(c)
    for d in (wh, old, template):
        shutil.rmtree(d, ignore_errors=True)
    held.unlink()
    g = f"Kineto trace, {events} events ({f.stat().st_size / 1e6:.1f} MB)"
    rows = [
        Row(g, "pwh ingest wall (whole process: interpreter, imports, new warehouse, ingest, "
            "exit)", median(walls), "s", limit=0.5, samples=walls,
            note="the judged figure").judge(),
        Row(g, "pwh ingest CPU (user+sys, whole process)", median(cpus), "s", samples=cpus,
            note="on a loaded machine the wall tends to this").judge(),
        Row(g, "pwh ingest wall into an existing warehouse (whole process)", median(ex_w), "s",
            median(walls), "into a new warehouse", samples=ex_w,
            note=f"CPU {median(ex_c):.3f} s").judge(),
        Row(g, f"floor: python -c '{IMPORT_FLOOR}' (what any ingest imports)", median(fl_w),
            "s", samples=fl_w, note=f"CPU {median(fl_c):.3f} s").judge(),
    ]
    log(f"kineto 10k: process {median(walls):.2f} s wall, {median(cpus):.2f} s CPU; into an "
        f"existing warehouse {median(ex_w):.2f} s wall, {median(ex_c):.2f} s CPU; imports alone {median(fl_w):.2f} s wall, {median(fl_c):.2f} s CPU")
    return rows


def compile_package() -> None:
    """Byte-compile the ``warehouse`` package (what an installed package ships)."""
    import compileall

    import warehouse

    compileall.compile_dir(Path(warehouse.__file__).parent, quiet=1)


def _mid(work: Path, mid_mb: int, reps: int, env: dict, log) -> list:
    from bench.run import PY, Row, median, pwh_ingest, run_measured, warm

    # 500 MB: pwh ingest vs a typed msgspec decode, both whole processes
    f = work / "kineto_500.pt.trace.json"
    info = kineto_gen.write_file(f, target_bytes=int(mid_mb * 1e6), seed=12)
    size = info["bytes"]
    floor_proc, floor_call, wall, rss, two, two_rss, noscan = [], [], [], [], [], [], []
    for i in range(reps):
        warm(f)
        w, r, out = run_measured([PY, "-m", "bench.kineto_refs", str(f)])
        floor_proc.append(w)
        floor_call.append(json.loads(out)["seconds"])
        w, r, _ = pwh_ingest(f, work / "wh_k500", env)
        wall.append(w)
        rss.append(r)
        w1, r1, _ = pwh_ingest(f, work / "wh_k500", {**env, "PWH_TRACE_SPLIT": "1"})
        two.append(w1)
        two_rss.append(r1)
        w2, _, _ = pwh_ingest(f, work / "wh_k500", {**env, "PWH_KINETO_SCAN": "0"})
        noscan.append(w2)
        log(f"  kineto {size / 1e6:.0f} MB rep {i + 1}: msgspec process {floor_proc[-1]:.2f} s "
            f"(decode {floor_call[-1]:.2f} s), pwh ingest {w:.2f} s, rss {r / 2**20:.0f} MiB; "
            f"two parser processes {w1:.2f} s, rss {r1 / 2**20:.0f} MiB; without the compiled "
            f"scanner {w2:.2f} s")
    g = f"Kineto trace ingest ({size / 1e6:.0f} MB, {info['steps']} steps)"
    rows = [
        Row(g, "pwh ingest wall (process, end to end)", median(wall), "s", median(floor_proc),
            "msgspec typed decode, whole process", 2.0, samples=wall).judge(),
        Row(g, "pwh ingest wall (process, end to end)", median(wall), "s", median(floor_call),
            "msgspec typed decode call only", samples=wall).judge(),
        Row(g, "pwh ingest peak RSS", median(rss), "bytes", size, "file size",
            samples=rss).judge(),
        Row(g, "pwh ingest wall, two parser processes (PWH_TRACE_SPLIT=1)", median(two), "s",
            median(floor_proc), "msgspec typed decode, whole process", samples=two).judge(),
        Row(g, "pwh ingest peak RSS, two parser processes", median(two_rss), "bytes", size,
            "file size", samples=two_rss).judge(),
        Row(g, "pwh ingest wall without the compiled scanner (PWH_KINETO_SCAN=0)",
            median(noscan), "s", median(floor_proc), "msgspec typed decode, whole process",
            samples=noscan).judge(),
    ]
    shutil.rmtree(work / "wh_k500", ignore_errors=True)
    f.unlink()
    return rows


def _big(work: Path, big_mb: int, env: dict, log) -> list:
    from bench.run import Row, pwh_ingest

    rows = []
    # 2 GB+: streamed, plain and gzip, peak RSS <= 1 GiB
    for gz in (False, True):
        f = work / ("kineto_big.pt.trace.json" + (".gz" if gz else ""))
        info = kineto_gen.write_file(f, gz=gz, target_bytes=int(big_mb * 1e6), seed=13)
        w, r, s = pwh_ingest(f, work / "wh_kbig", env)
        g = (f"Kineto trace {info['bytes'] / 1e9:.2f} GB" + (f" (gzip, {f.stat().st_size / 1e6:.0f}"
                                                              " MB on disk)" if gz else ""))
        rows += [
            Row(g, "pwh ingest peak RSS (streamed)", r, "bytes", limit=GIB, samples=[r]).judge(),
            Row(g, "pwh ingest wall", w, "s", samples=[w]).judge(),
        ]
        log(f"kineto big {'gzip' if gz else 'plain'}: {w:.1f} s, rss {r / 2**20:.0f} MiB")
        shutil.rmtree(work / "wh_kbig", ignore_errors=True)
        f.unlink()
    return rows
