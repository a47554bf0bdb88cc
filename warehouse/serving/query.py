"""The analyst query layer: locked-down, read-only connections to the published snapshot.

An analyst connection (``warehouse.connect()``, ``pwh sql``, ``pwh shell``, ``pwh runs``):

* opens the current **snapshot** (``<state>/snapshots/current.duckdb``, see
  :mod:`warehouse.serving.snapshot`), never the live file, so holding it for hours never blocks or fails
  ingestion; it keeps the version it opened until it is closed;
* is **read-only**: writes and DDL (temporary objects included), ``ATTACH``/``DETACH``,
  ``INSTALL``/``LOAD`` and configuration changes are refused with a message saying why;
* has **no file access** except the export folder (``<state>/exports/``): ``COPY … TO`` and
  ``read_parquet``/``read_csv`` work there and nowhere else;
* runs with a **locked configuration**, a **memory limit** (``$PWH_ANALYST_MEMORY``, default
  4GB; queries that need more fail instead of spilling to disk) and a **query timeout**
  (``$PWH_QUERY_TIMEOUT`` seconds, default 300; 0 disables it) that interrupts a runaway query.

Two layers enforce this: DuckDB itself (``read_only``, ``enable_external_access=false`` with
``allowed_directories``, ``autoload/autoinstall`` off, ``lock_configuration``), which is the
security boundary for SQL text, and a statement check here, which refuses forbidden statement
types up front with a clear message. Python code in a notebook is not sandboxed by either: it can
always open files itself. The limits protect the warehouse from analyst *SQL*.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings
from pathlib import Path

import duckdb

from warehouse.config import Settings
from warehouse.config import settings as resolve_settings
from warehouse.errors import PwhError, QueryRefused
from warehouse.serving.exports import resolve as resolve_path
from warehouse.serving.exports import rewrite as rewrite_paths
from warehouse.serving.results import format_result, run_query, run_statements  # noqa: F401

# DuckDB 2.0 warns on every .pl()/.arrow() of an execute() result; analysts asked for it
warnings.filterwarnings("ignore", message="Arrow output on a DB-API result", category=UserWarning)

DEFAULT_MEMORY = "4GB"
DEFAULT_TIMEOUT_S = 300.0

ST = duckdb.StatementType
# Statement types an analyst may run. DuckDB still enforces read-only, file access and the
# configuration lock on each of them (COPY only to the export folder, SET only search_path).
ALLOWED = {ST.SELECT, ST.EXPLAIN, ST.COPY, ST.EXPORT, ST.CALL, ST.PRAGMA, ST.TRANSACTION,
           ST.SET, ST.VARIABLE_SET}
_WHY = {
    "write": "analyst connections are read-only: the warehouse is written only by `pwh ingest` "
             "and `pwh build` (use a CTE instead of a table, or export to Parquet and work on "
             "the file)",
    "attach": "analyst connections see only the published snapshot; other databases cannot be "
              "attached or detached",
    "extension": "extensions cannot be installed or loaded on analyst connections",
    "other": "only queries (SELECT, DESCRIBE, SUMMARIZE, EXPLAIN, SHOW, PRAGMA), COPY … TO the "
             "export folder and SET search_path are allowed on analyst connections",
}
_KIND = {ST.INSERT: "write", ST.UPDATE: "write", ST.DELETE: "write", ST.MERGE_INTO: "write",
         ST.CREATE: "write", ST.CREATE_FUNC: "write", ST.DROP: "write", ST.ALTER: "write",
         ST.COPY_DATABASE: "write", ST.VACUUM: "write", ST.ANALYZE: "write",
         ST.ATTACH: "attach", ST.DETACH: "attach", ST.LOAD: "extension",
         ST.EXTENSION: "extension"}
# SET statements that change nothing the lock protects: the schema search path and variables.
_SET_OK = re.compile(r"^\s*(use\s|set\s+(session\s+|local\s+)?(search_path|schema|variable)\b"
                     r"|reset\s+(session\s+|local\s+)?(search_path|schema|variable)\b)", re.I)


_MISSING_FILE = re.compile(r"Table with name (.+?) does not exist")
_FILE_EXT = re.compile(r"\.(csv|tsv|txt|parquet|json|jsonl|ndjson|gz|zst|duckdb|db)$", re.I)


class NoWarehouse(PwhError):
    """There is no warehouse file where the connection looked. The message says how to name
    another one: ``--warehouse`` on the command line, ``connect(path)`` or ``PWH_WAREHOUSE``
    from Python (a notebook started outside the repository looks in its own folder)."""

    def __init__(self, path: Path, *, explicit: bool, cli: bool = False):
        self.path, self.explicit = path, explicit
        if cli:
            msg = (f"{path}: no warehouse here yet (pass --warehouse PATH or set PWH_WAREHOUSE; "
                   "`pwh ingest` creates one)")
        else:
            if explicit:
                source = "the path given to connect()"
            elif os.environ.get("PWH_WAREHOUSE"):
                source = "from $PWH_WAREHOUSE"
            else:
                source = ("the default .pwh/warehouse.duckdb under the current folder "
                          f"{Path.cwd()}")
            msg = (f"{path}: no warehouse here yet ({source}). Pass the warehouse file, "
                   "warehouse.connect('/path/to/.pwh/warehouse.duckdb'), or set "
                   "PWH_WAREHOUSE=/path/to/.pwh/warehouse.duckdb before starting Python; "
                   "`pwh ingest` creates a warehouse")
        super().__init__(msg)

    def for_cli(self) -> NoWarehouse:
        return NoWarehouse(self.path, explicit=self.explicit, cli=True)


class QueryTimeout(PwhError):
    """An analyst query ran longer than the query timeout and was interrupted."""


class QueryInterrupted(PwhError):
    """An analyst query was interrupted (Ctrl-C or ``interrupt()``)."""


def memory_limit() -> str:
    return os.environ.get("PWH_ANALYST_MEMORY", DEFAULT_MEMORY)


def timeout_s() -> float:
    raw = os.environ.get("PWH_QUERY_TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        return float(raw)
    except ValueError:
        raise PwhError(f"PWH_QUERY_TIMEOUT={raw!r}: expected a number of seconds") from None


def connect(warehouse: str | os.PathLike[str] | Settings | None = None, *, live: bool = False,
            timeout: float | None = None, memory: str | None = None, locked: bool = True):
    """A locked-down, read-only analyst connection to the current snapshot.

    ``live=True`` opens the live warehouse file instead (still read-only and locked down). Use
    it only for short operator queries: while it is open, ingestion and builds wait for it.
    If no snapshot has been published yet, one is published first (this takes the writer lock
    once, like a build). ``timeout`` (seconds, 0 = none) and ``memory`` (e.g. "2GB") override
    the defaults. ``locked=False`` is for the warehouse's own tooling (e.g. ``pwh check``): a
    plain read-only DuckDB connection to the live file, without the analyst restrictions.
    """
    s = warehouse if isinstance(warehouse, Settings) else resolve_settings(warehouse)
    if not s.warehouse.exists():
        raise NoWarehouse(s.warehouse, explicit=warehouse is not None)
    if not locked:
        return duckdb.connect(str(s.warehouse), read_only=True,
                              config={"autoinstall_known_extensions": False})
    t = timeout_s() if timeout is None else float(timeout)
    mem = memory or memory_limit()
    if live:
        return AnalystConnection(_open_locked(s.warehouse, s, mem), s.warehouse, "live", t, s, mem)
    from warehouse.serving import snapshot

    for _attempt in range(5):
        path = snapshot.current(s)
        if path is None:
            snapshot.publish(s)
            continue
        try:
            con = _open_locked(path, s, mem)
        except (duckdb.IOException, PwhError) as exc:
            # pruned or being re-synchronised between resolving the pointer and opening it
            if path.exists() and "lock" not in str(exc).lower():
                raise
            continue
        return AnalystConnection(con, path, snapshot.version_of(path), t, s, mem)
    raise PwhError(f"{s.snapshot_dir}: could not open the current snapshot (it kept changing "
                   "or is missing); try again, or run `pwh snapshot`")


def _open_locked(path: Path, s: Settings, mem: str):
    config = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        "allow_unsigned_extensions": False,
        "allow_persistent_secrets": False,
        "allow_extension_repositories": "forbidden",
        "memory_limit": mem,
        "temp_directory": "",  # no spilling: the memory limit is a limit
        "allowed_configs": ["search_path", "schema"],
    }
    try:
        con = duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.ConnectionException as exc:
        if "different configuration" not in str(exc):
            raise
        raise PwhError(f"{path}: this process already has a connection to it with other settings "
                       "(memory limit, or a read-write connection); close that one first, or use "
                       "its .cursor()") from None
    except duckdb.InvalidInputException as exc:
        raise PwhError(f"cannot open an analyst connection: {exc} (check PWH_ANALYST_MEMORY)"
                       ) from None
    try:
        if con.execute("SELECT current_setting('lock_configuration')").fetchone()[0]:
            # DuckDB hands out one database instance per file and process: this one was locked
            # down by an earlier analyst connection. Make sure of it rather than assume.
            if con.execute("SELECT current_setting('enable_external_access')").fetchone()[0]:
                con.close()
                raise PwhError(f"{path}: already open in this process without the analyst "
                               "restrictions; close that connection first")
            return con
        export = s.export_dir
        try:
            export.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # COPY TO will then fail with a clear error; reading still works
        # allowed_directories can only be set while external access is still enabled
        con.execute("SET allowed_directories = ?", [[str(export) + os.sep]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def check_statements(con, sql: str) -> None:
    """Refuse statement types analysts may not run, before DuckDB sees them."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise PwhError(f"query failed: {exc}") from None
    for st in statements:
        kind = _KIND.get(st.type)
        text = " ".join(st.query.split())[:80]
        if kind or st.type not in ALLOWED:
            raise QueryRefused(f"refused: {text!r}: {_WHY[kind or 'other']}")
        if st.type == ST.SET and not _SET_OK.match(st.query):
            raise QueryRefused(
                f"refused: {text!r}: the configuration of analyst connections is locked (read-only, "
                "file access, extensions, memory limit); only `SET search_path`/`USE schema` may "
                "change")


