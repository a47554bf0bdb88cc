"""Read-only snapshots of the warehouse for analysts, published after each successful build.

DuckDB allows one read-write process per file, and a reader holding the file blocks that writer.
Analysts therefore never open the live ``warehouse.duckdb``: they open a *snapshot*, a separate
DuckDB file that only :func:`publish` writes. In ``<state>/snapshots/``::

    <version>.duckdb     one published snapshot; version = UTC publish time to the
                         microsecond, strictly increasing (under the publish lock), sortable;
                         given its name by a rename that never replaces a file
    current.duckdb       symlink to the snapshot new analyst connections open
    .publishing-*        work files of a publish in progress (removed by the next publish)
    .publish.lock        serialises publishers (flock)

Guarantees:

* **Atomic swap.** A snapshot is complete, checkpointed and closed before the ``current`` symlink
  is replaced (``rename``, atomic on POSIX). A reader sees the old snapshot or the new one.
* **Old readers keep their version.** A connection keeps the file it opened. Publishing writes
  only into files that are not current, and only after taking DuckDB's write lock on them, which
  fails while any reader has them open; pruning skips files a reader holds.
* **kill -9 safe.** Killed at any point, the previous ``current`` snapshot stays readable; the
  next publish removes leftovers and re-synchronises a half-written spare file.
* **Cost.** The first publish (or one where every spare file is held by a reader, where the
  structure changed, e.g. a new model, or where the delta would write more rows than a copy
  costs) copies the checkpointed live file byte for byte (in the kernel; a clone on btrfs/XFS).
  Otherwise the spare snapshot is brought up to date in place by a *delta*: raw tables by their
  manifest (runs added, removed or re-derived since that snapshot), every other table by
  content hashes (per run where the table has ``run_id``), rewriting only what differs. The
  cost is then about the data that changed plus a hash scan of the model tables, not the size
  of the warehouse. ``pwh snapshot`` prints what each publish did and how long it took.

Who calls it: ``pwh build`` and the Dagster build after a successful build, while they still
hold the writer (pass their connection), ``pwh import`` after a restore, and ``pwh snapshot``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from warehouse import keep
from warehouse.config import Settings
from warehouse.errors import PwhError

POINTER = "current.duckdb"
WORK_PREFIX = ".publishing-"
LOCK_FILE = ".publish.lock"
INFO_SCHEMA = "pwh_snapshot"  # inside each snapshot: pwh_snapshot.info (version, published_at, …)
ALIAS = "pwh_snap"  # the snapshot file's catalog name while it is attached to the writer
DEFAULT_KEEP = 2  # current + one spare that the next publish updates by delta

_local_lock = threading.Lock()  # flock is per open file; this also serialises threads
# Snapshot files analyst connections of THIS process have open. POSIX locks never conflict
# within one process, so DuckDB's lock cannot protect these from this process's own publisher.
_open_here: dict[str, int] = {}
_open_lock = threading.Lock()


def reader_opened(path: Path) -> None:
    with _open_lock:
        _open_here[str(path)] = _open_here.get(str(path), 0) + 1


def reader_closed(path: Path) -> None:
    with _open_lock:
        n = _open_here.get(str(path), 0) - 1
        if n > 0:
            _open_here[str(path)] = n
        else:
            _open_here.pop(str(path), None)


class SnapshotError(PwhError):
    """A snapshot could not be published or opened."""


@dataclass
class Published:
    version: str
    path: Path
    method: str  # delta | copy
    seconds: float
    bytes: int
    reason: str = ""  # why a full copy was needed
    rows_written: dict[str, int] = field(default_factory=dict)  # table -> rows deleted+inserted
    pruned: list[str] = field(default_factory=list)

    def summary(self) -> str:
        what = (f"{sum(self.rows_written.values())} row(s) deleted or inserted in "
                f"{len(self.rows_written)} table(s)" if self.method == "delta"
                else f"full copy ({self.reason})")
        return (f"published snapshot {self.version} by {self.method}: {what}; "
                f"{self.bytes / 1e6:.1f} MB, {self.seconds:.2f} s")


# --------------------------------------------------------------------------- reading side


def current(settings: Settings) -> Path | None:
    """The snapshot new readers open, or ``None`` if none has been published yet."""
    link = settings.snapshot_dir / POINTER
    try:
        target = os.readlink(link)
    except OSError:
        return None
    path = settings.snapshot_dir / target
    return path if path.exists() else None


def version_of(path: Path) -> str:
    return path.name.removesuffix(".duckdb")


def list_snapshots(settings: Settings) -> list[Path]:
    """Published snapshot files, newest first (``current.duckdb`` and work files excluded)."""
    d = settings.snapshot_dir
    if not d.is_dir():
        return []
    files = [p for p in d.glob("*.duckdb")
             if p.name != POINTER and not p.name.startswith(".") and not p.is_symlink()]
    return sorted(files, key=lambda p: p.name, reverse=True)


def in_use(path: Path) -> bool:
    """True if another process holds a DuckDB lock on ``path`` (a reader has it open).

    Files this process's own analyst connections hold count as in use, and are never probed:
    closing the probe's file descriptor would drop this process's POSIX lock on them.
    """
    if str(path) in _open_here:
        return True
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the probe lock
    return False


# --------------------------------------------------------------------------- publishing


def publish(settings: Settings, con=None, *, keep: int | None = None, full: bool = False,
            log: Callable[[str], None] | None = None) -> Published:
    """Publish the live warehouse as the new ``current`` snapshot and return what was done.

    ``con``: an open read-write connection to the live warehouse (the caller's, e.g. the build's,
    so that nothing can write between the build and the publish). Without it, the writer lock is
    taken here (retrying while another process holds it). ``keep``: snapshots kept, counting the
    current one (default ``$PWH_SNAPSHOT_KEEP`` or 2); files that readers still hold are kept too.
    ``full``: always make a fresh byte copy instead of updating a spare snapshot.
    """
    keep = max(1, keep or int(os.environ.get("PWH_SNAPSHOT_KEEP", DEFAULT_KEEP)))
    if con is None:
        from warehouse import db

        if not settings.warehouse.exists():
            raise SnapshotError(f"{settings.warehouse}: no warehouse here yet, nothing to publish")
        with db.writer(settings.warehouse) as c:
            return publish(settings, c, keep=keep, full=full, log=log)
    with _publish_lock(settings.snapshot_dir, log):
        return _publish(settings, con, keep, full)


@contextlib.contextmanager
def _publish_lock(sdir: Path, log) -> Iterator[None]:
    try:
        sdir.mkdir(parents=True, exist_ok=True)
        fd = os.open(sdir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise SnapshotError(f"{sdir}: cannot create the snapshot folder: "
                            f"{exc.strerror or exc}") from None
    warned = False
    with _local_lock:
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not warned:
                        (log or _stderr)(f"{sdir}: another publish is in progress, waiting…")
                        warned = True
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)  # releases the flock


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _publish(settings: Settings, con, keep: int, full: bool = False) -> Published:
    t0 = time.perf_counter()
    sdir = settings.snapshot_dir
    _remove_work_files(sdir)  # we hold the publish lock: anything left is from a killed publish
    live_db = con.execute("SELECT current_database()").fetchone()[0]
    cur = current(settings)
    version = _new_version(settings)
    final = sdir / f"{version}.duckdb"
    try:
        result = _create(settings, con, live_db, cur, final, version, full)
        _swap_pointer(sdir, final)
    except (duckdb.Error, OSError) as exc:
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, OSError) and exc.strerror:
            what = f"{exc.filename or ''}: {exc.strerror}"
        raise SnapshotError(f"could not publish a snapshot of {settings.warehouse}: {what}; the "
                            "previous snapshot is still current") from None
    try:
        result.pruned = prune(settings, keep)
    except OSError:
        result.pruned = []  # a file we could not delete is retried by the next publish
    result.seconds = time.perf_counter() - t0
    result.bytes = final.stat().st_size
    return result


def _create(settings: Settings, con, live_db: str, cur: Path | None, final: Path, version: str,
            full: bool) -> Published:
    """Write the new snapshot as ``final`` (not yet current)."""
    result: Published | None = None
    spares = [] if full else [p for p in list_snapshots(settings) if p != cur]
    reason = ("requested" if full else "no snapshot yet" if cur is None else
              "every spare snapshot is held by a reader" if spares else "no spare snapshot yet")
    for cand in spares:
        if str(cand) in _open_here:
            continue  # an analyst connection of this process reads it
        with contextlib.suppress(OSError):
            if cand.stat().st_nlink > 1:
                continue  # also another snapshot's name (a killed link-based rename): keep it
        outcome = _try_delta(con, live_db, cand, version, settings.warehouse)
        if isinstance(outcome, Published):
            _fsync(cand)
            keep.rename_noreplace(cand, final)  # a snapshot is never replaced
            outcome.path = final
            result = outcome
            break
        if isinstance(outcome, str):
            reason = outcome
            break
    if result is None:
        result = _full_copy(settings, con, final, version, reason)
    return result


def _new_version(settings: Settings) -> str:
    now = dt.datetime.now(dt.UTC)
    v = now.strftime("%Y%m%dT%H%M%S.%fZ")
    existing = [version_of(p) for p in list_snapshots(settings)]
    while existing and v <= max(existing):  # the clock went backwards, or two in one µs
        now += dt.timedelta(microseconds=1)
        v = now.strftime("%Y%m%dT%H%M%S.%fZ")
    return v


def _remove_work_files(sdir: Path) -> None:
    for p in sdir.glob(WORK_PREFIX + "*"):
        with contextlib.suppress(OSError):
            p.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_pointer(sdir: Path, final: Path) -> None:
    tmp = sdir / f"{WORK_PREFIX}link-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(final.name, tmp)
    try:
        os.replace(tmp, sdir / POINTER)  # atomic: readers resolve the old target or the new one
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # the pointer is unchanged: leave no work file behind
        raise
    _fsync(sdir)


def prune(settings: Settings, keep: int = DEFAULT_KEEP) -> list[str]:
    """Delete old snapshots beyond ``keep`` (current included) that no reader holds."""
    cur = current(settings)
    others = [p for p in list_snapshots(settings) if p != cur]
    removed = []
    for p in others[max(0, keep - 1):]:
        if in_use(p):
            continue  # a reader still has it open; a later publish prunes it
        try:
            for f in (p, p.with_name(p.name + ".wal")):
                with contextlib.suppress(FileNotFoundError):
                    f.unlink()
        except OSError:
            continue  # e.g. a read-only folder: tried again by the next publish
        removed.append(version_of(p))
    return removed


# --------------------------------------------------------------------------- full copy


# Copies in a child process on purpose: POSIX record locks belong to a process, and closing ANY
# descriptor of a file drops all of that process's locks on it. Reading the live file from this
# process (which holds DuckDB's write lock on it) would silently release that lock.
_COPY_SCRIPT = r"""
import fcntl, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
try:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        try:
            fcntl.ioctl(fo.fileno(), 0x40049409, fi.fileno())  # FICLONE: instant on btrfs/xfs
        except OSError:
            try:  # in-kernel copy (Linux)
                left = os.fstat(fi.fileno()).st_size
                while left > 0:
                    k = os.copy_file_range(fi.fileno(), fo.fileno(), left)
                    if k == 0:
                        break
                    left -= k
            except (AttributeError, OSError) as exc:
                if getattr(exc, "errno", None) == 28:  # ENOSPC
                    raise
                fi.seek(0)
                fo.seek(0)
                fo.truncate()
                shutil.copyfileobj(fi, fo, 8 << 20)
        fo.flush()
        os.fsync(fo.fileno())
