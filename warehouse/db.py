"""Connections to the live warehouse file and the raw-layer schema.

DuckDB allows one read-write process per file. Writers here retry a locked file with backoff
(printing "busy, retrying") instead of failing, and never install extensions from the network.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import stat
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from warehouse.errors import PwhError, WarehouseBusyError
from warehouse.keep import fsync as sync_entry
from warehouse.keep import pid_alive, rename_noreplace

BASE_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": True}

MANIFEST_DDL = """
CREATE TABLE IF NOT EXISTS raw.files (
    sha256          VARCHAR PRIMARY KEY,  -- SHA-256 of the raw bytes: the file's identity and run_id
    original_path   VARCHAR NOT NULL,     -- absolute path the file was ingested from
    file_name       VARCHAR NOT NULL,     -- base name of original_path
    source_format   VARCHAR NOT NULL,     -- tile_profile, conv_audit, kineto_trace, nsys_sqlite, nsys_kern_sum_csv, nsys_trace_csv, rocprof_*, ncu_rep, ncu_csv (detected from content)
    parser_version  VARCHAR NOT NULL,     -- e.g. tile_profile/1: re-derive runs after a parser fix
    byte_size       BIGINT  NOT NULL,     -- size of the raw file in bytes
    ingested_at     TIMESTAMP NOT NULL,   -- UTC
    series          VARCHAR NOT NULL,     -- workload profiled
    label           VARCHAR NOT NULL,     -- build/version that produced the run
    captured_at     TIMESTAMP NOT NULL,   -- UTC
    meta_source     VARCHAR NOT NULL,     -- where series/label/captured_at came from: cli, sidecar or default
    archive_path    VARCHAR               -- content-addressed copy of the raw bytes, if archived
)"""

ERRORS_DDL = """
CREATE TABLE IF NOT EXISTS raw.ingest_errors (
    sha256           VARCHAR,             -- of the bad file's bytes (NULL if unreadable)
    original_path    VARCHAR NOT NULL,    -- the file as given
    error_kind       VARCHAR NOT NULL,    -- malformed, schema, unknown_format, too_large, unsupported, job or io
    json_path        VARCHAR,             -- where in the document, e.g. $.groups[3].p95Cycles
    message          VARCHAR NOT NULL,    -- the full error: file, JSON path, rule
    quarantine_path  VARCHAR,             -- copy of the bad file (sidecar: + .error.json)
    occurred_at      TIMESTAMP NOT NULL   -- UTC
)"""

CHECKS_DDL = """
CREATE SCHEMA IF NOT EXISTS checks;
CREATE TABLE IF NOT EXISTS checks.results (
    run_id          VARCHAR NOT NULL,     -- the run validated (raw.files.sha256)
    suite           VARCHAR NOT NULL,     -- expectation suite name
    expectation     VARCHAR NOT NULL,     -- expectation type and column
    invariant_id    VARCHAR NOT NULL,     -- e.g. A1, P7, SCHEMA, CHECKSUM
    critical        BOOLEAN NOT NULL,     -- a failing critical expectation fails the run
    success         BOOLEAN NOT NULL,
    unexpected_count BIGINT,
    sample_failures JSON,                 -- a few failing rows
    validated_at    TIMESTAMP NOT NULL    -- UTC
);
CREATE OR REPLACE VIEW checks.run_status AS
WITH latest AS (
    SELECT run_id, max(validated_at) AS validated_at FROM checks.results GROUP BY run_id
)
SELECT
    r.run_id,
    CASE WHEN bool_or(NOT r.success AND r.critical) THEN 'failed' ELSE 'passed' END AS status,
    list(DISTINCT r.invariant_id ORDER BY r.invariant_id)
        FILTER (WHERE NOT r.success AND r.critical) AS failed_invariants,
    max(r.validated_at) AS validated_at
