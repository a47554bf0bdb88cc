"""Warehouse creation with one DuckDB instance (``db.create_warehouse(keep=True)``, the loader's
``WriterAhead``): what a second reader of that code found. The creating connection's database
was opened under a temporary name, so DuckDB's instance cache does not know it under the
warehouse's name: a second ``duckdb.connect`` of the warehouse in the same process starts a
second instance on the same file (two writers; closing either drops the process's POSIX lock).
``db._refuse_second_instance`` must see every such open, and the kept connection must never
outlive its owner."""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from warehouse import db
from warehouse.errors import PwhError

OPEN_CHILD = textwrap.dedent("""
    import sys, duckdb
    try:
        duckdb.connect(sys.argv[1]).close()
        print("opened")
    except duckdb.IOException as exc:
        print("locked" if "lock" in str(exc).lower() else f"error {exc}")
""")


def other_process_opens(path) -> str:
    """``opened`` when another process can open the warehouse read-write, ``locked`` when a
    DuckDB instance of this process still holds it."""
    r = subprocess.run([sys.executable, "-c", OPEN_CHILD, str(path)], capture_output=True,
                       text=True, timeout=300)
    return r.stdout.strip() or r.stderr


def insert_error(con, name: str) -> None:
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('x', ?, 'io', NULL, 'm', NULL, now()::timestamp)", [name])


# ------------------------------------------------------------------ the kept connection dropped


def test_a_creating_connection_dropped_without_close_lets_the_warehouse_go(tmp_path):
    """The registry held a cursor of the creating connection: a connection garbage-collected
    without ``close()`` (its owner gone) stayed open through that cursor for the life of the
    process: the file locked against every other process, and every later open in this one
    refused with "use that connection" (a connection nobody has any more)."""
    path = tmp_path / "w.duckdb"
    con = db.connect_rw(path, keep_created=True)
    insert_error(con, "kept.json")
    del con
    gc.collect()
    assert other_process_opens(path) == "opened"
    again = db.connect_rw(path, timeout_s=5)
    try:
        assert again.execute("SELECT original_path FROM raw.ingest_errors").fetchall() == [
            ("kept.json",)]
    finally:
        again.close()


def test_ctrl_c_while_the_writer_thread_creates_the_warehouse(tmp_path, wh, seeds, monkeypatch):
    """``pwh ingest`` as a library call (a notebook, a service): Ctrl-C reaches the main thread
    while the ``WriterAhead`` thread is still creating the warehouse; ``ingest_paths`` abandons
    the thread, which then finishes and drops its connection. The warehouse must be usable by
    the next call in the same process, and by other processes."""
    from warehouse.ingesting import forking, loader

    gate, opening = threading.Event(), threading.Event()
    real_connect = db.connect_rw

    def slow_connect(path, **kw):
        opening.set()
        assert gate.wait(60)
        return real_connect(path, **kw)

    def interrupted(*a, con=None, **kw):
        forking.forks_done()  # the writer starts opening, as once the first file is forked
        assert opening.wait(60)
        raise KeyboardInterrupt

    monkeypatch.setattr(db, "connect_rw", slow_connect)
    monkeypatch.setattr(loader, "ingest_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loader.ingest_paths(wh, [seeds["profile"]])
    gate.set()
    for t in threading.enumerate():
        if t.name == "pwh-writer-open":
            t.join(60)
    monkeypatch.undo()
    gc.collect()
    assert wh.warehouse.exists()
    assert other_process_opens(wh.warehouse) == "opened"
    results = loader.ingest_paths(wh, [seeds["profile"]])
    assert [r.status for r in results] == ["ingested"], results


# ------------------------------------------------------------------ path aliases


@pytest.mark.parametrize("alias", ["symlinked folder", "dot-dot", "hard link", "relative"])
def test_the_creating_connection_is_found_under_any_name_of_the_file(tmp_path, monkeypatch,
                                                                     alias):
    """The registry was keyed by the path's spelling: another spelling of the same file opened
    a second DuckDB instance on it in this process."""
    real = tmp_path / "real"
    path = real / "w.duckdb"
    con = db.connect_rw(path, keep_created=True)
    try:
        if alias == "symlinked folder":
            (tmp_path / "link").symlink_to(real, target_is_directory=True)
            other = tmp_path / "link" / "w.duckdb"
        elif alias == "dot-dot":
            (real / "sub").mkdir()
            other = real / "sub" / ".." / "w.duckdb"
        elif alias == "hard link":
            other = real / "w2.duckdb"
            os.link(path, other)
        else:
            monkeypatch.chdir(real)
            other = type(path)("w.duckdb")
        with pytest.raises(PwhError, match="already open for writing in this process"):
            db.connect_rw(other, timeout_s=1).close()
        insert_error(con, "still.json")  # the creating connection goes on writing alone
    finally:
        con.close()
    assert other_process_opens(path) == "opened"


# ------------------------------------------------------------------ Ctrl-C inside creation


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, lambda: RuntimeError("Query interrupted")])
def test_an_interrupt_after_the_warehouse_got_its_name_closes_the_connection(
        tmp_path, monkeypatch, interrupt):
    """Ctrl-C (or DuckDB's "Query interrupted") right after the link: the connection was
    neither closed nor registered. While the traceback lives (a notebook keeps the last one)
    it held the file, and this process could open it a second time."""
    path = tmp_path / "w.duckdb"
    real_claim = db._claim

    def claim_then_interrupt(tmp, p):
        assert real_claim(tmp, p)
        raise interrupt()

    monkeypatch.setattr(db, "_claim", claim_then_interrupt)
    with pytest.raises((KeyboardInterrupt, RuntimeError)) as caught:
        db.connect_rw(path, keep_created=True)
    monkeypatch.undo()
    assert caught.value is not None  # the traceback (and its frames) still alive
    assert path.exists()
    assert other_process_opens(path) == "opened"
    con = db.connect_rw(path, timeout_s=5)
    try:
        assert db.has_table(con, "raw", "files")
    finally:
        con.close()
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"]


# ------------------------------------------------------------------ durability of the name


def test_the_folder_is_synced_after_the_warehouse_gets_its_name(tmp_path, monkeypatch):
    """The new file's data was synced, but not the folder entry that names it: after a power
    cut the warehouse (and every run committed to it) could be gone although ingested."""
    path = tmp_path / "w.duckdb"
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        st = os.fstat(fd)
        synced.append((stat.S_ISDIR(st.st_mode), st.st_ino, path.exists()))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    for keep in (False, True):
        synced.clear()
        con = db.create_warehouse(path, keep=keep)
        if con is not None:
            con.close()
        folder = os.stat(tmp_path).st_ino
        assert (True, folder, True) in synced, (keep, synced)
        path.unlink()