def explain_error(exc: duckdb.Error, export_dir: Path, memory: str) -> PwhError:
    """Turn DuckDB's refusal into a message that says what is not allowed and why."""
    msg = str(exc)
    first = msg.splitlines()[0] if msg else type(exc).__name__
    if "has been locked" in msg:
        return QueryRefused(f"refused: the configuration of analyst connections is locked "
                            f"({first})")
    if isinstance(exc, duckdb.PermissionException) or "disabled by configuration" in msg:
        if "xtension" in msg:
            return QueryRefused(f"refused: {_WHY['extension']} ({first})")
        return QueryRefused(f"refused: analyst SQL may read and write files only in the export "
                            f"folder {export_dir}{os.sep} ({first})")
    m = _MISSING_FILE.search(msg)
    if m and ("/" in m.group(1) or "\\" in m.group(1) or _FILE_EXT.search(m.group(1))):
        # a path in FROM '…' outside the allowed folder: DuckDB skips the file scan and then
        # reports a missing table
        return QueryRefused(f"refused: analyst SQL may read and write files only in the export "
                            f"folder {export_dir}{os.sep} (cannot read {m.group(1)!r})")
    if "read-only mode" in msg:
        return QueryRefused(f"refused: {_WHY['write']} ({first})")
    if isinstance(exc, duckdb.OutOfMemoryException):
        return PwhError(f"query needs more memory than the analyst limit of {memory} "
                        f"(PWH_ANALYST_MEMORY): {first}")
    return PwhError(f"query failed: {msg}")


