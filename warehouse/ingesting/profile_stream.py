"""The streamed reader of big tile profiles: parsed a chunk of samples at a time while DuckDB
loads the previous chunk, so memory stays bounded whatever the size.

The parser (:class:`profile.SampleStream`) reads the snapshot's private copy in place through a
private memory map, either in a forked process (the default: its batches come back as Arrow IPC
through a pipe) or in this process (``PWH_STREAM_PROCESS=0``). The parser holds the GIL for a
whole chunk decode, and DuckDB's Python client needs the GIL again and again while it scans an
Arrow batch: in one process they take turns (measured: an INSERT from Arrow runs 3.5x slower
while another thread decodes JSON); in a parser process the parse and the load really run in
parallel.

A file that turns out bad is declined (the whole-document reader then reports the canonical
error) unless it is bigger than :data:`EXACT_ERRORS_MAX_BYTES`.
"""

from __future__ import annotations

import gc
import json
import mmap
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting.forking import (
    MallocKeep,
    ParserProcess,
    lower_switch_interval,
    restore_switch_interval,
    use_process,
)
from warehouse.ingesting.formats import profile
from warehouse.ingesting.reading import Declined, Reader

# A streamed file that turns out bad is parsed again whole, for the exact same error message as
# the whole-document path, unless it is bigger than this (then the streamed error is reported).
EXACT_ERRORS_MAX_BYTES = 1 << 30

_PAGE = mmap.PAGESIZE


def layout_ok(path: Path, size: int) -> bool:
    """Laid out as profilers write them: samples last (the head and tail say so)."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
        if profile.samples_start(head) is None:  # a long groups[] pushes samples further
            head += fh.read(profile.MAX_HEADER_BYTES)
        fh.seek(max(0, size - 4096))
        tail = fh.read()
    return profile.samples_start(head) is not None and profile.samples_end(tail) is not None


def releaser(mm: mmap.mmap) -> Callable[[int], None]:
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


def _private_map(file: Path) -> mmap.mmap:
    with open(file, "rb") as fh:
        return mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE)


class ProfileStream(Reader):
    ON_DISK = True
    # Parser in its own process: no GIL to share, so smaller INSERTs keep pace with the parse
    # and leave less to append once it ends (full-size profile: 9 of 10 interleaved runs faster
    # than with 64 MB, by ~5 %). In a thread: few, big INSERTs.
    INSERT_BYTES_PROCESS = 16 << 20
    INSERT_BYTES_THREAD = 64 << 20

    def __init__(self, snapshot, shown: str):
        super().__init__(snapshot, shown)
        self.source_format, self.parser_version = profile.NAME, profile.PARSER_VERSION
        self.child = _Child(snapshot.file, shown) if use_process() else None
        self.PARALLEL = self.child is not None
        self.INSERT_BYTES = (self.INSERT_BYTES_PROCESS if self.child is not None
                             else self.INSERT_BYTES_THREAD)
        self._gc_was = self._switch = None
        self._malloc: MallocKeep | None = None

    def start(self) -> None:
        self._gc_was = gc.isenabled()
        gc.disable()
        self._malloc = MallocKeep()
        # the writer needs the GIL often while DuckDB scans a batch: let it have it sooner
        self._switch = lower_switch_interval(0.0005)
        if self.child is not None:
            self.child.start()

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        try:
            if self.child is not None:
                yield from self.child.items()
                counts = self.child
            else:
                stream = profile.SampleStream(self.shown, str(self.snapshot.file))
                mm = _private_map(self.snapshot.file)
                try:
                    yield from stream.tables(mm, releaser(mm))
                finally:
                    mm.close()
                stream.verify_keys()
                counts = stream
        except profile.NotStreamable as exc:
            raise Declined(str(exc)) from None
        except FormatError as exc:
            if self.snapshot.size <= EXACT_ERRORS_MAX_BYTES:
                raise Declined("the whole-document reader words the error") from exc
            raise
        self.summary = {"groups": counts.groups, "samples": counts.samples,
                        "metadata_pairs": counts.pairs}

    def close(self) -> None:
        if self.child is not None:
            self.child.close()
        if self._malloc is not None:
            self._malloc.restore()
            self._malloc = None
        lease, self._switch = self._switch, None
        restore_switch_interval(lease)
        if self._gc_was:
            gc.enable()
            self._gc_was = None

    def timing(self) -> str:
        if self.child is None:
            return ""
        return (f"parser process cpu {self.child.cpu:.2f}s, "
                f"peak rss {self.child.peak_rss} KiB")


class _Child(ParserProcess):
    """:class:`profile.SampleStream` in a forked process: it sends each batch as Arrow IPC,
    checks the keys, then reports the counts (``D``), "not streamable" (``N``) or the error."""

    def __init__(self, src: Path, shown: str):
        super().__init__()
        self.src, self.shown = src, shown
        self.groups = self.samples = self.pairs = 0

    def _child(self, fd: int) -> None:
        stream = profile.SampleStream(self.shown, str(self.src))
        try:
            mm = _private_map(self.src)
            try:
                for tname, table in stream.tables(mm, releaser(mm)):
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
