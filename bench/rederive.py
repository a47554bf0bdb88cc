"""Issue 20, item 8: upgrading a warehouse of archived traces costs <= 2x ingesting them fresh,
and the upgraded warehouse equals the fresh ingest. Ratios measured in one run.

    python -m bench.rederive            # 1,000 small generated Kineto traces
    python -m bench.rederive --quick    # 30 traces: keeps the harness working
    python -m bench.rederive --n 300    # another count
    python -m bench.rederive --old-code /tmp/old   # the old warehouse ingested by an older pwh
                                                   # checkout (e.g. `git worktree add /tmp/old REV`)

1. ``pwh ingest`` of N generated Kineto traces (``kineto_gen``, 2-4 steps, ~30-40 KB each) into
   a fresh warehouse, whole process: the **fresh** time;
2. the warehouse (and its archive) is copied and set back to what kineto_trace/1 wrote (the
   CPU side's rows deleted, the runs' counts changed, ``parser_version`` kineto_trace/1); or,
   with ``--old-code DIR``, the traces are ingested by that older checkout of pwh (run with
   this interpreter, ``PYTHONPATH=DIR``, without the compiled scanner it may not have built);
3. ``pwh rederive`` on the copy, whole process: the **upgrade** time (goal: <= 2x fresh);
4. every raw table of the upgraded copy is compared with the fresh warehouse's, row by row
   (without ``archive_path`` and ``ingested_at``, the columns that name a warehouse's place and
   the time a file entered it).

Prints one line per figure and exits 1 if a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_KINDS = ["cpu_op", "annotation", "gpu_annotation", "sync", "other"]
GOAL = 2.0


def generate(folder: Path, n: int) -> int:
    from warehouse.ingesting.formats import kineto_gen

    total = 0
    for i in range(n):
        p = folder / f"t{i:04d}.pt.trace.json"
        total += kineto_gen.write_file(p, steps=2 + i % 3, seed=i, relative=bool(i % 2))["bytes"]
    return total


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "warehouse.cli", *argv], capture_output=True,
                       text=True, cwd=ROOT)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"bench.rederive: {' '.join(argv)} failed:\n{r.stdout}\n{r.stderr}")
    return dt, r


def set_back(wh: Path) -> int:
    """What kineto_trace/1 wrote: GPU and runtime rows only. Returns the rows removed."""
    import duckdb

    con = duckdb.connect(str(wh))
    try:
        removed = con.execute("SELECT count(*) FROM raw.trace_events WHERE kind IN "
                              "(SELECT unnest(?))", [CPU_KINDS]).fetchone()[0]
        con.execute("DELETE FROM raw.trace_events WHERE kind IN (SELECT unnest(?))", [CPU_KINDS])
        con.execute("UPDATE raw.trace_runs SET event_count = (SELECT count(*) FROM "
                    "raw.trace_events e WHERE e.run_id = trace_runs.run_id), metadata = '{}'")
        con.execute("UPDATE raw.files SET parser_version = 'kineto_trace/1'")
        con.execute("CHECKPOINT")
        return removed
    finally:
        con.close()


def raw_state(wh: Path) -> dict[str, list]:
    import duckdb

    con = duckdb.connect(str(wh), read_only=True)
    try:
        out = {}
        for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = "
                                "'raw' ORDER BY 1").fetchall():
            cols = [c for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'raw' AND "
                "table_name = ? ORDER BY column_index", [t]).fetchall()
                if c not in ("archive_path", "ingested_at", "occurred_at")]
            out[t] = sorted(con.execute(f"SELECT {', '.join(cols)} FROM raw.{t}").fetchall(),
                            key=repr)
        return out
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rederive", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="30 traces")
    ap.add_argument("--n", type=int, help="number of traces (default 1,000; --quick 30)")
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed)")
    ap.add_argument("--old-code", type=Path, metavar="DIR",
                    help="an older pwh checkout that ingests the warehouse to upgrade")
    a = ap.parse_args(argv)
    n = a.n or (30 if a.quick else 1000)
    import tempfile

    work = a.work or Path(tempfile.mkdtemp(prefix="pwh-bench-rederive-"))
    try:
        src = work / "traces" / "kin"
        size = generate(src, n)
        print(f"{n} generated Kineto traces, {size / 1e6:.1f} MB", flush=True)
        fresh = work / "fresh" / "warehouse.duckdb"
        t_fresh, _ = timed(["--warehouse", str(fresh), "ingest", str(src), "-q"])
        print(f"fresh ingest (pwh ingest, whole process): {t_fresh:.2f} s", flush=True)
        up_dir = work / "upgraded"
        up = up_dir / "warehouse.duckdb"
        if a.old_code:
            old = a.old_code.resolve()
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "warehouse.cli", "--warehouse", str(up),
                                "ingest", str(src), "-q"], capture_output=True, text=True,
                               cwd=old, env={**os.environ, "PYTHONPATH": str(old),
                                             "PWH_KINETO_SCAN": "0"})
            if r.returncode != 0:
                raise SystemExit(f"bench.rederive: the old ingest failed:\n{r.stderr}")
            import duckdb

            con = duckdb.connect(str(up), read_only=True)
            versions = con.execute("SELECT DISTINCT parser_version FROM raw.files").fetchall()
            con.close()
            print(f"old warehouse ingested by {old} in {time.perf_counter() - t0:.2f} s "
                  f"(parser versions {sorted(v for (v,) in versions)})", flush=True)
        else:
            shutil.copytree(fresh.parent, up_dir, ignore=shutil.ignore_patterns("snapshots",
                                                                                "status"))
            removed = set_back(up)
            print(f"set back to kineto_trace/1: {removed} CPU-side rows removed", flush=True)
        t_up, r = timed(["--warehouse", str(up), "rederive", "-q"])
        print(f"upgrade (pwh rederive, whole process): {t_up:.2f} s  [{r.stdout.splitlines()[0]}]",
              flush=True)
        ratio = t_up / t_fresh
        ok_time = ratio <= GOAL
        print(f"upgrade / fresh ingest = {ratio:.2f} (goal <= {GOAL}): "
              f"{'met' if ok_time else 'MISSED'}")
        got, want = raw_state(up), raw_state(fresh)
        diff = [t for t in want if got.get(t) != want[t]]
        print("upgraded raw tables equal the fresh ingest's: "
              + ("yes" if not diff else f"NO ({', '.join(diff)})"))
        return 0 if ok_time and not diff else 1
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PWH_HOLD_WRITER_S", "2.0")
    sys.exit(main())
