"""Bench goal ``report`` (issue 11): the HTML report and ``pwh compare`` on a 1,000-run history.

    python -m bench.run --only report            # 1,000 runs (~2-3 min: most of it ingesting)
    python -m bench.run --only report --quick    # 30 runs, keeps the harness working

A warehouse is grown from ``bench.gen.write_history`` (audits with ~60 trend keys each and
small tile profiles in three series), built and published. Then, each as a whole ``pwh``
process (interpreter start included), median of the level's repetitions:

* ``pwh report`` into an empty folder: wall time (limit 10 s) and the folder's size (50 MB);
* one new run ingested, built and published, then ``pwh report`` again: wall time (2 s) and
  which series' pages it rewrote (only the new run's series may be read again);
* ``pwh compare --series S`` on the series with the most runs (1 s);
* the index opened in headless Chromium (1,400 x 1,000, ``file://``): navigation start to the
  page built and interactive (``window.pwhReport.readyAt``), 1 s (issue 23; skipped without
  /usr/bin/chromium or Playwright).

Each is reported as wall time and as CPU time (user + system of the process, from ``wait4``):
on the shared 2-core machine wall time mostly measures waiting for a core. Beside each, for
scale, ``pwh sql "select 1"`` measured in the same moments (a process that opens the snapshot
and runs nothing): the fixed cost every command pays.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def _run(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s = user + system of the process, stdout); raises on a non-zero exit.
    On a shared machine the CPU time is the steadier figure: wall time includes waiting for a
    core."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {err.read().decode()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, out.read().decode()


def _index_interactive(index: Path, reps: int) -> list[float]:
    """Seconds from navigation start until the index is built and interactive
    (``window.pwhReport.readyAt``), each load in a fresh tab of headless Chromium; [] without
    Chromium or Playwright."""
    chromium = Path("/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return []
    if not chromium.exists():
        return []
    out = []
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(chromium), headless=True, offline=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
            viewport={"width": 1400, "height": 1000})
        try:
            for _ in range(reps):
                page = ctx.new_page()
                page.goto(index.as_uri())
                page.wait_for_function("window.pwhReport && window.pwhReport.ready",
                                       timeout=120_000)
                out.append(page.evaluate("window.pwhReport.readyAt") / 1000)
                page.close()
        finally:
            ctx.close()
    return out


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def goal_report(work: Path, level: dict, log, Row, median, PWH) -> list:  # noqa: N803
    from bench import gen
    from warehouse import db
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.modelling import models
    from warehouse.serving import snapshot

    n = 1000 if level["name"] == "full" else 30
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

    def floor() -> tuple[float, float]:
        return _run([PWH, "sql", *w, "select 1"])[:2]

    full, full_cpu, full_ref, size = [], [], [], 0
    for i in range(reps):
        out = work / f"report_out_{i}"
        shutil.rmtree(out, ignore_errors=True)
        wall, cpu, _ = _run([PWH, "report", *w, "--out", str(out)])
        full.append(wall)
        full_cpu.append(cpu)
        full_ref.append(floor())
        size = _du(out)
    log(f"  report: full {median(full):.2f} s (CPU {median(full_cpu):.2f} s), "
        f"{size / 1e6:.1f} MB")
    out = work / f"report_out_{reps - 1}"

    inc, inc_cpu, inc_ref, rebuilt, written = [], [], [], [], []
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
        wall, cpu, text = _run([PWH, "report", *w, "--out", str(out)])
        inc.append(wall)
        inc_cpu.append(cpu)
        inc_ref.append(floor())
        m = re.search(r"\((\d+) changed\), (\d+) page", text)
        rebuilt.append(int(m.group(1)) if m else -1)
        written.append(int(m.group(2)) if m else -1)
    log(f"  report after one run: {median(inc):.2f} s (CPU {median(inc_cpu):.2f} s), series "
        f"re-read {rebuilt}, pages written {written}")

    interactive = _index_interactive(out / "index.html", max(reps, 3))
    if interactive:
        log(f"  index interactive in Chromium: {median(interactive) * 1000:.0f} ms "
            f"({', '.join(f'{x * 1000:.0f}' for x in interactive)})")

    cmp_, cmp_cpu, cmp_ref = [], [], []
    for _ in range(max(reps, 3) if level["name"] == "full" else 1):
        wall, cpu, _ = _run([PWH, "compare", *w, "--series", top, "--fail-on", "never",
                             "--format", "json"])
        cmp_.append(wall)
        cmp_cpu.append(cpu)
        cmp_ref.append(floor())
    log(f"  compare: {median(cmp_):.2f} s (CPU {median(cmp_cpu):.2f} s)")

    def fl(xs: list[tuple[float, float]]) -> str:
        return (f"`pwh sql 'select 1'` {median([x[0] for x in xs]):.2f} s wall, "
                f"{median([x[1] for x in xs]):.2f} s CPU")

    rows = [] if not interactive else [
        Row(g, "index interactive in Chromium", median(interactive), "s", limit=1.0,
            note="navigation start to the page built (window.pwhReport.readyAt), headless "
                 "Chromium 1400x1000 from file://, median", samples=interactive).judge()]
    return rows + [
        Row(g, "pwh report, empty folder (wall)", median(full), "s", limit=10.0,
            note=f"{keys} keys/series; process floor {fl(full_ref)}", samples=full).judge(),
        Row(g, "pwh report, empty folder (CPU)", median(full_cpu), "s", limit=10.0,
            samples=full_cpu).judge(),
        Row(g, "report folder size", float(size), "bytes", limit=50e6,
            note="plotly.min.js 4.8 MB of it").judge(),
        Row(g, "pwh report after one new run (wall)", median(inc), "s", limit=2.0,
            note=f"process floor {fl(inc_ref)}", samples=inc).judge(),
        Row(g, "pwh report after one new run (CPU)", median(inc_cpu), "s", limit=2.0,
            samples=inc_cpu).judge(),
        Row(g, "series re-read after one new run", float(max(rebuilt)), "series", limit=1.0,
            note=f"pages written per run: {written} (index, series page, the new label's "
                 "page and its neighbour's, the run's page)").judge(),
        Row(g, "pwh compare --series (wall)", median(cmp_), "s", limit=1.0,
            note=f"process floor {fl(cmp_ref)}", samples=cmp_).judge(),
        Row(g, "pwh compare --series (CPU)", median(cmp_cpu), "s", limit=1.0,
            samples=cmp_cpu).judge(),
    ]