except OSError as exc:
    print(f"{exc.filename or dst}: {exc.strerror or exc}", file=sys.stderr)
    sys.exit(3)
"""


def _full_copy(settings: Settings, con, final: Path, version: str,
               reason: str) -> Published:
    live = settings.warehouse
    con.execute("CHECKPOINT")  # the main file alone now holds every committed change
    wal = live.with_name(live.name + ".wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise SnapshotError(f"{live}: the write-ahead log is not empty after CHECKPOINT "
                            "(another connection of this process holds a transaction open?)")
    work = settings.snapshot_dir / f"{WORK_PREFIX}{version}.duckdb"
    try:
        proc = subprocess.run([sys.executable, "-c", _COPY_SCRIPT, str(live), str(work)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SnapshotError(f"could not publish a snapshot: copying {live} to {work} failed: "
                                f"{proc.stderr.strip() or proc.returncode}; the previous "
                                "snapshot is still current")
        _attach(con, work)
        try:
            _write_info(con, version, "copy", live)
            con.execute(f"CHECKPOINT {ALIAS}")
        finally:
            con.execute(f"DETACH {ALIAS}")
        _fsync(work)
        keep.rename_noreplace(work, final)  # a snapshot is never replaced
    except BaseException:
        for f in (work, work.with_name(work.name + ".wal")):
            with contextlib.suppress(OSError):
                f.unlink()
        raise
    return Published(version, final, "copy", 0.0, 0, reason=reason)


def _attach(con, path: Path) -> None:
    try:
        con.execute(f"ATTACH ? AS {ALIAS}", [str(path)])
    except duckdb.Error as exc:
        raise SnapshotError(f"{path}: cannot open the snapshot for writing: {exc}") from None


def _write_info(con, version: str, method: str, live: Path) -> None:
    from warehouse import db  # lazily: it loads the format parsers, which analyst reads never need

    runs = _count(con, _q(ALIAS, "raw", "files")) if db.has_table(con, "raw", "files", ALIAS) else 0
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ALIAS}.{INFO_SCHEMA}")
    con.execute(f"CREATE OR REPLACE TABLE {ALIAS}.{INFO_SCHEMA}.info AS "
                "SELECT ?::VARCHAR AS version, ?::TIMESTAMP AS published_at, "
                "?::VARCHAR AS method, ?::VARCHAR AS source, ?::BIGINT AS runs",
                [version, dt.datetime.now(dt.UTC).replace(tzinfo=None), method, str(live), runs])


# --------------------------------------------------------------------------- delta


def _q(*parts: str) -> str:
    """A qualified identifier from catalog names (never from user input)."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


