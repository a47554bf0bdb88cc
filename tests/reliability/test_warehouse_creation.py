"""Creating a warehouse with one DuckDB instance (``db.connect_rw(..., keep_created=True)``): the
connection that created the file keeps writing it, and everything it commits is at the
warehouse's name even when the process is killed before it closes."""

from __future__ import annotations

import textwrap

import duckdb
import pytest

from tests.reliability.conftest import (
    error_paths,
    kill_hard,
    other_process_opens,
    python_child,
    read_lines,
)
from warehouse import db
from warehouse.errors import PwhError

KEPT_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from warehouse import db
    con = db.connect_rw(Path(sys.argv[1]), keep_created=True)
    print(con.execute("SELECT path FROM duckdb_databases() "
                      "WHERE database_name = current_database()").fetchone()[0], flush=True)
    con.execute("BEGIN")
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('a', 'committed.json', 'io', NULL, 'm', NULL, now()::timestamp)")
    con.execute("COMMIT")
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('b', 'autocommitted.json', 'io', NULL, 'm', NULL, now()::timestamp)")
    con.execute("BEGIN")
    con.execute("INSERT INTO raw.ingest_errors VALUES "
                "('c', 'uncommitted.json', 'io', NULL, 'm', NULL, now()::timestamp)")
    print("committed", flush=True)
    time.sleep(3600)  # killed here: the creating connection never closes
""")


def test_commits_on_the_creating_connection_survive_a_kill_before_it_closes(tmp_path):
    """Its write-ahead log lives under the temporary name (a later open of the warehouse never
    replays it), so every commit must reach the file itself before it returns."""
    path = tmp_path / "wh" / "w.duckdb"
    proc = python_child(KEPT_CHILD, str(path))
    lines = read_lines(proc, 2)
    assert len(lines) == 2 and lines[1] == "committed\n", proc.stderr.read()
    assert lines[0].strip().endswith(db.INIT_SUFFIX)  # it was the creating instance
    kill_hard(proc)
    assert path.exists()
    assert error_paths(path) == ["autocommitted.json", "committed.json"]
    # its temporary log (if any) is removed once its process is gone; the warehouse stays
    db.remove_stale_init_files(path.parent)
    assert [p.name for p in path.parent.iterdir()] == ["w.duckdb"]


def test_the_creating_connection_is_the_warehouse_and_has_the_schema(tmp_path):
    path = tmp_path / "w.duckdb"
    con = db.connect_rw(path, keep_created=True)
    try:
        assert path.exists()
        assert not [p for p in tmp_path.iterdir() if p.name != "w.duckdb"], "no temporary name"
        assert con.execute("SELECT current_database()").fetchone()[0] == "w"
        assert db.has_table(con, "raw", "files") and db.has_table(con, "checks", "results")
        # the same process must not start a second DuckDB instance on the file meanwhile
        with pytest.raises(PwhError, match="already open for writing in this process"):
            db.connect_rw(path, timeout_s=0.5)  # waits for it, then refuses
        con.execute("INSERT INTO raw.ingest_errors VALUES "
                    "('a', 'x.json', 'io', NULL, 'm', NULL, now()::timestamp)")
    finally:
        con.close()
    again = db.connect_rw(path, keep_created=True)  # closed: an ordinary open of the file
    try:
        assert again.execute("SELECT count(*) FROM raw.ingest_errors").fetchone()[0] == 1
        path_of = again.execute("SELECT path FROM duckdb_databases() "
                                "WHERE database_name = current_database()").fetchone()[0]
        assert path_of == str(path)
    finally:
        again.close()


def test_a_warehouse_created_meanwhile_by_another_process_is_never_replaced(tmp_path):
    path = tmp_path / "w.duckdb"
    other = duckdb.connect(str(path))  # "another process" won the race: its file is there
    other.execute("CREATE TABLE mine AS SELECT 1 AS x")
    other.close()
    assert db.create_warehouse(path, keep=True) is None
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("SELECT x FROM mine").fetchall() == [(1,)]
        assert not db.has_table(con, "raw", "files")
    finally:
        con.close()
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"], "its copy was dropped"


def test_another_process_cannot_open_the_warehouse_while_its_creator_writes_it(tmp_path):
    """The creating connection keeps DuckDB's lock under the warehouse's name (a descriptor of
    ours closed on the file would have dropped it: POSIX locks are per process and file)."""
    path = tmp_path / "w.duckdb"
    con = db.connect_rw(path, keep_created=True)
    try:
        con.execute("INSERT INTO raw.ingest_errors VALUES "
                    "('a', 'x.json', 'io', NULL, 'm', NULL, now()::timestamp)")
        assert other_process_opens(path) == "locked"
        # the live warehouse is written with DuckDB's syncs
        assert con.execute("SELECT current_setting('fsync_mode')").fetchone()[0] == "STANDARD"
    finally:
        con.close()
    assert other_process_opens(path) == "opened"
