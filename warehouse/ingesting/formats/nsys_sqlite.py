"""Nsight Systems SQLite export (``nsys export --type sqlite``).

Ingestion reads the snapshot's private copy on disk (:func:`open_file`: read-only,
``immutable``, ``query_only``; ``warehouse.ingesting.sqlite_stream``), so a big export costs
SQLite's page cache and a few batches of rows, not its size; :func:`parse` opens bytes in memory
(``deserialize``) for the same rows. Nothing is ever written to the file. A SQLite
database is an nsys export when it has the ``StringIds`` table and at least one of nsys's own
tables (``META_DATA_EXPORT``, ``TARGET_INFO_SESSION_START_TIME``, ``CUPTI_ACTIVITY_KIND_*``);
any other SQLite file is refused naming that rule.

Events (columns always selected by name: schema versions differ):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> kind ``kernel``: ``name`` = ``StringIds[demangledName]``
  (``shortName`` where no demangled name exists), ``mangled_name`` = ``StringIds[mangledName]``;
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> ``memcpy`` / ``memset``, named like
  ``nsys stats`` does (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``; an export without
  ``ENUM_CUDA_MEMCPY_OPER``, nsys 2021.1 and older, labelled by :data:`MEMCPY_LABELS`);
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime`` (``StringIds[nameId]``): CUDA runtime and
  driver API calls alike (``args.eventClass`` tells them apart); their ``correlation`` is the
  one of the kernel, memcpy or memset they launched;
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``sync`` (named by ``ENUM_CUPTI_SYNC_TYPE``, e.g.
  ``Stream sync``; without that table, by :data:`SYNC_LABELS`), ``correlation`` = the
  synchronising API call's;
- ``NVTX_EVENTS`` ranges (push/pop and start/end, ``NVTX_RANGE_TYPES``) -> ``annotation``:
  ``name`` = ``text`` or ``StringIds[textId]`` ('' for a range without a message), ``tid`` =
  ``globalTid``, ``args.domain`` = the name its ``NvtxDomainCreate`` event gave ``domainId``
  in that process (absent for the default domain); a range never ended (``end`` NULL) and the
  other NVTX events (marks, naming events) are counted in ``metadata.nvtx``, not rows.

``dur_ns`` = ``end - start`` (integers, end >= start). No kernel table is a run with 0 kernels.
Rows are fetched ``BATCH_ROWS`` at a time and become Arrow every ``tracebuild.FLUSH_ROWS``
events, handed over as they come (:func:`items`): a big export is never held at once.
Times count from the session start (``time_base`` ``session``); ``origin_ns`` is
``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, the file's own clock. The export also carries the
process environment, command lines, user and host names (``META_DATA_CAPTURE``,
``TARGET_INFO_SYSTEM_ENV``, ``PROCESSES``, ``EXPORT_HOST``): none of it is read into the raw
tables; ``metadata`` keeps only an allow-list of ``META_DATA_EXPORT`` (product, version,
schema, export time) and the archive keeps the file whole.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import urllib.parse
from collections.abc import Callable, Generator
from pathlib import Path

import pyarrow as pa

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "nsys_sqlite"
PARSER_VERSION = "nsys_sqlite/3"  # 3: exports before mid-2021 (GPUs from TARGET_INFO_CUDA_GPU,
# copies and syncs named without the ENUM tables)
KIND = "sqlite"
TABLES = trace.TABLES

MAGIC = b"SQLite format 3\x00"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
# NVTX event types (ENUM_NSYS_EVENT_TYPE) kept as rows: ranges with a start and an end
NVTX_RANGE_TYPES = {59: "NvtxPushPopRange", 60: "NvtxStartEndRange"}
NVTX_DOMAIN_CREATE = 75
# GPUs of exports before mid-2021 (TARGET_INFO_GPU since): nsys 2021.1's own reports join it
# on the kernels' deviceId (extra-p/extrap nsys_db.py reads either table)
OLD_GPU_TABLE = "TARGET_INFO_CUDA_GPU"
# copyKind labels of ENUM_CUDA_MEMCPY_OPER (nsys 2025.1 export; CUpti_ActivityMemcpyKind), for
# exports that predate the enum tables (nsys 2021.1's reports spelled the names in SQL)
MEMCPY_LABELS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}
# syncType labels of ENUM_CUPTI_SYNC_TYPE (nsys 2025.1 export; CUpti_ActivitySynchronizationType)
SYNC_LABELS = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
               4: "Context sync"}
NSYS_MARKERS = ("META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", KERNEL, RUNTIME)
# META_DATA_EXPORT rows copied into trace_runs.metadata; everything else there (host, user,
# input/output paths) stays out.
EXPORT_ALLOWED = (
    "EXPORT_PRODUCT_NAME", "EXPORT_PRODUCT_VERSION", "EXPORT_PRODUCT_DATE",
    "EXPORT_SCHEMA_VERSION", "EXPORT_PLATFORM", "EXPORT_ARCH", "EXPORT_TIME_UTC",
    "EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_PARAM_TIME_SHIFT", "EXPORT_CONFIG_TIME_SHIFT",
)
BATCH_ROWS = 1 << 14  # rows fetched from SQLite at a time
# The longest string or blob SQLite may read or make from a file (SQLITE_LIMIT_LENGTH, 16 MiB):
# a longer value (a hostile blob, its hex in ``args``) is refused with its table instead of
# being copied several times over.
MAX_VALUE = 16 << 20
# Columns of these tables that hold StringIds references: resolved to their text in ``args``.
_STRING_REFS = {"shortName", "demangledName", "mangledName", "nameId", "textId"}

# What the per-format ``items(con, path, run_id)`` generators are: they yield ``trace_events``
# Arrow tables as they are built and return the run's :class:`Parsed` (the last events too).
Items = Generator[pa.Table, None, Parsed]


def sniff(head: bytes, path: str) -> bool:
    """Any SQLite database: ``parse`` refuses, naming the rule, one that is not an nsys export."""
    return head.startswith(MAGIC)


def open_bytes(data: bytes, path: str) -> sqlite3.Connection:
    """A read-only in-memory SQLite connection on ``data`` (never a path), or refuse."""
    if not data.startswith(MAGIC):
        raise FormatError(path, "byte 0", "a SQLite database (header 'SQLite format 3')",
                          kind="malformed")
    if data[18:20] == b"\x02\x02":
        # a WAL-mode database: its file (without the -wal beside it, which is never read) is
        # read as the on-disk reader's immutable open reads it (deserialize refuses WAL mode)
        data = b"".join((data[:18], b"\x01\x01", data[20:]))
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(bytes(data))
    except sqlite3.Error as exc:
        con.close()
        raise FormatError(path, "$", f"a readable SQLite database ({_why(exc)})",
                          kind="malformed") from None
    return _guarded(con, path)


def open_file(file: Path, path: str) -> sqlite3.Connection:
    """A read-only connection on the SQLite file ``file`` (a private, stable copy: opened
    ``immutable``, so SQLite takes no lock and writes no journal beside it), or refuse naming
    ``path``. Reads go through SQLite's page cache: memory does not grow with the file."""
    with open(file, "rb") as fh:
        if not fh.read(len(MAGIC)).startswith(MAGIC):
            raise FormatError(path, "byte 0", "a SQLite database (header 'SQLite format 3')",
                              kind="malformed")
    uri = f"file:{urllib.parse.quote(str(file))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise FormatError(path, "$", f"a readable SQLite database ({_why(exc)})",
                          kind="malformed") from None
    return _guarded(con, path)


