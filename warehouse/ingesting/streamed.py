"""Streamed ingestion of big files: the pipeline stages every streamed format shares (a hasher
and a DuckDB writer thread, a parser process and its pipe framing) and the streamed tile profile.

Same guarantees as :mod:`warehouse.ingesting.loader` (identity = SHA-256 of the bytes, one
transaction per file, archive first, nothing half-written); memory stays bounded whatever the
size. :func:`loader.ingest_file` sends files of ``STREAM_MIN_BYTES`` or more here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import mmap
import os
import queue
import shutil
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse import db
from warehouse.config import Settings
from warehouse.errors import FormatError
from warehouse.ingesting import runmeta
from warehouse.ingesting.formats import profile
from warehouse.ingesting.loader import (
    IngestResult,
    _archived,
    _ingested,
    _known,
    forks_done,
    utcnow,
    writer_of,
)

# A streamed file that turns out bad is parsed again whole, for the exact same error message as
# the whole-document path, unless it is bigger than this (then the streamed error is reported).
EXACT_ERRORS_MAX_BYTES = 1 << 30


# ------------------------------------------------------------------ streamed ingestion
#
# A big profile is first copied into the archive's temp file (in-kernel copy). Everything then
# reads that private copy, so the rows, the archived bytes and the SHA-256 (the run_id) provably
# describe the same bytes even if the source changes meanwhile. Three threads share the work
# (each stage releases the GIL where it can):
#   main    parses chunks of samples in place from a private memory map (profile.SampleStream);
#   hasher  SHA-256 of the copy (needed before the first row is written), then fsync;
#   writer  inserts the Arrow batches into DuckDB inside one transaction.
# COMMIT happens only when the parse, the duplicate-key check, the hash and the archive copy all
# succeeded; any error rolls the whole file back.

_BLOCK = 8 << 20
_PAGE = mmap.PAGESIZE
_INSERT_BYTES = 64 << 20  # Arrow bytes per INSERT while streaming (parser in a thread)
# Parser in its own process: no GIL to share, so smaller INSERTs keep pace with the parse and
# leave less to append once it ends (full-size profile: 9 of 10 interleaved runs faster than
# with 64 MB, by ~5 %).
_INSERT_BYTES_CHILD = 16 << 20
# DuckDB's threads while the parser process runs. Appending from Arrow gains little from a
# second DuckDB thread, which on a 2-core machine takes the parser's core instead: measured on
# a full-size profile, one thread uses less CPU in all and ingests 10-25 % faster.
_LOAD_THREADS = 1


class _Stop(Exception):
    """Another stage gave up; the error that made it stop is reported instead."""


class _Stage(threading.Thread):
    def __init__(self, name: str):
        super().__init__(name=f"pwh-{name}", daemon=True)
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread
            self.error = exc
        finally:
            self.cpu = time.thread_time()

    def work(self) -> None:
        raise NotImplementedError


class _Hasher(_Stage):
    def __init__(self, file: Path, fsync: bool):
        super().__init__("hasher")
        self.file, self.fsync = file, fsync
        self.sha: str | None = None
        self.sha_ready = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.sha_ready.set()

    def work(self) -> None:
        h = hashlib.sha256()
        with open(self.file, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            size = len(mm)
            for off in range(0, size, _BLOCK):
                if self.stop.is_set():
                    raise _Stop
                n = min(_BLOCK, size - off)
                with memoryview(mm) as mv, mv[off: off + n] as block:
                    h.update(block)
                mm.madvise(mmap.MADV_DONTNEED, off, n)  # keep RSS flat: the page cache has it
            self.sha = h.hexdigest()
            self.sha_ready.set()
            if self.fsync:
                os.fsync(fh.fileno())


class _Writer(_Stage):
    def __init__(self, con, hasher: _Hasher, insert_bytes: int = _INSERT_BYTES):
        super().__init__("writer")
        self.con, self.hasher = con, hasher
        self.insert_bytes = insert_bytes
        self.q: queue.Queue = queue.Queue(maxsize=64)
        self.known = False
        self.began = False
        self.inserts = 0

    def work(self) -> None:
        self.hasher.sha_ready.wait()
        sha = self.hasher.sha
        if sha is None:
            raise _Stop
        if _known(self.con, sha):
            self.known = True
            return
        self.con.execute("BEGIN TRANSACTION")
        self.began = True
        done = False
        pending: dict[str, list] = {}
        size = 0
        while not done:
            try:
                item = self.q.get(timeout=0.05)
            except queue.Empty:
                if self.stop.is_set():
                    raise _Stop from None
                continue
            if item is None:
                done = True
            else:
                pending.setdefault(item[0], []).append(item[1])
                size += item[1].nbytes
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

    def insert(self, tname: str, table, sha: str) -> None:
        # DuckDB keeps every Python object a query scanned alive until the transaction ends;
        # for a registered table that is all its data, so the file's one transaction would
        # hold every batch ever sent (~60 B per row). A reader that hands each batch over
        # once and forgets it keeps only itself alive: memory stays flat with the sample count.
        batches = table.to_batches()
        source = pa.RecordBatchReader.from_batches(table.schema, _handing_over(batches))
        del batches
        self.con.register("_pwh_batch", source)
        try:
            self.con.execute(
                f"INSERT INTO raw.{tname} BY NAME "  # noqa: S608 - names from profile.TABLES
                "SELECT ?::VARCHAR AS run_id, * FROM _pwh_batch", [sha])
        except BaseException:
            with contextlib.suppress(Exception):  # the aborted transaction refuses it
                self.con.unregister("_pwh_batch")
            raise
        self.con.unregister("_pwh_batch")

    def send(self, item) -> None:
        while True:
            if not self.is_alive():
                raise _Stop
            try:
                self.q.put(item, timeout=0.05)
                return
            except queue.Full:
                continue


def _handing_over(batches: list):
    """Yield the batches, dropping each one from the list as it goes."""
    batches.reverse()
    while batches:
        yield batches.pop()


def _stream_layout_ok(path: Path, size: int) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
        if profile.samples_start(head) is None:  # a long groups[] pushes samples further
            head += fh.read(profile.MAX_HEADER_BYTES)
        fh.seek(max(0, size - 4096))
        tail = fh.read()
    return profile.samples_start(head) is not None and profile.samples_end(tail) is not None


def ingest_streamed_profile(settings: Settings, path: Path, shown: str, t0: float, *, con, meta,
                     series, label, captured_at) -> IngestResult | None:
    """Ingest a big profile by streaming; ``None`` means: use the whole-document path."""
    size = path.stat().st_size
    if not _stream_layout_ok(path, size):
        return None
    meta = meta or runmeta.resolve(path, series=series, label=label, captured_at=captured_at)
    archived = _archived(settings, path) is not None
    tmp = None
    if archived:
        src = path
    else:
        settings.archive_dir.mkdir(parents=True, exist_ok=True)
        tmp = src = settings.archive_dir / f".{uuid.uuid4().hex}.{os.getpid()}.tmp"
    c = None
    hasher = writer = child = threads = None
    gc_was = gc.isenabled()
    gc.disable()
    malloc = _MallocKeep()
    # the writer needs the GIL often while DuckDB scans a batch: let it have it sooner
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0005))
    cpu0 = time.thread_time()
    marks = [("start", time.perf_counter(), cpu0)]
    try:
        if tmp is not None:
            shutil.copyfile(path, tmp)
        marks.append(("copy", time.perf_counter(), time.thread_time()))
        child = _ChildStream(src, shown) if _use_child() else None
        if child is not None:
            child.start()  # before any thread of ours exists
        forks_done()
        c = writer_of(con) or db.connect_rw(settings.warehouse)  # while the parser starts
        db.ensure_schema(c)
        if child is not None:
            threads = _set_threads(c, _LOAD_THREADS)
        hasher = _Hasher(src, fsync=tmp is not None)
        writer = _Writer(c, hasher, _INSERT_BYTES if child is None else _INSERT_BYTES_CHILD)
        hasher.start()
        writer.start()
        if child is not None:
            stream, items, mm = child, child.items(), None
        else:
            stream = profile.SampleStream(shown, str(src))
            with open(src, "rb") as fh:
                mm = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            items = stream.tables(mm, _releaser(mm))
        completed = False
        try:
            for item in items:
                if writer.known:
                    break
                writer.send(item)
            else:
                writer.send(None)
                completed = True
        except _Stop:
            pass
        except profile.NotStreamable:
            return None
        except FormatError as exc:
            _halt(writer)
            hasher.join()
            if size <= EXACT_ERRORS_MAX_BYTES:
                return None  # the whole-document path reports the canonical error
            exc.sha256 = hasher.sha
            raise
        finally:
            if mm is not None:
                mm.close()
            if not completed:
                _halt(hasher, writer)
        hasher.join()
        writer.join()
        if writer.known:
            return IngestResult(shown, "skipped", hasher.sha, message="already ingested",
                                seconds=time.perf_counter() - t0)
        for t in (hasher, writer):
            if t.error is not None:
                raise t.error
        sha = hasher.sha
        try:
            stream.verify_keys()
        except FormatError as exc:
            exc.sha256 = sha
            raise
        dest = path
        if tmp is not None:
            dest = settings.archive_dir / f"{sha}.json"
            if dest.exists() and dest.stat().st_size == size:
                tmp.unlink()
            else:
                os.replace(tmp, dest)
            tmp = None
        c.execute(
            "INSERT INTO raw.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [sha, shown, Path(shown).name, profile.NAME, profile.PARSER_VERSION, size, utcnow(),
             meta.series, meta.label, meta.captured_at, meta.source, str(dest)])
        marks.append(("parsed", time.perf_counter(), time.thread_time()))
        c.execute("COMMIT")
        writer.began = False
        marks.append(("commit", time.perf_counter(), time.thread_time()))
        if child is not None:
            child.close()
        if os.environ.get("PWH_DEBUG_TIMING"):
            print("pwh timing: " + ", ".join(
                f"{n} {w - marks[0][1]:.2f}s wall/{cpu - cpu0:.2f}s cpu" for n, w, cpu in marks[1:])
                + f"; hasher cpu {hasher.cpu:.2f}s, writer cpu {writer.cpu:.2f}s, "
                f"{writer.inserts} inserts"
                + (f"; parser process cpu {child.cpu:.2f}s, peak rss {child.peak_rss} KiB"
                   if child is not None else ""), file=sys.stderr)
        return _ingested(shown, sha, profile.NAME, {
            "groups": stream.groups, "samples": stream.samples,
            "metadata_pairs": stream.pairs}, t0)
    finally:
        if child is not None:
            child.close()
        _halt(hasher, writer)
        for t in (hasher, writer):
            if t is not None and t.is_alive():
                t.join()
        if writer is not None and writer.began:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
                c.execute("ROLLBACK")
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if threads is not None:
            _set_threads(c, threads)
        if con is None and c is not None:
            c.close()
        malloc.restore()
        sys.setswitchinterval(switch)
        if gc_was:
            gc.enable()


def _set_threads(con, n: int) -> int | None:
    """Set DuckDB's thread count (a database-wide setting); return the previous one."""
    try:
        old = con.execute("SELECT current_setting('threads')").fetchone()[0]
        con.execute(f"SET threads = {int(n)}")
        return int(old)
    except duckdb.Error:  # e.g. a connection a failed COMMIT invalidated: nothing to restore
        return None


