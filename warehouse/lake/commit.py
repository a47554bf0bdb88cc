"""One run = one atomic, exactly-once commit across every Iceberg table it writes.

An Iceberg commit swaps one table's metadata pointer; a run writes several raw tables. The SQL
catalog keeps every pointer in one database table, so a run is committed as *one database
transaction*:

1. the run's rows are written as Parquet data files (once, whatever happens next);
2. per table, against the table as loaded now: a snapshot appending those files (manifest,
   manifest list, new metadata file; nothing visible yet);
3. one transaction in the catalog database: insert the run into the ledger
   (``pwh_lake_runs``, primary key ``run_id``), then move each table's pointer with a
   compare-and-swap on the pointer it was built on (the SQL catalog's own commit rule), in a
   fixed table order (no deadlock between writers);
4. a lost compare-and-swap (another run committed meanwhile) or a busy database rolls the
   whole transaction back and goes to 2 again with fresh metadata (jittered exponential
   backoff; the data files are reused); a ledger key violation means another writer committed
   the same run first: nothing to do.

Steps 2 and 3 run in the writer's *turn* (:func:`commit_turn`: an ``flock`` beside a SQLite
catalog, an advisory lock on PostgreSQL), so writers of one catalog do not stage snapshots on
metadata that another writer is about to replace; everything before (parse, Parquet files)
runs in parallel. The turn is only an optimisation: the compare-and-swap keeps commits correct
without it.

A writer killed at any point before the database commit leaves only unreferenced files
(harmless, removable by orphan-file maintenance); the database commit is atomic, so a run is in
every table it writes or in none, and in the ledger exactly when it is in the tables.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import random
import threading
import time
import uuid
from collections.abc import Callable

import pyarrow as pa

from warehouse.lake.catalog import LakeError, load_consistent, table_ident

# A conflict is retried this many times (jittered exponential backoff from RETRY_MIN_S)
RETRIES = 60
RETRY_MIN_S = 0.01
RETRY_MAX_S = 1.0


class CommitConflict(Exception):
    """Another writer moved a table's pointer first: rebuild the snapshots and retry."""


def create_tables(cat, schemas: dict[str, pa.Schema]) -> None:
    """Create the missing tables (racing creators: the first wins, the others load it)."""
    from pyiceberg.exceptions import TableAlreadyExistsError
    from sqlalchemy.exc import SQLAlchemyError

    have = {".".join(ident) for ns in {n.split(".")[0] for n in schemas}
            for ident in cat.list_tables(ns)}
    for name, schema in schemas.items():
        if name in have:
            continue
        for attempt in range(10):
            try:
                cat.create_table_if_not_exists(table_ident(name), schema=schema)
                break
            except TableAlreadyExistsError:
                break
            except SQLAlchemyError as exc:
                if attempt == 9:
                    raise LakeError(f"cannot create the Iceberg table {name}: {exc}") from None
                time.sleep(0.05 * (attempt + 1) * (1 + random.random()))


