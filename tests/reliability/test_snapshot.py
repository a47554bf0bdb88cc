"""Snapshots: what analysts read is a complete copy of the live warehouse at publish time, swapped
in atomically; old readers keep their version; pruning never removes a file a reader holds;
the delta path produces exactly what a full copy would."""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from tests.reliability.conftest import (
    pwh,
    pwh_cmd,
    python_child,
    read_line,
    spawn,
    wait_for,
    write_runs,
)
from warehouse import db
from warehouse.ingesting.loader import ingest_file, ingest_paths
from warehouse.serving import snapshot
from warehouse.serving.query import connect


def tables_of(path) -> dict:
    """{schema.table: (rows, content hash)} of every table, pwh_snapshot excluded."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE schema_name <> "
            "'pwh_snapshot' ORDER BY 1, 2").fetchall()
        return {f"{s}.{t}": con.execute(
            f'SELECT count(*), sum(hash(_r)::HUGEINT) FROM "{s}"."{t}" AS _r').fetchone()
            for s, t in names}
    finally:
        con.close()


def views_of(path) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return dict(con.execute("SELECT schema_name || '.' || view_name, sql FROM duckdb_views() "
                                "WHERE NOT internal").fetchall())
    finally:
        con.close()


def assert_snapshot_matches_live(wh):
    cur = snapshot.current(wh)
    assert cur is not None
    assert tables_of(cur) == tables_of(wh.warehouse)
    assert views_of(cur) == views_of(wh.warehouse)


def test_first_publish_copies_then_deltas_track_every_change(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 6, samples=50)
    ingest_paths(wh, runs[:2])
    r1 = snapshot.publish(wh)
    assert r1.method == "copy" and "no snapshot yet" in r1.reason
    assert_snapshot_matches_live(wh)
    r2 = snapshot.publish(wh)  # no spare yet: a second copy
    assert r2.method == "copy"
    for i, batch in enumerate((runs[2:4], runs[4:5], [])):
        ingest_paths(wh, batch)
        r = snapshot.publish(wh)
        assert r.method == "delta", (i, r)
        assert_snapshot_matches_live(wh)
    # the spare lags two publishes (it was current before the last one): one more empty
    # publish catches it up, and then nothing at all is rewritten
    assert set(r.rows_written) >= {"raw.files", "raw.profile_samples"}
    r = snapshot.publish(wh)
    assert r.method == "delta" and r.rows_written == {}
    assert_snapshot_matches_live(wh)
    # a model-like table rebuilt with other content, and a removed run (re-derivation)
    with db.writer(wh.warehouse) as con:
        con.execute("CREATE SCHEMA marts")
        con.execute("CREATE TABLE marts.per_run AS SELECT sha256 AS run_id, byte_size FROM raw.files")
        con.execute("CREATE VIEW marts.v AS SELECT count(*) AS n FROM marts.per_run")
    r = snapshot.publish(wh)
    assert r.method == "copy" and "structure changed" in r.reason
    assert_snapshot_matches_live(wh)
    snapshot.publish(wh)
    with db.writer(wh.warehouse) as con:
        gone = con.execute("SELECT sha256 FROM raw.files ORDER BY sha256 LIMIT 1").fetchone()[0]
        con.execute("BEGIN")
        for t in ("files",):
            con.execute(f"DELETE FROM raw.{t} WHERE sha256 = ?", [gone])
        for t in ("profile_runs", "profile_groups", "profile_samples", "profile_sample_metadata",
                  "audit_documents", "audit_rows", "audit_components", "audit_kernels"):
            con.execute(f"DELETE FROM raw.{t} WHERE run_id = ?", [gone])
        con.execute("COMMIT")
        con.execute("CREATE OR REPLACE TABLE marts.per_run AS "
                    "SELECT sha256 AS run_id, byte_size + 1 AS byte_size FROM raw.files")
    r = snapshot.publish(wh)
    assert r.method == "delta", r
    assert r.rows_written["raw.files"] == 1  # the removed run: one row deleted
    assert r.rows_written["marts.per_run"] == 5 + 4  # every row differs: 5 deleted, 4 inserted
    assert_snapshot_matches_live(wh)


def test_raw_rows_changed_without_their_manifest_row_are_still_caught(wh, tmp_path):
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=20))
    snapshot.publish(wh)
    snapshot.publish(wh)
    with db.writer(wh.warehouse) as con:  # a repair that does not touch raw.files
        con.execute("DELETE FROM raw.profile_samples WHERE sample_idx = 3")
    r = snapshot.publish(wh)
    assert r.method == "delta"
    assert_snapshot_matches_live(wh)


def test_publish_swaps_atomically_and_old_readers_keep_their_version(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 3, samples=20)
    ingest_paths(wh, runs[:1])
    snapshot.publish(wh)
    old = connect(wh)
    v1 = old.version
    assert old.execute("SELECT count(*) FROM raw.files").fetchone() == (1,)
    ingest_paths(wh, runs[1:])
    r = snapshot.publish(wh)
    new = connect(wh)
    assert new.version == r.version != v1
    assert new.execute("SELECT count(*) FROM raw.files").fetchone() == (3,)
    assert old.execute("SELECT count(*) FROM raw.files").fetchone() == (1,)  # unchanged view
    # the snapshot names itself
    assert new.execute("SELECT version, method FROM pwh_snapshot.info").fetchone()[0] == r.version
    # more publishes: the old reader's file is neither rewritten nor pruned while it is open
    for _ in range(3):
        snapshot.publish(wh, keep=1)
        assert old.path.exists()
        assert old.execute("SELECT count(*) FROM raw.files").fetchone() == (1,)
    old.close()
    new.close()
    snapshot.publish(wh, keep=1)
    assert snapshot.list_snapshots(wh) == [snapshot.current(wh)]


def test_a_reader_in_another_process_blocks_neither_publish_nor_pruning_errors(wh, tmp_path):
    """A spare snapshot held by another process is not written to (DuckDB's lock says so):
    the publish makes a full copy instead, and pruning keeps the held file."""
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=20))
    snapshot.publish(wh)
    held = snapshot.current(wh)
    reader = python_child(
        "import duckdb, sys, time\n"
        "con = duckdb.connect(sys.argv[1], read_only=True)\n"
        "print(con.execute('select count(*) from raw.files').fetchone()[0], flush=True)\n"
        "time.sleep(3600)\n", str(held))  # killed below
    try:
        assert read_line(reader).strip() == "2"
        snapshot.publish(wh)  # `held` is now the spare, and still open elsewhere
        assert snapshot.in_use(held)
        r = snapshot.publish(wh, keep=1)
        assert r.method == "copy" and "held by a reader" in r.reason
        assert held.exists()  # not pruned while open
        assert_snapshot_matches_live(wh)
    finally:
        reader.kill()
        reader.wait()
    snapshot.publish(wh, keep=1)
    assert not held.exists()  # pruned once released


def test_stale_work_files_of_a_killed_publish_are_cleaned(wh, tmp_path):
    ingest_paths(wh, write_runs(tmp_path / "in", 1, samples=10))
    snapshot.publish(wh)
    junk = [wh.snapshot_dir / ".publishing-20990101T000000.000000Z.duckdb",
            wh.snapshot_dir / ".publishing-20990101T000000.000000Z.duckdb.wal",
            wh.snapshot_dir / ".publishing-link-123"]
    for j in junk:
        j.write_bytes(b"half-written")
    snapshot.publish(wh)
    assert not any(j.exists() for j in junk)


def test_publish_waits_for_the_writer_and_says_so(wh, tmp_path):
    """The holder keeps the lock until pwh has said it waits (not for a fixed time: a slow
    start of pwh on a loaded machine would otherwise find the file free)."""
    ingest_paths(wh, write_runs(tmp_path / "in", 1, samples=10))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys\n"
         "con = duckdb.connect(sys.argv[1])\n"
         "print('locked', flush=True)\n"
         "sys.stdin.readline()\n", str(wh.warehouse)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = spawn(pwh_cmd("--warehouse", str(wh.warehouse), "snapshot"))
        seen = []
        while not seen or (seen[-1] and "busy" not in seen[-1]):
            seen.append(proc.stderr.readline())  # blocks until pwh says something (or exits)
        first = "".join(seen)
        assert "busy" in seen[-1] and "retrying" in seen[-1], first
    finally:
        holder.stdin.write("release\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, first + err
    assert "published snapshot" in out


def test_pwh_snapshot_list(wh, tmp_path):
    r = pwh("--warehouse", str(wh.warehouse), "snapshot")
    assert r.returncode == 1 and "no warehouse here yet" in r.stderr
    ingest_paths(wh, write_runs(tmp_path / "in", 1, samples=10))
    assert pwh("--warehouse", str(wh.warehouse), "snapshot").returncode == 0
    r = pwh("--warehouse", str(wh.warehouse), "snapshot", "--list")
    assert r.returncode == 0 and "current" in r.stdout
    assert snapshot.version_of(snapshot.current(wh)) in r.stdout


def test_connect_publishes_the_first_snapshot_when_there_is_none(wh, tmp_path):
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=10))
    assert snapshot.current(wh) is None
    with connect(wh) as con:
        assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (2,)
    assert snapshot.current(wh) is not None


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_current_pointer_is_a_relative_symlink(wh, tmp_path):
    ingest_paths(wh, write_runs(tmp_path / "in", 1, samples=10))
    snapshot.publish(wh)
    link = wh.snapshot_dir / snapshot.POINTER
    assert link.is_symlink() and "/" not in os.readlink(link)
    wait_for(lambda: snapshot.current(wh), what="current snapshot")


def test_big_rebuilt_model_tables_make_publishing_copy_instead(wh, tmp_path):
    """A delta that could rewrite more rows than a byte copy costs is not attempted."""
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=10))
    with db.writer(wh.warehouse) as con:
        con.execute("CREATE SCHEMA staging")
        con.execute("CREATE TABLE staging.big AS SELECT range AS i FROM range(300000)")
    snapshot.publish(wh)
    snapshot.publish(wh)
    with db.writer(wh.warehouse) as con:  # a build rebuilds it wholesale
        con.execute("CREATE OR REPLACE TABLE staging.big AS SELECT range + 1 AS i "
                    "FROM range(300000)")
    r = snapshot.publish(wh)
    assert r.method == "copy" and "a delta could write up to" in r.reason, r
    assert_snapshot_matches_live(wh)


def test_incremental_builds_publish_only_the_new_runs_model_rows(wh, tmp_path):
    """Model tables built incrementally are synced by their build stamps (meta.model_runs):
    a new run rewrites that run's rows (its series' rows, for trends), nothing is hashed whole,
    and a full rebuild (new build id) still publishes correctly."""
    from warehouse.modelling import models

    runs = write_runs(tmp_path / "in", 6, samples=50)
    ingest_paths(wh, runs[:4])
    with db.writer(wh.warehouse) as con:
        models.build(con)
        snapshot.publish(wh, con)
        snapshot.publish(wh, con)  # the spare is now current too
        assert ingest_file(wh, runs[4], con=con).status == "ingested"
        new = con.execute("SELECT sha256 FROM raw.files ORDER BY ingested_at DESC LIMIT 1"
                          ).fetchone()[0]
        res = {r.model: r for r in models.build(con)}
        assert res["staging.profile_samples"].mode == "incremental"
        r = snapshot.publish(wh, con)
        new_rows = con.execute("SELECT count(*) FROM staging.profile_samples WHERE run_id = ?",
                               [new]).fetchone()[0]
        all_rows = con.execute("SELECT count(*) FROM staging.profile_samples").fetchone()[0]
        series_rows = con.execute(
            "SELECT count(*) FROM marts.kernel_trends WHERE series = "
            "(SELECT series FROM raw.files WHERE sha256 = ?)", [new]).fetchone()[0]
    assert r.method == "delta", r
    assert_snapshot_matches_live(wh)
    assert r.rows_written["staging.profile_samples"] == new_rows < all_rows
    # only the new run's series is rewritten (its old rows deleted, its new rows inserted)
    assert 0 < r.rows_written["marts.kernel_trends"] <= 2 * series_rows
    with db.writer(wh.warehouse) as con:
        models.build(con, full_refresh=True)
        snapshot.publish(wh, con)
    assert_snapshot_matches_live(wh)
    with db.writer(wh.warehouse) as con:
        assert ingest_file(wh, runs[5], con=con).status == "ingested"
        models.build(con)
        r = snapshot.publish(wh, con)
    assert r.method == "delta", r
    assert_snapshot_matches_live(wh)
