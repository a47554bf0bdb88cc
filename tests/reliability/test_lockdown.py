"""Analyst connections cannot write, escape or unlock: every attempt of the issue is refused with
a message that says what is not allowed; legitimate work (queries, export folder) still works."""

from __future__ import annotations

import json
import threading
import time

import pytest

import warehouse
from tests.reliability.conftest import pwh, write_runs
from warehouse.errors import PwhError, QueryRefused
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving.query import QueryInterrupted, QueryTimeout, connect


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One small warehouse (with its snapshot) for the read-only tests of this module."""
    from warehouse.config import settings
    from warehouse.serving import snapshot

    d = tmp_path_factory.mktemp("lockdown")
    s = settings(d / "state" / "warehouse.duckdb")
    ingest_paths(s, write_runs(d / "in", 2, samples=20))
    snapshot.publish(s)
    return s


@pytest.fixture
def filled(shared):
    return shared


READ_ONLY = r"read-only"
NO_FILES = r"only in the export folder"
NO_EXT = r"extensions cannot be installed or loaded"
LOCKED = r"configuration of analyst connections is locked"
NO_ATTACH = r"cannot be attached or detached"

ESCAPES = [
    # writes and DDL
    ("insert", "INSERT INTO raw.files SELECT * FROM raw.files", READ_ONLY),
    ("update", "UPDATE raw.files SET label = 'x'", READ_ONLY),
    ("delete", "DELETE FROM raw.files", READ_ONLY),
    ("create_table", "CREATE TABLE main.t AS SELECT 1 AS x", READ_ONLY),
    ("create_temp", "CREATE TEMP TABLE t AS SELECT 1 AS x", READ_ONLY),
    ("create_view", "CREATE VIEW v AS SELECT 1", READ_ONLY),
    ("create_macro", "CREATE MACRO m(a) AS a + 1", READ_ONLY),
    ("drop", "DROP TABLE raw.files", READ_ONLY),
    ("alter", "ALTER TABLE raw.files ADD COLUMN x INT", READ_ONLY),
    ("vacuum", "VACUUM", READ_ONLY),
    ("smuggled_after_select", "SELECT 1; DELETE FROM raw.files", READ_ONLY),
    ("prepared_write", "PREPARE p AS DELETE FROM raw.files", r"only queries"),
    # ATTACH
    ("attach_memory", "ATTACH ':memory:' AS m", NO_ATTACH),
    ("attach_live", "ATTACH '{live}' AS w", NO_ATTACH),
    ("attach_live_rw", "ATTACH '{live}' AS w (READ_WRITE)", NO_ATTACH),
    ("detach", "DETACH pwh", NO_ATTACH),
    # files outside the export folder
    ("copy_to_tmp", "COPY raw.files TO '{tmp}/x.csv'", NO_FILES),
    ("copy_traversal", "COPY raw.files TO '{exports}/../escape.csv'", NO_FILES),
    # a relative path lands in the export folder, and '..' does not lead out of it
    ("copy_relative_traversal", "COPY raw.files TO '../escape.csv'", NO_FILES),
    ("read_relative_traversal", "SELECT * FROM read_csv('../../../../../../etc/passwd')",
     NO_FILES),
    ("export_database", "EXPORT DATABASE '{tmp}/dump'", NO_FILES),
    ("read_csv_passwd", "SELECT * FROM read_csv('/etc/passwd')", NO_FILES),
    ("read_text_passwd", "SELECT * FROM read_text('/etc/passwd')", NO_FILES),
    ("replacement_scan", "SELECT * FROM '/etc/passwd'", NO_FILES),
    ("glob", "SELECT * FROM glob('/etc/*')", NO_FILES),
    ("read_live_file", "SELECT * FROM read_blob('{live}')", NO_FILES),
    ("import_database", "IMPORT DATABASE '{tmp}'", NO_FILES),
    # extensions
    ("install", "INSTALL httpfs", NO_EXT),
    ("load", "LOAD httpfs", NO_EXT),
    ("load_builtin", "LOAD json", NO_EXT),
    ("force_install", "FORCE INSTALL httpfs FROM core", NO_EXT),
    # configuration
    ("set_external_access", "SET enable_external_access = true", LOCKED),
    ("set_unlock", "SET lock_configuration = false", LOCKED),
    ("reset_unlock", "RESET lock_configuration", LOCKED),
    ("set_memory", "SET memory_limit = '100GB'", LOCKED),
    ("pragma_memory", "PRAGMA memory_limit = '100GB'", LOCKED),
    ("set_allowed_dirs", "SET allowed_directories = ['/']", LOCKED),
    ("set_global", "SET GLOBAL enable_external_access = true", LOCKED),
    ("set_temp_dir", "SET temp_directory = '/tmp'", LOCKED),
    ("set_autoinstall", "SET autoinstall_known_extensions = true", LOCKED),
]


def _render(sql: str, wh, tmp_path) -> str:
    return sql.format(live=wh.warehouse, tmp=tmp_path, exports=wh.export_dir)


@pytest.mark.parametrize("case,sql,pattern", ESCAPES, ids=[c[0] for c in ESCAPES])
def test_escape_attempt_is_refused_clearly(filled, tmp_path, case, sql, pattern):
    sql = _render(sql, filled, tmp_path)
    with connect(filled) as con:
        with pytest.raises(QueryRefused, match=pattern) as e:
            con.execute(sql).fetchall()
        assert str(e.value).startswith("refused:")
        # the connection stays usable and locked
        assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (2,)
        assert con.execute(
            "SELECT current_setting('enable_external_access'), "
            "current_setting('lock_configuration')").fetchone() == (False, True)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "escape.csv").exists()
    assert not (filled.state_dir / "escape.csv").exists()


def test_escapes_leave_the_warehouse_and_snapshot_unchanged(filled, tmp_path):
    from tests.reliability.conftest import raw_state
    from warehouse.serving import snapshot

    with connect(filled) as con:
        snap = con.path
    before_live, before_snap = raw_state(filled.warehouse), raw_state(snap)
    with connect(filled) as con:  # (one process cannot mix plain and locked connections)
        for _, sql, _ in ESCAPES:
            with pytest.raises(PwhError):
                con.execute(_render(sql, filled, tmp_path))
    assert raw_state(filled.warehouse) == before_live
    assert raw_state(snap) == before_snap
    assert snapshot.current(filled) == snap


def test_export_folder_is_the_one_place_for_files(filled):
    out = filled.export_dir / "runs.parquet"
    with connect(filled) as con:
        con.execute("COPY (SELECT sha256, label FROM raw.files) TO ? (FORMAT parquet)",
                    [str(out)])
        assert out.exists()
        assert con.execute("SELECT count(*) FROM read_parquet(?)", [str(out)]).fetchall() == [(2,)]
        assert con.sql(f"SELECT count(*) FROM '{out}'").fetchall() == [(2,)]


def test_allowed_statements_still_work(filled):
    with connect(filled) as con:
        assert con.execute("SET search_path = 'raw'").fetchall() is not None
        assert con.execute("SELECT count(*) FROM files").fetchone() == (2,)
        con.execute("USE checks")
        assert con.execute("DESCRIBE raw.files").fetchall()
        assert con.execute("SUMMARIZE raw.profile_samples").fetchall()
        assert con.execute("EXPLAIN SELECT * FROM raw.files").fetchall()
        assert con.execute("SHOW TABLES").fetchall() is not None
        assert con.execute("SELECT * FROM pwh_snapshot.info").fetchall()
        con.execute("SET VARIABLE k = 3")
        assert con.execute("SELECT getvariable('k')").fetchone() == (3,)
        assert con.execute("SELECT label FROM raw.files WHERE byte_size > ?", [0]).fetchall()
        assert con.sql("SELECT * FROM raw.files").pl().height == 2
        assert len(con.table("raw.files").filter("byte_size > 0").df()) == 2
        # Python data joins analyst SQL without touching files
        import pandas as pd

        con.register("wanted", pd.DataFrame({"n": [1, 2]}))
        assert con.execute("SELECT sum(n) FROM wanted").fetchone() == (3,)


def test_relation_sql_hooks_are_checked_too(filled):
    with connect(filled) as con:
        rel = con.sql("SELECT * FROM raw.files")
        with pytest.raises(QueryRefused, match=READ_ONLY):
            rel.query("f", "DELETE FROM raw.files")
        with pytest.raises(QueryRefused, match=NO_FILES):
            rel.write_csv("/tmp/pwh-should-not-exist.csv")
        with pytest.raises(AttributeError, match="not available on an analyst connection"):
            con.install_extension("httpfs")


def test_runaway_query_is_interrupted_by_the_timeout(filled):
    with connect(filled, timeout=0.5) as con:
        t0 = time.monotonic()
        with pytest.raises(QueryTimeout, match="timeout"):
            con.execute("SELECT count(*) FROM range(1000000000000) a, range(1000) b").fetchall()
        assert time.monotonic() - t0 < 60  # bounded; not a timing assertion on the limit itself
        with pytest.raises(QueryTimeout):
            con.sql("SELECT sum(a.range * b.range) FROM range(1000000000) a, range(10000) b"
                    ).fetchall()
        assert con.execute("SELECT 42").fetchone() == (42,)  # usable afterwards


LATE_START_CHILD = """
import sys, time
from warehouse.serving.query import QueryTimeout, connect

