"""Query results for people: running every statement of a text, printing results as an aligned
table, CSV or JSON (``pwh sql``, ``pwh shell``, ``pwh runs``, the demo), and the options and
safeguards the query commands share."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import os
import threading

import duckdb

from warehouse.errors import PwhError

# JSON output (``--format json`` of every command) is strict RFC 8259: NaN and ±infinity,
# which JSON has no numbers for, are written as the strings "NaN", "Infinity" and "-Infinity"
# (as PostgreSQL's to_json does), so that a strict parser (JavaScript's JSON.parse, jq,
# json.loads with parse_constant) reads every output and a NaN stays distinct from SQL NULL
# (null). Times are ISO 8601 text, decimals numbers, blobs hex text, anything else its text.
NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def jsonable(v):
    """``v`` (a DuckDB value, nested lists, structs and maps included) as plain JSON data."""
    if isinstance(v, float):
        return v if math.isfinite(v) else NONFINITE[repr(v)]
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return jsonable(float(v))
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(jsonable(k)): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [jsonable(x) for x in v]
    return str(v)


def to_json(data, indent: int | None = 2) -> str:
    """``data`` as strict JSON text (see above); never NaN or Infinity."""
    return json.dumps(jsonable(data), indent=indent, allow_nan=False)


def format_result(columns: list[str], rows: list[tuple], fmt: str = "table", *,
                  what: str = "row", digits: int = 6) -> str:
    """``rows`` as an aligned table (numbers right-aligned, each numeric column with one number
    of decimals), CSV or strict JSON. ``what``: the noun the table's last line counts;
    ``digits``: significant digits of a table's floats (see :func:`number_format`)."""
    if fmt == "json":
        return to_json([dict(zip(columns, r, strict=True)) for r in rows])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    fmts = [number_format([r[i] for r in rows], digits) for i in range(len(columns))]
    cells = [[_cell(v, f) for v, f in zip(r, fmts, strict=True)] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    right = [f is not None for f in fmts]

    def line(values):
        return "  ".join(v.rjust(w) if rj else v.ljust(w)
                         for v, w, rj in zip(values, widths, right, strict=True)).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} {what}{'' if len(rows) == 1 else 's'})")
    return "\n".join(out)


def number_format(values, digits: int = 6) -> str | None:
    """One format for the numbers of a column (``None``: not a numeric column): the same number
    of decimals for every value, as many as the most precise value needs when written to
    ``digits`` significant digits (at most 6: 0.24933, 5.2687, 23.8 become 0.24933, 5.26870,
    23.80000); integers as they are; exponent notation for the whole column when fixed decimals
    would show a value as 0 or need more than 15 digits."""
    nums = [v for v in values if v is not None]
    if not nums or not all(isinstance(v, int | float | decimal.Decimal) and
                           not isinstance(v, bool) for v in nums):
        return None
    fracs = [abs(float(v)) for v in nums if not isinstance(v, int)
             and math.isfinite(float(v))]
    if not fracs:
        return "{}"
    exponent = f"{{:.{digits - 1}e}}"
    decimals = 0
    for x in fracs:
        text = f"{x:.{digits}g}"
        if "e" in text:
            if x >= 1e15 or x < 5e-7:
                return exponent
            text = f"{x:.6f}".rstrip("0")
        decimals = max(decimals, len(text.partition(".")[2]))
    decimals = min(decimals, 6)
    if len(f"{max(fracs):.{decimals}f}") > 16:
        return exponent
    return f"{{:.{decimals}f}}"