def _guarded(con: sqlite3.Connection, path: str) -> sqlite3.Connection:
    """No value past :data:`MAX_VALUE`, queries only, the schema readable: or refuse."""
    try:
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE)
        con.execute("pragma query_only = on")
        con.execute("pragma temp_store = file")  # a sort spills to disk, never to memory
        con.execute("select count(*) from sqlite_master").fetchall()
    except sqlite3.Error as exc:
        con.close()
        raise FormatError(path, "$", f"a readable SQLite database ({_why(exc)})",
                          kind="malformed") from None
    return con


def _why(exc: sqlite3.Error) -> str:
    """SQLite's reason, with our rule when a value is longer than :data:`MAX_VALUE`."""
    if "too big" in str(exc):
        return f"values of at most {MAX_VALUE >> 20} MiB; SQLite: {exc}"
    return str(exc)


def _columns(con, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'pragma table_info("{table}")')]


def _check_strings(con, path: str) -> None:
    try:
        con.execute("select count(id), max(length(value)) from StringIds").fetchall()
    except sqlite3.Error as exc:
        raise FormatError(path, "table StringIds", f"readable (id, value) rows ({_why(exc)})",
                          kind="schema") from None


class _Reader:
    """Row access for the small tables, and the precise refusal of one offending row."""

    def __init__(self, con, path: str):
        self.con, self.path = con, path

    def rows(self, table: str, required: tuple[str, ...]):
        """``(rowid, {column: value})`` of ``table`` in file order, required columns checked."""
        cols = _columns(self.con, table)
        missing = [c for c in required if c not in cols]
        if missing:
            raise FormatError(self.path, f"table {table}",
                              f"columns {', '.join(required)} (nsys export schema); "
                              f"missing {', '.join(missing)}", kind="schema")
        # Column names come from the file: quoted as identifiers; table names are ours.
        sel = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
        try:
            cur = self.con.execute(f'select rowid, {sel} from "{table}" order by rowid')  # noqa: S608
            for r in cur:
                yield r[0], dict(zip(cols, r[1:], strict=True))
        except sqlite3.Error as exc:
            raise FormatError(self.path, f"table {table}", f"readable rows ({_why(exc)})",
                              kind="malformed") from None

    def where(self, table: str, rowid: int, col: str) -> str:
        return f"table {table}, rowid {rowid}, column {col}"

    def ns(self, table: str, rowid: int, row: dict, col: str) -> int:
        v = row[col]
        if type(v) is not int:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"an integer timestamp in ns; got {v!r}", kind="schema")
        if v < 0:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"a non-negative timestamp in ns; got {v}", kind="schema")
        return v

    def span(self, table: str, rowid: int, row: dict) -> tuple[int, int]:
        start, end = self.ns(table, rowid, row, "start"), self.ns(table, rowid, row, "end")
        if end < start:
            raise FormatError(self.path, self.where(table, rowid, "end"),
                              f"end >= start (a non-negative duration); got {end} < {start}",
                              kind="schema")
        return start, end - start

    def string(self, table: str, rowid: int, row: dict, col: str, *,
               required: bool = True) -> str | None:
        v = row.get(col)
        if v is None and not required:
            return None
        s = None
        if type(v) is int:
            found = self.con.execute("select value from StringIds where id = ?", [v]).fetchall()
            s = found[0][0] if found else None
        if s is None:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"a StringIds id; got {v!r}", kind="schema")
        if len(s) > trace.MAX_NAME:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"a name of at most {trace.MAX_NAME} characters; got {len(s)}",
                              kind="schema")
        return s