_STRUCTURE = {
    "schemas": "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ? "
               "AND schema_name <> ?",
    "tables": "SELECT schema_name, table_name, sql, comment::VARCHAR FROM duckdb_tables() "
              "WHERE database_name = ? AND schema_name <> ? AND NOT temporary",
    "columns": "SELECT schema_name, table_name, column_index, column_name, data_type, "
               "column_default, is_nullable, comment::VARCHAR FROM duckdb_columns() "
               "WHERE database_name = ? AND schema_name <> ?",
    "views": "SELECT schema_name, view_name, sql, comment::VARCHAR FROM duckdb_views() "
             "WHERE database_name = ? AND schema_name <> ? AND NOT internal AND NOT temporary",
    "indexes": "SELECT schema_name, table_name, index_name, sql FROM duckdb_indexes() "
               "WHERE database_name = ? AND schema_name <> ?",
    "sequences": "SELECT schema_name, sequence_name FROM duckdb_sequences() "
                 "WHERE database_name = ? AND schema_name <> ?",
    "macros": "SELECT schema_name, function_name, function_type, macro_definition "
              "FROM duckdb_functions() WHERE database_name = ? AND schema_name <> ? "
              "AND NOT internal",
    "types": "SELECT schema_name, type_name, logical_type FROM duckdb_types() "
             "WHERE database_name = ? AND schema_name <> ? AND NOT internal",
}


