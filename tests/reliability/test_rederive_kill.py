"""kill -9 during `pwh rederive` (issue 20, item 8): each run is wholly old or wholly new after
the kill, and the next `pwh rederive` completes to exactly a fresh ingest of the same files.

Two kinds of kill, as in tests/reliability/test_kill_commands.py:

* deterministic: a child stops inside the k-th run's transaction (its old rows deleted, the new
  ones inserted, not committed) and is killed there: the runs before it are new, it and the
  rest old;
* randomised: the real command is killed after a random number of its progress lines plus a
  random delay (seeded; the seed is printed); attempts are repeated, each after fewer lines,
  until one interrupted the work (some run still old), never relying on timing luck.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb

from tests.reliability.conftest import kill_hard, pwh, pwh_cmd, read_lines
from tests.test_rederive import OLD_KINETO, fresh_ingest_of, kineto_traces, make_kineto_old
from warehouse.config import settings
from warehouse.ingesting import formats
from warehouse.ingesting.formats import kineto
from warehouse.ingesting.loader import ingest_paths

ROOT = Path(__file__).resolve().parents[2]


def per_run(wh) -> dict[str, tuple[str, str]]:
    """Per run: its parser version and a hash of every raw row it has (all raw tables)."""
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        out = {}
        for sha, version in con.execute("SELECT sha256, parser_version FROM raw.files"
                                        ).fetchall():
            h = hashlib.sha256()
            for t in formats.ALL_TABLES:
                rows = con.execute(f"SELECT * FROM raw.{t.name} WHERE run_id = ?",  # noqa: S608
                                   [sha]).fetchall()
                h.update(f"{t.name}:{sorted(map(repr, rows))}".encode())
            out[sha] = (version, h.hexdigest())
        orphans = con.execute("SELECT count(*) FROM raw.trace_events WHERE run_id NOT IN "
                              "(SELECT sha256 FROM raw.files)").fetchone()[0]
        assert orphans == 0
        return out
    finally:
        con.close()


def setup_old(tmp_path, n: int):
    """A pristine old warehouse (kept as a copy), and the per-run old and new states."""
    old = settings(tmp_path / "old" / "warehouse.duckdb")
    fresh = settings(tmp_path / "fresh" / "warehouse.duckdb")
    assert all(r.status == "ingested" for r in ingest_paths(old, kineto_traces(tmp_path, n)))
    make_kineto_old(old)
    fresh_ingest_of(old, fresh)
    pristine = tmp_path / "pristine"
    shutil.copytree(old.state_dir, pristine)
    return old, fresh, pristine, per_run(old), per_run(fresh)


def restore(old, pristine: Path) -> None:
    shutil.rmtree(old.state_dir)
    shutil.copytree(pristine, old.state_dir)


def check_each_run_old_or_new(wh, before: dict, after: dict, ctx: str) -> tuple[int, int]:
    now = per_run(wh)
    assert now.keys() == before.keys(), f"{ctx}: runs appeared or vanished"
    new = old = 0
    for sha, state in now.items():
        if state == before[sha]:
            assert state[0] == OLD_KINETO
            old += 1
        else:
            assert state == after[sha], f"{ctx}: run {sha[:12]} is neither old nor new"
            assert state[0] == kineto.PARSER_VERSION
            new += 1
    return old, new


INSIDE_CHILD = textwrap.dedent("""
    import sys, time
    from warehouse.config import settings
    from warehouse.ingesting import rederive
    real, seen = rederive._insert_all, []
    def stop_inside(con, reader, run_id):  # inside the k-th run's transaction, before COMMIT
        out = real(con, reader, run_id)
        seen.append(run_id)
        if len(seen) == int(sys.argv[2]):
            print("inside", run_id, flush=True)
            time.sleep(3600)  # killed here
        return out
    rederive._insert_all = stop_inside
    rederive.rederive(settings(sys.argv[1]))
""")


def test_kill9_inside_a_runs_transaction_leaves_it_old(tmp_path):
    old, fresh, pristine, before, after = setup_old(tmp_path, 6)
    con = duckdb.connect(str(old.warehouse), read_only=True)
    order = [r[0] for r in con.execute("SELECT sha256 FROM raw.files ORDER BY ingested_at, "
                                       "sha256").fetchall()]
    con.close()
    for k in (1, 4):
        restore(old, pristine)
        proc = subprocess.Popen([sys.executable, "-c", INSIDE_CHILD, str(old.warehouse), str(k)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        line = read_lines(proc, 1, timeout=300)
        assert line and line[0].split() == ["inside", order[k - 1]], proc.stderr.read()
        kill_hard(proc)
        now = per_run(old)
        for i, sha in enumerate(order):
            want = after[sha] if i < k - 1 else before[sha]
            assert now[sha] == want, f"k={k}: run {i} is not {'new' if i < k - 1 else 'old'}"
    # the next run completes: every run new, exactly a fresh ingest
    r = pwh("--warehouse", str(old.warehouse), "rederive", "-q", timeout=600)
    assert r.returncode == 0, r.stderr
    assert ": 3 re-derived" in r.stdout  # the runs after the second kill's first three
    assert per_run(old) == after


def test_kill9_during_rederive_then_rerun_completes(tmp_path, rng):
    old, fresh, pristine, before, after = setup_old(tmp_path, 24)
    outcomes = []
    top = 24
    for attempt in range(10):
        if attempt >= 3 and any(o > 0 for o, _ in outcomes):
            break  # three kills, one of which interrupted the work at least
        restore(old, pristine)
        proc = subprocess.Popen(pwh_cmd("--warehouse", str(old.warehouse), "rederive"),
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        lines = read_lines(proc, rng.randrange(0, top), timeout=300)  # one line per run
        time.sleep(rng.uniform(0.0, 0.05 * top / 24))
        finished = proc.poll() is not None
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}, after {len(lines)} line(s)"
        n_old, n_new = check_each_run_old_or_new(old, before, after, ctx)
        done_lines = sum(" ok " in x for x in lines)
        assert n_new >= done_lines, f"{ctx}: a run reported done is not new"
        outcomes.append((n_old, finished))
        if n_old == 0:
            top = max(1, top // 2)  # the kill came after the work: sooner next time
        # resumable: the next run re-derives exactly the runs still old
        r = pwh("--warehouse", str(old.warehouse), "rederive", "-q", timeout=600)
        assert r.returncode == 0, f"{ctx}: {r.stderr}"
        assert f": {n_old} re-derived" in r.stdout, f"{ctx}: {r.stdout}"
        assert per_run(old) == after, f"{ctx}: the rerun did not complete the upgrade"
    print("outcomes (runs left old, finished before the kill)", outcomes)
    assert any(o > 0 for o, _ in outcomes), f"seed {rng.seed_value}: no kill interrupted"
    # and the whole raw layer equals the fresh ingest's
    from tests.test_rederive import table_state

    assert table_state(old.warehouse) == table_state(fresh.warehouse)