def write_data_files(tbl, data: pa.Table) -> list:
    """Write ``data`` as Parquet data files of ``tbl`` (not committed: invisible until then)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if data.num_rows == 0:
        return []
    data = data.select([f.name for f in tbl.schema().fields]).cast(tbl.schema().as_arrow())
    return list(_dataframe_to_data_files(table_metadata=tbl.metadata, write_uuid=uuid.uuid4(),
                                         df=data, io=tbl.io))


# Snapshots kept in a raw table's metadata: older ones are expired by the commit that adds a new
# one (appends never unreference a data file, so no file is deleted). Keeps every commit's
# metadata the same size however long the history: without it each commit rewrites a metadata
# file that lists every snapshot ever made.
KEEP_SNAPSHOTS = int(os.environ.get("PWH_LAKE_KEEP_SNAPSHOTS", "20"))


def _fast_transaction(tbl):
    """A pyiceberg transaction whose ``table_metadata`` is computed once per staged update.

    pyiceberg 0.12 recomputes it (a deep copy of the whole metadata) on every access, a dozen
    times per append: quadratic in the number of snapshots."""
    from pyiceberg.table import Transaction
    from pyiceberg.table.update import update_table_metadata

    class _Txn(Transaction):
        _memo: tuple = (0, None)

        @property
        def table_metadata(self):
            if not self._updates:
                return self._table.metadata
            n, meta = self._memo
            if n != len(self._updates):
                meta = update_table_metadata(self._table.metadata, self._updates)
                self._memo = (len(self._updates), meta)
            return meta

    return _Txn(tbl)


def _stage(cat, tbl, files: list, properties: dict[str, str]):
    """A new metadata file for ``tbl`` with one more snapshot appending ``files`` (older
    snapshots past :data:`KEEP_SNAPSHOTS` expired); returns its location (written, not yet
    pointed to)."""
    from pyiceberg.table.update import RemoveSnapshotsUpdate

    txn = _fast_transaction(tbl)
    with txn.update_snapshot(snapshot_properties=properties).fast_append() as fa:
        for f in files:
            fa.append_data_file(f)
    snaps = sorted(tbl.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    old = [s.snapshot_id for s in snaps[:max(0, len(snaps) - (KEEP_SNAPSHOTS - 1))]]
    updates = txn._updates + ((RemoveSnapshotsUpdate(snapshot_ids=old),) if old else ())
    staged = cat._update_and_stage_table(tbl, tbl.name(), txn._requirements, updates)
    cat._write_metadata(metadata=staged.metadata, io=staged.io,
                        metadata_path=staged.metadata_location)
    return staged.metadata_location


def _retryable_db_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return any(k in msg for k in ("locked", "busy", "serializ", "deadlock", "could not obtain"))


def commit_run(cat, run_id: str, source_format: str, tables: dict[str, pa.Table], *,
               on_retry: Callable[[int, str], None] | None = None,
               hook: Callable[[str], None] | None = None,
               check: Callable[[dict], None] | None = None,
               also: Callable[[object], None] | None = None) -> bool:
    """Commit one run's rows (``ns.table`` -> Arrow table) atomically and exactly once.

    Returns ``True`` when this call committed the run, ``False`` when the lake already held
    it (committed before, or by a writer that won a race). ``hook(stage)`` is called with
    ``"staged"`` before the database transaction and ``"in_transaction"`` once every pointer is
    moved but not yet committed (tests kill a writer there). ``check``, ``also``: as for
    :func:`commit_files`.
    """
    from warehouse.lake import ledger

    if ledger.committed(cat.engine, cat.name, [run_id]):
        return False
    names = sorted(n for n, t in tables.items() if t.num_rows > 0)
    loaded = load_tables(cat, names)
    if check is not None:
        check(loaded)  # before any data file is written
    files = {n: write_data_files(loaded[n], tables[n]) for n in names}
    return commit_files(cat, run_id, source_format, files, loaded=loaded, on_retry=on_retry,
                        hook=hook, check=check, also=also)


def load_tables(cat, names: list[str]) -> dict:
    """``names`` loaded as of one instant; :class:`LakeError` naming any the lake lacks."""
    loaded = load_consistent(cat, names)
    missing = [n for n in names if n not in loaded]
    if missing:
        raise LakeError(f"the lake has no table {', '.join(missing)}")
    return loaded


def commit_files(cat, run_id: str, source_format: str, files: dict[str, list], *,
                 loaded: dict | None = None,
                 on_retry: Callable[[int, str], None] | None = None,
                 hook: Callable[[str], None] | None = None,
                 check: Callable[[dict], None] | None = None,
                 also: Callable[[object], None] | None = None) -> bool:
    """Commit one run's data files (``ns.table`` -> pyiceberg ``DataFile`` list, written but
    not committed) atomically and exactly once: the second half of :func:`commit_run`.
    ``loaded``: the tables as loaded just before (else they are loaded in the writer's turn,
    which keeps conflicts away). ``check(tables)``: called in the writer's turn with the
    tables each attempt's snapshots are built on, before staging them; whatever it raises
    ends the commit with nothing committed. What it reads of a table the run writes cannot
    change before the commit (a change moves that table's pointer: the swap fails, and the
    retry checks again); :mod:`warehouse.lake.ranks` relies on it. ``also(connection)``: more
    rows for the catalog database, inserted in the run's commit transaction (after the
    ledger's; a key violation there rolls the commit back and retries it, checking again)."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    from warehouse.lake import ledger

    names = sorted(n for n, f in files.items() if f)
    props = {"pwh.run_id": run_id}
    delay = RETRY_MIN_S
    for attempt in range(RETRIES + 1):
        staged = {}
        try:
            with commit_turn(cat):
                if attempt or loaded is None:
                    loaded = load_tables(cat, names)
                if check is not None:
                    check(loaded)
                staged = {n: (loaded[n].metadata_location,
                              _stage(cat, loaded[n], files[n], props)) for n in names}
                if hook is not None:
                    hook("staged")
                _transaction(cat, run_id, source_format, names, staged, hook, also)
            return True
        except IntegrityError:
            if ledger.committed(cat.engine, cat.name, [run_id]):
                return False  # another writer committed this run first
            reason = "ledger or rank index insert refused"
        except CommitConflict as exc:
            reason = f"{exc.args[0]} moved"
        except OperationalError as exc:
            if not _retryable_db_error(exc):
                raise LakeError(f"catalog database error committing run {run_id}: "
                                f"{str(exc).splitlines()[0]}") from None
            reason = "database busy"
        _discard(loaded, staged)
        if attempt == RETRIES:
            break
        if on_retry is not None:
            on_retry(attempt + 1, reason)
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, RETRY_MAX_S)
    raise LakeError(f"run {run_id}: still conflicting after {RETRIES} retries; nothing of it "
                    "was committed (run the ingest again)")