def _structure(con, catalog: str) -> dict[str, list[tuple]]:
    return {k: sorted(con.execute(q, [catalog, INFO_SCHEMA]).fetchall(), key=repr)
            for k, q in _STRUCTURE.items()}


def _structure_diff(a: dict, b: dict) -> str:
    for k in _STRUCTURE:
        if a[k] != b[k]:
            extra = [r for r in a[k] if r not in b[k]][:1] or [r for r in b[k] if r not in a[k]][:1]
            return f"{k} changed (e.g. {extra[0][:2] if extra else '?'})"
    return ""


# A delta rewrites rows; a full copy moves bytes. Measured here (2 cores, ext4, no reflink):
# inserting 2.55 M raw rows with their primary-key index costs ~2.5 s, copying a 640 MB file
# ~1.4-2.6 s. So a delta is chosen only while the rows it may write are fewer than
# (file bytes / this). The estimate is an upper bound known before anything is hashed: the rows
# of the runs whose manifest changed, plus every row of the other (model, check) tables, which
# the build rebuilds wholesale. So a warehouse whose model tables are small next to its raw
# layer publishes by delta, at a cost that follows what changed; one with big materialised
# model tables publishes by copy, at disk speed.
COPY_BYTES_PER_DELTA_ROW = 400


class _CopyInstead(Exception):
    """The delta would cost more than a full copy (the message says why)."""


@dataclass
class _TablePlan:
    name: str
    live_t: str
    snap_t: str
    key: str | None  # sha256/run_id, or None: the whole table
    keys: list  # key values whose rows are replaced (ignored when key is None)
    rows: int  # rows this plan inserts (estimate for the cost decision)
    manifest: bool = False  # raw table synced by the manifest: verify counts afterwards


