"""List ingested runs, most recently ingested first: id (SHA-256 prefix), format, series, label,
captured_at, ingested_at, size, check status and file name. --errors lists what went wrong
instead, newest first: files that failed to ingest (with the JSON path, the rule and the
quarantined copy) and runs that failed their blocking checks (with the invariants).

Current right after every ingest, check and build: it reads the runs status that every writer
publishes (<state>/status/<warehouse file name>.duckdb), never the live file, so it never makes ingestion wait.
--live reads the live file instead (brief operator queries only)."""

from __future__ import annotations

COMMAND = (20, "runs", "list ingested runs (and failed files and checks with --errors)")

RUNS_SQL = """
select left(run_id, 12) as run, source_format as format, series, label, captured_at,
       date_trunc('second', ingested_at) as ingested_at, byte_size as bytes, checks,
       array_to_string(failed_invariants, ',') as failed, file_name
from runs
order by runs.ingested_at desc, run_id
limit ?
"""
ERRORS_SQL = """
select occurred_at, stage, error_kind, original_path, json_path, message, quarantine_path
from errors
order by occurred_at desc
limit ?
"""


def add_arguments(p):
    p.add_argument("--errors", action="store_true",
                   help="list failed files and runs that failed their checks instead")
    p.add_argument("--limit", type=int, default=200, help="at most this many rows (default 200)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table (--errors: one block per error, nothing cut), csv or json")
    p.add_argument("--live", action="store_true",
                   help="read the live warehouse file (writers wait while it is open)")


def run(args, settings) -> int:
    from warehouse.serving.results import format_result

    cols, rows = _fetch(args, settings)
    if args.errors and args.format == "table":
        print(format_errors(cols, rows))
    else:
        print(format_result(cols, rows, args.format))
    return 0


def _fetch(args, settings):
    import duckdb

    from warehouse.errors import PwhError
    from warehouse.serving import status
    from warehouse.serving.query import NoWarehouse

    if not settings.warehouse.exists():
        raise NoWarehouse(settings.warehouse, explicit=True, cli=True)
    sql = ERRORS_SQL if args.errors else RUNS_SQL
    if args.live:  # the same queries, on the live tables
        live = "checks.run_status"
        sql = (f"with runs as ({status.RUNS_SQL.format(checks=live)}), "
               f"errors as ({status.ERRORS_SQL.format(checks=live)}) {sql}")
        try:
            con = duckdb.connect(str(settings.warehouse), read_only=True,
                                 config={"autoinstall_known_extensions": False})
        except duckdb.IOException as exc:
            raise PwhError(f"{settings.warehouse}: cannot open the live file: "
                           f"{str(exc).splitlines()[0]} (drop --live: the status is current)"
                           ) from None
    else:
        con = status.open_status(settings)
    try:
        cur = con.execute(sql, [args.limit])
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        raise PwhError(f"{status.path(settings)}: cannot read the runs status: {exc}") from None
    finally:
        con.close()


def format_errors(cols: list[str], rows: list[tuple]) -> str:
    """One block per error, every field in full (a table would cut messages and paths)."""
    if not rows:
        return "no failed files or checks"
    out = []
    for r in rows:
        e = dict(zip(cols, r, strict=True))
        when = e["occurred_at"].isoformat(sep=" ", timespec="seconds") if e["occurred_at"] else "?"
        out.append(f"{when}  {e['stage']}: {e['error_kind']}  {e['original_path']}")
        if e["json_path"]:
            out.append(f"  at:          {e['json_path']}")
        out.append(f"  error:       {e['message']}")
        if e["quarantine_path"]:
            out.append(f"  quarantined: {e['quarantine_path']}")
        out.append("")
    out.append(f"({len(rows)} error{'s' if len(rows) != 1 else ''}; newest first)")
    return "\n".join(out)

