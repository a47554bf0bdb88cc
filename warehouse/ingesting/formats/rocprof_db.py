"""rocprof v1 ``results.db``: the SQLite database rocprof's ``tblextr`` writes (``-o x.db``).

Tables, all optional: ``KERN`` (one row per kernel dispatch: ``Index``, ``KernelName``,
``gpu-id``, ``queue-id``, …, ``BeginNs``, ``EndNs``, ``DurationNs``), ``OPS`` (HIP-traced GPU
operations: ``BeginNs``, ``EndNs``, ``dev-id``, ``queue-id``, ``Name``, ``stream-id``, …),
``COPY`` (memory copies), ``HIP`` / ``HSA`` (API calls), ``rocTX`` (markers). Recognised by
``CREATE TABLE KERN`` / ``OPS`` / ``HIP`` / ``HSA`` / ``COPY`` and a ``"BeginNs"`` column in
the schema (the first MiB), read like the nsys export (on disk when ingested, a batch of rows
at a time: ``warehouse.ingesting.sqlite_stream``; ``parse`` opens bytes in memory).

Kernels: the ``OPS`` rows when ``OPS`` has any (rocprof's own ``results.stats.csv`` counts
those; ``<barrier packet>`` rows are "other"), else the ``KERN`` rows; when both exist the
``KERN`` copies of the same dispatches are kind "other". ``dur_ns`` = ``EndNs - BeginNs``
(exact non-negative int64 integers, or text of digits in that range; end >= start). A NULL,
blob or empty name is refused with the table, rowid and column. rocprof stores ``KernelName`` / ``Name`` wrapped in double
quotes: one enclosing pair is removed (as rocprof's CSV and JSON outputs show them). Every
other column stays verbatim in ``args``.

Parser ``rocprof_db/2`` (``pwh rederive`` re-derives ``rocprof_db/1`` runs) adds:

- **the launch link.** ``tblextr`` numbers a HIP call's record ``Index`` with its correlation
  id (the ``:N`` roctracer appends to a ``hip_api_trace.txt`` line, else a per-process record
  number) and writes the same id as the ``Index`` of the ``OPS`` rows (and the HIP-traced copies
  in ``COPY``) that call launched, paired by ``(Index, pid)``. So ``correlation`` = ``Index`` for
  every ``HIP`` row, and for an ``OPS`` / ``COPY`` row when a ``HIP`` row has its ``Index`` and
  ``pid`` (a barrier packet, an HSA ``async-copy`` in ``COPY``, whose ``Index`` counts the HSA
  calls, stay null) -- provided the ``HIP`` table's ``Index`` values are distinct integers (one
  numbering: a database of several processes numbered separately has none linked, and
  ``metadata.correlation`` says so). ``HSA`` rows and ``KERN`` rows (whose ``Index`` is the
  dispatch number) are never linked.
- **roctx ranges** (the ``rocTX`` table: ``BeginNs``, ``EndNs``, ``pid``, ``tid``, ``Name``,
  ``Index``, ``__section``, ``__lane``) as kind ``annotation``, the message verbatim as ``name``:
  a push/pop range on its thread's lane (``__lane`` = ``tid``), a start/stop range on lane 0
  (``EndNs`` = its stop + 1), a ``roctxMark`` a 1 ns row (``EndNs = BeginNs + 1``), as
  ``tblextr`` writes them. ``staging.trace_cpu_events`` nests on the push/pop ranges.
"""

from __future__ import annotations

import json
import re

from warehouse.errors import FormatError
from warehouse.ingesting.formats import nsys_sqlite, trace, tracecsv
from warehouse.ingesting.formats.base import Parsed
from warehouse.ingesting.formats.tracebuild import TraceBuilder, fetch_run

NAME = "rocprof_db"
PARSER_VERSION = "rocprof_db/2"  # 2: HIP <-> OPS correlation, rocTX ranges
KIND = "sqlite"
TABLES = trace.TABLES

_SCHEMA = re.compile(rb'CREATE TABLE (KERN|OPS|HIP|HSA|COPY) \(')
# (table, event kind, name column, device column, stream column), in output order
_SOURCES = (
    ("KERN", "kernel", "KernelName", "gpu-id", "queue-id"),
    ("OPS", "kernel", "Name", "dev-id", "queue-id"),
    ("COPY", "memcpy", "Name", "dev-id", "queue-id"),
    ("HIP", "runtime", "Name", None, None),
    ("HSA", "runtime", "Name", None, None),
    ("rocTX", "annotation", "Name", None, None),
)
# roctx messages are stored as written (no enclosing quotes to remove)
_VERBATIM_NAMES = ("rocTX",)
# a COPY row that is an HSA async copy (its Index counts HSA calls, not HIP's)
HSA_COPY = "async-copy"
BARRIER = "<barrier packet>"


