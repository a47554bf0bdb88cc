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
from warehouse.serving import snapshot_delta as delta

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
            keep.fsync(cand)
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
    keep.fsync(sdir)


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
        keep.fsync(work)
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

    runs = delta.count(con, delta.q(ALIAS, "raw", "files")) if db.has_table(con, "raw", "files", ALIAS) else 0
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ALIAS}.{INFO_SCHEMA}")
    con.execute(f"CREATE OR REPLACE TABLE {ALIAS}.{INFO_SCHEMA}.info AS "
                "SELECT ?::VARCHAR AS version, ?::TIMESTAMP AS published_at, "
                "?::VARCHAR AS method, ?::VARCHAR AS source, ?::BIGINT AS runs",
                [version, dt.datetime.now(dt.UTC).replace(tzinfo=None), method, str(live), runs])


# --------------------------------------------------------------------------- delta


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
        live_s, snap_s = delta.structure(con, live_db, INFO_SCHEMA), delta.structure(con, ALIAS, INFO_SCHEMA)
        diff = delta.structure_diff(live_s, snap_s)
        if diff:
            return f"structure changed since the spare snapshot: {diff}"
        try:
            plans = delta.plan(con, live_db, ALIAS, live_s["columns"], live.stat().st_size)
        except delta.CopyInstead as exc:
            return str(exc)
        con.execute("BEGIN TRANSACTION")
        try:
            written = {p.name: n for p in plans if (n := delta.apply(con, p))}
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