class LateStart:  # the DuckDB connection, its queries starting 1 s late (a busy machine)
    def __init__(self, con):
        self._c = con
    def __getattr__(self, name):
        return getattr(self._c, name)
    def execute(self, *a, **kw):
        time.sleep(1.0)
        return self._c.execute(*a, **kw)

with connect(sys.argv[1], timeout=0.2) as con:
    con._con = LateStart(con._con)
    try:
        con.execute("SELECT count(*) FROM range(1000000000000) a, range(1000) b").fetchall()
    except QueryTimeout:
        print("timed out", flush=True)
"""


def test_a_timeout_that_fires_before_the_query_started_still_stops_it(filled):
    """DuckDB clears its interrupt flag when a query starts: the timeout's interrupt, fired
    before (a busy machine, a tiny limit), was lost and the query ran for hours. Here every
    query starts after its timeout fired. In a child process, so that a lost interrupt fails
    the test instead of hanging the suite."""
    import subprocess
    import sys

    try:
        r = subprocess.run([sys.executable, "-c", LATE_START_CHILD, str(filled.warehouse)],
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the timeout's interrupt was lost: the query still ran after 300 s")
    assert r.returncode == 0 and r.stdout == "timed out\n", r.stderr[-3000:]


def test_interrupt_from_another_thread(filled):
    with connect(filled, timeout=0) as con:
        # DuckDB clears the interrupt flag when a query starts: an interrupt that lands before
        # the query began (a busy machine) is lost, so the other thread repeats it until the
        # query ended (one lost interrupt would leave the test running for hours)
        over = threading.Event()

        def interrupter():
            while not over.wait(0.3):
                con.interrupt()

        threading.Thread(target=interrupter, daemon=True).start()
        try:
            with pytest.raises(QueryInterrupted):
                con.execute("SELECT count(*) FROM range(1000000000000) a, range(1000) b"
                            ).fetchall()
        finally:
            over.set()


def test_memory_limit_stops_a_query_that_needs_more(filled, monkeypatch):
    monkeypatch.setenv("PWH_ANALYST_MEMORY", "64MB")
    r = pwh("--warehouse", str(filled.warehouse), "sql",
            "SELECT len(list(range)) FROM range(50000000)")
    assert r.returncode == 1
    assert "analyst limit of 64MB" in r.stderr and "PWH_ANALYST_MEMORY" in r.stderr


def test_cli_refusals_are_clear_and_exit_1(filled, tmp_path, capsys):
    from warehouse.cli import main

    w = str(filled.warehouse)
    for sql, pattern in [("DELETE FROM raw.files", READ_ONLY),
                         (f"ATTACH '{w}' AS x", NO_ATTACH),
                         (f"COPY raw.files TO '{tmp_path}/out.csv'", NO_FILES),
                         ("SELECT * FROM read_csv('/etc/passwd')", NO_FILES),
                         ("INSTALL httpfs", NO_EXT), ("LOAD json", NO_EXT),
                         ("SET lock_configuration = false", LOCKED)]:
        assert main(["--warehouse", w, "sql", sql]) == 1, sql
        err = capsys.readouterr().err
        assert err.startswith("pwh sql: refused:") and pattern in err, err
    # and end to end in a real process: exit code 1, message, no traceback
    r = pwh("--warehouse", w, "sql", "SELECT count(*) FROM range(1000000000000) a, range(100) b",
            "--timeout", "0.5")
    assert r.returncode == 1 and "timeout" in r.stderr and "Traceback" not in r.stderr
    r = pwh("--warehouse", w, "sql", "DROP TABLE raw.files")
    assert r.returncode == 1 and r.stderr.startswith("pwh sql: refused:") and READ_ONLY in r.stderr


def test_shell_runs_a_script_and_refuses_writes(filled):
    w = str(filled.warehouse)
    r = pwh("--warehouse", w, "shell", "--format", "json",
            input="SELECT count(*) AS n\nFROM raw.files;\n.tables raw\n")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.split("\n]")[0] + "\n]") == [{"n": 2}]
    assert '"name": "files"' in r.stdout
    r = pwh("--warehouse", w, "shell", input="SELECT 1;\nDROP TABLE raw.files;\nSELECT 2;\n")
    assert r.returncode == 1 and "refused" in r.stderr and READ_ONLY in r.stderr
    r = pwh("--warehouse", w, "sql", "SELECT count(*) AS n FROM raw.files", "--format", "csv")
    assert r.stdout.split() == ["n", "2"]


def test_notebook_entry_point(filled):
    con = warehouse.connect(filled.warehouse)
    try:
        assert con.version != "live" and con.path.parent == filled.snapshot_dir
        assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (2,)
        with pytest.raises(QueryRefused):
            con.execute("DELETE FROM raw.files")
    finally:
        con.close()
    live = warehouse.connect(filled.warehouse, live=True)
    try:
        assert live.version == "live"
        with pytest.raises(QueryRefused, match=READ_ONLY):
            live.execute("DELETE FROM raw.files")
    finally:
        live.close()
