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

from tests.reliability.conftest import (
    error_paths,
    other_process_opens,
    small_fs,  # noqa: F401, F811 - the fixture
)
from warehouse import db
from warehouse.errors import PwhError


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
    with pytest.raises(KeyboardInterrupt) as caught:
        loader.ingest_paths(wh, [seeds["profile"]])
    gate.set()
    for t in threading.enumerate():
        if t.name == "pwh-writer-open":
            t.join(60)
    monkeypatch.undo()
    gc.collect()
    # a notebook keeps the last traceback (and so the frames holding the abandoned opening):
    # the connection it opened after it was abandoned must be closed all the same
    assert caught.traceback is not None
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


# ------------------------------------------------------------------ real processes


RACE_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path
    from warehouse import db
    real = db._claim
    def claim(tmp, path):  # both creators built their file: wait here until both are released
        print("built", flush=True)
        sys.stdin.readline()
        won = real(tmp, path)
        print("won" if won else "lost", flush=True)
        return won
    db._claim = claim
    con = db.connect_rw(Path(sys.argv[1]), keep_created=True, timeout_s=300, quiet=True)
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('x', ?, 'io', NULL, 'm', NULL, now()::timestamp)", [sys.argv[2]])
    print("inserted", flush=True)
    sys.stdin.readline()
    con.close()
    print("closed", flush=True)
""")


def test_two_processes_creating_one_warehouse_at_once(tmp_path):
    """Both build a complete file, then link it at the same moment: one wins and keeps its
    connection; the other drops its copy and waits for the winner's lock like any writer.
    Nothing is replaced, both writes land, nothing is left beside the warehouse."""
    from tests.reliability.conftest import read_line, spawn

    path = tmp_path / "w.duckdb"
    procs = [spawn([sys.executable, "-c", RACE_CHILD, str(path), f"p{i}"],
                   stdin=subprocess.PIPE) for i in range(2)]
    try:
        for p in procs:
            assert read_line(p) == "built\n", p.stderr.read()
        for p in procs:  # released together
            p.stdin.write("\n")
            p.stdin.flush()
        outcome = [read_line(p).strip() for p in procs]
        assert sorted(outcome) == ["lost", "won"], outcome
        winner, loser = (procs if outcome[0] == "won" else procs[::-1])
        assert read_line(winner) == "inserted\n"
        winner.stdin.write("\n")
        winner.stdin.flush()
        assert read_line(winner) == "closed\n"
        assert read_line(loser) == "inserted\n", loser.stderr.read()
        loser.stdin.write("\n")
        loser.stdin.flush()
        assert read_line(loser) == "closed\n"
    finally:
        for p in procs:
            p.kill()
            p.wait(60)
    assert error_paths(path) == ["p0", "p1"]
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"]


KILLED_AFTER_LINK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from warehouse import db
    real = db._claim
    def claim(tmp, path):
        assert real(tmp, path)
        print("linked", flush=True)
        time.sleep(3600)  # killed here: named, its temporary name not yet removed
    db._claim = claim
    db.connect_rw(Path(sys.argv[1]), keep_created=True)
""")


def test_kill9_between_the_link_and_the_first_commit(tmp_path, wh, seeds):
    """The warehouse already has its name (and its full schema); the temporary name is a second
    link to the same file. The next ingest uses the warehouse and removes the leftover; a
    reader meanwhile sees the complete raw layer."""
    import duckdb

    from tests.reliability.conftest import kill_hard, python_child, read_line
    from warehouse.ingesting import loader

    proc = python_child(KILLED_AFTER_LINK, str(wh.warehouse))
    assert read_line(proc) == "linked\n", proc.stderr.read()
    kill_hard(proc)
    leftovers = [p for p in wh.warehouse.parent.iterdir() if p.name.endswith(db.INIT_SUFFIX)]
    assert leftovers and leftovers[0].stat().st_ino == wh.warehouse.stat().st_ino
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        assert db.has_table(con, "raw", "files") and db.has_table(con, "checks", "results")
    finally:
        con.close()
    results = loader.ingest_paths(wh, [seeds["profile"], seeds["audit"]])
    assert [r.status for r in results] == ["ingested", "ingested"], results
    assert not [p for p in leftovers if p.exists()]