def sniff(head: bytes, path: str) -> bool:
    return (head.startswith(nsys_sqlite.MAGIC) and _SCHEMA.search(head) is not None
            and b'"BeginNs"' in head and b"StringIds" not in head)


def _unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] == '"' else s


def _ns(v, path: str, where: str) -> int:
    """An exact non-negative int64 of ns: an INTEGER, or TEXT of digits (rocprof writes
    either), bounded like every other format's timestamps."""
    if type(v) is str:
        try:
            return tracecsv.exact_int(v, path, where, what="ns")
        except FormatError as exc:
            raise FormatError(path, where, f"a non-negative integer timestamp in ns: "
                              f"{exc.expected}", kind="schema") from None
    if type(v) is not int or not 0 <= v <= tracecsv.INT64_MAX:
        raise FormatError(path, where, f"a non-negative integer timestamp in ns; got {v!r}",
                          kind="schema")
    return v


def _name(v, path: str, where: str, *, verbatim: bool = False) -> str:
    """The event name without rocprof's enclosing quotes (``verbatim``: as stored); NULL, a
    blob or empty is refused."""
    if type(v) is bytes or v is None:
        got = "NULL" if v is None else "a blob"
        raise FormatError(path, where, f"a non-empty text name; got {got}", kind="schema")
    name = str(v) if verbatim else _unquote(str(v))
    if not name:
        raise FormatError(path, where, f"a non-empty text name; got {v!r}", kind="schema")
    if len(name) > trace.MAX_NAME:
        raise FormatError(path, where, f"a name of at most {trace.MAX_NAME} characters",
                          kind="schema")
    return name


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    return nsys_sqlite.parse_database(data, path, run_id, items)


_UNQUOTED = ("case when typeof(t.{c}) = 'text' and length(t.{c}) >= 2 and t.{c} like '\"%\"' "
             "then substr(t.{c}, 2, length(t.{c}) - 2) else t.{c} end")


def items(con, path: str, run_id: str) -> nsys_sqlite.Items:
    """The database on ``con`` as event tables while they are read (``nsys_sqlite.BATCH_ROWS``
    rows at a time), then the run (see ``nsys_sqlite.Items``)."""
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    present = [s for s in _SOURCES if s[0] in tables]
    if not present:
        raise FormatError(path, "$", "a rocprof results.db (tables KERN, OPS, COPY, HIP or HSA)",
                          kind="unknown_format")
    columns = {}
    for table, *_ in present:
        cols = [r[1] for r in con.execute(f'pragma table_info("{table}")')]
        for c in ("BeginNs", "EndNs"):
            if c not in cols:
                raise FormatError(path, f"table {table}", f"a column {c} (rocprof results.db)",
                                  kind="schema")
        columns[table] = cols
    # OPS holds kernels when any of its rows is no barrier packet (a non-text name counts)
    ops_kernels = False
    if "OPS" in columns and "Name" in columns["OPS"]:
        unq = _UNQUOTED.format(c='"Name"')
        ops_kernels = bool(con.execute(
            f"select exists(select 1 from OPS as t where typeof(t.\"Name\") != 'text' "  # noqa: S608
            f"or {unq} != ?)", [BARRIER]).fetchall()[0][0])
    link, how = _hip_link(con, columns)
    b = TraceBuilder(run_id)
    for table, kind, name_col, dev_col, stream_col in present:
        cols = columns[table]
        if name_col not in cols:
            raise FormatError(path, f"table {table}", f"a column {name_col}", kind="schema")
        ib, ie, iname = cols.index("BeginNs"), cols.index("EndNs"), cols.index(name_col)
        rest = [(c, i) for i, c in enumerate(cols) if c != name_col]
        opt = {col: (None if src is None or src not in cols else cols.index(src))
               for col, src in (("device", dev_col), ("stream", stream_col), ("pid", "pid"),
                                ("tid", "tid"))}
        sel = ", ".join('t."' + c.replace('"', '""') + '"' for c in cols)
        corr, join = _correlation_sql(table, cols, link)
        cur = con.execute(f'select t.rowid, {sel}, {corr} from "{table}" as t {join} '  # noqa: S608
                          "order by t.rowid")
        while batch := cur.fetchmany(nsys_sqlite.BATCH_ROWS):
            cs: dict[str, list] = {c: [] for c in (
                "kind", "name", "start", "dur", "args", "device", "stream", "pid", "tid",
                "corr")}
            for r in batch:
                rowid, row = r[0], r[1:-1]
                where = f"table {table}, rowid {rowid}"
                start = _ns(row[ib], path, f"{where}, column BeginNs")
                end = _ns(row[ie], path, f"{where}, column EndNs")
                if end < start:
                    raise FormatError(path, f"{where}, column EndNs",
                                      f"EndNs >= BeginNs (a non-negative duration); got {end} "
                                      f"< {start}", kind="schema")
                name = _name(row[iname], path, f"{where}, column {name_col}",
                             verbatim=table in _VERBATIM_NAMES)
                other = table == "OPS" and name == BARRIER or table == "KERN" and ops_kernels
                cs["kind"].append("other" if other else kind)
                cs["name"].append(name)
                cs["start"].append(start)
                cs["dur"].append(end - start)
                cs["args"].append({c: row[i] for c, i in rest})
                cs["corr"].append(r[-1] if type(r[-1]) is int else None)
                for col, i in opt.items():
                    v = None if i is None else row[i]
                    cs[col].append(None if v is None else str(v))
            del batch
            b.events_bulk(cs["kind"], [table] * len(cs["name"]), cs["name"], cs["start"],
                          cs["dur"], cs["args"], device=cs["device"], stream=cs["stream"],
                          pid=cs["pid"], tid=cs["tid"], correlation=cs["corr"])
            yield from b.take_flushed()
    meta = {"columns": columns, "correlation": how}
    return b.parsed(NAME, PARSER_VERSION, tool="rocprof", tool_version=None,
                    time_base="session", origin_ns=None, metadata=meta)


