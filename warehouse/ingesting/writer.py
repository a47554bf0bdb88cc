"""The one writer: a file's rows go into the warehouse in one transaction, whatever read them.

:class:`Writer` is a thread that obtains the warehouse's writer connection (an open one, or a
:class:`WriterAhead` still opening it), waits for the file's identity, asks whether the
warehouse already has it (then it writes nothing: :attr:`Writer.known`), and otherwise begins
the file's transaction and inserts the ``(raw table name, Arrow table)`` items it is sent, as
they come, while the reader goes on reading. Any known raw table may be sent, in any order and
any number of times; a table without a ``run_id`` column gets the file's identity bound in SQL.
The loader then adds the manifest row and commits (:meth:`Writer.commit`), or rolls back:
nothing is half-written.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time

import duckdb
import pyarrow as pa

from warehouse import db
from warehouse.config import Settings
from warehouse.ingesting.forking import Ahead


class WriterAhead(Ahead):
    """The warehouse's writer connection, opened (the warehouse created if new) while a file is
    read, hashed and parsed: DuckDB's start-up (~25 ms per database instance) overlaps the
    parse. A new warehouse is written through the connection that created it (one instance,
    not two: :func:`db.create_warehouse`).

    DuckDB's client takes the GIL back between the steps of each statement, and Python hands
    the GIL over every 5 ms: the ~30 statements creating a warehouse would wait for the parse
    to end. While the thread runs, the hand-over interval is 0.2 ms (the parse is not slowed
    measurably; the warehouse is ready ~6x sooner)."""

    NAME = "pwh-writer-open"
    SWITCH_S = 0.0002

    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings
        self.opening: tuple[float, float] | None = None  # perf_counter: began, ready
        self.created = False  # the warehouse was new (created by this connection)
        self._abandoned = False  # nobody will take the connection: closed once opened
        self._handed = False  # the connection is (about to be) the result
        self._handover = threading.Lock()

    def work(self):
        if self._abandoned:
            return None
        t0 = time.perf_counter()
        self.created = not self.settings.warehouse.exists()
        con = db.connect_rw(self.settings.warehouse, keep_created=True)
        try:
            db.ensure_schema(con)
        except BaseException:
            con.close()
            raise
        self.opening = (t0, time.perf_counter())
        with self._handover:
            if self._abandoned:  # e.g. Ctrl-C while it opened: let the warehouse go at once
                con.close()
                return None
            self._handed = True
        return con

    def abandon(self):
        """The connection if it is ready by now, else ``None``; one the thread opens later is
        closed by it (a traceback kept alive, as in a notebook, would hold it open)."""
        with self._handover:
            self._abandoned = True
            handed = self._handed
        if handed or self._thread is None or not self._thread.is_alive():
            try:
                return self.get()  # handed: the thread is returning it (a short join)
            except BaseException:  # noqa: BLE001 - the caller is leaving already
                return None
        return super().abandon()  # still opening: not waited for


def writer_of(con):
    """``con``, or the connection a :class:`WriterAhead` opens (joined)."""
    return con.get() if isinstance(con, WriterAhead) else con


def known(con, sha: str) -> bool:
    """The warehouse already has the file of this identity."""
    return con.execute("SELECT 1 FROM raw.files WHERE sha256 = ?", [sha]).fetchone() is not None


def set_threads(con, n: int) -> int | None:
    """Set DuckDB's thread count (a database-wide setting); return the previous one."""
    try:
        old = con.execute("SELECT current_setting('threads')").fetchone()[0]
        con.execute(f"SET threads = {int(n)}")
        return int(old)
    except duckdb.Error:  # e.g. a connection a failed COMMIT invalidated: nothing to restore
        return None


def ingest_memory_limit() -> str:
    """DuckDB's memory limit while a file loads (``PWH_INGEST_MEMORY_MB``, default 512): rows
    past it go to the database file ahead of the COMMIT (DuckDB writes big transactions
    optimistically), so a file of millions of rows stays within the RSS bound
    (docs/formats.md, limits). ``0`` leaves DuckDB's own default (80 % of RAM)."""
    import os

    mb = os.environ.get("PWH_INGEST_MEMORY_MB", "512").strip()
    return f"{int(mb)}MB" if mb and int(mb) > 0 else ""


def set_memory_limit(con, limit: str) -> str | None:
    """Set DuckDB's memory limit (database-wide); return the previous one."""
    if not limit:
        return None
    try:
        old = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        con.execute(f"SET memory_limit = '{limit}'")
        return str(old)
    except duckdb.Error:
        return None


class Stop(Exception):
    """The writer stopped (told to, or it failed: then :attr:`Writer.error` says why)."""


def _raw_tables() -> frozenset[str]:
    from warehouse.ingesting.formats import ALL_TABLES

    return frozenset(t.name for t in ALL_TABLES)


