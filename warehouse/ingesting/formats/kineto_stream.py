"""Streamed parsing of huge Kineto traces (plain or gzip): memory bounded whatever the size.

The document is read block by block (gzip decompressed on the fly, every member, the end of the
stream checked). Everything before ``"traceEvents": [`` is the header; the events array is cut
into chunks of about :data:`CHUNK_BYTES` at a ``}, {`` boundary between two events, and each
chunk is read by the compiled scanner (:mod:`.kineto_scan`) or, where it declines, decoded
with the same strict typed decoder as the whole-document path (:mod:`.kineto`), then turned
into one Arrow batch of ``raw.trace_events``. The keys after
the array (``traceName``, ``baseTimeNanoseconds`` …) are read at the end, then the run and
device rows are produced.

Soundness: a cut may fall inside a string (a name containing ``}, {``); then the chunk does not
decode and the cut is moved to an earlier boundary, or more input is read. If the header, every
chunk and the tail decode, the whole document is well-formed. Duplicate keys are found per chunk
by comparing the quotes-before-colon count with the keys decoded (an exact check runs where
they differ), and across header and tail by comparing their key sets.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator

import msgspec
import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import kineto, kineto_scan, trace

CHUNK_BYTES = 8 << 20
MAX_HEADER_BYTES = 64 << 20
# A chunk that never decodes up to this size is an error: no real event comes near it (a
# name is at most 64 KiB, any other text 1 MiB), and decoding one costs ~6x its size, so the
# limit bounds a refusal's memory (a 64 MiB event: ~400 MiB; 256 MiB was ~1.5 GiB).
MAX_CHUNK_BYTES = 64 << 20
LOCATE_BYTES = 32 << 20  # at most this much of such a chunk is decoded to locate its error
_BLOCK = 4 << 20
_GZIP = b"\x1f\x8b"
_ARRAY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
_WS = b" \t\r\n"
_LEAD_WS = re.compile(rb"[ \t\r\n]*")


class NotStreamable(Exception):
    """Not laid out for streaming (no top-level traceEvents array in the first 64 MiB)."""


class BadCut(Exception):
    """The head part's end (a ``}, {`` boundary chosen blindly) is not an event boundary of the
    array: parse the file in one part instead (which finds any real error)."""


def split_point(file: str, size: int) -> int | None:
    """The offset of the comma of a ``}, {`` boundary near the middle of a plain file, or
    ``None``. Chosen without parsing: the head part proves it is a real boundary between two
    events of the array (its events up to there decode as one array), else :class:`BadCut`."""
    with open(file, "rb") as fh:
        if fh.read(2) == _GZIP:
            return None
        lo = max(size // 2 - (1 << 20), 0)
        fh.seek(lo)
        window = fh.read(1 << 21)
    cut = _prev_boundary(window, len(window))
    return lo + cut if cut > 0 else None


def _plain_blocks(file: str, start: int, stop: int | None = None) -> Iterator[bytes]:
    """The bytes ``[start, stop)`` of a plain file in blocks of about ``_BLOCK``."""
    with open(file, "rb") as fh:
        fh.seek(start)
        left = None if stop is None else stop - start
        while left is None or left > 0:
            b = fh.read(_BLOCK if left is None else min(_BLOCK, left))
            if not b:
                return
            if left is not None:
                left -= len(b)
            yield b


def finish(path: str, top_head: dict, tail_top: dict, cols: kineto.Columns
           ) -> tuple[pa.Table, pa.Table, dict[str, int], object]:
    """``(devices, runs, summary, captured_at)`` from the keys before and after the events
    array and the events' counts (one part's, or the merged counts of two)."""
    dup = (set(top_head) - {"traceEvents"}) & set(tail_top)
    if dup or "traceEvents" in tail_top:
        raise FormatError(path, "$", "unique object keys, got the key "
                          f"{sorted(dup or {'traceEvents'})[0]!r} twice", kind="malformed")
    head_facts = kineto.HeaderFacts({**top_head, **tail_top}, path)
    runs, devs = head_facts.tables(cols)
    summary = {"events": cols.rows, "kernels": cols.kinds.get("kernel", 0),
               "devices": devs.num_rows}
    return devs, runs, summary, head_facts.captured_at(cols)


_FACT_KEYS = ("index", "rows", "phases", "kinds", "min_start", "min_any", "unended")


def part_facts(top_head: dict, tail_top: dict, cols: kineto.Columns) -> bytes:
    """A part's keys and counts as JSON (sent to the parent, which merges two parts)."""
    return msgspec.json.encode({"top_head": top_head, "tail_top": tail_top,
                                **{k: getattr(cols, k) for k in _FACT_KEYS}})