def _int_or_none(v):
    return v if type(v) is int else None


def _q(ident: str) -> str:
    """A column name from the file as a quoted SQL identifier."""
    return '"' + ident.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _events(con, rd: _Reader, b: TraceBuilder, table: str, kind: str, *,
            name_col: str | None = None, name_sql: str | None = None,
            mangled_col: str | None = None, join: str = "", where: str = "",
            extra_args: tuple[tuple[str, str], ...] = ()) -> Generator[pa.Table, None, None]:
    """Every row of ``table`` (``where``: those matching it) as events of ``kind``, in file
    (rowid) order; yields the events' Arrow tables as the builder makes them.

    SQLite does the row work (string lookups, JSON of ``args``); Python only checks that the
    first offending row, if any, is refused with its rowid and rule. ``extra_args``: (key,
    SQL) pairs added to ``args`` after the row's own columns (derived facts, e.g. an NVTX
    range's domain name).
    """
    cols = _columns(con, table)
    required = ("start", "end") + ((name_col,) if name_col else ())
    missing = [c for c in required if c not in cols]
    if missing:
        raise FormatError(rd.path, f"table {table}",
                          f"columns {', '.join(required)} (nsys export schema); "
                          f"missing {', '.join(missing)}", kind="schema")
    t = f'"{table}"'
    cond = f"({where}) and " if where else ""
    try:
        bad = con.execute(
            f"select rowid, start, end from {t} as t where {cond}(typeof(start) != 'integer' "  # noqa: S608
            "or typeof(end) != 'integer' or start < 0 or end < start) order by rowid limit 1"
        ).fetchall()
        if bad:
            rowid, start, end = bad[0]
            rd.span(table, rowid, {"start": start, "end": end})
        names = [c for c in (name_col, mangled_col) if c]
        for c in names:  # a name must resolve (a mangled name may be null) and fit
            rows = con.execute(
                f"select t.rowid, t.{_q(c)}, length(s.value) from {t} as t left join StringIds "  # noqa: S608
                f"as s on s.id = t.{_q(c)} where {cond}((s.id is null and (t.{_q(c)} is not "
                f"null or {int(c == name_col)})) or length(s.value) > {trace.MAX_NAME}) "
                "order by t.rowid limit 1").fetchall()
            if rows:
                rd.string(table, rows[0][0], {c: rows[0][1]}, c, required=c == name_col)
        joins = [join] if join else []
        values = []
        for i, c in enumerate(cols):
            if c in names:
                continue
            v = f"t.{_q(c)}"
            if c in _STRING_REFS:
                joins.append(f"left join StringIds as r{i} on r{i}.id = {v}")
                v = f"coalesce(r{i}.value, {v})"
            values.append(f"{_lit(c)}, case when typeof({v}) = 'blob' then hex({v}) else {v} end")
        values += [f"{_lit(k)}, {v}" for k, v in extra_args if k not in cols]
        # json_object takes at most ~60 pairs per call: longer rows are merged with json_patch
        objs = [f"json_object({', '.join(values[k:k + 50])})" for k in range(0, len(values), 50)]
        args = objs[0] if objs else "'{}'"
        for o in objs[1:]:
            args = f"json_patch({args}, {o})"
        name = "sn.value" if name_col else name_sql
        if name_col:
            joins.append(f"left join StringIds as sn on sn.id = t.{_q(name_col)}")
        mangled = "null"
        if mangled_col:
            joins.append(f"left join StringIds as sm on sm.id = t.{_q(mangled_col)}")
            mangled = "sm.value"

        def opt(c: str) -> str:
            return f"cast(t.{_q(c)} as text)" if c in cols else "null"

        corr = ("case when typeof(t.correlationId) = 'integer' then t.correlationId end"
                if "correlationId" in cols else "null")
        sql = (f"select {name}, {mangled}, t.start, t.end - t.start, {opt('deviceId')}, "  # noqa: S608
               f"{opt('streamId')}, {opt('globalPid')}, {opt('globalTid')}, {corr}, {args} "
               f"from {t} as t {' '.join(joins)} {'where ' + where if where else ''} "
               "order by t.rowid")
        cur = con.execute(sql)
        # in batches: a big export's rows never exist all at once as Python objects (the
        # builder turns them into Arrow every tracebuild.FLUSH_ROWS events)
        while rows := cur.fetchmany(BATCH_ROWS):
            (nm, mg, start, dur, dev, stream, pid, tid, corr_ids,
             args_json) = map(list, zip(*rows, strict=True))
            del rows
            b.events_bulk(kind, [table] * len(nm), nm, start, dur, None, args_json=args_json,
                          mangled_name=mg, device=dev, stream=stream, pid=pid, tid=tid,
                          correlation=corr_ids)
            yield from b.take_flushed()
    except sqlite3.Error as exc:
        raise FormatError(rd.path, f"table {table}", f"readable rows ({_why(exc)})",
                          kind="malformed") from None


