"""Validation cost of one new run must not grow with the warehouse (issue 4).

Two warehouses are built from the same deterministic history (``bench/gen.py``): a small one
(2 runs) and a large one (200 runs; ``--quick``: 20), every model built and every history run
validated, so ``checks.results`` holds a realistic history too. Then one new run of each format
is ingested into both, the models are rebuilt, and the measured step is exactly what ``pwh
check`` does for a new run: ``validate_run`` (every suite: raw, staging, marts) plus
``record_results``. Measurements alternate between the two warehouses and the ratio uses the
fastest of ``--reps`` repetitions per side (noise from a busy machine only adds time); medians
are printed too. A second figure isolates the warehouse reads: every suite's batch query for the
new run, without Great Expectations (whose cost per expectation does not depend on the data).

    python -m bench.check_scaling            # 2 vs 200 runs
    python -m bench.check_scaling --quick    # 2 vs 20 runs, fewer repetitions

Prints one line per format and the ratio large/small; exit status 1 if a ratio exceeds
``--limit`` (default 1.5) or a new run does not pass its checks. ``--json PATH`` also writes the
figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _warehouse(work: Path, name: str, history: list[Path], new: dict[str, Path]):
    from warehouse import checks, db
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.modelling import models

    s = settings(work / name / "warehouse.duckdb")
    t0 = time.perf_counter()
    res = ingest_paths(s, history)
    bad = [r for r in res if r.status != "ingested"]
    if bad:
        raise SystemExit(f"{name}: history did not ingest: {bad[0].path}: {bad[0].message}")
    with db.writer(s.warehouse) as con:
        models.build(con)
        ids = [r.sha256 for r in res]
        checks.record_results(con, checks.validate_runs(con, ids))
        failed = [i for i, st in checks.run_status(con, ids).items() if st.status != "passed"]
        if failed:
            raise SystemExit(f"{name}: history run {failed[0]} does not pass its checks")
    new_ids = {}
    for kind, path in new.items():
        r = ingest_paths(s, [path])[0]
        if r.status != "ingested":
            raise SystemExit(f"{name}: new {kind} run did not ingest: {r.message}")
        new_ids[kind] = r.sha256
    with db.writer(s.warehouse) as con:
        models.build(con)
        runs = con.execute("select count(*) from raw.files").fetchone()[0]
        results = con.execute("select count(*) from checks.results").fetchone()[0]
    print(f"  {name}: {runs} runs, {results} check results "
          f"(set up in {time.perf_counter() - t0:.1f} s)", flush=True)
    return s, new_ids


def _validate_once(s, run_id: str) -> tuple[float, float, bool]:
    """(seconds to validate and record, seconds of the batch queries alone, every check passed)"""
    from warehouse import checks, db
    from warehouse.checks import batches

    with db.writer(s.warehouse) as con:
        fmt = con.execute("select source_format from raw.files where sha256 = ?",
                          [run_id]).fetchone()[0]
        have = batches.existing_tables(con)
        t0 = time.perf_counter()
        for suite in checks.load_suites():
            if suite.applies_to(fmt) and suite.tables_read() <= have:
                batches.fetch(con, suite, [run_id])
        reads = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = checks.validate_run(con, run_id)
        checks.record_results(con, results)
        dt = time.perf_counter() - t0
    return dt, reads, all(r.success for r in results) and bool(results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.check_scaling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 vs 20 runs, 2 repetitions")
    ap.add_argument("--small", type=int, default=2, help="runs in the small warehouse")
    ap.add_argument("--large", type=int, default=None, help="runs in the large one (200)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per side (5; quick: 2)")
    ap.add_argument("--limit", type=float, default=1.5, help="largest acceptable ratio")
    ap.add_argument("--json", metavar="PATH", help="also write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args(argv)
    large = a.large or (20 if a.quick else 200)
    reps = a.reps or (2 if a.quick else 5)

    from bench.gen import write_audit, write_history, write_profile
    from warehouse import checks

    work = Path(tempfile.mkdtemp(prefix="pwh-check-scaling-"))
    try:
        print(f"history: {large} runs (audits and small profiles) in {work}", flush=True)
        hist = write_history(work / "history", large, profile_samples=300)
        # the new runs: the same bytes in both warehouses, unlike any history run
        new = {"conv_audit": write_audit(work / "new" / "audit.json", seed=999_001),
               "tile_profile": work / "new" / "profile.json"}
        write_profile(new["tile_profile"], 300, seed=999_002)
        t0 = time.perf_counter()
        checks.warm_up()  # import GX once, outside every measurement
        print(f"Great Expectations imported in {time.perf_counter() - t0:.1f} s", flush=True)
        small = _warehouse(work, f"small-{a.small}", hist[:a.small], new)
        big = _warehouse(work, f"large-{large}", hist, new)
        for side in (small, big):  # warm-up: GX suites built, DuckDB caches filled
            for run_id in side[1].values():
                _validate_once(side[0], run_id)
        figures = {}
        ok = True
        for kind in ("conv_audit", "tile_profile"):
            times: dict[str, list[float]] = {"small": [], "large": []}
            reads: dict[str, list[float]] = {"small": [], "large": []}
            for _ in range(reps):
                for side, (s, ids) in (("small", small), ("large", big)):
                    dt, rd, passed = _validate_once(s, ids[kind])
                    ok &= passed
                    times[side].append(dt)
                    reads[side].append(rd)
            fig = {"small_runs": a.small + 2, "large_runs": large + 2, "reps": reps,
                   "limit": a.limit}
            for what, data in (("validate", times), ("reads", reads)):
                fs, fl = min(data["small"]), min(data["large"])
                fig[what] = {"small_seconds": fs, "large_seconds": fl, "ratio": fl / fs,
                             "small_median": statistics.median(data["small"]),
                             "large_median": statistics.median(data["large"])}
            figures[kind] = fig
            v, r = fig["validate"], fig["reads"]
            verdict = "ok" if v["ratio"] <= a.limit else "TOO SLOW"
            print(f"one new {kind} run, validate + record: {v['small_seconds']:.3f} s with "
                  f"{a.small + 2} runs, {v['large_seconds']:.3f} s with {large + 2} runs: "
                  f"ratio {v['ratio']:.2f} (limit {a.limit}) {verdict}  "
                  f"[medians {v['small_median']:.3f} / {v['large_median']:.3f} s]", flush=True)
            print(f"one new {kind} run, batch queries only: {r['small_seconds'] * 1000:.1f} ms / "
                  f"{r['large_seconds'] * 1000:.1f} ms: ratio {r['ratio']:.2f}", flush=True)
            ok &= v["ratio"] <= a.limit
        if not ok:
            print("FAILED: a ratio exceeds the limit or a new run failed its checks")
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")
        return 0 if ok else 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
