"""kill -9 at randomised points: during ingestion, during a model build, during a snapshot publish.

Each test runs the real code in a child process, SIGKILLs its whole process group at a random
moment (seeded; the seed is printed), then checks that nothing is partial, that the state
analysts read is still a consistent, readable one, and that a rerun completes exactly once.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import (
    assert_consistent,
    kill_hard,
    pwh,
    pwh_cmd,
    read_line,
    read_lines,
    ro,
    spawn,
    write_runs,
)
from warehouse.config import settings
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving import snapshot
from warehouse.serving.query import connect


@pytest.mark.parametrize("path", ["whole", "streamed"])
def test_kill9_during_ingestion_then_rerun_loads_each_file_exactly_once(wh, tmp_path, rng, path):
    """``streamed``: the loader's streaming path (used for big profiles) forced on small files."""
    n = 12
    folder = tmp_path / "landing"
    runs = write_runs(folder, n, samples=1500)
    env = {**os.environ, "PWH_STREAM_MIN_BYTES": "65536" if path == "streamed" else str(1 << 40)}
    # Three kills per round, each after a few files and a random delay. A round whose children
    # all finished before their kill proves only the consistency checks: the next round starts
    # again on a fresh warehouse with the waits halved, until a kill landed inside a batch.
    killed_mid_batch, scale = 0, 1.0
    for rnd in range(6):
        if rnd:
            wh = settings(tmp_path / f"round{rnd}" / "warehouse.duckdb")
        w = str(wh.warehouse)
        for attempt in range(3):
            proc = spawn(pwh_cmd("--warehouse", w, "ingest", str(folder)), env=env)
            wait_files = int(rng.randrange(0, 4) * scale)
            read_lines(proc, wait_files)  # let a few files through first (0: kill in startup)
            time.sleep(rng.uniform(0.0, 0.25 * scale))  # ... then strike inside the next one
            kill_hard(proc)
            ctx = f"seed {rng.seed_value}, round {rnd}, attempt {attempt}, after {wait_files} file(s)"
            loaded = assert_consistent(wh, ctx) if wh.warehouse.exists() else set()
            killed_mid_batch += len(loaded) < n  # the batch was not finished when killed
        if killed_mid_batch:
            break
        scale /= 2
    assert killed_mid_batch, f"seed {rng.seed_value}: every child finished before the kill"
    r = pwh("--warehouse", w, "ingest", str(folder), env=env)
    assert r.returncode == 0, r.stderr
    shas = assert_consistent(wh, f"seed {rng.seed_value}, after rerun")
    assert len(shas) == n
    con = ro(wh)
    try:
        names = sorted(x[0] for x in con.execute("SELECT file_name FROM raw.files").fetchall())
    finally:
        con.close()
    assert names == sorted(p.name for p in runs)
    r = pwh("--warehouse", w, "ingest", str(folder), env=env)
    assert f"0 ingested, {n} already ingested, 0 failed" in r.stdout


def test_a_killed_ingestion_leaves_no_temporary_files(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 4, samples=3000)
    env = {**os.environ, "PWH_STREAM_MIN_BYTES": "65536"}
    from tests.reliability.conftest import wait_for

    def temporary_copies():
        return wh.archive_dir.is_dir() and list(wh.archive_dir.glob(".*.tmp"))

    # killed while a temporary copy exists (it is still there after the kill); a child that
    # finished, or renamed its copy, before the kill (a descheduled test process) proves
    # nothing: again on a fresh warehouse
    for attempt in range(6):
        if attempt:
            wh = settings(tmp_path / f"again{attempt}" / "warehouse.duckdb")
        proc = spawn(pwh_cmd("--warehouse", str(wh.warehouse), "ingest", *map(str, runs)),
                     env=env)
        wait_for(lambda p=proc: temporary_copies() or p.poll() is not None, timeout=600,
                 interval=0.005, what="the loader's temporary archive copy")
        kill_hard(proc)
        left = temporary_copies()
        if left:
            break
    assert left, "every ingestion finished its temporary archive copies before the kill"
    r = pwh("--warehouse", str(wh.warehouse), "ingest", *map(str, runs), env=env)
    assert r.returncode == 0, r.stderr
    assert len(assert_consistent(wh)) == 4
    assert not list(wh.archive_dir.glob(".*.tmp"))


CREATE_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from warehouse import db
    real = db.ensure_schema
    def slow(con):
        real(con)
        print("schema created", flush=True)
        time.sleep(3600)  # killed here: before the new warehouse is linked into place
    db.ensure_schema = slow
    db.connect_rw(Path(sys.argv[1]))