def _try_delta(con, live_db: str, cand: Path, version: str, live: Path) -> Published | str | None:
    """Bring ``cand`` up to date in place. ``None``: unusable (held by a reader, or broken);
    a string: a full copy is needed or cheaper (the reason)."""
    try:
        con.execute(f"ATTACH ? AS {ALIAS}", [str(cand)])
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            return None  # a reader holds it: leave it alone
        with contextlib.suppress(OSError):  # not current and unreadable: useless
            cand.unlink()
        return None
    try:
        live_s, snap_s = _structure(con, live_db), _structure(con, ALIAS)
        diff = _structure_diff(live_s, snap_s)
        if diff:
            return f"structure changed since the spare snapshot: {diff}"
        try:
            plans = _plan(con, live_db, live_s["columns"], live.stat().st_size)
        except _CopyInstead as exc:
            return str(exc)
        con.execute("BEGIN TRANSACTION")
        try:
            written = {p.name: n for p in plans if (n := _apply(con, p))}
            _write_info(con, version, "delta", live)
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has rolled back already
                con.execute("ROLLBACK")
            raise
        con.execute(f"CHECKPOINT {ALIAS}")
    finally:
        con.execute(f"DETACH {ALIAS}")
    if cand.with_name(cand.name + ".wal").exists():
        raise SnapshotError(f"{cand}: write-ahead log left after CHECKPOINT; not publishing it")
    return Published(version, cand, "delta", 0.0, 0, rows_written=written)


def _plan(con, live_db: str, columns: list[tuple], size: int) -> list[_TablePlan]:
    """What differs between the live warehouse and the attached snapshot, table by table.
    Raises :class:`_CopyInstead` before any hashing when a full copy is cheaper."""
    views = {(s, v) for s, v in con.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ?",
        [live_db]).fetchall()}
    tables: dict[tuple[str, str], list[str]] = {}
    for schema, table, _idx, col, *_ in columns:
        if (schema, table) not in views:
            tables.setdefault((schema, table), []).append(col)
    changed_runs = (_changed_manifest_rows(con, live_db) if ("raw", "files") in tables
                    else None)
    live_builds, snap_builds = _model_builds(con, live_db), _model_builds(con, ALIAS)
    plans, hashed = [], []
    bound = 0  # upper bound of the rows the delta writes
    for (schema, table), cols in sorted(tables.items()):
        live_t, snap_t = _q(live_db, schema, table), _q(ALIAS, schema, table)
        key = "sha256" if (schema, table) == ("raw", "files") else (
            "run_id" if "run_id" in cols else None)
        p = _TablePlan(f"{schema}.{table}", live_t, snap_t, key, [], 0)
        build = live_builds.get(f"{schema}.{table}")
        if build and build[2] in cols and build == snap_builds.get(f"{schema}.{table}"):
            # An incremental model built by the same full build as the snapshot's copy: the
            # keys whose rows changed since are those whose build stamps differ.
            p.key = build[2]
            p.keys = _changed_model_keys(con, live_db, p.name, p.key)
            if p.keys:
                p.rows = _count_keys(con, live_t, p.key, p.keys)
                plans.append(p)
        elif schema == "raw" and key and changed_runs is not None:
            # Raw rows are written in the same transaction as their manifest row: the runs whose
            # raw.files row differs are the runs to copy (counts are verified after applying).
            p.manifest = True
            p.keys = changed_runs
            if changed_runs:
                p.rows = _count_keys(con, live_t, key, changed_runs)
            plans.append(p)
        else:
            p.rows = _count(con, live_t)
            hashed.append(p)
        bound += p.rows
    if bound * COPY_BYTES_PER_DELTA_ROW > size:
        raise _CopyInstead(f"a delta could write up to {bound} rows, more than copying "
                           f"{size / 1e6:.0f} MB costs")
    for p in hashed:
        if p.key:
            a, b = _key_hashes(con, p.live_t, p.key), _key_hashes(con, p.snap_t, p.key)
            p.keys = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
            p.rows = sum(a[k][0] for k in p.keys if k in a)
        else:
            q = "SELECT count(*), sum(hash({r})::HUGEINT) FROM {t} AS {r}"
            a = con.execute(q.format(t=p.live_t, r=_ROW)).fetchone()
            if a != con.execute(q.format(t=p.snap_t, r=_ROW)).fetchone():
                p.keys = [None]
        if p.keys:
            plans.append(p)
    return plans


def _apply(con, p: _TablePlan) -> int:
    """Apply one table's plan inside the publish transaction; return rows deleted + inserted."""
    n = 0
    if p.key is None:
        n = con.execute(f"DELETE FROM {p.snap_t}").fetchone()[0]  # noqa: S608
        return n + con.execute(
            f"INSERT INTO {p.snap_t} SELECT * FROM {p.live_t}").fetchone()[0]  # noqa: S608
    if p.keys:
        n = _replace_keys(con, p.live_t, p.snap_t, p.key, p.keys)
    if p.manifest and _count(con, p.live_t) != _count(con, p.snap_t):
        # raw rows changed without their manifest row: fall back to comparing every run
        a, b = _key_hashes(con, p.live_t, p.key), _key_hashes(con, p.snap_t, p.key)
        redo = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
        n += _replace_keys(con, p.live_t, p.snap_t, p.key, redo) if redo else 0
    return n


