"""Nsight Systems SQLite export (``nsys export --type sqlite``).

The file's bytes are opened in memory (``sqlite3.connect(':memory:')`` + ``deserialize``,
``query_only``): nothing is written anywhere, and the file is never opened by path. A SQLite
database is an nsys export when it has the ``StringIds`` table and at least one of nsys's own
tables (``META_DATA_EXPORT``, ``TARGET_INFO_SESSION_START_TIME``, ``CUPTI_ACTIVITY_KIND_*``);
any other SQLite file is refused naming that rule.

Events (columns always selected by name: schema versions differ):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> kind ``kernel``: ``name`` = ``StringIds[demangledName]``
  (``shortName`` where no demangled name exists), ``mangled_name`` = ``StringIds[mangledName]``;
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> ``memcpy`` / ``memset``, named like
  ``nsys stats`` does (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``);
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime`` (``StringIds[nameId]``).

``dur_ns`` = ``end - start`` (integers, end >= start). No kernel table is a run with 0 kernels.
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

from warehouse.errors import FormatError
from warehouse.ingesting.formats import trace
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "nsys_sqlite"
PARSER_VERSION = "nsys_sqlite/1"
KIND = "sqlite"
TABLES = trace.TABLES

MAGIC = b"SQLite format 3\x00"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NSYS_MARKERS = ("META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", KERNEL, RUNTIME)
# META_DATA_EXPORT rows copied into trace_runs.metadata; everything else there (host, user,
# input/output paths) stays out.
EXPORT_ALLOWED = (
    "EXPORT_PRODUCT_NAME", "EXPORT_PRODUCT_VERSION", "EXPORT_PRODUCT_DATE",
    "EXPORT_SCHEMA_VERSION", "EXPORT_PLATFORM", "EXPORT_ARCH", "EXPORT_TIME_UTC",
    "EXPORT_PARAM_TIME_NORMALIZE", "EXPORT_PARAM_TIME_SHIFT", "EXPORT_CONFIG_TIME_SHIFT",
)
# Columns of these tables that hold StringIds references: resolved to their text in ``args``.
_STRING_REFS = {"shortName", "demangledName", "mangledName", "nameId"}


def sniff(head: bytes, path: str) -> bool:
    """Any SQLite database: ``parse`` refuses, naming the rule, one that is not an nsys export."""
    return head.startswith(MAGIC)


def open_bytes(data: bytes, path: str) -> sqlite3.Connection:
    """A read-only in-memory SQLite connection on ``data`` (never a path), or refuse."""
    if not data.startswith(MAGIC):
        raise FormatError(path, "byte 0", "a SQLite database (header 'SQLite format 3')",
                          kind="malformed")
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(bytes(data))
        con.execute("pragma query_only = on")
        con.execute("select count(*) from sqlite_master").fetchall()
    except sqlite3.Error as exc:
        con.close()
        raise FormatError(path, "$", f"a readable SQLite database ({exc})",
                          kind="malformed") from None
    return con


def _columns(con, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'pragma table_info("{table}")')]


def _strings(con, path: str) -> dict[int, str]:
    try:
        return dict(con.execute("select id, value from StringIds").fetchall())
    except sqlite3.Error as exc:
        raise FormatError(path, "table StringIds", f"readable (id, value) rows ({exc})",
                          kind="schema") from None


class _Reader:
    def __init__(self, con, path: str, strings: dict[int, str]):
        self.con, self.path, self.strings = con, path, strings

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
            raise FormatError(self.path, f"table {table}", f"readable rows ({exc})",
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
        s = self.strings.get(v) if type(v) is int else None
        if s is None:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"a StringIds id; got {v!r}", kind="schema")
        if len(s) > trace.MAX_NAME:
            raise FormatError(self.path, self.where(table, rowid, col),
                              f"a name of at most {trace.MAX_NAME} characters; got {len(s)}",
                              kind="schema")
        return s

    def args(self, row: dict, names: tuple[str, ...] = ()) -> dict:
        """The row verbatim but for the name columns (in ``name`` / ``mangled_name``) and
        StringIds references (resolved to their text)."""
        out = {}
        for c, v in row.items():
            if c in names:
                continue
            if c in _STRING_REFS and type(v) is int:
                v = self.strings.get(v, v)
            out[c] = v
        return out


def _int_or_none(v):
    return v if type(v) is int else None


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    con = open_bytes(data, path)
    try:
        return _parse(con, path, run_id)
    finally:
        con.close()


def _parse(con, path: str, run_id: str) -> Parsed:
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    if "StringIds" not in tables or not any(t in tables for t in NSYS_MARKERS):
        shown = ", ".join(sorted(tables)[:12]) or "no tables"
        raise FormatError(
            path, "$",
            "an Nsight Systems export (nsys export --type sqlite: tables StringIds and "
            f"{' or '.join(NSYS_MARKERS)}); found a SQLite database with {shown}",
            kind="unknown_format")
    rd = _Reader(con, path, _strings(con, path))
    b = TraceBuilder(run_id)
    columns: dict[str, list[str]] = {}

    if KERNEL in tables:
        cols = _columns(con, KERNEL)
        name_col = "demangledName" if "demangledName" in cols else "shortName"
        for rowid, r in rd.rows(KERNEL, ("start", "end", name_col)):
            start, dur = rd.span(KERNEL, rowid, r)
            b.event("kernel", KERNEL, rd.string(KERNEL, rowid, r, name_col), start, dur,
                    mangled_name=rd.string(KERNEL, rowid, r, "mangledName", required=False),
                    device=r.get("deviceId"), stream=r.get("streamId"), pid=r.get("globalPid"),
                    correlation=_int_or_none(r.get("correlationId")),
                    args=rd.args(r, (name_col, "mangledName")))
    if MEMCPY in tables:
        kinds = {}
        if "ENUM_CUDA_MEMCPY_OPER" in tables:
            kinds = dict(con.execute("select id, label from ENUM_CUDA_MEMCPY_OPER").fetchall())
        for rowid, r in rd.rows(MEMCPY, ("start", "end")):
            start, dur = rd.span(MEMCPY, rowid, r)
            ck = r.get("copyKind")
            label = kinds.get(ck) or f"kind {ck}"
            b.event("memcpy", MEMCPY, f"[CUDA memcpy {label}]", start, dur,
                    device=r.get("deviceId"), stream=r.get("streamId"), pid=r.get("globalPid"),
                    correlation=_int_or_none(r.get("correlationId")), args=rd.args(r))
    if MEMSET in tables:
        for rowid, r in rd.rows(MEMSET, ("start", "end")):
            start, dur = rd.span(MEMSET, rowid, r)
            b.event("memset", MEMSET, "[CUDA memset]", start, dur,
                    device=r.get("deviceId"), stream=r.get("streamId"), pid=r.get("globalPid"),
                    correlation=_int_or_none(r.get("correlationId")), args=rd.args(r))
    if RUNTIME in tables:
        for rowid, r in rd.rows(RUNTIME, ("start", "end", "nameId")):
            start, dur = rd.span(RUNTIME, rowid, r)
            b.event("runtime", RUNTIME, rd.string(RUNTIME, rowid, r, "nameId"), start, dur,
                    tid=r.get("globalTid"),
                    correlation=_int_or_none(r.get("correlationId")),
                    args=rd.args(r, ("nameId",)))

    if "TARGET_INFO_GPU" in tables:
        for _, g in rd.rows("TARGET_INFO_GPU", ("id",)):
            # kernels name their device by CUDA ordinal (cuDevice); older exports only have id
            dev = g["cuDevice"] if g.get("cuDevice") is not None else g["id"]
            props = {k: v for k, v in g.items() if k != "name"}
            b.device(dev, g.get("name"), props)

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
    for t in (KERNEL, MEMCPY, MEMSET, RUNTIME):
        if t in tables:
            columns[t] = _columns(con, t)
    meta = {"export": export, "columns": columns}
    parsed = b.parsed(NAME, PARSER_VERSION,
                      tool=export.get("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
                      tool_version=export.get("EXPORT_PRODUCT_VERSION"), time_base="session",
                      origin_ns=origin, metadata=meta)
    if origin is not None and 0 < origin < 2**62:
        # the session start is the default capture time (naive UTC, µs precision)
        parsed.captured_at = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=origin // 1000)
    return parsed


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