""")


def test_kill9_while_creating_the_warehouse_leaves_no_schemaless_file(wh, tmp_path):
    """The warehouse file appears only with its raw layer committed: a kill between creating
    the file and committing the schema leaves no warehouse (and the next run cleans up)."""
    from tests.reliability.conftest import python_child

    proc = python_child(CREATE_CHILD, str(wh.warehouse))
    assert read_lines(proc, 1) == ["schema created\n"], proc.stderr.read()
    kill_hard(proc)
    assert not wh.warehouse.exists()
    leftovers = list(wh.warehouse.parent.glob(".*.init*"))
    assert leftovers, "the half-created file should exist until a later run removes it"
    runs = write_runs(tmp_path / "in", 2)
    r = pwh("--warehouse", str(wh.warehouse), "ingest", *map(str, runs))
    assert r.returncode == 0, r.stderr
    assert len(assert_consistent(wh)) == 2
    assert not [p for p in leftovers if p.exists()]


BUILD_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from warehouse import db
    from warehouse.modelling import models
    from warehouse.serving import snapshot
    from warehouse.config import settings
    s = settings(sys.argv[1])
    project = models.load_project(Path(sys.argv[2]))
    with db.writer(s.warehouse) as con:
        print("building", flush=True)
        models.build(con, project)
        con.execute("CHECKPOINT")
        print("publishing", flush=True)
        snapshot.publish(s, con)
    print("done", flush=True)
""")

# Per-run models, slow enough to be killed in the middle (cross joins over the samples).
MODELS = {
    "staging/run_samples.sql": """
        -- name: staging.run_samples
        -- grain: one row per run
        -- purpose: test model
        select s.run_id, count(*) as samples, sum(s.duration_cycles) as cycles
        from raw.profile_samples as s
        group by s.run_id
    """,
    "marts/run_heavy.sql": """
        -- name: marts.run_heavy
        -- grain: one row per run
        -- purpose: test model, deliberately slow
        with pairs as (
            select a.run_id, count(*) as n
            from raw.profile_samples as a
            join raw.profile_samples as b on a.run_id = b.run_id and b.sample_idx < 700
            group by a.run_id
        )
        select p.run_id, p.n, r.samples from pairs as p
        join staging.run_samples as r on r.run_id = p.run_id
    """,
    "marts/run_count.sql": """
        -- name: marts.run_count
        -- grain: one row
        -- purpose: test model
        select count(*) as runs, sum(samples) as samples from staging.run_samples
    """,
}


def _write_project(root: Path) -> Path:
    for rel, sql in MODELS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(sql).strip() + "\n")
    return root


def _expected_models(con) -> dict:
    """What the models compute over the raw rows visible on ``con``."""
    samples = dict(con.execute("SELECT run_id, count(*) FROM raw.profile_samples GROUP BY 1"
                               ).fetchall())
    return {"runs": len(samples), "samples": sum(samples.values()), "per_run": samples}


def _check_models_consistent(con, ctx: str) -> None:
    """Every model table present agrees with the raw rows of the same database, or is the
    complete result of the previous build (each model is replaced in one transaction)."""
    exp = _expected_models(con)
    have = {r[0] for r in con.execute(
        "SELECT schema_name || '.' || table_name FROM duckdb_tables()").fetchall()}
    if "staging.run_samples" in have:
        got = dict(con.execute("SELECT run_id, samples FROM staging.run_samples").fetchall())
        assert set(got) <= set(exp["per_run"]), ctx
        assert all(exp["per_run"][k] == v for k, v in got.items()), ctx
    if "marts.run_count" in have:
        runs, samples = con.execute("SELECT runs, samples FROM marts.run_count").fetchone()
        assert runs <= exp["runs"] and samples <= exp["samples"], ctx


def _stage_times(proc) -> dict[str, float]:
    """Seconds each stage of an uninterrupted BUILD_CHILD took (from its line to the next)."""
    stamps = {}
    for _ in range(3):
        line = read_line(proc, timeout=600).strip()
        stamps[line] = time.monotonic()
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    assert list(stamps) == ["building", "publishing", "done"], stamps
    return {"building": stamps["publishing"] - stamps["building"],
            "publishing": stamps["done"] - stamps["publishing"]}


