"""Run read-only SQL against the published snapshot of the warehouse and print the result.

Reads the snapshot published after the last build (see docs/operations.md), so a query never
makes ingestion wait; --live reads the live file instead. Writes, DDL, ATTACH, INSTALL/LOAD,
SET (other than search_path) and file access outside the export folder (<state>/exports/) are
refused with a message saying why; a relative path (COPY ... TO 'out.csv', read_csv('in.csv'))
names a file in the export folder. A query is interrupted after --timeout seconds, or by
Ctrl-C (exit code 130). Several statements separated by ';' run in order and every result is
printed (--format csv/json take a single result).
Schemas: raw (as ingested), staging, marts, checks; pwh_snapshot.info names the snapshot.
See docs/analyst-guide.md."""

from __future__ import annotations

import sys

COMMAND = (50, "sql", "run a read-only SQL query (on the published snapshot)")


def add_arguments(p):
    p.add_argument("query", help="SQL text, or - to read it from standard input")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    from warehouse.serving.query import add_cli_options

    add_cli_options(p)


def run(args, settings) -> int:
    from warehouse.serving.query import QueryInterrupted, cli_connect, hard_deadline
    from warehouse.serving.results import print_results, run_statements

    text = sys.stdin.read() if args.query == "-" else args.query
    con = cli_connect(args, settings)
    try:
        with hard_deadline(con.timeout):
            results = run_statements(con, text)
    except QueryInterrupted:
        print("pwh sql: query interrupted (Ctrl-C); nothing was changed", file=sys.stderr)
        return 130
    finally:
        con.close()
    return print_results(results, args.format, "pwh sql")
