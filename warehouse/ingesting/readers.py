"""Which reader reads a file: the streaming readers for big files laid out for them, else the
whole-document adapter around the format's ``parse`` (see :mod:`.reading`).

:func:`candidates` lists the readers to try in order; a reader that declines (``Declined``)
hands the file to its ``retry`` or the next one. A new streaming reader is added here. SQLite
files (Nsight Systems exports, rocprof ``results.db``) are always read on disk
(:mod:`.sqlite_stream`).
"""

from __future__ import annotations

import os
from pathlib import Path

from warehouse.ingesting import formats, sqlite_stream
from warehouse.ingesting.reading import Reader, WholeDocument

# Files at least this big (``$PWH_STREAM_MIN_BYTES``, default 32 MiB), laid out as profilers
# write them (samples last; a trace's events array), are streamed: parsed a chunk at a time
# while DuckDB loads the previous chunk, so memory stays bounded. gzip traces from an eighth of
# that (they decompress to several times their size). Smaller files are read whole.
STREAM_MIN_BYTES = int(os.environ.get("PWH_STREAM_MIN_BYTES", 32 << 20))


class TooBig(Reader):
    """A file no streaming reader takes and too big to read whole (past
    :data:`formats.WHOLE_MAX`, gzip undone): refused from the copy on disk, never read into
    memory."""

    ON_DISK = True

    def tables(self):
        size = self.snapshot.size
        raise formats.too_big(self.shown, f"this one has {size} bytes"
                              if size > formats.WHOLE_MAX else "this gzip file inflates past it")


def candidates(path: Path, size: int) -> list[type[Reader]]:
    """The reader classes to try for ``path`` (``size`` bytes), in order; the last one is
    always :class:`WholeDocument` (or :class:`TooBig`), but for an SQLite file: read on disk
    by :class:`~.sqlite_stream.SqliteReader`, whatever its size. The streaming readers are
    imported only for big files."""
    if sqlite_stream.is_sqlite(path):
        return [sqlite_stream.SqliteReader]
    out: list[type[Reader]] = []
    if size >= STREAM_MIN_BYTES // 8:
        from warehouse.ingesting import trace_stream

        if trace_stream.wants_stream(path, size, STREAM_MIN_BYTES):
            out.append(trace_stream.TraceReader)
    if size >= STREAM_MIN_BYTES and not out:
        from warehouse.ingesting import profile_stream

        if profile_stream.layout_ok(path, size):
            out.append(profile_stream.ProfileStream)
    if out:
        return [*out, WholeDocument]
    if size > formats.WHOLE_MAX:
        return [TooBig]
    # a small gzip may inflate past what is read whole: a trace is then streamed, else refused
    if size >= 18 and _gzip(path) and formats.inflated_over(path, formats.WHOLE_MAX):
        from warehouse.ingesting import trace_stream

        if trace_stream.wants_stream(path, size, 0):
            return [trace_stream.TraceReader, TooBig]
        return [TooBig]
    return [WholeDocument]


def _gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return formats.is_gzip(fh.read(2))
    except OSError:
        return False  # the snapshot reports it
