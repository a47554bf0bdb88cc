"""A full disk and an unwritable warehouse folder: a clear error naming the path and the cause,
and the previous state intact (live warehouse and analysts' snapshot).

Real file systems where the machine allows it (a tiny tmpfs, filled up or remounted read-only;
needs root with CAP_SYS_ADMIN), a chmod'ed folder for non-root users, and injected OSErrors that
always run and cover the same code paths.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil

import pytest

from tests.reliability.conftest import (
    assert_consistent,
    fill_disk,
    pwh,
    raw_state,
    remount,
    write_runs,
)
from warehouse import db
from warehouse.config import settings
from warehouse.errors import PwhError
from warehouse.ingesting.loader import ingest_file, ingest_paths
from warehouse.serving import snapshot, snapshot_delta
from warehouse.serving.query import connect


@pytest.fixture
def on_tmpfs(small_fs, tmp_path):
    """A warehouse with 2 runs and a snapshot on a 32 MB tmpfs; new runs waiting in tmp_path."""
    fs = small_fs(32 << 20)
    s = settings(fs / "state" / "warehouse.duckdb")
    runs = write_runs(tmp_path / "in", 5, samples=2000)
    ingest_paths(s, runs[:2])
    snapshot.publish(s)
    return fs, s, runs[2:]


def _snapshot_state(s):
    with connect(s) as con:
        path = con.path
    return path, raw_state(path)


def test_full_disk_during_ingestion_is_a_clear_error_and_changes_nothing(on_tmpfs):
    fs, s, new = on_tmpfs
    before, snap_before = raw_state(s.warehouse), _snapshot_state(s)
    filler = fill_disk(fs)
    r = pwh("--warehouse", str(s.warehouse), "ingest", *map(str, new))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "internal error" not in r.stdout + r.stderr
    for p in new:
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"FAIL {p}"))
        assert "No space left on device" in line, line
    assert raw_state(s.warehouse) == before
    assert _snapshot_state(s) == snap_before  # analysts unaffected
    r = pwh("--warehouse", str(s.warehouse), "snapshot")
    assert r.returncode == 1 and "No space left on device" in r.stderr
    assert "previous snapshot is still current" in r.stderr
    assert _snapshot_state(s) == snap_before
    assert not list(s.snapshot_dir.glob(".publishing-*"))
    filler.unlink()  # space again: everything goes through, exactly once
    r = pwh("--warehouse", str(s.warehouse), "ingest", *map(str, new))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(assert_consistent(s)) == 5
    assert snapshot.publish(s).path.exists()


def test_full_disk_when_only_the_database_write_fails(on_tmpfs):
    fs, s, new = on_tmpfs
    for p in new:  # archived already (e.g. staged by the Dagster sensor): only DuckDB writes
        data = p.read_bytes()
        shutil.copy(p, s.archive_dir / f"{hashlib.sha256(data).hexdigest()}.json")
    before = raw_state(s.warehouse)
    filler = fill_disk(fs)
    results = ingest_paths(s, new)
    assert raw_state(s.warehouse) == before  # this part holds today
    filler.unlink()
    for r in results:
        assert r.status == "failed"
        assert "No space left on device" in r.message, r.message
        assert "internal error" not in r.message


def test_read_only_file_system_is_a_clear_error(on_tmpfs):
    fs, s, new = on_tmpfs
    before, snap_before = raw_state(s.warehouse), _snapshot_state(s)
    remount(fs, "ro")
    try:
        r = pwh("--warehouse", str(s.warehouse), "ingest", str(new[0]))
        assert r.returncode == 1
        assert str(s.warehouse) in r.stderr and "Read-only file system" in r.stderr
        assert "Traceback" not in r.stderr
        r = pwh("--warehouse", str(s.warehouse), "snapshot")
        assert r.returncode == 1 and "Read-only file system" in r.stderr
        r = pwh("--warehouse", str(fs / "other" / "warehouse.duckdb"), "ingest", str(new[0]))
        assert r.returncode == 1 and "cannot create the warehouse folder" in r.stderr
        # analysts keep reading the snapshot
        r = pwh("--warehouse", str(s.warehouse), "sql", "SELECT count(*) AS n FROM raw.files",
                "--format", "csv")
        assert r.returncode == 0 and r.stdout.split() == ["n", "2"], r.stderr
    finally:
        remount(fs, "rw")
    assert raw_state(s.warehouse) == before
    assert _snapshot_state(s) == snap_before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions; the tmpfs tests "
                    "cover an unwritable folder as root")
def test_unwritable_folder_for_a_normal_user(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 2, samples=10)
    ingest_paths(wh, runs[:1])
    before = raw_state(wh.warehouse)
    os.chmod(wh.state_dir, 0o555)
    os.chmod(wh.warehouse, 0o444)
    try:
        r = pwh("--warehouse", str(wh.warehouse), "ingest", str(runs[1]))
        assert r.returncode == 1 and str(wh.warehouse) in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        os.chmod(wh.state_dir, 0o755)
        os.chmod(wh.warehouse, 0o644)
    assert raw_state(wh.warehouse) == before


# --------------------------------------------------------------------------- injected OSErrors


def test_injected_unwritable_warehouse_folder(wh, monkeypatch, tmp_path):
    from pathlib import Path

    def denied(self, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(db.WarehouseIOError, match=r"cannot create the warehouse folder: "
                       r"Permission denied"):
        db.connect_rw(wh.warehouse)


def test_injected_io_error_opening_the_warehouse(wh, monkeypatch):
    import duckdb

    def refuse(*a, **k):
        raise duckdb.IOException(f'IO Error: Cannot open file "{wh.warehouse}": Permission denied')

    monkeypatch.setattr(db.duckdb, "connect", refuse)
    with pytest.raises(db.WarehouseIOError) as e:
        db.connect_rw(wh.warehouse)
    assert str(wh.warehouse) in str(e.value) and "not writable" in str(e.value)


def test_injected_full_disk_while_archiving(wh, tmp_path, monkeypatch):
    import warehouse.ingesting.loader as loader

    runs = write_runs(tmp_path / "in", 2, samples=10)
    ingest_file(wh, runs[0])
    before = raw_state(wh.warehouse)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(loader, "archive_bytes", full)
    r = ingest_file(wh, runs[1])
    assert r.status == "failed" and str(runs[1]) in r.message
    assert "No space left on device" in r.message
    after = raw_state(wh.warehouse)
    errors = after.pop("ingest_errors")
    before.pop("ingest_errors")
    assert after == before  # nothing of the run was written
    assert len(errors) == 1 and str(runs[1]) in errors[0][1]  # the failure is logged
    assert len(assert_consistent(wh)) == 1


def test_injected_full_disk_while_publishing(wh, tmp_path, monkeypatch):
    ingest_paths(wh, write_runs(tmp_path / "in", 2, samples=10))
    first = snapshot.publish(wh).path
    real_replace = os.replace

    def full(src, dst, *a, **k):
        if str(dst).endswith(".duckdb") and ".publishing-" in str(src):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst, *a, **k)

    real_rename = snapshot.keep.rename_noreplace

    def full_rename(src, dst):  # the snapshot file moved into place (never over another one)
        if str(dst).endswith(".duckdb") and ".publishing-" in str(src):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_rename(src, dst)

    # the disk fills while the snapshot file is moved into place, then while the pointer swaps
    for target, name, fake in ((snapshot.keep, "rename_noreplace", full_rename),
                               (snapshot.os, "replace", full)):
        real = getattr(target, name)
        monkeypatch.setattr(target, name, fake)
        with pytest.raises((PwhError, OSError)):
            snapshot.publish(wh, full=True)
        monkeypatch.setattr(target, name, real)
        assert snapshot.current(wh) == first
        with connect(wh) as con:
            assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (2,)
        assert not list(wh.snapshot_dir.glob(".publishing-*")), name


def test_injected_database_error_during_a_delta_publish(wh, tmp_path, monkeypatch):
    import duckdb

    runs = write_runs(tmp_path / "in", 3, samples=10)
    ingest_paths(wh, runs[:2])
    snapshot.publish(wh)
    first = snapshot.publish(wh).path  # now there is a spare for the next delta
    ingest_paths(wh, runs[2:])
    real_apply = snapshot_delta.apply

    def full(con, plan):
        real_apply(con, plan)  # half the work is done inside the transaction, then the disk fills
        raise duckdb.IOException('IO Error: Could not write file "x.wal": No space left on device')

    monkeypatch.setattr(snapshot_delta, "apply", full)
    with pytest.raises(snapshot.SnapshotError, match=r"No space left on device; the previous "
                       r"snapshot is still current"):
        snapshot.publish(wh)
    monkeypatch.setattr(snapshot_delta, "apply", real_apply)
    assert snapshot.current(wh) == first
    with connect(wh) as con:
        assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (2,)
    r = snapshot.publish(wh)  # the half-updated spare is rolled back and synchronised again
    assert r.method == "delta"
    assert assert_consistent(settings(r.path)) == assert_consistent(wh)