# ------------------------------------------------------------------ file systems without hard links


NO_LINKS_CHILD = textwrap.dedent("""
    import errno, os, sys
    from pathlib import Path
    from warehouse import db, keep
    path = Path(sys.argv[1])
    def no_link(src, dst, **kw):
        raise OSError(errno.EPERM, "Operation not permitted", str(src), None, str(dst))
    os.link = no_link  # a file system without hard links ...
    keep._renameat2 = None  # ... nor renameat2(RENAME_NOREPLACE): the empty claim
    real_replace = os.replace
    def replace(src, dst):
        if Path(dst) == path:
            print("claimed", flush=True)
            sys.stdin.readline()  # paused (or killed) while the name is an empty file
        return real_replace(src, dst)
    os.replace = replace
    con = db.connect_rw(path, keep_created=True)
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('x', 'child', 'io', NULL, 'm', NULL, now()::timestamp)")
    con.close()
    print("closed", flush=True)
""")


def test_kill9_while_the_name_is_an_empty_claim(tmp_path, wh, seeds):
    """Last resort of the claim: the name is taken by an empty file, then the warehouse is
    renamed over it. Killed in between, the empty file stayed, and DuckDB refuses an empty
    file: every later ingest failed ("not a valid DuckDB database file")."""
    from tests.reliability.conftest import kill_hard, read_line, spawn
    from warehouse.ingesting import loader

    proc = spawn([sys.executable, "-c", NO_LINKS_CHILD, str(wh.warehouse)],
                 stdin=subprocess.PIPE)
    assert read_line(proc) == "claimed\n", proc.stderr.read()
    kill_hard(proc)
    assert wh.warehouse.stat().st_size == 0
    results = loader.ingest_paths(wh, [seeds["profile"]])
    assert [r.status for r in results] == ["ingested"], results


def test_an_open_while_the_name_is_an_empty_claim_waits_for_the_warehouse(tmp_path, monkeypatch):
    """Another writer opening the warehouse in that moment failed at once (an empty file is no
    DuckDB database) instead of waiting for the creator like for any other writer."""
    import fcntl

    from tests.reliability.conftest import read_line, spawn

    path = tmp_path / "w.duckdb"
    proc = spawn([sys.executable, "-c", NO_LINKS_CHILD, str(path)], stdin=subprocess.PIPE)
    try:
        assert read_line(proc) == "claimed\n", proc.stderr.read()
        waiting = threading.Event()
        real_flock = fcntl.flock

        def flock(fd, op):
            waiting.set()  # the opener waits for the creator's lock
            return real_flock(fd, op)

        monkeypatch.setattr(fcntl, "flock", flock)
        got = {}

        def opener():
            try:
                got["con"] = db.connect_rw(path, timeout_s=300, quiet=True)
            except BaseException as exc:  # noqa: BLE001 - reported below
                got["error"] = exc
            finally:
                waiting.set()

        t = threading.Thread(target=opener)
        t.start()
        assert waiting.wait(300)
        proc.stdin.write("\n")  # the creator renames its warehouse over the claim
        proc.stdin.flush()
        t.join(300)
        assert "error" not in got, got.get("error")
        con = got["con"]
        try:
            assert con.execute("SELECT original_path FROM raw.ingest_errors").fetchall() == [
                ("child",)]
        finally:
            con.close()
        assert read_line(proc) == "closed\n", proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(60)


