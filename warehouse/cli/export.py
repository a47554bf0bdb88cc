"""Back up the whole warehouse to a new folder: every table as Parquet, the views and the DDL
in a manifest (pwh-export.json, with row counts and content fingerprints), and the archive of raw
files. Restore it with `pwh import`.

By default the live warehouse is exported while holding the writer lock (one consistent state;
ingestion waits meanwhile and says "busy, retrying"). --from-snapshot exports the current
snapshot instead and makes nothing wait. The folder appears under its name only when complete,
and an export never replaces anything but an empty folder. Without DIR the export gets a new
folder <state>/backups/export-<UTC time to the microsecond>-<random suffix>."""

from __future__ import annotations

COMMAND = (60, "export", "back up the whole warehouse to Parquet (restore with `pwh import`)")


def add_arguments(p):
    p.add_argument("dest", metavar="DIR", nargs="?",
                   help="a new (or empty) folder to write (default: a new folder "
                        "<state>/backups/export-<time>-<suffix>)")
    p.add_argument("--from-snapshot", action="store_true",
                   help="export the current snapshot instead of the live warehouse")
    p.add_argument("--no-archive", action="store_true",
                   help="leave out the archived raw files (the export is then not lossless "
                        "with respect to the original bytes)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def run(args, settings) -> int:
    from warehouse.serving import backup

    log = (lambda m: None) if args.quiet else (lambda m: print(m, flush=True))
    m = backup.export(settings, args.dest, from_snapshot=args.from_snapshot,
                      archive=not args.no_archive, log=log)
    rows = sum(t["rows"] for t in m["tables"])
    arch = m.get("archive", {}).get("files", 0)
    print(f"exported {len(m['tables'])} table(s), {rows} row(s), {len(m['views'])} view(s), "
          f"{arch} archived raw file(s) from the {m['source']['kind']} warehouse to {m['path']}")
    return 0
