"""The reader of SQLite files (Nsight Systems exports, rocprof ``results.db``): read on disk,
never into memory.

SQLite is a file format made to be read in place: the reader opens the snapshot's private copy
(:meth:`~warehouse.ingesting.snapshot.Snapshot.copy`, stable whatever happens to the source;
hashed by a thread meanwhile) read-only (``nsys_sqlite.open_file``) and the format's ``items``
generator sends each batch of events on to the writer as soon as it is built. Memory is
SQLite's page cache plus a few batches, whatever the file's size: the whole-document limit
(``formats.WHOLE_MAX``) does not apply, the per-value limit (``nsys_sqlite.MAX_VALUE``) does.

Every plain SQLite file takes this reader (a gzip-compressed one is read whole, decompressed):
the rows are those of ``parse(data, path, run_id)`` of the same format, which reads the bytes
in memory through the same ``items``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting import formats
from warehouse.ingesting.formats import nsys_sqlite, trace
from warehouse.ingesting.reading import Reader


def is_sqlite(path: Path) -> bool:
    """``path`` starts with the SQLite magic (an unreadable file: no; the snapshot says why)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(formats.SQLITE_MAGIC)) == formats.SQLITE_MAGIC
    except OSError:
        return False


def _run_free(table: pa.Table) -> pa.Table:
    """The table without ``run_id``: the writer binds the file's identity (known once hashed)."""
    return table.drop_columns(["run_id"]) if "run_id" in table.schema.names else table


class SqliteReader(Reader):
    ON_DISK = True
    # batches come as fast as SQLite reads them: a short queue and modest INSERTs bound memory
    QUEUE = 4
    INSERT_BYTES = 32 << 20

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        file = self.snapshot.file
        with open(file, "rb") as fh:
            head = fh.read(trace.HEAD_BYTES)
        fmt = formats.detect_head(head, self.shown)
        if fmt is None or fmt.KIND != "sqlite":  # nsys_sqlite takes (and refuses) any other
            raise FormatError(self.shown, "$", "an SQLite file a format reads",
                              kind="unknown_format")
        con = nsys_sqlite.open_file(file, self.shown)
        try:
            gen = nsys_sqlite.stream(con, self.shown, "", fmt.items)
            while True:
                try:
                    table = next(gen)
                except StopIteration as stop:
                    parsed = stop.value
                    break
                yield trace.EVENTS.name, _run_free(table)
                del table
        finally:
            con.close()
        self.source_format, self.parser_version = parsed.source_format, parsed.parser_version
        self.summary, self.captured_at = parsed.summary, parsed.captured_at
        for name, table in parsed.tables.items():
            yield name, _run_free(table)
