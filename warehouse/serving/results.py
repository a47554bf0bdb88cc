"""Query results for people: running every statement of a text, printing results as an aligned
table, CSV or JSON (``pwh sql``, ``pwh shell``, ``pwh runs``, the demo), and the options and
safeguards the query commands share."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import os
import threading

import duckdb

from warehouse.errors import PwhError


def _jsonable(v):
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.hex()
    return v


def format_result(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([{c: _jsonable(v) for c, v in zip(columns, r, strict=True)} for r in rows],
                          indent=2, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(v, limit: int = 60) -> str:
    if v is None:
        s = "NULL"
    elif isinstance(v, float):
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
