"""What a reader is: how one file's rows reach the writer, for every source format.

A reader is made for one file (``Reader(snapshot, shown)``) and used once by the loader:

1. :meth:`Reader.start` forks its parser processes, if it has any (no thread of ours exists
   yet);
2. :meth:`Reader.tables` yields ``(raw table name, Arrow table)`` items: any known raw tables,
   whole or in batches, in any order; a table without ``run_id`` gets the file's identity in
   SQL. It raises :class:`~warehouse.errors.FormatError` for a bad file (nothing is written),
   or :class:`Declined` if another reader should read the file instead;
3. once the iteration ended, :attr:`~Reader.source_format`, :attr:`~Reader.parser_version`,
   :attr:`~Reader.summary` (counts shown to the user) and :attr:`~Reader.captured_at` (the
   file's own clock, naive UTC, or ``None``) describe the file; :meth:`Reader.finish` may still
   amend the run's uncommitted rows;
4. :meth:`Reader.close` releases what it holds (always called).

Whether the file is read whole or streamed, in this process or a parser process, is the
reader's business. The loader resolves the run's identity, runs the one writer, archives and
quarantines: a new format implements a reader (or just ``parse(data, path, run_id) ->
Parsed`` in ``formats/``, which :class:`WholeDocument` adapts) and nothing else.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from warehouse.ingesting import formats

if TYPE_CHECKING:
    from warehouse.ingesting.snapshot import Snapshot


class Declined(Exception):
    """This reader cannot read this file after all (another layout, a cut that is no event
    boundary, an error the whole-document reader words exactly): nothing was committed, and
    ``retry`` (a reader class), or else the next candidate reader, reads the file instead."""

    def __init__(self, why: str, retry: Callable[..., Reader] | None = None):
        super().__init__(why)
        self.retry = retry


class Reader:
    """See the module's docstring. Class attributes tell the loader how to run it."""

    #: the bytes it reads: on disk (a private copy, hashed aside) or in memory
    ON_DISK = False
    #: it parses in a parser process: DuckDB gets one thread meanwhile (the parser has a core)
    PARALLEL = False
    #: it may decline with a retry that forks again: the loader starts no thread before
    FORKS_AGAIN = False
    #: Arrow bytes per INSERT, items waiting for the writer (bounds memory)
    INSERT_BYTES = 64 << 20
    QUEUE = 64

    def __init__(self, snapshot: Snapshot, shown: str):
        self.snapshot, self.shown = snapshot, shown
        self.source_format = ""
        self.parser_version = ""
        self.summary: dict[str, int] = {}
        self.captured_at: dt.datetime | None = None

    def start(self) -> None:
        """Fork the parser processes, if any."""

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        raise NotImplementedError

    def finish(self, con, run_id: str) -> None:
        """Amend this run's rows inside the transaction before the manifest row and COMMIT."""

    def close(self) -> None:
        """Release processes, maps and settings (called once, whatever happened)."""

    def timing(self) -> str:
        """Extra figures for ``PWH_DEBUG_TIMING`` (e.g. a parser process's CPU and peak RSS)."""
        return ""


def parse_document(data: bytes, shown: str, run_id: str) -> formats.Parsed:
    """The format of ``data`` (gzip undone) and its ``parse``: detection by content only."""
    fmt, payload = formats.detect_payload(data, shown)
    return fmt.parse(payload, shown, run_id)


class WholeDocument(Reader):
    """The generic adapter: a format module's ``parse(data, path, run_id) -> Parsed`` as a
    reader (every format in ``formats.ALL_FORMATS``; any file no streaming reader takes)."""

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        snap = self.snapshot
        data = snap.bytes()
        parsed = parse_document(data, self.shown, snap.wait_sha())
        del data
        self.source_format, self.parser_version = parsed.source_format, parsed.parser_version
        self.summary, self.captured_at = parsed.summary, parsed.captured_at
        yield from parsed.tables.items()
