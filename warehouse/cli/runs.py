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


COUNTS_SQL = """
select (select count(*) from runs),
       (select count(*) from errors where stage = 'ingest'),
       (select count(*) from errors where stage = 'checks')
"""


def _limit(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be 0 (all) or more")
    return n


def add_arguments(p):
    p.add_argument("--errors", action="store_true",
                   help="list failed files and runs that failed their checks instead")
    p.add_argument("--limit", type=_limit, default=200, metavar="N",
                   help="at most this many rows, newest first (default 200; 0: all); the "
                        "table's last line says how many more there are")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table (--errors: one block per error, nothing cut), csv or json "
                        "(notes such as rows left out go to standard error)")
    p.add_argument("--live", action="store_true",
                   help="read the live warehouse file (writers wait while it is open)")


def run(args, settings) -> int:
    import sys

    from warehouse.serving.results import format_result

    cols, rows, (n_runs, n_failed_files, n_failed_checks) = _fetch(args, settings)
    what, total = ("error", n_failed_files + n_failed_checks) if args.errors else ("run", n_runs)
    more = more_note(len(rows), total, what)
    others = errors_note(n_failed_files, n_failed_checks) if not args.errors else ""
    if args.format != "table":
        print(format_result(cols, rows, args.format))
        for note in (more, others):
            if note:
                print(f"pwh runs: {note}", file=sys.stderr)
    elif args.errors:
        print(format_errors(cols, rows, total))
    else:
        table = format_result(cols, rows, "table", what="run")
        if more:  # the count line says what was left out and how to see it
            table = table.rsplit("\n", 1)[0] + f"\n({more})"
        print(table + (f"\n{others}" if others else ""))
    return 0


def more_note(shown: int, total: int, what: str) -> str:
    """What the listing left out and how to see it; "" when nothing was left out."""
    if total <= shown:
        return ""
    more = total - shown
    return (f"{shown} of {total} {what}s shown, newest first; {more} more: --limit {total} "
            f"(or --limit 0) shows all")


def errors_note(failed_files: int, failed_checks: int) -> str:
    parts = []
    if failed_files:
        parts.append(f"{failed_files} file{'s' if failed_files != 1 else ''} failed to ingest "
                     "(not runs, so not listed above)")
    if failed_checks:
        parts.append(f"{failed_checks} run{'s' if failed_checks != 1 else ''} failed "
                     f"{'their' if failed_checks != 1 else 'its'} blocking checks "
                     "(checks = failed above)")
    return "; ".join(parts) + ": pwh runs --errors lists them" if parts else ""


def _fetch(args, settings):
    import duckdb

    from warehouse.errors import PwhError
    from warehouse.serving import status
    from warehouse.serving.query import NoWarehouse

    if not settings.warehouse.exists():
        raise NoWarehouse(settings.warehouse, explicit=True, cli=True)
    sql = ERRORS_SQL if args.errors else RUNS_SQL
    counts = COUNTS_SQL
    if args.live:  # the same queries, on the live tables
        live = "checks.run_status"
        views = (f"with runs as ({status.RUNS_SQL.format(checks=live)}), "
                 f"errors as ({status.ERRORS_SQL.format(checks=live)}) ")
        sql, counts = views + sql, views + counts
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
        cur = con.execute(sql, [args.limit or None])  # 0: no limit
        cols, rows = [d[0] for d in cur.description], cur.fetchall()
        return cols, rows, con.execute(counts).fetchall()[0]
    except duckdb.Error as exc:
        raise PwhError(f"{status.path(settings)}: cannot read the runs status: {exc}") from None
    finally:
        con.close()


def format_errors(cols: list[str], rows: list[tuple], total: int | None = None) -> str:
    """One block per error, every field in full (a table would cut messages and paths);
    ``total``: how many errors there are in all (the last line says how many more)."""
    from warehouse.cli.ingest import without_path

    if not rows:
        return "no failed files or checks"
    out = []
    for r in rows:
        e = dict(zip(cols, r, strict=True))
        when = e["occurred_at"].isoformat(sep=" ", timespec="seconds") if e["occurred_at"] else "?"
        out.append(f"{when}  {e['stage']}: {e['error_kind']}  {e['original_path']}")
        if e["json_path"]:
            out.append(f"  at:          {e['json_path']}")
        out.append(f"  error:       {without_path(e['message'], e['original_path'])}")
        if e["quarantine_path"]:
            out.append(f"  quarantined: {e['quarantine_path']}")
        out.append("")
    total = len(rows) if total is None else max(total, len(rows))
    if total > len(rows):
        out.append(f"({more_note(len(rows), total, 'error')})")
    else:
        out.append(f"({total} error{'s' if total != 1 else ''}; newest first)")
    return "\n".join(out)
