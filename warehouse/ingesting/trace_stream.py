"""The streamed reader of huge kernel traces (Kineto, plain or gzip): memory bounded by chunks.

The parser (:class:`kineto_stream.TraceStream`, the compiled scanner its detail) runs in a
forked process and reads the snapshot's private copy; its batches come back as Arrow IPC
through a pipe while the writer inserts the previous ones, so parsing and loading use both
cores and the parser's memory is its own.

A plain trace of ``SPLIT_MIN_BYTES`` or more may be parsed by two such processes, one per half
(:func:`split_wanted`): the file is cut at a ``}, {`` near its middle. The tail part's
``event_idx`` cannot be known before the head part is parsed (it counts from the document's
first event): its rows are sent with a provisional index (:data:`PROVISIONAL` + the index
within the part, negative) and moved by one ``UPDATE`` of those uncommitted rows before
``COMMIT`` (:meth:`TraceReader.finish`). An error of the head part is reported before any of
the tail's (document order), a tail error's event index is shifted too. If the cut turns out
not to be an event boundary (e.g. inside a name), the reader declines and the file is read
again in one part.

Used for trace files of ``PWH_STREAM_MIN_BYTES`` or more, and gzip traces of an eighth of that
(they decompress to several times their size): see :mod:`.readers`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.forking import MallocKeep, ParserProcess
from warehouse.ingesting.formats import kineto, kineto_stream, trace
from warehouse.ingesting.formats.base import to_arrow
from warehouse.ingesting.reading import Declined, Reader


def wants_stream(path: Path, size: int, min_bytes: int) -> bool:
    """A trace big enough to stream (content decides: the decompressed head is sniffed):
    ``min_bytes`` or more, gzip an eighth of that."""
    gz_min = min_bytes // 8
    if size < min(min_bytes, gz_min):
        return False
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
    gz = formats.is_gzip(head)
    if size < (gz_min if gz else min_bytes):
        return False
    if gz:
        try:
            head = formats.gunzip(head, str(path), limit=trace.HEAD_BYTES)
        except FormatError:
            return False  # the whole-document path reports the corrupt stream
    fmt = formats.detect_head(head, str(path))
    return fmt is not None and hasattr(fmt, "STREAM")


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


class _Child(ParserProcess):
    """:class:`kineto_stream.TraceStream` in a forked process. Its own messages: ``D`` the end
    of a whole file (counts and capture time), ``P`` the end of a part (its keys and counts),
    ``N`` not streamable, ``C`` a cut that is not an event boundary."""

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
        MallocKeep()  # chunk-sized temporaries reuse the heap (this process just exits)
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

_QUEUE = 8  # Arrow batches (one per ~8 MB chunk) waiting for DuckDB: bounds the parent's RSS


class _Feed(threading.Thread):
    """Reads one part's parser process and puts its batches on the shared queue, then
    ``(None, error or None)`` at its end."""

    def __init__(self, child: _Child, out: queue.Queue, shift: bool):
        super().__init__(name="pwh-part-feed", daemon=True)
        self.child, self.out, self.shift = child, out, shift

    def run(self) -> None:
        try:
            for name, table in self.child.items():
                if self.shift and name == trace.EVENTS.name:
                    table = _shift_events(table, PROVISIONAL)
                self.out.put((self, name, table))
        except BaseException as exc:  # noqa: BLE001 - raised by the reader, in document order
            self.out.put((self, None, exc))
        else:
            self.out.put((self, None, None))


class TraceReader(Reader):
    ON_DISK = True
    PARALLEL = True
    # no GIL shared with the parser: smaller INSERTs keep pace and leave less for the end
    INSERT_BYTES = 16 << 20
    QUEUE = _QUEUE

    def __init__(self, snapshot, shown: str, split: bool | None = None):
        super().__init__(snapshot, shown)
        self.source_format, self.parser_version = kineto.NAME, kineto.PARSER_VERSION
        self.split = split_wanted(snapshot.size) if split is None else split
        self.FORKS_AGAIN = self.split  # a bad cut is read again in one part
        self.head: _Child | None = None
        self.tail: _Child | None = None
        self.head_events = 0
        self._feeds: list[_Feed] = []

    def start(self) -> None:
        cut = kineto_stream.split_point(str(self.snapshot.file), self.snapshot.size) \
            if self.split else None
        self.head = _Child(self.snapshot.file, self.shown, stop=cut)
        self.head.start()
        if cut is not None:
            self.tail = _Child(self.snapshot.file, self.shown, start=cut + 1)
            self.tail.start()

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        try:
            if self.tail is None:
                yield from self.head.items()
                self.summary, self.captured_at = self.head.summary, self.head.captured_at
            else:
                yield from self._two_parts()
        except kineto_stream.NotStreamable as exc:
            raise Declined(str(exc)) from None
        except kineto_stream.BadCut as exc:
            raise Declined(str(exc), retry=_one_part) from None

    def _two_parts(self) -> Iterator[tuple[str, pa.Table]]:
        q: queue.Queue = queue.Queue(maxsize=_QUEUE)
        head, tail = _Feed(self.head, q, False), _Feed(self.tail, q, True)
        self._feeds = [head, tail]
        for f in self._feeds:
            f.start()
        tail_error: BaseException | None = None
        running = {head, tail}
        while running:
            feed, name, item = q.get()
            if name is not None:
                yield name, item
                continue
            running.discard(feed)
            if feed is head and item is not None:
                raise item  # the head part's error comes first
            if feed is tail:
                tail_error = item
        self.head_events = json.loads(self.head.facts)["index"]
        if isinstance(tail_error, FormatError):
            raise _shift_error(tail_error, self.head_events)
        if tail_error is not None:
            raise tail_error
        devs, runs, self.summary, self.captured_at, _ = \
            kineto_stream.merge_parts(self.shown, self.head.facts, self.tail.facts)
        yield trace.DEVICES.name, devs
        yield trace.RUNS.name, runs

    def finish(self, con, run_id: str) -> None:
        if self.tail is not None:  # give the tail part's rows their document index
            con.execute("UPDATE raw.trace_events SET event_idx = event_idx + ? "
                        "WHERE run_id = ? AND event_idx < 0",
                        [self.head_events - PROVISIONAL, run_id])

    def close(self) -> None:
        for ch in (self.head, self.tail):
            if ch is not None:
                ch.kill()  # a feed reads to the end of its pipe, then stops
        for f in self._feeds:
            while f.is_alive():  # it may wait to put an item on the full queue: drain it
                with contextlib.suppress(queue.Empty):
                    f.out.get(timeout=0.05)
        for ch in (self.head, self.tail):
            if ch is not None:
                ch.close()

    def timing(self) -> str:
        cpu = sum(ch.cpu for ch in (self.head, self.tail) if ch is not None)
        rss = sum(ch.peak_rss for ch in (self.head, self.tail) if ch is not None)
        return f"parser process cpu {cpu:.2f}s, peak rss {rss} KiB"


def _one_part(snapshot, shown: str) -> TraceReader:
    return TraceReader(snapshot, shown, split=False)
