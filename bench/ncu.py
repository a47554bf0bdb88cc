"""Nsight Compute goals of issue 21, measured as ratios in one run.

    python -m bench.ncu            # the samples + a 1,000 reports x 20 launches x 1,000 metrics history
    python -m bench.ncu --quick    # the samples + a tiny history: keeps the harness working
    PWH_BENCH_NCU=rep python -m bench.ncu   # only some parts: rep, history

* ``rep``: ``pwh ingest`` of each ``.ncu-rep`` sample (``../shared/samples/ncu_rep``, skipped
  when absent), whole process on a fresh warehouse, <= 2x a **floor**: a fresh Python process
  that opens the report with ``ncu_report`` and reads every metric value and unit of every
  launch (:func:`floor_script`), nothing else;
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


def _reports(work: Path, reps: int, log) -> list:
    from bench.run import PY, Row, median, pwh_ingest, run_measured, warm
    from warehouse.ingesting.formats import ncu_rep

    reports = sorted(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else []
    if not reports or not ncu_rep.available():
        return [Row("Nsight Compute report ingest", "pwh ingest vs ncu_report floor", None, "s",
                    note=f"no samples in {SAMPLES} or no ncu_report").judge()]
    floor = floor_script(work)
    rows = []
    for rep in reports:
        warm(rep)
        run_measured([PY, str(floor), str(rep)])  # warm-up: page cache, the native library
        pwh_ingest(rep, work / "wh_ncu", {})
        fl, pw = [], []
        for _ in range(max(reps, 3)):
            w, _, _ = run_measured([PY, str(floor), str(rep)])
            fl.append(w)
            w, _, _ = pwh_ingest(rep, work / "wh_ncu", {})
            pw.append(w)
        log(f"ncu {rep.name}: floor {median(fl):.2f} s, pwh ingest {median(pw):.2f} s")
        rows.append(Row(f"Nsight Compute report ingest ({rep.stat().st_size / 1e6:.1f} MB)",
                        f"pwh ingest wall (whole process), {rep.name}", median(pw), "s",
                        median(fl), "ncu_report reads every metric, whole process", 2.0,
                        samples=pw).judge())
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
