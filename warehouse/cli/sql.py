"""Run one read-only SQL query against the warehouse and print the result.
Writes, DDL, ATTACH, file access and extension loading are refused.
Schemas: raw (as ingested), staging, marts, checks. See docs/analyst-guide.md."""

from __future__ import annotations

import sys

COMMAND = (50, "sql", "run a read-only SQL query")


def add_arguments(p):
    p.add_argument("query", help="SQL text, or - to read it from standard input")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")


def run(args, settings) -> int:
    from ..query import connect, format_result, run_query

    text = sys.stdin.read() if args.query == "-" else args.query
    con = connect(settings)
    try:
        cols, rows = run_query(con, text)
    finally:
        con.close()
    print(format_result(cols, rows, args.format))
    return 0