class AnalystConnection:
    """A locked-down DuckDB connection. Mirrors the common DuckDB connection methods
    (``execute``, ``sql``, ``fetch*``, ``df``, ``pl``, ``arrow``, ``table``…); every call that
    runs a query is checked, guarded by the timeout, and its errors explained."""

    def __init__(self, con, path: Path, version: str, timeout: float, settings: Settings,
                 memory: str):
        self._con = con
        self.path = path
        self.version = version  # snapshot version, or "live"
        self.timeout = timeout
        self.settings = settings
        self.memory = memory
        self._closed = False
        self._pending = False  # execute() left a result that is not fetched to the end
        from warehouse.serving import snapshot

        snapshot.reader_opened(path)

    # -- guarded execution
    def _run(self, fn, *args, **kw):
        fired, over = threading.Event(), threading.Event()
        timer = None
        if self.timeout and self.timeout > 0:
            def fire():  # DuckDB clears the flag when a query starts: an interrupt before the
                fired.set()  # query began would be lost, so it is repeated until the call ends
                while not over.is_set():
                    self._con.interrupt()
                    over.wait(0.25)

            timer = threading.Timer(self.timeout, fire)
            timer.daemon = True
            timer.start()
        try:
            return self._call(fn, *args, **kw)
        except (duckdb.InterruptException, KeyboardInterrupt, RuntimeError) as exc:
            # DuckDB 2.0 raises a plain RuntimeError("Query interrupted") when Ctrl-C (SIGINT)
            # stops a query, InterruptException for interrupt() (the timeout, another thread)
            if isinstance(exc, RuntimeError) and not _is_interrupt(exc):
                raise
            self._pending = False
            with contextlib.suppress(duckdb.Error, RuntimeError):
                self._con.abort()
            if fired.is_set():
                raise QueryTimeout(
                    f"query interrupted after the {self.timeout:g} s analyst query timeout "
                    "(PWH_QUERY_TIMEOUT, or --timeout)") from None
            raise QueryInterrupted("query interrupted") from None
        except duckdb.Error as exc:
            if isinstance(exc, duckdb.ResourceInUseException):
                raise PwhError(
                    "this connection still has an unfinished result: fetch it to the end, or "
                    "call con.abort() (or con.complete()) first; con.cursor() gives a second "
                    "connection for queries side by side") from None
            raise explain_error(exc, self.settings.export_dir, self.memory) from None
        finally:
            if timer is not None:
                over.set()
                timer.cancel()
                timer.join()  # no interrupt of this call may reach the connection's next query

    def _call(self, fn, *args, **kw):
        """``fn(*args)``; from the main thread, in a helper thread while the main thread waits.

        A query running in DuckDB's C++ code checks for Ctrl-C only now and then (on a loaded
        machine not for minutes). Waiting in Python instead, the main thread gets Ctrl-C
        (SIGINT, or a notebook's interrupt) at once as ``KeyboardInterrupt``; the query is then
        interrupted and its thread joined before the exception goes on."""
        if threading.current_thread() is not threading.main_thread():
            return fn(*args, **kw)
        box: dict = {}
        done = threading.Event()

        def work():
            _name_os_thread(b"pwh-query")
            try:
                box["value"] = fn(*args, **kw)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="pwh-query", daemon=True).start()
        try:
            while not done.wait(0.25):
                pass
        except KeyboardInterrupt:
            self._con.interrupt()
            while not done.wait(0.25):  # a second Ctrl-C here leaves at once
                self._con.interrupt()
            raise
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _start(self) -> None:
        """Before new work: drop an unfinished result of an earlier ``execute`` (DuckDB 2.0
        otherwise refuses every further query on the connection until it is finished)."""
        if self._pending:
            self._pending = False
            with contextlib.suppress(duckdb.Error):
                self._con.abort()

    def _fetch(self, fn, *args, partial: bool = False):
        out = self._run(fn, *args)
        if not partial or out is None or out == []:
            self._pending = False
        return out

    def _wrap(self, value):
        return _Relation(value, self) if isinstance(value, duckdb.DuckDBPyRelation) else value

    @property
    def export_dir(self) -> Path:
        """The one folder analyst SQL may read and write files in; relative paths land here."""
        return self.settings.export_dir

    def _sql(self, query: str) -> str:
        check_statements(self._con, query)
        return rewrite_paths(query, self.settings.export_dir)

    def execute(self, query: str, parameters=None):
        query = self._sql(query)
        self._start()
        self._run(self._con.execute, query, parameters)
        self._pending = True
        return self

    def sql(self, query: str, *, params=None):
        query = self._sql(query)
        self._start()
        return self._wrap(self._run(self._con.sql, query, params=params))

    query = sql
    from_query = sql

    def table(self, name: str):
        self._start()
        return self._wrap(self._run(self._con.table, name))

    def view(self, name: str):
        self._start()
        return self._wrap(self._run(self._con.view, name))

    def read_parquet(self, path, *a, **kw):
        self._start()
        return self._wrap(self._run(self._con.read_parquet, _resolve(path, self), *a, **kw))

    def read_csv(self, path, *a, **kw):
        self._start()
        return self._wrap(self._run(self._con.read_csv, _resolve(path, self), *a, **kw))

    def register(self, name: str, obj):
        """Expose a DataFrame/Arrow table to SQL under ``name`` (session-local, in memory)."""
        self._start()
        self._run(self._con.register, name, obj)
        return self

    def unregister(self, name: str):
        self._start()
        self._run(self._con.unregister, name)
        return self

    # -- results of execute(): DuckDB 2.0 keeps them pending until fetched to the end
    def fetchone(self):
        return self._fetch(self._con.fetchone, partial=True)

    def fetchmany(self, size: int = 1):
        return self._fetch(self._con.fetchmany, size, partial=True)

    def fetchall(self):
        return self._fetch(self._con.fetchall)

    def df(self):
        return self._fetch(self._con.df)

    fetchdf = df

    def pl(self):
        """The result as a polars DataFrame (DuckDB 2.0 connections have no ``.pl()``)."""
        import polars as pl

        return pl.from_arrow(self._fetch(self._con.to_arrow_table))

    def to_arrow_table(self):
        return self._fetch(self._con.to_arrow_table)

    fetch_arrow_table = to_arrow_table

    def arrow(self):
        """The result as a ``pyarrow.RecordBatchReader`` (as DuckDB 2.0's ``.arrow()``)."""
        return self._fetch(self._con.to_arrow_reader)

    to_arrow_reader = arrow

    def fetchnumpy(self):
        return self._fetch(self._con.fetchnumpy)

    def abort(self) -> None:
        """Drop the unfinished result of ``execute`` (after a partial ``fetchone``)."""
        self._pending = False
        self._run(self._con.abort)

    def complete(self) -> None:
        """Finish the result of ``execute`` without fetching it."""
        self._pending = False
        self._run(self._con.complete)

    @property
    def description(self):
        return self._con.description

    def interrupt(self) -> None:
        self._con.interrupt()

    def cursor(self) -> AnalystConnection:
        """A second connection to the same snapshot (same limits), e.g. for another thread."""
        return AnalystConnection(self._con.cursor(), self.path, self.version, self.timeout,
                                 self.settings, self.memory)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._con.close()
            from warehouse.serving import snapshot

            snapshot.reader_closed(self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name: str):
        raise AttributeError(
            f"{name!r} is not available on an analyst connection (read-only, locked down); "
            "use execute/sql/table/fetch*/df/pl/arrow/register/abort")

    def __repr__(self) -> str:
        return f"<AnalystConnection {self.version} {self.path}>"