def _hip_link(con, columns: dict[str, list[str]]) -> tuple[bool, str]:
    """Whether the ``HIP`` table's ``Index`` is one numbering of correlation ids (distinct
    integers), and in words what ``correlation`` holds (``metadata.correlation``)."""
    cols = columns.get("HIP")
    if cols is None:
        return False, "none: no HIP table"
    if "Index" not in cols:
        return False, "none: the HIP table has no Index column"
    if "pid" not in cols:  # SQLite would read a missing "pid" as the text 'pid': no pairing
        return False, "none: the HIP table has no pid column"
    n, distinct, ints = con.execute(
        "select count(*), count(distinct \"Index\"), "
        "coalesce(sum(typeof(\"Index\") = 'integer'), 0) from HIP").fetchall()[0]
    if ints != n:
        return False, f"none: {n - ints} HIP rows have no integer Index"
    if distinct != n:
        return False, (f"none: {n - distinct} HIP rows repeat another's Index (several "
                       "processes numbered separately)")
    return True, "HIP.Index; OPS and COPY rows with a HIP row of the same Index and pid"


def _correlation_sql(table: str, cols: list[str], link: bool) -> tuple[str, str]:
    """``(expression, join)`` giving a row's correlation id (see the module's docstring)."""
    if not link or "Index" not in cols:
        return "null", ""
    if table == "HIP":
        return 't."Index"', ""
    if table not in ("OPS", "COPY") or "pid" not in cols:
        return "null", ""
    join = ('left join (select "Index" as i, "pid" as p from HIP group by 1, 2) as h '
            'on h.i = t."Index" and h.p is t."pid"')
    if table == "COPY" and "Name" in cols:
        unq = _UNQUOTED.format(c='"Name"')
        return f"case when {unq} is not '{HSA_COPY}' then h.i end", join
    return "h.i", join


def rebuild(con, run_id: str) -> dict[str, list[dict]]:
    """Per rocprof table, its rows in file order, every column (names without rocprof's
    enclosing quotes)."""
    run, events = fetch_run(con, run_id)
    columns = json.loads(run["metadata"])["columns"]
    name_col = {s[0]: s[2] for s in _SOURCES}
    out: dict[str, list[dict]] = {}
    for e in events:
        t = e["category"]
        row = json.loads(e["args"])
        row[name_col[t]] = e["name"]
        out.setdefault(t, []).append({c: row[c] for c in columns[t]})
    return out