def _releaser(mm: mmap.mmap) -> Callable[[int], None]:
    """``release(upto)``: drop the pages before ``upto`` from the process (the page cache keeps
    them), so a private map of a huge file does not grow the RSS."""
    released = 0

    def release(upto: int) -> None:
        nonlocal released
        upto -= upto % _PAGE
        if upto > released:
            mm.madvise(mmap.MADV_DONTNEED, released, upto - released)
            released = upto

    return release


def _use_child() -> bool:
    return hasattr(os, "fork") and os.environ.get("PWH_STREAM_PROCESS", "1") != "0"


_HEAD = struct.Struct("<cIQ")  # message kind, name length, payload length


def _write_all(fd: int, data) -> None:
    with memoryview(data) as mv:
        pos = 0
        while pos < len(mv):
            pos += os.write(fd, mv[pos:])


def _read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    with memoryview(buf) as mv:
        pos = 0
        while pos < n:
            k = os.readv(fd, [mv[pos:]])
            if k == 0:
                raise EOFError("the parser process ended early")
            pos += k
    return buf


def fork_child(child: Callable[[int], None]) -> tuple[int, int]:
    """Fork a process that runs ``child(write_fd)`` and exits (0 if it returned, 1 if it
    raised); returns ``(pid, read_fd)`` of the pipe it writes to."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # Linux: bigger pipe, fewer calls
        import fcntl

        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            child(w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


class ParserProcess:
    """A parser run in a forked process, its batches sent back through a pipe: the framing
    shared by :class:`_ChildStream` (tile profiles) and ``trace_loader._Child`` (Kineto traces).

    Each message is ``(kind, name, payload)``: ``T`` an Arrow IPC table named ``name``, ``E`` a
    :class:`FormatError` (its fields as JSON, rebuilt here), ``X`` any other error of the child
    (its repr); the subclass adds its own kinds (the end with its counts, "not streamable" …).
    The child runs :meth:`_child` with :meth:`_send`, :meth:`_send_table`, :meth:`_send_error`;
    the parent reads :meth:`_messages`."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.fd: int | None = None
        self.cpu = 0.0
        self.peak_rss = 0
        self.blocked = 0.0  # in the child: seconds spent waiting for the pipe

    def start(self) -> None:
        self.pid, self.fd = fork_child(self._child)

    def _child(self, fd: int) -> None:
        raise NotImplementedError

    # ---- the child's side

    def _send(self, fd: int, kind: bytes, name: bytes = b"", payload=b"") -> None:
        t = time.perf_counter()
        _write_all(fd, _HEAD.pack(kind, len(name), len(payload)) + name)
        if len(payload):
            _write_all(fd, payload)
        self.blocked += time.perf_counter() - t

    def _send_table(self, fd: int, name: str, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)
        del table
        self._send(fd, b"T", name.encode(), sink.getvalue())

    def _send_error(self, fd: int, exc: BaseException) -> None:
        if isinstance(exc, FormatError):
            self._send(fd, b"E", payload=json.dumps(
                [exc.path, exc.json_path, exc.expected, exc.kind]).encode())
        else:
            self._send(fd, b"X", payload=f"parser process: {exc!r}"[:4000].encode())

    # ---- the parent's side

    def _messages(self) -> Iterator[tuple[bytes, str, object]]:
        """``(kind, name, payload)`` until the caller stops reading; a ``T`` payload is the
        table; ``E`` and ``X`` raise (:class:`FormatError`, ``RuntimeError``)."""
        while True:
            kind, nlen, plen = _HEAD.unpack(_read_exact(self.fd, _HEAD.size))
            name = bytes(_read_exact(self.fd, nlen)).decode() if nlen else ""
            payload = _read_exact(self.fd, plen) if plen else b""
            if kind == b"T":
                yield kind, name, pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
            elif kind == b"E":
                p, where, expected, k = json.loads(bytes(payload))
                raise FormatError(p, where, expected, kind=k)
            elif kind == b"X":
                raise RuntimeError(bytes(payload).decode(errors="replace"))
            else:
                yield kind, name, bytes(payload)

    def kill(self) -> None:
        """End the process now (a thread reading its pipe then sees the end of it)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            self.kill()  # a no-op when it already ended
            pid, self.pid = self.pid, None
            _, _, usage = os.wait4(pid, 0)
            self.cpu = usage.ru_utime + usage.ru_stime
            self.peak_rss = usage.ru_maxrss


class _ChildStream(ParserProcess):
    """:class:`profile.SampleStream` run in a forked process.

    The parser holds the GIL for a whole chunk decode, and DuckDB's Python client needs the GIL
    again and again while it scans an Arrow batch: in one process they take turns (measured: an
    INSERT from Arrow runs 3.5x slower while another thread decodes JSON). In a child process
    the parse and the load really run in parallel. The child sends each batch as Arrow IPC
    through a pipe, checks the keys, then reports the counts, or the error (a
    :class:`FormatError` is rebuilt here with the same fields). It reads only the private copy
    of the file and writes nothing but the pipe; it is killed if the load stops.
    """

    def __init__(self, src: Path, shown: str):
        super().__init__()
        self.src, self.shown = src, shown
        self.groups = self.samples = self.pairs = 0

    def _child(self, fd: int) -> None:
        stream = profile.SampleStream(self.shown, str(self.src))
        try:
            with open(self.src, "rb") as fh:
                mm = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            try:
                for tname, table in stream.tables(mm, _releaser(mm)):
                    self._send_table(fd, tname, table)
            finally:
                mm.close()
            stream.verify_keys()
            self._send(fd, b"D", payload=json.dumps(
                [stream.groups, stream.samples, stream.pairs]).encode())
        except profile.NotStreamable:
            self._send(fd, b"N")
        except BrokenPipeError:
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            self._send_error(fd, exc)

    def items(self) -> Iterator[tuple[str, pa.Table]]:
        for kind, name, payload in self._messages():
            if kind == b"T":
                yield name, payload
            elif kind == b"D":
                self.groups, self.samples, self.pairs = json.loads(payload)
                return
            elif kind == b"N":
                raise profile.NotStreamable("reported by the parser process")
            else:
                raise RuntimeError(f"parser process: unexpected message {kind!r}")

    def verify_keys(self) -> None:
        """Done by the child before it reported success."""


class _MallocKeep:
    """glibc only: while streaming, serve the per-chunk temporary arrays (a few MB each) from
    the heap and keep freed memory for the next chunk, instead of a fresh mmap per array (whose
    page faults cost as much as the work on the array). Restored, and memory handed back, at
    the end. A no-op where glibc's ``mallopt`` is not available."""

    _M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

    def __init__(self):
        try:
            import ctypes

            self.libc = ctypes.CDLL("libc.so.6")
            ok = (self.libc.mallopt(self._M_MMAP_THRESHOLD, 32 << 20)
                  and self.libc.mallopt(self._M_TRIM_THRESHOLD, 1 << 30))
            if not ok:
                self.restore()
        except (OSError, AttributeError):
            self.libc = None

    def restore(self) -> None:
        if self.libc is not None:
            self.libc.mallopt(self._M_TRIM_THRESHOLD, 128 << 10)  # glibc's defaults
            self.libc.mallopt(self._M_MMAP_THRESHOLD, 128 << 10)
            self.libc.malloc_trim(0)
            self.libc = None


def _halt(*stages: _Stage | None) -> None:
    for t in stages:
        if t is not None:
            t.stop.set()