FILES_INSERT = "INSERT INTO raw.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class Writer(threading.Thread):
    """See the module's docstring. ``source``: an open connection or a :class:`WriterAhead`;
    ``identity(stop)``: blocks until the file's SHA-256 is known (``None``: stop). ``insert_bytes``:
    Arrow bytes gathered per INSERT (few, big INSERTs when the parser shares the GIL with this
    thread); ``queue_size``: items waiting, which bounds memory; ``threads``: DuckDB's thread
    count while the load runs (restored before COMMIT), ``None`` to leave it; ``ask``: whether
    to ask if the warehouse has the file (``False``: the loader just did)."""

    def __init__(self, source, identity, *, insert_bytes: int = 64 << 20, queue_size: int = 64,
                 threads: int | None = None, ask: bool = True):
        super().__init__(name="pwh-writer", daemon=True)
        self.source, self.identity = source, identity
        self.insert_bytes, self.threads = insert_bytes, threads
        self.q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.con = None
        self.sha: str | None = None
        self.ask = ask  # False: the loader asked whether the file is known already
        self.known = False
        self.began = False
        self.inserts = 0
        self.cpu = 0.0
        self._threads_was: int | None = None
        self._memory_was: str | None = None
        self._tables = _raw_tables()

    # ---- the thread

    def run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the loader's thread
            self.error = exc
        finally:
            self.cpu = time.thread_time()

    def _work(self) -> None:
        self.con = writer_of(self.source)
        db.ensure_schema(self.con)
        if self.threads is not None:
            self._threads_was = set_threads(self.con, self.threads)
        self._memory_was = set_memory_limit(self.con, ingest_memory_limit())
        sha = self.identity(self.stop)
        if sha is None or self.stop.is_set():
            raise Stop
        self.sha = sha
        if self.ask and known(self.con, sha):
            self.known = True
            return
        self.con.execute("BEGIN TRANSACTION")
        self.began = True
        pending: dict[str, list[pa.Table]] = {}
        size = 0
        done = False
        while not done:
            try:
                item = self.q.get(timeout=0.05)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stop from None
                continue
            if item is None:
                done = True
            else:
                tname, table = item
                if tname not in self._tables:
                    raise ValueError(f"a reader sent rows for raw.{tname}, which is no raw table")
                if table.num_rows:  # nothing to insert: a statement saved
                    pending.setdefault(tname, []).append(table)
                    size += table.nbytes
                del item, table
            # Few, big INSERTs when the parser runs in a thread: DuckDB's Python client takes
            # the GIL again and again while it scans an Arrow table, and the parser holds the
            # GIL for a whole chunk decode, so every INSERT made while parsing waits; batching
            # makes those waits rare.
            if done or size >= self.insert_bytes:
                for tname, tables in pending.items():
                    self.insert(tname, tables[0] if len(tables) == 1 else pa.concat_tables(tables),
                                sha)
                    self.inserts += 1
                pending, size = {}, 0

    def insert(self, tname: str, table: pa.Table, sha: str) -> None:
        # DuckDB keeps every Python object a query scanned alive until the transaction ends;
        # for a registered table that is all its data, so the file's one transaction would
        # hold every batch ever sent (~60 B per row). A reader that hands each batch over
        # once and forgets it keeps only itself alive: memory stays flat with the row count.
        batches = table.to_batches()
        source = pa.RecordBatchReader.from_batches(table.schema, _handing_over(batches))
        del batches
        bound = "run_id" not in table.schema.names
        del table
        self.con.register("_pwh_batch", source)
        try:
            if bound:  # a streamed batch: the identity is bound here
                self.con.execute(f"INSERT INTO raw.{tname} BY NAME "  # noqa: S608 - known names
                                 "SELECT ?::VARCHAR AS run_id, * FROM _pwh_batch", [sha])
            else:
                self.con.execute(f"INSERT INTO raw.{tname} BY NAME "  # noqa: S608 - known names
                                 "SELECT * FROM _pwh_batch")
        except BaseException:
            with contextlib.suppress(Exception):  # the aborted transaction refuses it
                self.con.unregister("_pwh_batch")
            raise
        self.con.unregister("_pwh_batch")

    # ---- the loader's side

    def send(self, item: tuple[str, pa.Table]) -> None:
        """Queue an item for the transaction; :class:`Stop` if the writer is not writing."""
        while True:
            if not self.is_alive():
                raise Stop
            try:
                self.q.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def end(self) -> None:
        """No more items: the writer inserts what it holds and ends."""
        self.send(None)

    def halt(self) -> None:
        """Stop now (what was inserted stays uncommitted until :meth:`rollback`)."""
        self.stop.set()

    def restore_threads(self) -> None:
        """DuckDB's thread count and memory limit as they were before the load."""
        if self._threads_was is not None and self.con is not None:
            set_threads(self.con, self._threads_was)
            self._threads_was = None
        if self._memory_was is not None and self.con is not None:
            set_memory_limit(self.con, self._memory_was)
            self._memory_was = None

    def commit(self, files_row: list) -> None:
        """After the thread ended: the manifest row, then ``COMMIT``. The reader is done by
        now, so DuckDB's checkpoint gets every core."""
        self.restore_threads()
        self.con.execute(FILES_INSERT, files_row)
        self.con.execute("COMMIT")
        self.began = False

    def rollback(self) -> None:
        if self.began:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
                self.con.execute("ROLLBACK")
            self.began = False
        with contextlib.suppress(duckdb.Error):
            self.restore_threads()


def _handing_over(batches: list):
    """Yield the batches, dropping each one from the list as it goes."""
    batches.reverse()
    while batches:
        yield batches.pop()
