"""Measure what publishing a snapshot costs next to the build it follows (not a test).

    .venv/bin/python -m tests.reliability.measure_publish --runs 1000 --full 10 [--work DIR]

Builds a warehouse like the benchmark's (``--runs`` audits and small profiles from
``bench.gen.write_history`` plus ``--full`` full-size 232,260-sample profiles), then times, in
one process on the same files: the model build (``warehouse.modelling.models.build``, every model), the
first publish (full copy), a publish with nothing new, and "one new run -> build -> publish"
for a new audit and for a new full-size profile. Prints a table and the ratio publish / build.
Timings go to stdout only; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="history runs (default 1000)")
    ap.add_argument("--full", type=int, default=10, help="full-size profiles (default 10)")
    ap.add_argument("--samples", type=int, default=232_260, help="samples per full profile")
    ap.add_argument("--work", help="work folder (default: a temporary one, removed)")
    a = ap.parse_args(argv)

    from bench import gen
    from warehouse import db
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.modelling import models
    from warehouse.serving import snapshot

    work = Path(a.work or tempfile.mkdtemp(prefix="pwh-publish-"))
    s = settings(work / "state" / "warehouse.duckdb")
    shutil.rmtree(s.state_dir, ignore_errors=True)
    rows: list[tuple[str, float, float | None]] = []
    try:
        t, files = _timed(lambda: gen.write_history(work / "history", a.runs))
        print(f"generated {len(files)} history runs in {t:.1f} s", flush=True)
        t, _ = _timed(lambda: ingest_paths(s, files))
        print(f"ingested them in {t:.1f} s", flush=True)
        for i in range(a.full):
            p = work / "full" / f"full_{i}.json"
            gen.write_profile(p, a.samples, seed=100 + i)
            t, _ = _timed(lambda p=p: ingest_paths(s, [p]))
            p.unlink()
            print(f"full-size profile {i + 1}/{a.full} ingested in {t:.1f} s", flush=True)
        project = models.load_project()
        with db.writer(s.warehouse) as con:
            build_s, _ = _timed(lambda: (models.build(con, project), con.execute("CHECKPOINT")))
            size = s.warehouse.stat().st_size
            print(f"warehouse {size / 1e6:.0f} MB; full build {build_s:.2f} s", flush=True)
            t, r = _timed(lambda: snapshot.publish(s, con))
            rows.append((f"first publish ({r.method})", t, build_s))
            t, r = _timed(lambda: snapshot.publish(s, con))
            rows.append((f"second publish ({r.method}: no spare yet)", t, build_s))
            t, r = _timed(lambda: snapshot.publish(s, con))
            rows.append((f"publish, nothing new ({r.method})", t, build_s))
        for kind in ("audit", "profile"):
            p = work / "new" / f"{kind}.json"
            if kind == "audit":
                gen.write_audit(p, 999_999)
            else:
                gen.write_profile(p, a.samples, seed=999)
            ingest_paths(s, [p])
            with db.writer(s.warehouse) as con:
                b, _ = _timed(lambda: (models.build(con, project), con.execute("CHECKPOINT")))
                t, r = _timed(lambda: snapshot.publish(s, con))
            rows.append((f"new {kind} -> build -> publish ({r.method}, "
                         f"{sum(r.rows_written.values())} rows)", t, b))
        print()
        print(f"{'step':58} {'publish s':>10} {'build s':>9} {'ratio':>7}")
        for name, t, b in rows:
            print(f"{name:58} {t:10.2f} {b:9.2f} {t / b:7.2f}")
        print(f"\nmachine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
