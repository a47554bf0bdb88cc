"""Restore a warehouse from a `pwh export` folder.

The warehouse is rebuilt in a new file beside the target, every table is checked against the
export's row counts and content fingerprints, archived raw files against their SHA-256 names,
and only then is the file moved into place; a snapshot is then published. Restoring over an
existing warehouse needs --replace: the previous file is kept as
warehouse.duckdb.before-import-<UTC time to the microsecond>-<random suffix>, a new name every
time (never replacing another kept file). Killed at any point, the warehouse is the old one or
the restored one; run the same command again. Stop scheduled ingestion while restoring."""

from __future__ import annotations

COMMAND = (61, "import", "restore the warehouse from a `pwh export` folder")


def add_arguments(p):
    p.add_argument("src", metavar="DIR", help="a folder written by `pwh export`")
    p.add_argument("--replace", action="store_true",
                   help="replace an existing warehouse (the old file is kept beside it)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def run(args, settings) -> int:
    from warehouse.serving import backup

    log = (lambda m: None) if args.quiet else (lambda m: print(m, flush=True))
    s = backup.restore(settings, args.src, replace=args.replace, log=log)
    print(f"restored {s['tables']} table(s), {s['rows']} row(s), {s['archive_files']} archived "
          f"raw file(s) into {settings.warehouse}; snapshot {s.get('snapshot')}"
          + (f"; previous warehouse kept as {s['previous']}" if s["previous"] else ""))
    return 0