def _cell(v, number: str | None = None, limit: int = 60) -> str:
    if v is None:
        return "NULL"
    if number is not None and not isinstance(v, bool):
        if isinstance(v, int):
            return str(v)
        x = float(v)
        return number.format(x) if math.isfinite(x) else NONFINITE[repr(x)]
    if isinstance(v, float):
        s = f"{v:.6g}"
    else:
        s = str(v)
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def run_query(con, sql: str, params: list | dict | None = None) -> tuple[list[str], list[tuple]]:
    """Run ``sql`` on an analyst (or plain DuckDB) connection; return (columns, rows)."""
    try:
        cur = con.execute(sql, params or None)
        if cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        raise PwhError(f"query failed: {exc}") from None


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql``, each with its ';', split where DuckDB's own tokenizer sees a
    ';' (never inside a string, quoted name or comment), so that each can be parsed and run on
    its own: a syntax error in one does not take the others with it. Pieces that hold nothing
    but blanks and comments are dropped."""
    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - cannot tokenize: leave it whole to DuckDB's parser
        return [sql] if sql.strip() else []
    out, start, body = [], 0, False
    for pos, kind in tokens:
        if kind == duckdb.token_type.operator and sql.startswith(";", pos):
            if body:
                out.append(sql[start:pos + 1].strip())
            start, body = pos + 1, False
        elif kind != duckdb.token_type.comment:
            body = True
    if body:
        out.append(sql[start:].strip())
    return out


def ends_statement(sql: str) -> bool:
    """True if ``sql`` ends with a ';' that ends a statement (not one in a string, a quoted
    name or a comment); comments after it are allowed."""
    try:
        tokens = [(p, k) for p, k in duckdb.tokenize(sql) if k != duckdb.token_type.comment]
    except Exception:  # noqa: BLE001
        return sql.rstrip().endswith(";")
    return bool(tokens) and tokens[-1][1] == duckdb.token_type.operator \
        and sql.startswith(";", tokens[-1][0])


def run_statements(con, sql: str) -> list[tuple[str, list[str], list[tuple]]]:
    """Run every statement of ``sql`` in order; return (statement, columns, rows) for each one
    that returns a result (a ``SET`` or ``USE`` returns none). ``pwh sql "select 1; select 2"``
    shows both results, not only the last."""
    raw = getattr(con, "_con", con)
    try:
        statements = raw.extract_statements(sql)
    except duckdb.Error as exc:
        raise PwhError(f"query failed: {exc}") from None
    out = []
    for st in statements:
        cols, rows = run_query(con, st.query)
        # SET, USE, BEGIN … answer only "Success": shown when alone, skipped among others
        shows = duckdb.ExpectedResultType.QUERY_RESULT in st.expected_result_type
        if cols and (shows or len(statements) == 1):
            out.append((" ".join(st.query.split()).rstrip(";").strip(), cols, rows))
    return out


def print_results(results: list[tuple[str, list[str], list[tuple]]], fmt: str, who: str) -> int:
    """Print the results of :func:`run_statements`; exit code. With several results, the table
    format names each statement above its result; CSV and JSON take one result only."""
    import sys

    if len(results) > 1 and fmt != "table":
        print(f"{who}: the query has {len(results)} statements that return rows; --format {fmt} "
              "prints one result: run them one at a time, or use --format table",
              file=sys.stderr)
        return 2
    for i, (statement, cols, rows) in enumerate(results):
        if len(results) > 1:
            print(("\n" if i else "") + f"-- {statement[:120]}")
        print(format_result(cols, rows, fmt))
    return 0


# --------------------------------------------------------------------------- CLI helpers

KILL_GRACE_S = 10.0


def add_cli_options(p, *, snapshot_default: bool = True) -> None:
    """Options shared by the commands that open analyst connections."""
    p.add_argument("--live", action="store_true",
                   help="read the live warehouse instead of the published snapshot (brief "
                        "operator queries only: ingestion and builds wait while it is open)")
    from warehouse.serving.query import DEFAULT_MEMORY, DEFAULT_TIMEOUT_S

    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help=f"interrupt a query after this long (default $PWH_QUERY_TIMEOUT or "
                        f"{DEFAULT_TIMEOUT_S:g}; 0 = no limit)")
    p.add_argument("--memory", metavar="SIZE",
                   help=f"memory limit, e.g. 2GB (default $PWH_ANALYST_MEMORY or {DEFAULT_MEMORY})")


def cli_connect(args, settings):
    """An analyst connection for a command (--live/--timeout/--memory), or a clear error."""
    from warehouse.serving.query import NoWarehouse, connect

    try:
        return connect(settings, live=args.live, timeout=args.timeout, memory=args.memory)
    except NoWarehouse as exc:
        raise exc.for_cli() from None


class hard_deadline:  # noqa: N801 - used as a context manager
    """Backstop for command-line queries: if a query ignores the interrupt for ``KILL_GRACE_S``
    past its timeout, end the process (exit 124) with a clear message rather than hang."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout

    def __enter__(self):
        self.timer = None
        if self.timeout and self.timeout > 0:
            def kill():
                import sys

                print(f"pwh: query still running {KILL_GRACE_S:g} s after the {self.timeout:g} s "
                      "timeout interrupted it; exiting", file=sys.stderr, flush=True)
                os._exit(124)

            self.timer = threading.Timer(self.timeout + KILL_GRACE_S, kill)
            self.timer.daemon = True
            self.timer.start()
        return self

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()
