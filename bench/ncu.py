"""Nsight Compute goals of issue 21, measured as ratios in one run.

    python -m bench.ncu            # the samples + a 1,000 reports x 20 launches x 1,000 metrics history
    python -m bench.ncu --quick    # the samples + a tiny history: keeps the harness working
    PWH_BENCH_NCU=rep python -m bench.ncu   # only some parts: rep, history

* ``rep``: ``pwh ingest`` of each ``.ncu-rep`` sample (``../shared/samples/ncu_rep``, skipped
  when absent), whole process on a fresh warehouse, <= 2x a **floor**: a fresh Python process
  that opens the report with ``ncu_report`` and reads every metric value and unit of every
  launch (:func:`floor_script`), nothing else; the two interleaved, at least 5 times each, the
  package byte-compiled first (as installed). The CPU time of both (user + system, ``pwh``'s
  reader process included) is reported beside it: ``pwh`` starts the reader before its own
  imports, so on an idle 2-core machine the wall is below the CPU sum;
* ``history``: a generated history of ``ncu --csv`` exports (:mod:`ncu_gen`; full: 1,000
  reports x 20 launches x 1,000 metrics, quick: 12 x 20 x 40) ingested and built, then one more
  report: ``pwh build`` incremental after it (<= 2 s, the whole process) and a
  ``marts.metric_trends`` query for one kernel on an analyst connection (<= 100 ms, median).

Rows use :class:`bench.run.Row`; ``goals(work, level, log)`` is the hook for ``bench.run``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples" / "ncu_rep"
SIZES = {"quick": (12, 20, 40), "full": (1000, 20, 1000)}  # reports, launches, metrics

FLOOR = """
import sys, ncu_report
ctx = ncu_report.load_report(sys.argv[1])
n = 0
for ri in range(ctx.num_ranges()):
    rng = ctx.range_by_idx(ri)
    for ai in range(rng.num_actions()):
        a = rng.action_by_idx(ai)
        for name in a.metric_names():
            m = a.metric_by_name(name)
            m.value(); m.unit()
            n += 1
