"""`pwh build` on a generated Nsight Compute history: full, and incremental after one report.

    python -m bench.ncu_build                               # 100 reports x 20 launches x 100 metrics
    python -m bench.ncu_build --reports 1000 --metrics 1000 # the issue-21 size (20 M values)
    python -m bench.ncu_build --quick                       # 12 x 20 x 40: keeps it working

Issue 21's goal: on a history of 1,000 reports x 20 launches x 1,000 metrics, ``pwh build``
incremental after one new report <= 2 s and a ``marts.metric_trends`` query for one kernel
<= 100 ms. Every figure is a whole ``pwh`` process (imports, model loading, the build, the
snapshot publish), measured on one warehouse in one run:

* ``ingest``: the history (``ncu --csv --page raw`` exports from
  :mod:`warehouse.ingesting.formats.ncu_gen`, one report per label, ``launches / 2`` kernels of
  2 launches each; ``--per-label`` runs per label);
* ``full``: the first ``pwh build`` (every model from all history);
* ``noop``: ``pwh build`` with nothing new (the fixed cost: Python, models, stamps, publish);
* ``newest``: ``pwh ingest`` of one more report at a new newest label, then ``pwh build``
  (``--reps`` times, median);
* ``older``: one report inserted at an older label (captured between two existing labels):
  every later label's position moves;
* ``query``: the analyst guide's query for one kernel (``select metric, unit, label, … from
  marts.metric_trends where series = $series and kernel_key = … and kernel = $kernel``,
  :data:`bench.metric_query.FILTER`) on an analyst connection to the published snapshot,
  fetched as Arrow by ``con.sql(sql, params=…)`` (median of 7, warm). At the issue's 20 M rows it is
  measured by ``python -m bench.metric_query`` on a generated mart (this build would take hours).

The per-model seconds of each build (from ``pwh build``'s own lines) show where the time goes.
Figures go to stdout as a table and, with ``--json PATH``, as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SERIES = "bench-ncu"
_BUILT = re.compile(r"^built (\S+): (\d+) rows, (.*) \(([\d.]+) s\)$")
T0 = dt.datetime(2026, 1, 1)


def write_report(folder: Path, i: int, *, launches: int, metrics: int, label: str,
                 captured_at: dt.datetime) -> Path:
    """One ``ncu --csv --page raw`` export of ``launches`` launches (``launches / 2`` kernels,
    2 launches each) x ``metrics`` metrics with its sidecar (series, label, captured_at)."""
    from warehouse.ingesting.formats import ncu_gen

    return ncu_gen.write_export(folder, f"r{i:06d}", seed=i, series=SERIES, label=label,
                                captured_at=captured_at.isoformat() + "Z",
                                kernels=ncu_gen.bench_kernels(max(launches // 2, 1)),
                                per_kernel=2, metrics=metrics)


def label_of(i: int) -> str:
    return f"b{i:06d}"


def when(i: int) -> dt.datetime:
    return T0 + dt.timedelta(hours=i)


CPU: list[tuple[str, float, float]] = []  # (what, wall s, CPU s) of every pwh process


def _pwh(wh: Path, *args: str) -> tuple[float, str]:
    """Run ``pwh``; return (wall seconds, stdout). Its CPU seconds (user + system, the
    process's own, by ``wait4``) go to :data:`CPU`: on a shared machine the wall time carries
    other people's load, the CPU time much less."""
    import os
    import subprocess

    from bench.run import PWH, ROOT

    cmd = [PWH, "--warehouse", str(wh), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode()
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed: {err.read().decode()[-2000:]}")
    CPU.append((" ".join(args[:1]), wall, usage.ru_utime + usage.ru_stime))
    return wall, text


def _cpu() -> float:
    return CPU[-1][2]


def per_model(out: str) -> dict[str, tuple[float, str]]:
    """``{model: (seconds, how)}`` from ``pwh build``'s lines."""
    got = {}
    for line in out.splitlines():
        m = _BUILT.match(line.strip())
        if m:
            got[m.group(1)] = (float(m.group(4)), m.group(3))
    return got


def _slowest(models: dict[str, tuple[float, str]], n: int = 4) -> str:
    top = sorted(models.items(), key=lambda kv: -kv[1][0])[:n]
    return ", ".join(f"{k} {s:.2f}s ({how})" for k, (s, how) in top)


def run(work: Path, *, reports: int, launches: int, metrics: int, per_label: int, reps: int,
        log) -> dict:
    src = work / "history"
    src.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    n = 0
    for lab in range(reports // per_label):
        for _ in range(per_label):
            write_report(src, n, launches=launches, metrics=metrics, label=label_of(lab),
                         captured_at=when(lab) + dt.timedelta(minutes=n % per_label))
            n += 1
    labels = reports // per_label
    log(f"generated {n} reports ({labels} labels) in {time.perf_counter() - t:.1f} s")
    wh = work / "wh" / "w.duckdb"
    wh.parent.mkdir(parents=True, exist_ok=True)
    res: dict = {"reports": n, "labels": labels, "launches": launches, "metrics": metrics,
                 "values": n * launches * metrics}
    res["ingest"], _ = _pwh(wh, "ingest", "-q", str(src))
    log(f"ingest {res['ingest']:.1f} s")
    res["full"], out = _pwh(wh, "build")
    res["full_cpu"] = _cpu()
    res["full_models"] = per_model(out)
    log(f"full build {res['full']:.1f} s: {_slowest(res['full_models'])}")
    res["noop"], _ = _pwh(wh, "build")
    res["noop_cpu"] = _cpu()
    log(f"no-op build {res['noop']:.2f} s")
    extra = work / "extra"
    extra.mkdir(exist_ok=True)
    res["newest"], res["newest_cpu"], res["newest_models"] = [], [], []
    for r in range(reps):
        i = n + r
        f = write_report(extra, i, launches=launches, metrics=metrics,
                         label=label_of(labels + r), captured_at=when(labels + r))
        _pwh(wh, "ingest", "-q", str(f))
        w, out = _pwh(wh, "build")
        res["newest"].append(w)
        res["newest_cpu"].append(_cpu())
        res["newest_models"].append(per_model(out))
        log(f"incremental build after one report at the newest label: {w:.2f} s: "
            f"{_slowest(per_model(out))}")
    # one report at an older label: captured between labels 0 and 1 of the history
    i = n + reps
    f = write_report(extra, i, launches=launches, metrics=metrics, label="b000000a",
                     captured_at=when(0) + dt.timedelta(minutes=30))
    _pwh(wh, "ingest", "-q", str(f))
    res["older"], out = _pwh(wh, "build")
    res["older_cpu"] = _cpu()
    res["older_models"] = per_model(out)
    log(f"incremental build after one report at an older label: {res['older']:.2f} s: "
        f"{_slowest(res['older_models'])}")
    res["query"], res["query_rows"] = _query(wh)
    log(f"metric_trends query for one kernel: {res['query'] * 1000:.1f} ms "
        f"({res['query_rows']} rows)")
    return res


def _query(wh: Path) -> tuple[float, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.metric_query import queries
    from warehouse import connect

    con = connect(wh)
    try:
        kernel = con.execute("select min(kernel) from marts.metric_trends").fetchall()[0][0]
        sql = queries()["trend"]
        args = {"series": SERIES, "kernel": kernel}
        con.sql(sql, params=args).to_arrow_table()  # warm
        times = []
        for _ in range(7):
            t = time.perf_counter()
            got = con.sql(sql, params=args).to_arrow_table()
            times.append(time.perf_counter() - t)
        return statistics.median(times), got.num_rows
    finally:
        con.close()


def table(res: dict) -> str:
    values = res["values"]
    head = (f"Nsight Compute history: {res['reports']} reports ({res['labels']} labels) x "
            f"{res['launches']} launches x {res['metrics']} metrics = {values:,} values")
    med = statistics.median(res["newest"])
    cpu = statistics.median(res["newest_cpu"])
    lines = [head, "                                                   wall       CPU",
             f"  pwh ingest (history)                          {res['ingest']:8.2f} s",
             f"  pwh build, full                               {res['full']:8.2f} s "
             f"{res['full_cpu']:8.2f} s",
             f"  pwh build, nothing new                        {res['noop']:8.2f} s "
             f"{res['noop_cpu']:8.2f} s",
             f"  pwh build after one report, newest label      {med:8.2f} s {cpu:8.2f} s"
             f"  (goal <= 2 s; wall samples {', '.join(f'{x:.2f}' for x in res['newest'])})",
             f"  pwh build after one report, older label       {res['older']:8.2f} s "
             f"{res['older_cpu']:8.2f} s",
             f"  metric_trends query, one kernel               {res['query'] * 1000:8.1f} ms "
             f"({res['query_rows']} rows; goal <= 100 ms)",
             "  where the newest-label build goes (median over reps, s):"]
    models = sorted({m for d in res["newest_models"] for m in d})
    secs = {m: statistics.median([d.get(m, (0.0, ""))[0] for d in res["newest_models"]])
            for m in models}
    for m in sorted(secs, key=lambda k: -secs[k])[:8]:
        lines.append(f"    {m:34s} {secs[m]:7.2f}   full build: "
                     f"{res['full_models'].get(m, (0.0, ''))[0]:7.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ncu_build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=100, help="reports in the history (100)")
    ap.add_argument("--launches", type=int, default=20, help="launches per report (20)")
    ap.add_argument("--metrics", type=int, default=100, help="metrics per launch (100)")
    ap.add_argument("--per-label", type=int, default=1, help="reports per label (1)")
    ap.add_argument("--reps", type=int, default=3, help="incremental builds measured (3)")
    ap.add_argument("--quick", action="store_true", help="12 x 20 x 40, 1 rep")
    ap.add_argument("--work", type=Path, default=None,
                    help="work folder (default: a temporary one, deleted)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.quick:
        a.reports, a.launches, a.metrics, a.reps = 12, 20, 40, 1
    if a.reports < 2 * a.per_label or a.reps < 1:
        ap.error("need at least two labels and one rep")

    def log(m):
        print(m, file=sys.stderr, flush=True)

    tmp = None
    work = a.work
    if work is None:
        tmp = tempfile.mkdtemp(prefix="pwh-bench-ncu-build-")
        work = Path(tmp)
    try:
        res = run(work, reports=a.reports, launches=a.launches, metrics=a.metrics,
                  per_label=a.per_label, reps=a.reps, log=log)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(table(res))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