class _Facts(msgspec.Struct):
    top_head: dict[str, msgspec.Raw]
    tail_top: dict[str, msgspec.Raw]
    index: int
    rows: int
    phases: dict[str, int]
    kinds: dict[str, int]
    min_start: int | None
    min_any: int | None = None
    unended: dict[str, int] = {}


def merge_parts(path: str, head: bytes, tail: bytes):
    """:func:`finish` of a file parsed in two parts (their :func:`part_facts`, in document
    order); also returns the number of events of the head part (the tail's index offset)."""
    a, b = (msgspec.json.decode(x, type=_Facts) for x in (head, tail))
    cols = kineto.Columns(path, None)
    cols.index, cols.rows = a.index + b.index, a.rows + b.rows
    for src in (a, b):
        for k, v in src.phases.items():
            cols.phases[k] = cols.phases.get(k, 0) + v
        for k, v in src.kinds.items():
            cols.kinds[k] = cols.kinds.get(k, 0) + v
        for k, v in src.unended.items():
            cols.unended[k] = cols.unended.get(k, 0) + v
    for key in ("min_start", "min_any"):
        starts = [m for m in (getattr(a, key), getattr(b, key)) if m is not None]
        setattr(cols, key, min(starts) if starts else None)
    return (*finish(path, a.top_head, b.tail_top, cols), a.index)


def blocks(file: str, path: str) -> Iterator[bytes]:
    """The file's bytes, decompressed if it is gzip, in blocks of about ``_BLOCK``."""
    with open(file, "rb") as fh:
        first = fh.read(_BLOCK)
        if first[:2] != _GZIP:
            while first:
                yield first
                first = fh.read(_BLOCK)
            return
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        pos = 0  # compressed offset of `data`
        data = first
        while True:
            try:
                out = d.decompress(data, _BLOCK)
                while out:
                    yield out
                    out = d.decompress(d.unconsumed_tail, _BLOCK)
            except zlib.error as exc:
                raise FormatError(path, f"byte {pos}", f"a valid gzip stream: {exc}",
                                  kind="malformed") from None
            pos += len(data)
            if d.eof:
                rest = d.unused_data
                if rest.strip(b"\0") == b"" and not fh.peek(1)[:1].strip(b"\0"):
                    return
                if not rest.startswith(_GZIP[: len(rest)]):
                    raise FormatError(path, f"byte {pos - len(rest)}", "nothing after the gzip "
                                      "stream (trailing garbage)", kind="malformed")
                d = zlib.decompressobj(zlib.MAX_WBITS | 16)
                data = rest + fh.read(_BLOCK)
                continue
            data = fh.read(_BLOCK)
            if not data:
                raise FormatError(path, f"byte {pos}", "a complete gzip stream, got a "
                                  "truncated one", kind="malformed")


def _prev_boundary(buf, hi: int) -> int:
    """Offset of the comma of the last ``}, {`` boundary before ``hi``, or -1."""
    pos = hi
    while True:
        k = buf.rfind(b"{", 0, pos)
        if k <= 0:
            return -1
        j = k - 1
        while j > 0 and buf[j] in _WS:
            j -= 1
        if buf[j] == 0x2C:  # ,
            c = j
            j -= 1
            while j > 0 and buf[j] in _WS:
                j -= 1
            if buf[j] == 0x7D:  # }
                return c
        pos = k