def _transaction(cat, run_id: str, source_format: str, names: list[str], staged: dict,
                 hook: Callable[[str], None] | None,
                 also: Callable[[object], None] | None = None) -> None:
    """The ledger insert and every pointer's compare-and-swap, in one database transaction."""
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import insert, update

    from warehouse.lake import ledger

    with cat.engine.begin() as con:
        con.execute(insert(ledger.RUNS).values(
            catalog_name=cat.name, run_id=run_id, source_format=source_format,
            committed_at=dt.datetime.now(dt.UTC).replace(tzinfo=None)))
        if also is not None:
            also(con)
        for n in names:
            ns, t = table_ident(n)
            old, new = staged[n]
            res = con.execute(
                update(IcebergTables)
                .where(IcebergTables.catalog_name == cat.name,
                       IcebergTables.table_namespace == ns,
                       IcebergTables.table_name == t,
                       IcebergTables.metadata_location == old)
                .values(metadata_location=new, previous_metadata_location=old))
            if res.rowcount != 1:
                raise CommitConflict(n)
        if hook is not None:
            hook("in_transaction")


_turn = threading.local()


def _lock_key(cat) -> int:
    digest = hashlib.sha256(f"pwh-lake-commit:{cat.name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def commit_turn(cat):
    """Writers of one catalog take turns for the short end of a commit (load the tables, stage
    the snapshots, the database transaction), so that they do not waste work staging snapshots
    that another writer's commit outdates. SQLite: an ``flock`` on ``<catalog file>.commit-lock``
    beside it; PostgreSQL: a session advisory lock. Both are released when the holder dies
    (kill -9 included). Only an optimisation: the compare-and-swap keeps the commit correct
    without it (other catalogs, writers of older pwh versions). Re-entrant per thread."""
    if getattr(_turn, "depth", 0):
        _turn.depth += 1
        try:
            yield
        finally:
            _turn.depth -= 1
        return
    dialect = cat.engine.dialect.name
    db = cat.engine.url.database
    if dialect == "sqlite" and db and db != ":memory:":
        import fcntl

        fd = os.open(f"{db}.commit-lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _turn.depth = 1
            try:
                yield
            finally:
                _turn.depth = 0
        finally:
            os.close(fd)  # releases the lock
    elif dialect == "postgresql":
        from sqlalchemy import text

        with cat.engine.connect() as con:
            con.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _lock_key(cat)})
            _turn.depth = 1
            try:
                yield
            finally:
                _turn.depth = 0
                con.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _lock_key(cat)})
                con.commit()
    else:
        yield


def _discard(loaded: dict, staged: dict) -> None:
    """Best effort: delete the metadata files of a failed attempt (never pointed to)."""
    for n, (_, new) in staged.items():
        try:
            loaded[n].io.delete(new)
        except Exception:  # noqa: BLE001, S110 - an orphan file is harmless
            pass