class _Relation:
    """A DuckDB relation whose evaluation is guarded like the connection's queries."""

    def __init__(self, rel, owner: AnalystConnection):
        self._rel = rel
        self._owner = owner

    def __getattr__(self, name: str):
        attr = getattr(self._rel, name)
        if not callable(attr):
            return attr
        if name == "query":  # rel.query(view, sql) runs arbitrary SQL: check it too
            def q(view_name, sql_query, _attr=attr):
                sql_query = self._owner._sql(sql_query)
                self._owner._start()
                return self._owner._wrap(self._owner._run(_attr, view_name, sql_query))
            return q
        if name in _WRITERS:  # rel.write_csv('x.csv'): a relative path lands in the exports
            def write(file_name, *a, _attr=attr, **kw):
                self._owner._start()
                return self._owner._run(_attr, _resolve(file_name, self._owner), *a, **kw)
            return write

        def call(*a, **kw):
            self._owner._start()
            return self._owner._wrap(self._owner._run(attr, *a, **kw))

        return call

    def __repr__(self) -> str:
        return self._owner._run(repr, self._rel)

    __str__ = __repr__

    def __len__(self) -> int:
        return self._owner._run(len, self._rel)


_WRITERS = frozenset({"write_csv", "to_csv", "write_parquet", "to_parquet"})


def _resolve(path, owner: AnalystConnection):
    return resolve_path(path, owner.settings.export_dir) if isinstance(path, str) else path


_prctl = None


def _name_os_thread(name: bytes) -> None:
    """Name the calling thread for the OS (Linux): a running analyst query shows as
    ``pwh-query`` in ``ps -L`` / ``top -H`` (and tests can see that it is running)."""
    global _prctl
    if not sys.platform.startswith("linux"):
        return
    try:
        if _prctl is None:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        _prctl(15, name[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _is_interrupt(exc: BaseException) -> bool:
    return "interrupted" in str(exc).lower()


def default_path() -> Path:
    return resolve_settings().warehouse


# The command-line helpers live in results.py; these names stay importable from here.
from warehouse.serving.results import (  # noqa: E402
    KILL_GRACE_S,  # noqa: F401
    add_cli_options,  # noqa: F401
    cli_connect,  # noqa: F401
    hard_deadline,  # noqa: F401
)