print(n)
"""


def floor_script(work: Path) -> Path:
    f = work / "ncu_floor.py"
    f.write_text(FLOOR)
    return f


def goals(work: Path, level: dict, log) -> list:
    parts = set(os.environ.get("PWH_BENCH_NCU", "rep,history").split(","))
    rows: list = []
    if "rep" in parts:
        rows += _reports(work, level["reps"], log)
    if "history" in parts:
        rows += _history(work, level.get("name", "full"), level["reps"], log)
    return rows


def wall_cpu(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Run ``cmd`` (it must succeed); (wall s, CPU s: user + system of the process and of the
    children it waited for, e.g. ``pwh``'s report reader)."""
    import subprocess

    from bench.run import ROOT

    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _reports(work: Path, reps: int, log) -> list:
    from bench.kineto import compile_package
    from bench.run import PWH, PY, Row, median, warm
    from warehouse.ingesting.formats import ncu_rep

    reports = sorted(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else []
    if not reports or not ncu_rep.available():
        return [Row("Nsight Compute report ingest", "pwh ingest vs ncu_report floor", None, "s",
                    note=f"no samples in {SAMPLES} or no ncu_report").judge()]
    floor = floor_script(work)
    compile_package()  # as installed: PYTHONDONTWRITEBYTECODE=1 would compile ~45 modules a run
    rows = []
    for rep in reports:
        wh = work / "wh_ncu"
        pwh = [PWH, "--warehouse", str(wh / "w.duckdb"), "ingest", "-q", str(rep)]
        warm(rep)
        wall_cpu([PY, str(floor), str(rep)])  # warm-up: page cache, the native library
        shutil.rmtree(wh, ignore_errors=True)
        wall_cpu(pwh)
        fl, pw, fl_cpu, pw_cpu = [], [], [], []
        for _ in range(max(reps, 5)):  # interleaved: the machine's load hits both alike
            w, c = wall_cpu([PY, str(floor), str(rep)])
            fl.append(w)
            fl_cpu.append(c)
            shutil.rmtree(wh, ignore_errors=True)  # a fresh warehouse each time
            w, c = wall_cpu(pwh)
            pw.append(w)
            pw_cpu.append(c)
        log(f"ncu {rep.name}: floor {median(fl):.2f} s ({median(fl_cpu):.2f} s CPU), "
            f"pwh ingest {median(pw):.2f} s ({median(pw_cpu):.2f} s CPU)")
        g = f"Nsight Compute report ingest ({rep.stat().st_size / 1e6:.1f} MB)"
        rows.append(Row(g, f"pwh ingest wall (whole process, new warehouse), {rep.name}",
                        median(pw), "s", median(fl), "ncu_report reads every metric, whole "
                        "process", 2.0, samples=pw).judge())
        rows.append(Row(g, "pwh ingest CPU (user+sys, with its reader process)",
                        median(pw_cpu), "s", median(fl_cpu), "the floor's CPU",
                        samples=pw_cpu, note="not judged: the wall overlaps the reader with "
                        "pwh's imports (2 cores); on a loaded machine wall tends to this").judge())
    shutil.rmtree(work / "wh_ncu", ignore_errors=True)
    return rows


def _write(folder: Path, i: int, launches: int, metrics: int) -> Path:
    from warehouse.ingesting.formats import ncu_gen

    kernels = tuple(f"void bench_kernel_{k:02d}<float>(float*, int)" for k in range(launches // 2))
    lcs = ncu_gen.launches(i, kernels=kernels, per_kernel=2,
                           extra_metrics=max(metrics - len(ncu_gen.CORE) - 1, 0))
    f = folder / f"r{i:05d}.csv"
    f.write_text(ncu_gen.raw(lcs))
    when = dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i)
    (folder / (f.name + ".meta.json")).write_text(json.dumps(
        {"series": "bench-ncu", "label": f"b{i:05d}", "captured_at": when.isoformat() + "Z"}))
    return f


def _history(work: Path, name: str, reps: int, log) -> list:
    from bench.run import PWH, Row, median, run_measured

    n, launches, metrics = SIZES.get(name, SIZES["full"])
    folder = work / "ncu_history"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for i in range(n):
        _write(folder, i, launches, metrics)
    log(f"ncu history: {n} reports generated in {time.perf_counter() - t0:.0f} s")
    wh = work / "wh_ncu_hist" / "w.duckdb"
    shutil.rmtree(wh.parent, ignore_errors=True)
    w_ing, _, _ = run_measured([PWH, "--warehouse", str(wh), "ingest", "-q", str(folder)])
    w_full, _, _ = run_measured([PWH, "--warehouse", str(wh), "build"])
    log(f"ncu history: ingest {w_ing:.1f} s, full build {w_full:.1f} s")
    extra = work / "ncu_extra"
    builds, queries = [], []
    for r in range(max(reps, 1)):
        extra.mkdir(exist_ok=True)
        f = _write(extra, n + r, launches, metrics)
        run_measured([PWH, "--warehouse", str(wh), "ingest", "-q", str(f)])
        w, _, out = run_measured([PWH, "--warehouse", str(wh), "build"])
        builds.append(w)
        log(f"ncu history: incremental build after one report {w:.2f} s")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from warehouse import connect
    from warehouse.config import settings

    con = connect(settings(wh))
    try:
        kernel = con.execute("select min(kernel) from marts.metric_trends").fetchall()[0][0]
        sql = ("select label, metric, median, delta_pct, verdict from marts.metric_trends "
               "where series = 'bench-ncu' and kernel = ? order by metric, label_seq")
        con.execute(sql, [kernel]).fetchall()  # warm
        for _ in range(7):
            t = time.perf_counter()
            got = con.execute(sql, [kernel]).fetchall()
            queries.append(time.perf_counter() - t)
        rows_q = len(got)
    finally:
        con.close()
    g = f"Nsight Compute history ({n} reports x {launches} launches x {metrics} metrics)"
    out = [
        Row(g, "pwh ingest of the history (whole process)", w_ing, "s").judge(),
        Row(g, "pwh build, full", w_full, "s").judge(),
        Row(g, "pwh build incremental after one report (whole process)", median(builds), "s",
            limit=2.0, samples=builds).judge(),
        Row(g, f"metric_trends query for one kernel ({rows_q} rows)", median(queries), "s",
            limit=0.1, samples=queries).judge(),
    ]
    shutil.rmtree(folder, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    from bench.run import LEVELS, table

    ap = argparse.ArgumentParser(prog="python -m bench.ncu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny history (keeps it working)")
    ap.add_argument("--reps", type=int, default=None)
    a = ap.parse_args(argv)
    name = "quick" if a.quick else "full"
    level = {**LEVELS[name], "name": name}
    if a.reps:
        level["reps"] = a.reps
    with tempfile.TemporaryDirectory(prefix="pwh-bench-ncu-") as tmp:
        rows = goals(Path(tmp), level, lambda m: print(m, file=sys.stderr, flush=True))
    print(table(rows))
    return 0 if all(r.status != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