def test_without_hard_links_the_name_is_claimed_by_a_rename_that_never_replaces(tmp_path,
                                                                               monkeypatch):
    """Where renameat2(RENAME_NOREPLACE) works, the name never is an empty file."""
    import errno

    from warehouse import keep

    if keep._renameat2 is None:
        pytest.skip("no renameat2 here")
    path = tmp_path / "w.duckdb"

    def no_link(src, dst, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    empty_claims = []
    real_replace = os.replace

    def replace(src, dst):
        if str(dst) == str(path):
            empty_claims.append(path.exists())
        return real_replace(src, dst)

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(os, "replace", replace)
    con = db.connect_rw(path, keep_created=True)
    try:
        insert_error(con, "a.json")
        assert db.has_table(con, "raw", "files")
    finally:
        con.close()
    monkeypatch.undo()
    assert empty_claims == []
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"]
    assert other_process_opens(path) == "opened"


# ------------------------------------------------------------------ the first ingest fails


@pytest.mark.parametrize("where", ["insert", "commit"])
@pytest.mark.parametrize("how", ["ingest_paths", "ingest_file"])
def test_the_first_ingest_failing_on_the_creating_connection(tmp_path, wh, seeds, monkeypatch,
                                                             where, how):
    """The connection that created the warehouse fails in the first file's transaction: the run
    is recorded as failed, nothing of it is in the raw tables, the connection is closed (the
    file is free for other processes) and the next ingest uses the warehouse as usual."""
    import duckdb

    from tests.reliability.conftest import raw_state
    from warehouse.ingesting import loader, writer

    real = getattr(writer.Writer, where)
    calls = []

    def failing(self, *a):
        calls.append(self.con)
        if len(calls) == 1:
            raise duckdb.ConversionException("injected failure in the first transaction")
        return real(self, *a)

    monkeypatch.setattr(writer.Writer, where, failing)
    if how == "ingest_paths":
        results = loader.ingest_paths(wh, [seeds["profile"]])
    else:
        results = [loader.ingest_file(wh, seeds["profile"])]
    monkeypatch.undo()
    assert [r.status for r in results] == ["failed"], results
    assert "injected failure" in results[0].message
    assert other_process_opens(wh.warehouse) == "opened"
    state = raw_state(wh.warehouse)
    assert not any(state[t] for t in state if t != "ingest_errors"), "nothing of the run"
    assert [p.name for p in wh.warehouse.parent.iterdir()
            if p.name.startswith(".")] == [], "no temporary name or log left"
    results = loader.ingest_paths(wh, [seeds["profile"], seeds["audit"]])
    assert [r.status for r in results] == ["ingested", "ingested"], results


KILLED_BEFORE_FIRST_COMMIT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from warehouse.config import settings
    from warehouse.ingesting import loader, writer
    real = writer.Writer.commit
    def commit(self, row):
        self.con.execute("SELECT 1").fetchall()
        print("loaded", flush=True)
        time.sleep(3600)  # killed here: the first run inserted, not committed
    writer.Writer.commit = commit
    loader.ingest_paths(settings(Path(sys.argv[1])), [sys.argv[2]])
""")


def test_kill9_inside_the_first_ingests_transaction(tmp_path, wh, seeds):
    """Killed with the first run's rows inserted on the creating connection but not committed:
    the warehouse has its schema and no row of the run; the next ingest loads it once."""
    from tests.reliability.conftest import (
        assert_consistent,
        kill_hard,
        python_child,
        raw_state,
        read_line,
    )
    from warehouse.ingesting import loader

    proc = python_child(KILLED_BEFORE_FIRST_COMMIT, str(wh.warehouse), str(seeds["profile"]))
    assert read_line(proc) == "loaded\n", proc.stderr.read()
    kill_hard(proc)
    state = raw_state(wh.warehouse)
    assert not any(state.values()), "nothing of the uncommitted run"
    results = loader.ingest_paths(wh, [seeds["profile"]])
    assert [r.status for r in results] == ["ingested"], results
    assert len(assert_consistent(wh)) == 1
    assert not [p for p in wh.warehouse.parent.iterdir() if db.INIT_SUFFIX in p.name]


# ------------------------------------------------------------------ a full disk at the first commit


@pytest.mark.parametrize("leave", [0, 16 << 10, 64 << 10, 192 << 10])
def test_a_full_disk_at_the_first_commit_never_loses_an_ingested_run(tmp_path, seeds, small_fs,  # noqa: F811
                                                                    leave):
    """The creating connection's log lives under the temporary name (no later open replays it):
    a commit whose checkpoint hits a full disk must not be reported ingested. Whatever the free
    space, a run reported ingested is in the warehouse once space is freed; one reported
    failed is ingested by the next run."""
    from tests.reliability.conftest import fill_disk, raw_state
    from warehouse.config import settings
    from warehouse.ingesting import loader, writer

    fs = small_fs(8 << 20)
    s = settings(fs / "state" / "warehouse.duckdb")
    real = writer.Writer.commit
    filler = []

    def commit(self, row):
        filler.append(fill_disk(fs, leave))
        return real(self, row)

    writer.Writer.commit = commit
    try:
        results = loader.ingest_paths(s, [seeds["profile"]])
    finally:
        writer.Writer.commit = real
    filler[0].unlink()
    status = results[0].status
    assert status in ("ingested", "failed"), results
    shas = {r[0] for r in raw_state(s.warehouse)["files"]}
    if status == "ingested":
        assert results[0].sha256 in shas, f"leave={leave}: reported ingested, not in the warehouse"
    results = loader.ingest_paths(s, [seeds["profile"]])
    assert results[0].status in ("ingested", "skipped"), results
    assert len({r[0] for r in raw_state(s.warehouse)["files"]}) == 1


# ------------------------------------------------------------------ threads of one process


def test_a_thread_opening_the_warehouse_while_another_thread_creates_it(tmp_path, monkeypatch):
    """Thread A creates the warehouse and keeps its connection; thread B opens the warehouse
    just as A's file got its name, before A registered its connection: B started a second
    DuckDB instance of the file in the same process. B must wait for A's connection to close,
    like a writer of another process."""
    path = tmp_path / "w.duckdb"
    named, a_closed = threading.Event(), threading.Event()
    real_claim = db._claim

    def claim(tmp, p):
        won = real_claim(tmp, p)
        named.set()
        # B tries now; a fixed registry keeps B out (it may block B until this returns)
        b_done.wait(3)
        return won

    b_done = threading.Event()
    got = {}

    def thread_b():
        try:
            con = db.connect_rw(path, timeout_s=300, quiet=True)
            got["closed_before"] = a_closed.is_set()
            con.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            got["error"] = exc
        finally:
            b_done.set()

    monkeypatch.setattr(db, "_claim", claim)
    a = {}
    ta = threading.Thread(target=lambda: a.setdefault(
        "con", db.connect_rw(path, keep_created=True)))
    ta.start()
    assert named.wait(300)
    tb = threading.Thread(target=thread_b)
    tb.start()
    ta.join(300)
    con_a = a["con"]
    insert_error(con_a, "a.json")  # A writes alone meanwhile
    a_closed.set()
    con_a.close()
    tb.join(300)
    assert "error" not in got, got.get("error")
    assert got["closed_before"], "B opened the file while A's creating connection was open"
    assert other_process_opens(path) == "opened"


def test_files_ingested_from_a_pool_of_threads_into_a_new_warehouse(tmp_path, wh):
    """``ingest_file`` from several threads (a service's pool), the first of them creating the
    warehouse: every file is ingested once, none fails because another thread holds the
    creating connection, and the warehouse is consistent."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.reliability.conftest import assert_consistent, write_runs
    from warehouse.ingesting import loader

    runs = write_runs(tmp_path / "in", 6, samples=50)
    interval = sys.getswitchinterval()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda p: loader.ingest_file(wh, p), runs))
    # the openings' lowered switch intervals (forking.lower_switch_interval) all ended
    assert sys.getswitchinterval() == interval
    assert [r.status for r in results] == ["ingested"] * 6, [r.message for r in results]
    assert len(assert_consistent(wh)) == 6
    assert other_process_opens(wh.warehouse) == "opened"
