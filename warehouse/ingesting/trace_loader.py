"""Streamed ingestion of huge kernel traces (Kineto, plain or gzip): memory bounded by chunks.

The same guarantees as :mod:`.loader` (one transaction, identity = SHA-256 of the file's own
bytes, archive, quarantine through the caller), with the same stages: the file is copied
into the archive's temp file, a hasher thread hashes that copy, a writer thread inserts the
Arrow batches inside one transaction, and the parser (:class:`kineto_stream.TraceStream`)
runs in a forked process, so parsing and loading use both cores and the parser's memory is
its own. ``COMMIT`` happens only after the parse, the hash and the archive copy succeeded.
A plain trace of ``SPLIT_MIN_BYTES`` or more may be parsed by two such processes, one per half
(:func:`split_wanted`, :func:`ingest_streamed`).

Used by :func:`loader.ingest_file` for trace files of ``PWH_STREAM_MIN_BYTES`` or more, and
gzip traces of an eighth of that (they decompress to several times their size).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
import os
import queue
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse import db
from warehouse.config import Settings
from warehouse.errors import FormatError
from warehouse.ingesting import formats, runmeta
from warehouse.ingesting import loader as _l
from warehouse.ingesting import streamed as _st
from warehouse.ingesting.formats import kineto, kineto_stream, trace
from warehouse.ingesting.formats.base import to_arrow

_QUEUE = 8  # Arrow batches (one per ~8 MB chunk) waiting for DuckDB: bounds the parent's RSS


def wants_stream(path: Path, size: int) -> bool:
    """A trace big enough to stream (content decides: the decompressed head is sniffed)."""
    gz_min = _l.STREAM_MIN_BYTES // 8
    if size < min(_l.STREAM_MIN_BYTES, gz_min):
        return False
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
    gz = formats.is_gzip(head)
    if size < (gz_min if gz else _l.STREAM_MIN_BYTES):
        return False
    if gz:
        try:
            head = formats.gunzip(head, str(path), limit=trace.HEAD_BYTES)
        except FormatError:
            return False  # the whole-document path reports the corrupt stream
    fmt = formats.detect_head(head, str(path))
    return fmt is not None and hasattr(fmt, "STREAM")


class _Child(_st.ParserProcess):
    """:class:`kineto_stream.TraceStream` in a forked process; batches come back as Arrow IPC
    through a pipe (:class:`streamed.ParserProcess`). Its own messages: ``D`` the end of a
    whole file (counts and capture time), ``P`` the end of a part (its keys and counts), ``N``
    not streamable, ``C`` a cut that is not an event boundary."""

    def __init__(self, src: Path, shown: str, *, stop: int | None = None,
                 start: int | None = None):
        super().__init__()
        self.src, self.shown = src, shown
        self.stop, self.start_at = stop, start  # the part to parse (see TraceStream)
        self.summary: dict[str, int] = {}
        self.captured_at: dt.datetime | None = None
        self.facts: bytes | None = None  # a part's keys and counts (kineto_stream.part_facts)

    def _child(self, fd: int) -> None:
        t0 = time.perf_counter()
        # two parts at once: half-size chunks, so both parsers together hold what one would
        half = self.stop is not None or self.start_at is not None
        stream = kineto_stream.TraceStream(
            self.shown, str(self.src), kineto_stream.CHUNK_BYTES // 2 if half else None,
            stop=self.stop, start=self.start_at)
        _st._MallocKeep()  # chunk-sized temporaries reuse the heap (this process just exits)
        gc.disable()  # no cycles are made; collections would only walk the decoded events
        try:
            for tname, table in stream.tables():
                self._send_table(fd, tname, table)
            when = stream.captured_at.isoformat() if stream.captured_at else None
            if os.environ.get("PWH_DEBUG_TIMING"):
                print(f"pwh timing: parser process {time.perf_counter() - t0:.2f}s wall, "
                      f"{time.process_time():.2f}s cpu, {self.blocked:.2f}s writing to the pipe",
                      file=sys.stderr)
            if stream.facts is not None:
                self._send(fd, b"P", payload=stream.facts)
            else:
                self._send(fd, b"D", payload=json.dumps([stream.summary, when]).encode())
        except kineto_stream.NotStreamable:
            self._send(fd, b"N")
        except kineto_stream.BadCut:
            self._send(fd, b"C")
        except BrokenPipeError:
            raise
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            self._send_error(fd, exc)

    def items(self) -> Iterator[tuple[str, pa.Table]]:
        for kind, name, payload in self._messages():
            if kind == b"T":
                yield name, payload
            elif kind == b"D":
                self.summary, when = json.loads(payload)
                self.captured_at = dt.datetime.fromisoformat(when) if when else None
                return
            elif kind == b"P":
                self.facts = payload
                return
            elif kind == b"N":
                raise kineto_stream.NotStreamable("reported by the parser process")
            elif kind == b"C":
                raise kineto_stream.BadCut("reported by the parser process")
            else:
                raise RuntimeError(f"parser process: unexpected message {kind!r}")


# A plain trace of this size or more may be parsed by two processes, one per half (see
# split_wanted). gzip cannot be split: it is decompressed in order.
SPLIT_MIN_BYTES = int(os.environ.get("PWH_TRACE_SPLIT_MIN_BYTES", str(64 << 20)))
SPLIT_MIN_CPUS = 4


def split_wanted(size: int) -> bool:
    """Parse a plain trace of ``size`` bytes in two parts? ``PWH_TRACE_SPLIT=1``: always (from
    ``SPLIT_MIN_BYTES``), ``0``: never. By default only where it pays: without the compiled
    scanner (the parse is then most of the time: two parser processes were ~1.3x faster on 2
    cores), or with ``SPLIT_MIN_CPUS`` cores or more. With the scanner on 2 cores, one parser
    process was as fast or faster (the two parsers, the hasher and the DuckDB writer then share
    2 cores, and the tail part's rows are rewritten at COMMIT) and holds less memory."""
    mode = os.environ.get("PWH_TRACE_SPLIT", "")
    if mode == "0" or size < SPLIT_MIN_BYTES:
        return False
    if mode == "1":
        return True
    from warehouse.ingesting.formats import kineto_scan

    return not kineto_scan.available() or _cpus() >= SPLIT_MIN_CPUS


def _cpus() -> int:
    """The cores this process may run on (all of the machine's where that is not known)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ingest_streamed(settings: Settings, path: Path, shown: str, t0: float, *, con, meta,
                    series, label, captured_at) -> _l.IngestResult | None:
    """Ingest a big trace by streaming; ``None``: not streamable, use the whole-document path.
    A bad file raises :class:`FormatError` (with ``sha256`` when known) for the caller to
    quarantine; nothing is committed.

    A plain file of ``SPLIT_MIN_BYTES`` or more (where :func:`split_wanted`) is cut at a
    ``}, {`` near its middle and its halves parsed by two processes at once, and both parts' batches go to DuckDB as they come,
    in the file's one transaction. The tail part's ``event_idx`` cannot be known before the head
    part is parsed (it counts from the document's first event): its rows are inserted with a
    provisional index (``PROVISIONAL`` + the index within the part, negative) and moved by
    one ``UPDATE`` of those uncommitted rows before ``COMMIT``, once the head part's event
    count is known. An error of the head part is reported before any of the tail's (document
    order), a tail error's event index is shifted too. If the cut turns out not to be an event
    boundary (e.g. inside a name), the file is parsed again in one part."""
    kw = dict(con=con, meta=meta, series=series, label=label, captured_at=captured_at)
    if split_wanted(path.stat().st_size):
        try:
            return _ingest_streamed(settings, path, shown, t0, split=True, **kw)
        except kineto_stream.BadCut:
            pass  # everything was rolled back: parse in one part
    return _ingest_streamed(settings, path, shown, t0, split=False, **kw)


_EVENT_AT = re.compile(r"^\$\.traceEvents\[(\d+)(?::(\d+))?\]")


def _shift_error(exc: FormatError, offset: int) -> FormatError:
    """A tail part's error with its event indices counted from the document's first event."""
    where = _EVENT_AT.sub(lambda m: f"$.traceEvents[{int(m[1]) + offset}"
                          + (f":{int(m[2]) + offset}" if m[2] else "") + "]", exc.json_path or "")
    return FormatError(exc.path, where, exc.expected, kind=exc.kind)


def _shift_events(table: pa.Table, offset: int) -> pa.Table:
    i = table.schema.get_field_index("event_idx")
    idx = table.column(i).combine_chunks().to_numpy(zero_copy_only=False)
    return table.set_column(i, table.schema.field(i), to_arrow(idx + offset, pa.int64()))


# The tail part's rows carry this plus their index within the part until the head part's event
# count is known (far below any real index: the rows are told apart by a negative event_idx).
PROVISIONAL = -(1 << 62)


class _TailFeed(threading.Thread):
    """Sends the tail part's batches to the writer as they come, ``event_idx`` provisional
    (:data:`PROVISIONAL`); the part's keys and counts end in ``tail.facts``. A parse error is
    kept in :attr:`error` (raised by the caller after the head part's own errors)."""

    def __init__(self, tail: _Child, writer: _st._Writer):
        super().__init__(name="pwh-tail-part", daemon=True)
        self.tail, self.writer = tail, writer
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for name, table in self.tail.items():
                if name == trace.EVENTS.name:
                    table = _shift_events(table, PROVISIONAL)
                self.writer.send((name, table))
        except BaseException as exc:  # noqa: BLE001 - raised by the caller, in document order
            self.error = exc


def _place_tail(con, sha: str, head_events: int) -> None:
    """Give the tail part's rows their document index (the head part had ``head_events``)."""
    con.execute("UPDATE raw.trace_events SET event_idx = event_idx + ? "
                "WHERE run_id = ? AND event_idx < 0", [head_events - PROVISIONAL, sha])


def _ingest_streamed(settings: Settings, path: Path, shown: str, t0: float, *, con, meta,
                     series, label, captured_at, split: bool) -> _l.IngestResult | None:
    meta = meta or runmeta.resolve(path, series=series, label=label, captured_at=captured_at)
    archived = _l._archived(settings, path) is not None
    tmp = None
    if archived:
        src = path
    else:
        settings.archive_dir.mkdir(parents=True, exist_ok=True)
        tmp = src = settings.archive_dir / f".{uuid.uuid4().hex}.{os.getpid()}.tmp"
    c = hasher = writer = child = tail = feed = threads = None
    head_events = 0  # events of the head part (the tail part's index offset)
    size = path.stat().st_size
    marks = [("start", time.perf_counter(), time.thread_time())]
    try:
        if tmp is not None:
            shutil.copyfile(path, tmp)
        marks.append(("copy", time.perf_counter(), time.thread_time()))
        cut = kineto_stream.split_point(str(src), size) if split else None
        child = _Child(src, shown, stop=cut)
        child.start()  # before any thread of ours exists
        if cut is not None:
            tail = _Child(src, shown, start=cut + 1)
            tail.start()
        else:  # one parser, no retry after it (a bad cut of two parts is parsed again: wait)
            _l.forks_done()
        c = _l.writer_of(con) or db.connect_rw(settings.warehouse)  # while the parsers start
        db.ensure_schema(c)
        threads = _st._set_threads(c, _st._LOAD_THREADS)
        hasher = _st._Hasher(src, fsync=tmp is not None)
        writer = _st._Writer(c, hasher, _st._INSERT_BYTES_CHILD)
        writer.q = queue.Queue(maxsize=_QUEUE)
        hasher.start()
        writer.start()
        completed = False
        try:
            if tail is not None:
                feed = _TailFeed(tail, writer)
                feed.start()
            for item in child.items():  # the head part (or the only one)
                if writer.known:
                    break
                writer.send(item)
            else:
                if tail is not None:
                    head_events = json.loads(child.facts)["index"]
                    feed.join()
                    if isinstance(feed.error, FormatError):
                        raise _shift_error(feed.error, head_events)
                    if feed.error is not None:
                        raise feed.error
                    devs, runs, child.summary, child.captured_at, _ = \
                        kineto_stream.merge_parts(shown, child.facts, tail.facts)
                    writer.send((trace.DEVICES.name, devs))
                    writer.send((trace.RUNS.name, runs))
                writer.send(None)
                completed = True
        except _st._Stop:
            pass
        except kineto_stream.NotStreamable:
            return None
        except FormatError as exc:
            _st._halt(writer)
            hasher.join()
            exc.sha256 = hasher.sha
            raise
        finally:
            if not completed:
                _st._halt(hasher, writer)
        marks.append(("parsed", time.perf_counter(), time.thread_time()))
        hasher.join()
        writer.join()
        marks.append(("loaded", time.perf_counter(), time.thread_time()))
        if writer.known:
            return _l.IngestResult(shown, "skipped", hasher.sha, message="already ingested",
                                   seconds=time.perf_counter() - t0)
        for t in (hasher, writer):
            if t.error is not None:
                raise t.error
        sha = hasher.sha
        dest = path
        if tmp is not None:
            dest = settings.archive_dir / f"{sha}.json"
            if dest.exists() and dest.stat().st_size == size:
                tmp.unlink()
            else:
                os.replace(tmp, dest)
            tmp = None
        meta = meta.with_file_clock(child.captured_at)
        if threads is not None:  # the parser process is done: COMMIT's checkpoint gets both cores
            _st._set_threads(c, threads)
            threads = None
        if tail is not None:
            _place_tail(c, sha, head_events)
            marks.append(("placed", time.perf_counter(), time.thread_time()))
        c.execute(
            "INSERT INTO raw.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [sha, shown, Path(shown).name, kineto.NAME, kineto.PARSER_VERSION, size, _l.utcnow(),
             meta.series, meta.label, meta.captured_at, meta.source, str(dest)])
        c.execute("COMMIT")
        writer.began = False
        marks.append(("commit", time.perf_counter(), time.thread_time()))
        child.close()
        if tail is not None:
            tail.close()
            child.cpu += tail.cpu
            child.peak_rss += tail.peak_rss
        if os.environ.get("PWH_DEBUG_TIMING"):
            print("pwh timing: streamed trace, " + ", ".join(
                f"{n} {w - marks[0][1]:.2f}s wall/{cpu - marks[0][2]:.2f}s cpu"
                for n, w, cpu in marks[1:])
                + f" (main thread); hasher cpu {hasher.cpu:.2f}s, writer cpu {writer.cpu:.2f}s, "
                f"{writer.inserts} inserts; parser process cpu {child.cpu:.2f}s, "
                f"peak rss {child.peak_rss} KiB", file=sys.stderr)
        return _l._ingested(shown, sha, kineto.NAME, child.summary, t0)
    finally:
        if feed is not None and feed.is_alive():
            tail.kill()  # the feed reads to the end of its pipe, then stops
            feed.join()
        for ch in (child, tail):
            if ch is not None:
                ch.close()
        _st._halt(hasher, writer)
        for t in (hasher, writer):
            if t is not None and t.is_alive():
                t.join()
        if writer is not None and writer.began:
            with contextlib.suppress(duckdb.Error):
                c.execute("ROLLBACK")
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if threads is not None and c is not None:
            _st._set_threads(c, threads)
        if con is None and c is not None:
            c.close()