FROM checks.results r JOIN latest l USING (run_id, validated_at)
GROUP BY r.run_id
"""


def connect_rw(path: Path, *, timeout_s: float = 120.0, quiet: bool = False,
               keep_created: bool = False):
    """Open the live warehouse read-write, retrying while another process holds the lock.

    Waiting is announced once on stderr ("busy, retrying"); after ``timeout_s`` a
    :class:`WarehouseBusyError` says who may hold it. An unwritable folder, a read-only file
    system or a full disk raise :class:`WarehouseIOError` naming the path and the cause.

    A missing warehouse is created (:func:`create_warehouse`). ``keep_created``: the
    connection that created it is returned as it is (one DuckDB start instead of two; every
    commit on it is checkpointed at once, see :func:`create_warehouse`). While such a
    connection is open in this process, another open of the file (any name of it) waits for
    it to close like for a writer of another process: it would be a second DuckDB instance.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WarehouseIOError(f"{path.parent}: cannot create the warehouse folder: "
                               f"{exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    warned = False
    while True:
        _settle_empty(path)
        if not path.exists():
            con = create_warehouse(path, keep=keep_created)
            if con is not None:
                return con
        try:
            with _registry_lock:  # no creating connection registers between look and open
                here = _held_here(path)
                if not here:
                    return duckdb.connect(str(path), config=dict(BASE_CONFIG))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                if _empty_file(path):  # an empty claim of a creator appeared meanwhile
                    continue
                raise io_error(path, exc, "open the warehouse for writing") from None
        # busy: another process holds the file, or the connection that created it does, in
        # this process (opening it again would start a second DuckDB instance of the file)
        who = ("already open for writing in this process (the connection that created it)"
               if here else "locked by another process")
        if time.monotonic() >= deadline:
            raise WarehouseBusyError(
                f"{path}: {who}, still after {timeout_s:.0f} s" if here else
                f"{path}: still locked by another process after {timeout_s:.0f} s "
                "(another ingest, build or a read-write client holds it)") from None
        if not warned and not quiet:
            print(f"warehouse {path} is busy ({who}), retrying…", file=sys.stderr)
            warned = True
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 1.0)


INIT_SUFFIX = ".init"


def create_warehouse(path: Path, *, keep: bool = False):
    """Create a new warehouse file with its schema, atomically.

    The file is built beside ``path`` under a temporary name (``.<name>.<pid>-<nonce>.init``)
    and linked into place only once the schema is committed and checkpointed; the folder is
    synced after (the name durable too). A process killed half-way therefore never leaves a
    warehouse file without its raw layer; if two processes race, the first link wins and the
    other drops its copy. On a file system without hard links the copy is renamed with
    ``renameat2(RENAME_NOREPLACE)``; with neither, an exclusive create of ``path`` claims it
    first and the copy is renamed over it (see :func:`_settle_empty`). Leftovers of dead
    processes are removed by :func:`remove_stale_init_files`.

    ``keep``: return the connection that created the warehouse, open (``None`` when another
    process created it first: open ``path`` as usual). Its database is the file now at
    ``path`` (the same inode; the temporary name is removed), but DuckDB keeps its write-ahead
    log under the temporary name, where a later open of ``path`` would never replay it: so on
    that connection every commit is checkpointed before it returns (``checkpoint_threshold``
    0). DuckDB skips that checkpoint for a commit with an UPDATE or DELETE while another
    transaction of the same database is active: no other connection (cursor) of it may hold a
    transaction then. A kill inside a commit loses only that uncommitted transaction, and the
    log left behind is a stale ``.init.wal`` file; a checkpoint that fails (a full disk) fails
    the commit (DuckDB's FatalException). While it is open, this process must not open the file
    a second time under any name (a second DuckDB instance of one file; DuckDB's instance cache
    knows it only under the temporary name): :func:`connect_rw` waits for it to close. A read-only
    ``duckdb.connect`` of it in this process meanwhile is not refused and must not happen (its
    close would drop the process's lock). Dropped unclosed, the connection is closed when it is
    garbage-collected.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}{INIT_SUFFIX}")
    wal = tmp.with_name(tmp.name + ".wal")
    con = None
    try:
        # a private file: DuckDB's syncs of creating it and committing the schema to its log
        # are left out (3 of 5); the checkpoint then syncs the whole file, as DuckDB does
        # (data, then header), before the name appears. Never an fsync of our own through
        # another descriptor: closing it would drop DuckDB's lock (POSIX locks are per process
        # and file), and another process could open the warehouse while this one writes it.
        con = duckdb.connect(str(tmp), config={**BASE_CONFIG, "fsync_mode": "NONE"})
        ensure_schema(con)
        con.execute("SET fsync_mode = 'STANDARD'")
        con.execute("CHECKPOINT")
        if keep:
            con.execute("SET checkpoint_threshold = '0B'")
        else:
            con.close()
            con = None
        with _registry_lock:  # registered before the name appears: no thread opens it meanwhile
            kept = _register(tmp, con) if con is not None else None
            claimed = _claim(tmp, path)
            if kept is not None and not claimed:
                _forget(*kept)
        if claimed:  # the name durable too: the folder's entry (through the folder's descriptor,
            sync_entry(path.parent)  # never the file's: closing that would drop DuckDB's lock)
        if con is not None and not claimed:
            con.close()
            con = None
    except BaseException as exc:  # Ctrl-C too: never a creating connection left open
        if con is not None:
            with contextlib.suppress(duckdb.Error):
                con.close()
        if isinstance(exc, (duckdb.Error, OSError)):
            raise io_error(path, exc, "create the warehouse") from None
        raise
    finally:
        for leftover in (tmp, wal):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return con


@contextmanager
def unsynced(con) -> Iterator[None]:
    """DuckDB's own syncs off for the block (``fsync_mode``, database-wide), for writing a
    private file that the caller then syncs once, whole (:func:`fsync_file`), before giving it
    its name: one sync instead of one per commit and checkpoint step (~5 ms each on a busy
    disk). Nothing else may commit to the live warehouse meanwhile."""
    was = con.execute("SELECT current_setting('fsync_mode')").fetchone()[0]
    con.execute("SET fsync_mode = 'NONE'")
    try:
        yield
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"SET fsync_mode = '{was}'")


def fsync_file(path: Path) -> None:
    """Flush a file's data to stable storage. Never on a file a DuckDB of this process has
    open: closing our descriptor drops its lock."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# the warehouses this process created and still holds through the creating connection, by