def _model_builds(con, catalog: str) -> dict[str, tuple]:
    """model -> (definition, build_id, key) from ``meta.model_builds`` (see warehouse.modelling.models)."""
    from warehouse import db

    if not db.has_table(con, "meta", "model_builds", catalog):
        return {}
    return {r[0]: tuple(r[1:]) for r in con.execute(
        f"SELECT model, definition, build_id, key FROM {_q(catalog, 'meta', 'model_builds')}"  # noqa: S608
    ).fetchall()}


def _changed_model_keys(con, live_db: str, model: str, key: str) -> list:
    """Run ids (or series) whose build stamps differ between the live warehouse and the
    snapshot: exactly the keys an incremental build replaced since the snapshot's version."""
    col = {"run_id": "run_id", "series": "series"}[key]
    live_r, snap_r = _q(live_db, "meta", "model_runs"), _q(ALIAS, "meta", "model_runs")
    return [r[0] for r in con.execute(
        f"WITH a AS (SELECT run_id, series, stamp FROM {live_r} WHERE model = $m), "  # noqa: S608
        f"b AS (SELECT run_id, series, stamp FROM {snap_r} WHERE model = $m), "
        "d AS ((SELECT * FROM a EXCEPT SELECT * FROM b) UNION ALL "
        "(SELECT * FROM b EXCEPT SELECT * FROM a)) "
        f"SELECT DISTINCT {col} FROM d WHERE {col} IS NOT NULL ORDER BY 1",
        {"m": model}).fetchall()]


def _count_keys(con, t: str, key: str, keys: list) -> int:
    """Rows of table ``t`` whose ``key`` is one of ``keys`` (NULL keys ignored)."""
    return con.execute(f"SELECT count(*) FROM {t} WHERE {_q(key)} IN (SELECT unnest(?))",  # noqa: S608
                       [[k for k in keys if k is not None]]).fetchone()[0]


def _count(con, t: str) -> int:
    return con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608


def _changed_manifest_rows(con, live_db: str) -> list[str]:
    """sha256 of every manifest row added, removed or changed since the snapshot (row hashes
    compared by key: a few milliseconds for thousands of runs)."""
    live_f, snap_f = _q(live_db, "raw", "files"), _q(ALIAS, "raw", "files")
    return [r[0] for r in con.execute(
        f"SELECT coalesce(a.sha256, b.sha256) FROM (SELECT sha256, hash(f) AS h FROM {live_f} AS f) "  # noqa: S608
        f"AS a FULL JOIN (SELECT sha256, hash(f) AS h FROM {snap_f} AS f) AS b "
        "ON a.sha256 = b.sha256 WHERE a.h IS DISTINCT FROM b.h").fetchall()]


def _replace_keys(con, live_t: str, snap_t: str, key: str, keys: list) -> int:
    """Replace the rows of ``keys`` in the snapshot by the live ones; rows deleted + inserted."""
    k = _q(key)
    nonnull = [x for x in keys if x is not None]
    n = con.execute(f"DELETE FROM {snap_t} WHERE {k} IN (SELECT unnest(?))",  # noqa: S608
                    [nonnull]).fetchone()[0]
    n += con.execute(f"INSERT INTO {snap_t} SELECT * FROM {live_t} "  # noqa: S608
                     f"WHERE {k} IN (SELECT unnest(?))", [nonnull]).fetchone()[0]
    if None in keys:
        n += con.execute(f"DELETE FROM {snap_t} WHERE {k} IS NULL").fetchone()[0]  # noqa: S608
        n += con.execute(f"INSERT INTO {snap_t} SELECT * FROM {live_t} "  # noqa: S608
                         f"WHERE {k} IS NULL").fetchone()[0]
    return n


_ROW = "_pwh_row"


def _key_hashes(con, t: str, key: str) -> dict:
    return {r[0]: (r[1], r[2]) for r in con.execute(
        f"SELECT {_q(key)}, count(*), sum(hash({_ROW})::HUGEINT) FROM {t} AS {_ROW} "  # noqa: S608
        "GROUP BY ALL").fetchall()}