def test_kill9_during_build_or_publish_keeps_the_previous_snapshot_readable(wh, tmp_path, rng):
    """Every kill is checked (snapshot and live warehouse old-or-new, never half). Kill delays
    are drawn within the stage's duration measured on an uninterrupted build (of fewer runs:
    the killed builds have twice as many); an attempt whose work finished before the kill
    proves only the consistency, so the attempts go on, each miss halving the delay, until
    one interrupted the work (a kill right after the stage's line always does)."""
    project = _write_project(tmp_path / "sql")
    runs = write_runs(tmp_path / "in", 8, samples=1200)
    ingest_paths(wh, runs[:4])
    child = [sys.executable, "-c", BUILD_CHILD, str(wh.warehouse), str(project)]
    took = _stage_times(spawn(child))
    first = snapshot.current(wh)
    with connect(wh) as con:
        base = con.execute("SELECT runs, samples FROM marts.run_count").fetchone()
    ingest_paths(wh, runs[4:])
    outcomes = []
    scale = 1.0
    for attempt in range(12):
        if attempt >= 3 and any(interrupted for *_, interrupted in outcomes):
            break
        proc = spawn(child)
        stage = rng.choice(["building", "publishing"])
        seen = [x.strip() for x in read_lines(proc, 1 if stage == "building" else 2)]
        assert seen[-1:] == [stage], (seen, proc.stderr.read())
        delay = rng.uniform(0.0, scale * took[stage])
        time.sleep(delay)
        kill_hard(proc)
        rest = [x.strip() for x in read_lines(proc, 3, timeout=10)]  # printed before the kill
        after = "publishing" if stage == "building" else "done"
        interrupted = after not in rest
        outcomes.append((stage, round(delay, 4), interrupted))
        if not interrupted:
            scale /= 2
        ctx = (f"seed {rng.seed_value}, attempt {attempt}, killed while {stage} "
               f"{delay:.4f} s after its line (saw {seen + rest})")
        # analysts: the snapshot opens and is internally consistent (old or new, never half)
        cur = snapshot.current(wh)
        assert cur is not None, ctx
        with connect(wh) as con:
            _check_models_consistent(con._con, ctx)
            runs_now = con.execute("SELECT runs, samples FROM marts.run_count").fetchone()
            assert runs_now in (base, (4, 4 * 1200)), ctx
            assert con.execute("SELECT version FROM pwh_snapshot.info").fetchone()[0] == \
                snapshot.version_of(con.path), ctx
        assert_consistent(settings(cur), ctx)  # the raw layer inside the snapshot is complete
        # the live warehouse: opens, raw complete, each model old-or-new
        assert_consistent(wh, ctx)
        con = ro(wh)
        try:
            _check_models_consistent(con, ctx)
        finally:
            con.close()
    print("outcomes (stage, delay, interrupted):", outcomes, "stage times:", took)
    assert any(interrupted for *_, interrupted in outcomes), \
        f"seed {rng.seed_value}: no kill interrupted the work in 12 attempts: {outcomes}"
    proc = spawn(child)
    assert proc.wait(timeout=600) == 0, proc.stderr.read()
    with connect(wh) as con:
        assert con.execute("SELECT runs, samples FROM marts.run_count").fetchone() == (4, 4800)
    assert snapshot.current(wh) != first


PUBLISH_CHILD = textwrap.dedent("""
    import sys
    from warehouse.serving import snapshot
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_file
    s = settings(sys.argv[1])
    for i, path in enumerate(sys.argv[2:]):
        ingest_file(s, path)
        r = snapshot.publish(s, full=(i % 3 == 2))
        print(r.method, r.version, flush=True)
""")


def test_kill9_during_snapshot_publish(wh, tmp_path, rng):
    runs = write_runs(tmp_path / "in", 30, samples=800)
    ingest_paths(wh, runs[:2])
    snapshot.publish(wh)
    pending = [str(p) for p in runs[2:]]
    methods = set()
    for attempt in range(4):
        before = snapshot.current(wh)
        proc = spawn([sys.executable, "-c", PUBLISH_CHILD, str(wh.warehouse), *pending[:6]])
        lines = rng.randrange(0, 3)
        if attempt == 3 and not methods:
            lines = max(lines, 1)  # the final assertion needs one publish completed before a kill
        done = [x.split()[0] for x in read_lines(proc, lines)]
        methods.update(done)
        time.sleep(rng.uniform(0.0, 0.2))
        kill_hard(proc)
        ctx = f"seed {rng.seed_value}, attempt {attempt}"
        cur = snapshot.current(wh)
        assert cur is not None and cur.exists(), ctx
        if not done:
            assert cur in (before, *snapshot.list_snapshots(wh)), ctx
        with connect(wh) as con:  # readable, self-describing
            assert con.execute("SELECT version FROM pwh_snapshot.info").fetchone()[0] == \
                snapshot.version_of(cur), ctx
        snap_runs = assert_consistent(settings(cur), ctx)
        live_runs = assert_consistent(wh, ctx)
        assert snap_runs <= live_runs, ctx
        pending = pending[6:]
    r = snapshot.publish(wh)
    assert not list(wh.snapshot_dir.glob(".publishing-*"))
    assert assert_consistent(settings(r.path)) == assert_consistent(wh)
    assert methods, f"seed {rng.seed_value}: no publish completed before a kill"


def test_killed_export_leaves_no_partial_backup(wh, tmp_path, rng):
    ingest_paths(wh, write_runs(tmp_path / "in", 6, samples=3000))
    dest = tmp_path / "backup"
    proc = spawn(pwh_cmd("--warehouse", str(wh.warehouse), "export", str(dest)))
    read_lines(proc, rng.randrange(1, 6))
    kill_hard(proc)
    assert not dest.exists(), f"seed {rng.seed_value}: a killed export left {dest}"
    r = pwh("--warehouse", str(wh.warehouse), "export", str(dest), "-q")
    assert r.returncode == 0, r.stderr
    assert json.loads((dest / "pwh-export.json").read_text())["tables"]
    assert not list(tmp_path.glob(".backup.partial-*"))  # the killed run's leftovers are gone
