"""Bench goal ``report`` (issue 11): the HTML report and ``pwh compare`` on a 1,000-run history.

    python -m bench.run --only report            # 1,000 runs (~2-3 min: most of it ingesting)
    python -m bench.run --only report --quick    # 60 runs, keeps the harness working

A warehouse is grown from ``bench.gen.write_history`` (audits with ~60 trend keys each and
small tile profiles in three series), built and published. Then, each as a whole ``pwh``
process (interpreter start included), median of the level's repetitions:

* ``pwh report`` into an empty folder: wall time (limit 10 s) and the folder's size (50 MB);
* one new run ingested, built and published, then ``pwh report`` again: wall time (2 s) and
  which series' pages it rewrote (only the new run's series may be read again);
* ``pwh compare --series S`` on the series with the most runs (1 s).

Beside each, for scale, the wall time of ``pwh sql "select 1"`` measured in the same moments (a
process that opens the snapshot and runs nothing): the fixed cost every command pays.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import time
from pathlib import Path


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def goal_report(work: Path, level: dict, log, Row, run_measured, median, PWH) -> list:  # noqa: N803
    from bench import gen
    from warehouse import db
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.modelling import models
    from warehouse.serving import snapshot

    n = 1000 if level["name"] == "full" else 60
    reps = level["reps"]
    g = f"report and compare, {n:,}-run warehouse"
    s = settings(work / "wh_report" / "warehouse.duckdb")
    shutil.rmtree(s.state_dir, ignore_errors=True)
    t0 = time.perf_counter()
    files = gen.write_history(work / "report_history", n,
                              profile_samples=level["history_profile_samples"])
    for k in range(0, len(files), 200):
        bad = [r for r in ingest_paths(s, files[k:k + 200]) if r.status == "failed"]
        if bad:
            raise RuntimeError(f"history run failed: {bad[0].message}")
    with db.writer(s.warehouse, quiet=True) as con:
        models.build(con)
        snapshot.publish(s, con)
        keys = con.execute("select max(k) from (select count(distinct kernel_kind || kernel) as k "
                           "from marts.kernel_trends group by series)").fetchone()[0]
        top = con.execute("select series from marts.run_summary group by series "
                          "order by count(*) desc, series limit 1").fetchone()[0]
    log(f"  report: {n} runs, up to {keys} trend keys per series, built in "
        f"{time.perf_counter() - t0:.1f} s")
    w = ["--warehouse", str(s.warehouse)]

    def floor() -> float:
        return run_measured([PWH, "sql", *w, "select 1"])[0]

    full, full_ref, size = [], [], 0
    for i in range(reps):
        out = work / f"report_out_{i}"
        shutil.rmtree(out, ignore_errors=True)
        full.append(run_measured([PWH, "report", *w, "--out", str(out)])[0])
        full_ref.append(floor())
        size = _du(out)
    log(f"  report: full {median(full):.2f} s, {size / 1e6:.1f} MB")
    out = work / f"report_out_{reps - 1}"

    inc, inc_ref, rebuilt, written = [], [], [], []
    for i in range(reps):
        p = work / "report_new" / f"new_{i}.json"
        gen.write_audit(p, 900_000 + i)
        gen.write_sidecar(p, "vae_decoder", f"build-new-{i:02d}",
                          dt.datetime(2027, 1, 1) + dt.timedelta(hours=i))
        if ingest_paths(s, [p])[0].status != "ingested":
            raise RuntimeError(f"{p}: not ingested")
        with db.writer(s.warehouse, quiet=True) as con:
            models.build(con)
            snapshot.publish(s, con)
        wall, _, text = run_measured([PWH, "report", *w, "--out", str(out)])
        inc.append(wall)
        inc_ref.append(floor())
        m = re.search(r"\((\d+) changed\), (\d+) page", text)
        rebuilt.append(int(m.group(1)) if m else -1)
        written.append(int(m.group(2)) if m else -1)
    log(f"  report after one run: {median(inc):.2f} s, series re-read {rebuilt}, "
        f"pages written {written}")

    cmp_, cmp_ref = [], []
    for _ in range(max(reps, 3)):
        cmp_.append(run_measured([PWH, "compare", *w, "--series", top, "--fail-on", "never",
                                  "--format", "json"])[0])
        cmp_ref.append(floor())
    log(f"  compare: {median(cmp_):.2f} s")
    ctx = f"`pwh sql 'select 1'` {median(full_ref):.2f} s"
    return [
        Row(g, "pwh report, empty folder (wall)", median(full), "s", limit=10.0,
            note=f"{keys} keys/series; process floor {ctx}", samples=full).judge(),
        Row(g, "report folder size", float(size), "bytes", limit=50e6,
            note="plotly.min.js 4.8 MB of it").judge(),
        Row(g, "pwh report after one new run (wall)", median(inc), "s", limit=2.0,
            note=f"process floor {median(inc_ref):.2f} s", samples=inc).judge(),
        Row(g, "series re-read after one new run", float(max(rebuilt)), "series", limit=1.0,
            note=f"pages written per run: {written} (index + the new run's series pages whose "
                 "content changed)").judge(),
        Row(g, "pwh compare --series (wall)", median(cmp_), "s", limit=1.0,
            note=f"process floor {median(cmp_ref):.2f} s", samples=cmp_).judge(),
    ]