def stream(con, path: str, run_id: str,
           items_of: Callable[[sqlite3.Connection, str, str], Items]) -> Items:
    """``items_of(con, path, run_id)`` (a format's :func:`items`), an SQLite error while
    reading (a page broken past the schema: found only when read) refused as a malformed
    file."""
    try:
        return (yield from items_of(con, path, run_id))
    except sqlite3.Error as exc:
        raise FormatError(path, "$", f"a readable SQLite database ({_why(exc)})",
                          kind="malformed") from None


def collect(gen: Items) -> Parsed:
    """Every item of ``gen`` gathered into one :class:`Parsed` (the whole-document form)."""
    early: list[pa.Table] = []
    while True:
        try:
            early.append(next(gen))
        except StopIteration as stop:
            parsed: Parsed = stop.value
            break
    if early:
        ev = trace.EVENTS.name
        parsed.tables[ev] = pa.concat_tables([*early, parsed.tables[ev]])
    return parsed


def parse_database(data: bytes, path: str, run_id: str, items_of) -> Parsed:
    """``items_of(con, path, run_id)`` on the SQLite database ``data`` (opened by
    :func:`open_bytes`, closed after), gathered into one :class:`Parsed`."""
    con = open_bytes(data, path)
    try:
        return collect(stream(con, path, run_id, items_of))
    finally:
        con.close()


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    return parse_database(data, path, run_id, items)