class TraceStream:
    """Iterate :meth:`tables`; afterwards :attr:`summary` and :attr:`captured_at` are set.

    Two parts of a plain file can be parsed by two processes: ``stop`` (the head part: the
    document up to that comma, which must end an event) and ``start`` (the tail part: the
    events from that offset, and the keys after the array). A part yields only event batches;
    :attr:`facts` (:func:`part_facts`) then holds its keys and counts, and its event indices
    (``event_idx``, and those in error messages) count from the part's first event."""

    def __init__(self, path: str, file: str, chunk_bytes: int | None = None, *,
                 stop: int | None = None, start: int | None = None):
        self.path, self.file = path, file
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.summary: dict[str, int] = {}
        self.captured_at = None
        self.gzip = False
        self.stop, self.start = stop, start
        self.facts: bytes | None = None

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        with open(self.file, "rb") as fh:
            self.gzip = fh.read(2) == _GZIP
        it = blocks(self.file, self.path)
        head = bytearray()
        m = None
        for b in it:
            head += b
            m = _ARRAY.search(head)
            if m is not None and self._top_level(head, m):
                break
            m = None
            if len(head) > MAX_HEADER_BYTES:
                break
        if m is None:
            raise NotStreamable("no top-level traceEvents array in the first 64 MiB")
        top_head = jsonstrict.decode(bytes(head[: m.start()]) + b'"traceEvents":[]}',
                                     dict[str, msgspec.Raw], self.path)
        head_facts = kineto.HeaderFacts(top_head, self.path)  # rank for the event rows
        cols = kineto.Columns(self.path, head_facts.rank)
        buf = bytearray(head[m.end():])
        base = m.end()  # document offset of buf[0]
        if self.start is not None or self.stop is not None:
            if self.gzip or (self.stop or self.start) <= base:
                raise BadCut("the cut is not inside the events array")
            it.close()
            if self.start is not None:  # the tail part: its events from `start`
                it = _plain_blocks(self.file, self.start)
                buf, base = bytearray(), self.start
            else:  # the head part: the document up to `stop`
                del buf[self.stop - base:]
                it = _plain_blocks(self.file, len(head), self.stop)
        del head
        eof = False
        need = self.chunk_bytes
        skipped = 0  # whitespace before the next event, dropped (but counted) since the last cut
        while True:
            while len(buf) < need and not eof and skipped + len(buf) <= MAX_CHUNK_BYTES:
                try:
                    buf += next(it)
                except StopIteration:
                    eof = True
                    break
                lead = _LEAD_WS.match(buf).end()
                if lead:  # insignificant whitespace is not kept (a gzip of it can be huge)
                    del buf[:lead]
                    base += lead
                    skipped += lead
            if eof:
                break
            cut = self._decode_some(buf, base, cols)
            if cut > 0:
                yield trace.EVENTS.name, cols.batch()
                del buf[: cut + 1]
                base += cut + 1
                need = self.chunk_bytes
                skipped = 0
                continue
            if skipped + len(buf) > MAX_CHUNK_BYTES:  # no boundary decodes: report where
                self._too_long(buf, base, cols)
            need = len(buf) * 2  # a huge event, or a cut inside a string: read more
        if self.stop is not None:  # the rest up to the cut must be whole events
            self._head_end(bytes(buf), cols)
            tail_top = {}
        else:
            tail_top = self._last(buf, base, cols)
        if cols.c["event_idx"]:
            yield trace.EVENTS.name, cols.batch()
        if self.stop is not None or self.start is not None:
            self.facts = part_facts({} if self.start is not None else top_head, tail_top, cols)
            return
        devs, runs, self.summary, self.captured_at = finish(self.path, top_head, tail_top, cols)
        yield trace.DEVICES.name, devs
        yield trace.RUNS.name, runs

    def _too_long(self, buf: bytearray, base: int, cols: kineto.Columns) -> None:
        """Raise the error of a stretch of :data:`MAX_CHUNK_BYTES` in which no event boundary
        decodes: the located error of the events before its last boundary where decoding at
        most :data:`LOCATE_BYTES` of them finds one, else the rule. A refusal costs no more
        than its own limit: the buffer is never copied whole."""
        cut = _prev_boundary(buf, len(buf))
        n = cut if cut > 0 else len(buf)
        if n:
            with memoryview(buf) as mv:
                body = bytes(mv[: min(n, LOCATE_BYTES)])
            if n <= LOCATE_BYTES:
                self._decode(body, base, cols)  # raises the located error, if any
            else:
                try:  # unclosed: a prefix of a well-formed array can only be "truncated"
                    msgspec.json.decode(b"[" + body)
                except msgspec.DecodeError as exc:
                    if "truncated" not in str(exc):  # broken within the first LOCATE_BYTES
                        self._decode(body, base, cols)
        raise FormatError(self.path, f"$.traceEvents[{cols.index}]", "an event "
                          f"shorter than {MAX_CHUNK_BYTES >> 20} MiB", kind="malformed")

    def _head_end(self, body: bytes, cols: kineto.Columns) -> None:
        """The head part's last events (up to the cut), or :class:`BadCut`."""
        if not body.strip(_WS):
            raise BadCut("no event before the cut")
        chunk = b"[" + body + b"]"
        if kineto_scan.add_chunk(cols, chunk):
            return
        try:
            events = kineto._EVENTS_DECODER.decode(chunk)
        except msgspec.MsgspecError:
            raise BadCut("the events before the cut do not decode") from None
        self._add(events, chunk, cols)

    def _top_level(self, head, m) -> bool:
        try:
            msgspec.json.decode(bytes(head[: m.start()]) + b'"traceEvents":[]}',
                                type=dict[str, msgspec.Raw])
        except msgspec.MsgspecError:
            return False
        return True

    def _decode_some(self, buf, base: int, cols: kineto.Columns) -> int:
        """Decode the events before the last boundary that gives a well-formed chunk; return
        that boundary's offset in ``buf`` (-1: none found, read more)."""
        hi = len(buf)
        for _ in range(2):
            cut = _prev_boundary(buf, hi)
            if cut <= 0:
                return -1
            with memoryview(buf) as mv:  # one copy of the chunk (not three)
                chunk = b"".join((b"[", mv[:cut], b"]"))
            if kineto_scan.add_chunk(cols, chunk):  # the plain case, compiled
                return cut
            try:
                events = kineto._EVENTS_DECODER.decode(chunk)
            except msgspec.DecodeError as exc:
                if "truncated" not in str(exc):  # broken before the cut: report it, located
                    self._decode(bytes(buf[:cut]), base, cols)
                hi = cut  # the cut fell inside a string: try an earlier boundary
                continue
            except msgspec.MsgspecError:
                self._decode(bytes(buf[:cut]), base, cols)  # raises the located schema error
                raise
            self._add(events, chunk, cols)
            return cut
        return -1

    def _decode(self, body: bytes, base: int, cols: kineto.Columns) -> None:
        """Decode ``body`` (events without the brackets) or raise the located error."""
        first = cols.index
        chunk = b"[" + body + b"]"
        part = jsonstrict.Part(
            json_path=lambda p: "$.traceEvents" + re.sub(
                r"^\$\[(\d+)\]", lambda mm: f"[{first + int(mm.group(1))}]", p),
            byte_base=base - 1, locate=lambda off: f"byte {off}"
            + (" of the decompressed document" if self.gzip else ""))
        try:
            events = jsonstrict.decode(chunk, list[kineto.Event], self.path, part=part)
        except FormatError as exc:
            raise kineto.explain(exc, body) from None
        self._add(events, chunk, cols)

    def _add(self, events, chunk: bytes, cols: kineto.Columns) -> None:
        """Add events decoded by msgspec (the chunks the compiled scanner declined): the
        checks msgspec does not make (UTF-8 inside verbatim values, duplicate keys) here."""
        where = f"$.traceEvents[{cols.index}:{cols.index + len(events)}]"
        text = jsonstrict.require_utf8(chunk, self.path, where)
        before = (cols.keys, cols.colons)
        cols.add(events, chunk)
        if kineto.exact_key_check() or not kineto.keys_match(chunk, cols, before):
            jsonstrict.find_duplicate_key(text, self.path, where)

    def _last(self, buf, base: int, cols: kineto.Columns) -> dict[str, msgspec.Raw]:
        """The last events and the keys after the array: find the ``]`` closing it (the last
        one after which the rest closes the document and before which the events decode)."""
        data = bytes(buf)
        end = len(data)
        failed = None
        for _ in range(4096):
            k = data.rfind(b"]", 0, end)
            if k < 0:
                break
            end = k
            try:
                tail = msgspec.json.decode(b'{"_":0' + data[k + 1:], type=dict[str, msgspec.Raw])
            except msgspec.MsgspecError:
                continue
            chunk = b"[" + data[:k] + b"]"
            if not kineto_scan.add_chunk(cols, chunk):
                try:
                    events = kineto._EVENTS_DECODER.decode(chunk)
                except msgspec.MsgspecError:
                    failed = k if failed is None else failed
                    continue
                self._add(events, chunk, cols)
            tail.pop("_")
            return tail
        if failed is not None:
            self._decode(data[:failed], base, cols)  # raises the located error
        raise FormatError(self.path, "$", "well-formed JSON: the traceEvents array and the "
                          "document closed (the file ends early)", kind="malformed")