# file (device, inode: any name of the file finds it) -> a cursor of that connection (closed by
# DuckDB with it, and by us when the connection is garbage-collected unclosed)
_created: dict[tuple[int, int], duckdb.DuckDBPyConnection] = {}
_registry_lock = threading.Lock()


def _file_key(path: Path) -> tuple[int, int] | None:
    """The file ``path`` names (after symlinks), or ``None`` if there is none. A ``stat``, never
    an ``open``: a descriptor of ours closed on a DuckDB file would drop DuckDB's lock."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _register(tmp: Path, con):
    """Record the creating connection under its file (the same after the link or rename);
    ``(key, cursor)``."""
    key = _file_key(tmp)
    if key is None:
        raise FileNotFoundError(errno.ENOENT, "the new warehouse file vanished", str(tmp))
    cursor = con.cursor()
    _created[key] = cursor
    # a creating connection its owner dropped unclosed (an abandoned WriterAhead after Ctrl-C)
    # must not stay open through our cursor for the life of the process
    weakref.finalize(con, _forget, key, cursor)
    return key, cursor


def _forget(key: tuple[int, int], cursor) -> None:
    with contextlib.suppress(duckdb.Error):
        cursor.close()
    if _created.get(key) is cursor:
        del _created[key]


def _held_here(path: Path) -> bool:
    """Whether the connection that created the file ``path`` names (under any name) is open in
    this process: opening it again would start a second DuckDB instance of one file (DuckDB's
    lock does not stop the same process, and its instance cache knows that database only under
    its temporary name). Called under ``_registry_lock``."""
    key = _file_key(path) if _created else None
    probe = _created.get(key) if key is not None else None
    if probe is None:
        return False
    try:
        # raises once the connection (and so the cursor) is closed; unlike a query it starts
        # no transaction, which would keep the creating connection's next commit from being
        # checkpointed (an UPDATE/DELETE is not while another transaction is active)
        probe.interrupt()
    except duckdb.Error:  # closed with its connection: gone
        _forget(key, probe)
        return False
    return True


_NO_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK)


def _claim(tmp: Path, path: Path) -> bool:
    """Put ``tmp`` at ``path`` unless a warehouse is there already (never replace one); whether
    it was put there. A hard link, else ``renameat2(RENAME_NOREPLACE)``; on a file system with
    neither, an exclusive create of ``path`` claims the name and ``tmp`` is renamed over that
    empty claim, both under :func:`_creation_lock` (see :func:`_settle_empty`)."""
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    try:
        rename_noreplace(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    with _creation_lock(path):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        os.replace(tmp, path)
    return True


@contextmanager
def _creation_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on a hidden lock file beside the warehouse (never the warehouse
    itself: closing a descriptor of ours on it would drop DuckDB's lock), held while an empty
    claim of the name exists or is judged."""
    import fcntl

    fd = os.open(path.with_name(f".{path.name}.create.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _empty_file(path: Path) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def _settle_empty(path: Path) -> None:
    """An empty file at ``path`` is a claim of :func:`_claim`'s last resort: wait while its
    creator renames the new warehouse over it, and remove it if its creator was killed first
    (DuckDB refuses an empty file: every later open would fail)."""
    if not _empty_file(path):
        return
    with _creation_lock(path):  # the creator holds it until its warehouse is in place
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_size == 0:
                os.unlink(path)


_INIT_NAME = re.compile(rf"\..+\.(\d+)-[0-9a-f]+{re.escape(INIT_SUFFIX)}(?:\.wal)?")


def remove_stale_init_files(folder: Path) -> int:
    """Delete half-created warehouse files of killed processes (their pid is gone)."""
    removed = 0
    for tmp in folder.glob(f".*{INIT_SUFFIX}*") if folder.is_dir() else ():
        m = _INIT_NAME.fullmatch(tmp.name)
        if not m or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed


class WarehouseIOError(PwhError):
    """The warehouse cannot be written: unwritable folder, read-only file system, full disk."""


_IO_HINTS = (
    ("no space left", "the disk is full: free space, then retry (nothing was half-written)"),
    ("disk quota", "the disk quota is exhausted: free space, then retry"),
    ("read-only file system", "the file system is mounted read-only"),
    ("permission denied", "the folder or file is not writable by this user"),
    ("operation not permitted", "the folder or file is not writable by this user"),
)


def io_error(path: Path, exc: BaseException, doing: str) -> WarehouseIOError:
    """A clear error for a failed write to the warehouse, naming the path and the cause."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    low = msg.lower()
    hint = next((h for k, h in _IO_HINTS if k in low), "")
    return WarehouseIOError(f"{path}: cannot {doing}: {msg}" + (f" ({hint})" if hint else ""))


@contextmanager
def writer(path: Path, **kw) -> Iterator[duckdb.DuckDBPyConnection]:
    """The live warehouse, read-write, for the ``with`` block. On leaving, while the writer is
    still held, the runs status ``pwh runs`` reads is brought up to date
    (:mod:`warehouse.serving.status`)."""
    con = connect_rw(path, **kw)
    failed = True
    try:
        ensure_schema(con)
        yield con
        failed = False
    finally:
        try:
            from warehouse.serving import status

            status.refresh(path, con, quiet=failed)
        finally:
            con.close()


def has_table(con, schema: str, table: str, catalog: str | None = None) -> bool:
    """Whether ``schema.table`` exists in ``catalog`` (default: the connection's database)."""
    return con.execute(
        "SELECT 1 FROM duckdb_tables() WHERE database_name = coalesce(?, current_database()) "
        "AND schema_name = ? AND table_name = ?", [catalog, schema, table]).fetchone() is not None


def ensure_schema(con) -> None:
    """Create the raw layer and the check-results table if missing (idempotent)."""
    # the formats (NumPy, PyArrow, msgspec) only here: `pwh sql` / `pwh runs` never need them
    from warehouse.ingesting.formats import ALL_TABLES

    have = {r[0] for r in con.execute(
        "SELECT schema_name || '.' || table_name FROM duckdb_tables() "
        "WHERE schema_name IN ('raw', 'checks')").fetchall()}
    wanted = {"raw.files", "raw.ingest_errors", "checks.results"} | {
        f"raw.{t.name}" for t in ALL_TABLES}
    if wanted <= have:
        return
    # one call: a thread creating a warehouse while the main thread parses waits for the GIL
    # after each call, not after each of some 30 statements
    ddl = ["CREATE SCHEMA IF NOT EXISTS raw", MANIFEST_DDL, ERRORS_DDL,
           *(t.ddl() for t in ALL_TABLES), *CHECKS_DDL.split(";")]
    con.execute("BEGIN")
    try:
        con.execute(";\n".join(d.strip().rstrip(";") for d in ddl if d.strip()) + ";\nCOMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back already
            con.execute("ROLLBACK")
        raise
