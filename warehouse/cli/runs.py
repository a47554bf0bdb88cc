"""List ingested runs, newest first: id (SHA-256 prefix), format, series, label, captured_at,
size and check status. --errors lists files that failed to ingest instead.
Reads the published snapshot (state as of the last publish); --live reads the live file."""

from __future__ import annotations

COMMAND = (20, "runs", "list ingested runs (and failed files with --errors)")

RUNS_SQL = """
SELECT left(f.sha256, 12) AS run, f.source_format AS format, f.series, f.label,
       f.captured_at, f.byte_size AS bytes, coalesce(s.status, 'unchecked') AS checks,
       array_to_string(s.failed_invariants, ',') AS failed, f.file_name
FROM raw.files f LEFT JOIN checks.run_status s ON s.run_id = f.sha256
ORDER BY f.captured_at DESC, f.sha256
LIMIT ?
"""
ERRORS_SQL = """
SELECT occurred_at, original_path, error_kind, json_path, message, quarantine_path
FROM raw.ingest_errors ORDER BY occurred_at DESC LIMIT ?
"""


def add_arguments(p):
    p.add_argument("--errors", action="store_true", help="list failed files instead")
    p.add_argument("--limit", type=int, default=200, help="at most this many rows (default 200)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    from warehouse.serving.query import add_cli_options

    add_cli_options(p)


def run(args, settings) -> int:
    from warehouse.serving.query import cli_connect, format_result, hard_deadline, run_query

    con = cli_connect(args, settings)
    try:
        with hard_deadline(con.timeout):
            cols, rows = run_query(con, ERRORS_SQL if args.errors else RUNS_SQL, [args.limit])
    finally:
        con.close()
    print(format_result(cols, rows, args.format))
    return 0
