"""The 8-rank job goal of issue 20: ingesting a job of 8 rank files (8 x 60 MB Kineto traces)
takes at most 1.2x the sum of ingesting each file alone, whole ``pwh ingest`` processes.

    python -m bench.jobs                 # 8 ranks x 60 MB, 3 repetitions
    python -m bench.jobs --mb 10 --reps 1   # smaller, on a loaded machine

The rank files are generated (:mod:`warehouse.ingesting.formats.kineto_gen`, one seed per
rank; the generator writes ``world_size`` 1, patched here to the job's in place, same length)
into one folder, so ``pwh ingest <folder>`` makes them one job by default (docs/formats.md,
"Jobs of many ranks"). Measured in one run, each repetition on fresh warehouses:

* ``single``: ``pwh ingest <rank file>`` into a fresh warehouse, once per rank; the sum;
* ``job``: ``pwh ingest <folder>`` into a fresh warehouse (the 8 files, one job).

The ratio job / single (the best of the repetitions of each) is the goal (<= 1.2). Not in the
default bench goals (``bench.run``): a full run writes and ingests ~1 GB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from warehouse.ingesting.formats import kineto_gen

GOAL = 1.2
RANKS = 8


def make_job(folder: Path, ranks: int, mb: float) -> list[Path]:
    """``ranks`` rank files of one job of ``ranks`` ranks, about ``mb`` MB each."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        f = folder / f"rank{r}.pt.trace.json"
        kineto_gen.write_file(f, target_bytes=int(mb * 1e6), seed=r, rank=r)
        with open(f, "r+b") as fh:  # the generator's world_size 1 -> the job's (same length)
            head = fh.read(4096)
            old = f'"rank": {r}, "world_size": 1}}'.encode()
            new = f'"rank": {r}, "world_size": {ranks}}}'.encode()
            if old not in head or len(old) != len(new):
                raise SystemExit(f"{f}: the generator's distributedInfo is not {old!r}")
            fh.seek(0)
            fh.write(head.replace(old, new, 1))
        files.append(f)
    return files


def pwh(warehouse: Path, *args: str) -> float:
    """Seconds of one whole ``pwh ingest`` process."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "warehouse.cli", "--warehouse", str(warehouse),
                    "ingest", "-q", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(work: Path, ranks: int, mb: float, reps: int, log=print) -> dict:
    folder = work / "job8"
    t0 = time.perf_counter()
    files = make_job(folder, ranks, mb)
    size = sum(f.stat().st_size for f in files)
    log(f"generated {ranks} rank files, {size / 1e6:.0f} MB in all "
        f"({time.perf_counter() - t0:.1f} s)")
    singles, jobs_s = [], []
    for rep in range(reps):
        total = 0.0
        for i, f in enumerate(files):
            wdir = work / f"single-{rep}-{i}"
            total += pwh(wdir / "wh.duckdb", str(f))
            shutil.rmtree(wdir)
        singles.append(total)
        wdir = work / f"job-{rep}"
        jobs_s.append(pwh(wdir / "wh.duckdb", str(folder)))
        con = duckdb.connect(str(wdir / "wh.duckdb"), read_only=True)
        try:
            members = con.execute("SELECT job, count(*), min(world_size) FROM raw.trace_jobs "
                                  "GROUP BY job").fetchall()
        finally:
            con.close()
        shutil.rmtree(wdir)
        if members != [(folder.name, ranks, ranks)]:
            raise SystemExit(f"the folder was not ingested as one job of {ranks} ranks: "
                             f"{members}")
        log(f"rep {rep + 1}: single files {total:.2f} s in all, the job {jobs_s[-1]:.2f} s")
    ratio = min(jobs_s) / min(singles)
    return {"ranks": ranks, "mb_per_rank": mb, "bytes": size, "single_sum_s": min(singles),
            "job_s": min(jobs_s), "ratio": ratio, "goal": GOAL, "ok": ratio <= GOAL}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.jobs", description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=60.0, help="MB per rank file (default 60)")
    ap.add_argument("--ranks", type=int, default=RANKS, help="rank files (default 8)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (best of; default 3)")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="pwh-bench-jobs-"))
    try:
        out = measure(work, args.ranks, args.mb, args.reps)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    print(f"{args.ranks}-rank job x {args.mb:g} MB: job ingest {out['job_s']:.2f} s vs "
          f"{out['single_sum_s']:.2f} s for the files alone = {out['ratio']:.2f}x "
          f"(goal <= {GOAL}x): {'ok' if out['ok'] else 'MISSED'}")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