def items(con, path: str, run_id: str) -> Items:
    """The export on ``con`` as event tables while they are read, then the run (see
    :data:`Items`)."""
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    if "StringIds" not in tables or not any(t in tables for t in NSYS_MARKERS):
        shown = ", ".join(sorted(tables)[:12]) or "no tables"
        raise FormatError(
            path, "$",
            "an Nsight Systems export (nsys export --type sqlite: tables StringIds and "
            f"{' or '.join(NSYS_MARKERS)}); found a SQLite database with {shown}",
            kind="unknown_format")
    _check_strings(con, path)
    rd = _Reader(con, path)
    b = TraceBuilder(run_id)
    columns: dict[str, list[str]] = {}

    if KERNEL in tables:
        cols = _columns(con, KERNEL)
        name_col = "demangledName" if "demangledName" in cols else "shortName"
        yield from _events(con, rd, b, KERNEL, "kernel", name_col=name_col,
                           mangled_col="mangledName" if "mangledName" in cols else None)
    if MEMCPY in tables:
        label, join = _enum_label(tables, _columns(con, MEMCPY), "copyKind",
                                  "ENUM_CUDA_MEMCPY_OPER", MEMCPY_LABELS, "kind ")
        yield from _events(con, rd, b, MEMCPY, "memcpy",
                           name_sql=f"'[CUDA memcpy ' || {label} || ']'", join=join)
    if MEMSET in tables:
        yield from _events(con, rd, b, MEMSET, "memset", name_sql="'[CUDA memset]'")
    if RUNTIME in tables:
        yield from _events(con, rd, b, RUNTIME, "runtime", name_col="nameId")
    if SYNC in tables:
        yield from _sync_events(con, rd, b, tables)
    nvtx = None
    if NVTX in tables:
        nvtx = yield from _nvtx_events(con, rd, b)

    if "TARGET_INFO_GPU" in tables:
        for _, g in rd.rows("TARGET_INFO_GPU", ("id",)):
            # kernels name their device by CUDA ordinal (cuDevice); older exports only have id
            dev = g["cuDevice"] if g.get("cuDevice") is not None else g["id"]
            props = {k: v for k, v in g.items() if k != "name"}
            b.device(dev, g.get("name"), props)
    elif OLD_GPU_TABLE in tables and "deviceId" in _columns(con, OLD_GPU_TABLE):
        # exports before mid-2021 (schema of nsys 2021.1 and older): the GPUs are in
        # TARGET_INFO_CUDA_GPU, keyed by the kernels' deviceId (a table without that key
        # names no device: the devices are then those of the events, unnamed, as before /3)
        for _, g in rd.rows(OLD_GPU_TABLE, ("deviceId",)):
            props = {k: v for k, v in g.items() if k != "name"}
            b.device(g["deviceId"], g.get("name"), props)

    export = {}
    if "META_DATA_EXPORT" in tables:
        export = {k: v for k, v in con.execute("select name, value from META_DATA_EXPORT")
                  if k in EXPORT_ALLOWED}
    origin = None
    if "TARGET_INFO_SESSION_START_TIME" in tables and "utcEpochNs" in _columns(
            con, "TARGET_INFO_SESSION_START_TIME"):
        row = con.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME "
                          "order by rowid limit 1").fetchall()
        origin = _int_or_none(row[0][0]) if row else None
    for t in (KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, NVTX):
        if t in tables:
            columns[t] = _columns(con, t)
    meta = {"export": export, "columns": columns}
    if nvtx is not None:
        meta["nvtx"] = nvtx
    parsed = b.parsed(NAME, PARSER_VERSION,
                      tool=export.get("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                      tool_version=export.get("EXPORT_PRODUCT_VERSION"), time_base="session",
                      origin_ns=origin, metadata=meta)
    if origin is not None and 0 < origin < 2**62:
        # the session start is the default capture time (naive UTC, µs precision)
        parsed.captured_at = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=origin // 1000)
    return parsed


def _sync_events(con, rd: _Reader, b: TraceBuilder, tables: set[str]):
    """CUDA synchronisations (kind ``sync``), named by their type's label."""
    label, join = _enum_label(tables, _columns(con, SYNC), "syncType", "ENUM_CUPTI_SYNC_TYPE",
                              SYNC_LABELS, "syncType ")
    yield from _events(con, rd, b, SYNC, "sync", name_sql=label, join=join)


def _enum_label(tables: set[str], cols, column: str, enum: str, labels: dict[int, str],
                prefix: str) -> tuple[str, str]:
    """``(label SQL, join)`` naming the code in ``t.<column>``: the export's ``enum`` table's
    label, or in an export without the enum tables (nsys 2021.1 and older) ``labels``; an
    unknown code as ``<prefix><code>``; ``'?'`` when the table has no such column."""
    if column not in cols:
        return "'?'", ""
    label = f"'{prefix}' || coalesce(t.\"{column}\", '?')"
    if enum in tables:
        return (f"coalesce(e.label, {label})",
                f'left join {enum} as e on e.id = t."{column}"')
    cases = " ".join(f"when {k} then {_lit(v)}" for k, v in labels.items())
    return f'coalesce(case t."{column}" {cases} end, {label})', ""


def _nvtx_events(con, rd: _Reader, b: TraceBuilder):
    """NVTX ranges (kind ``annotation``); returns the counts of what is not a row."""
    cols = _columns(con, NVTX)
    for c in ("eventType", "start", "end"):
        if c not in cols:
            raise FormatError(rd.path, f"table {NVTX}", f"a column {c} (nsys export schema)",
                              kind="schema")
    types = ", ".join(map(str, NVTX_RANGE_TYPES))
    where = f't.eventType in ({types}) and t."end" is not null'
    text = "t.text" if "text" in cols else "null"
    joins, name = "", text
    if "textId" in cols:
        joins = "left join StringIds as nt on nt.id = t.textId"
        name = f"coalesce({text}, nt.value)"
        # a textId must resolve (a range may have no message at all: then its name is '')
        bad = con.execute(
            f"select t.rowid, t.textId from {NVTX} as t {joins} where {where} and "  # noqa: S608
            "t.textId is not null and nt.id is null order by t.rowid limit 1").fetchall()
        if bad:
            rd.string(NVTX, bad[0][0], {"textId": bad[0][1]}, "textId")
    long = con.execute(
        f"select t.rowid from {NVTX} as t {joins} where {where} and "  # noqa: S608
        f"length({name}) > {trace.MAX_NAME} order by t.rowid limit 1").fetchall()
    if long:
        raise FormatError(rd.path, rd.where(NVTX, long[0][0], "text"),
                          f"a name of at most {trace.MAX_NAME} characters", kind="schema")
    extra: tuple[tuple[str, str], ...] = ()
    if "domainId" in cols:
        # a domain is named by its NvtxDomainCreate event in the same process (the globalTid
        # without its thread bits), its name as text or a StringIds reference
        dname = "d.text" if "text" in cols else "null"
        if "textId" in cols:
            dname = f"coalesce({dname}, (select value from StringIds where id = d.textId))"  # noqa: S608
        process = "d.globalTid >> 24" if "globalTid" in cols else "0"
        joins += (f" left join (select d.domainId as id, {process} as gp, max({dname}) as name "  # noqa: S608
                  f"from {NVTX} as d where d.eventType = {NVTX_DOMAIN_CREATE} "
                  "group by 1, 2) as dom on dom.id = t.domainId and dom.gp = "
                  + ("t.globalTid >> 24" if "globalTid" in cols else "0"))
        extra = (("domain", "dom.name"),)
    yield from _events(con, rd, b, NVTX, "annotation", name_sql=f"coalesce({name}, '')",
                       join=joins, where=where, extra_args=extra)
    counts = {}
    for etype, n, unended in con.execute(
            'select eventType, count(*), sum("end" is null) '  # noqa: S608
            f"from {NVTX} as t group by eventType order by eventType"):
        key = NVTX_RANGE_TYPES.get(etype, str(etype))
        if etype in NVTX_RANGE_TYPES:
            counts[key] = n - unended
            if unended:
                counts[f"{key} never ended"] = unended
        else:
            counts[f"eventType {key}"] = n
    return counts


def rebuild(con, run_id: str) -> dict[str, list[dict]]:
    """Per nsys event table, its rows in file order, every column in the table's order
    (StringIds references resolved to their text)."""
    run, events = fetch_run(con, run_id)
    columns = json.loads(run["metadata"])["columns"]
    out: dict[str, list[dict]] = {}
    for e in events:
        row = json.loads(e["args"])
        cols = columns[e["category"]]
        if e["category"] == KERNEL:
            row["demangledName" if "demangledName" in cols else "shortName"] = e["name"]
            if "mangledName" in cols:
                row["mangledName"] = e["mangled_name"]
        elif e["category"] == RUNTIME:
            row["nameId"] = e["name"]
        out.setdefault(e["category"], []).append({c: row[c] for c in cols})
    return out
