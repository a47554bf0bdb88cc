"""Re-derive, from the archive, every run an older parser derived (run it after upgrading pwh).

Every run records the parser version that derived its raw rows (`pwh sql "select file_name,
parser_version from raw.files"`). When a new pwh reads a format more fully (kineto_trace/2
keeps the CPU side of a PyTorch-profiler trace: operators, ProfilerStep#N, annotations), the
runs of older versions lack those facts. This command reads each such run's archived bytes
(<state>/archive/<sha256>.json) through today's parser and replaces its raw rows; nobody drops
or re-ingests files.

- atomic per run: one transaction per run (its rows deleted from every raw table, re-read,
  inserted, raw.files.parser_version updated). Killed at any point, each run is wholly old or
  wholly new; run the command again and it resumes with the runs still old. A run is
  re-derived once: a run already current is left alone.
- identity kept: run id, series, label, captured_at, original path, ingested_at (the time the
  run first entered the warehouse) are unchanged; but a run whose capture time was the default
  (no option, no sidecar gave it) takes the one today's reader reads from the file's own clock.
- recorded: each re-derivation adds a row to meta.rederivations (run_id, parser_before,
  parser_version, rederived_at) in the run's transaction; the Dagster warehouse_sensor reports
  the re-derived runs' raw partitions again, once, with their new row counts.
- a run whose archived copy is missing or altered, or whose bytes today's parser refuses, is
  reported and left as it was; the command goes on and exits 1 at the end.
- models are not built here: run `pwh build` next. A re-derived run's manifest row changed, so
  the build rebuilds exactly the model rows of the re-derived runs (and what depends on them)
  and publishes the analysts' snapshot; then `pwh check --rerun RUN...` validates the new rows
  (the command prints the runs).

Progress, one line per run (n/N, run, file, versions, rows, seconds), goes to stderr; the
summary to stdout. --dry-run lists what would be re-derived and changes nothing.

exit status: 0 every stale run re-derived (or none); 1 a run could not be re-derived; 2 usage
error.
"""

from __future__ import annotations

import sys

COMMAND = (12, "rederive", "after upgrading pwh: re-derive runs of older parser versions from "
           "the archive")
IMPORTS = ("warehouse.ingesting.rederive",)
BIG = 8 << 20  # archived files this big get a line before their re-derivation too


def add_arguments(p):
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs that would be re-derived; change nothing")
    p.add_argument("--format", dest="formats", action="append", metavar="NAME",
                   help="only runs of this source format (e.g. kineto_trace; repeatable)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (failures and the summary are still printed)")


def run(args, settings) -> int:
    from warehouse import db
    from warehouse.ingesting import formats
    from warehouse.ingesting import rederive as rd

    for f in args.formats or ():
        if f not in formats.BY_NAME:
            print(f"pwh rederive: unknown format {f!r} (known: "
                  f"{', '.join(sorted(formats.BY_NAME))})", file=sys.stderr)
            return 2
    if not settings.warehouse.exists():
        print(f"pwh rederive: no warehouse at {settings.warehouse}", file=sys.stderr)
        return 2
    if args.dry_run:
        with db.writer(settings.warehouse) as con:
            p = rd.plan(con, args.formats)
        for r in p.stale:
            gone = "" if rd.locate(settings, r) else "  (archived copy MISSING)"
            print(f"{r.short}  {r.file_name}  {r.source_format}  {r.parser_version} -> "
                  f"{r.current_version}{gone}")
        _left_alone(p)
        print(f"{len(p.stale)} run(s) would be re-derived  [warehouse {settings.warehouse}]")
        return 0

    def starting(n, total, r):
        path = rd.locate(settings, r)
        if path is not None and path.stat().st_size >= BIG:  # a long read: say so first
            print(f"[{n}/{total}] {r.short} {r.file_name} ({r.source_format} "
                  f"{r.parser_version} -> {r.current_version}) …", file=sys.stderr, flush=True)

    def progress(n, total, o):
        if o.status == "failed" or not args.quiet:
            tag = {"rederived": "ok  ", "skipped": "skip", "failed": "FAIL"}[o.status]
            print(f"[{n}/{total}] {tag} {o.run.short} {o.run.file_name}: {o.message} "
                  f"({o.seconds:.2f} s)", file=sys.stderr, flush=True)

    rep = rd.rederive(settings, only_formats=args.formats, progress=progress,
                      starting=starting if not args.quiet else None)
    _left_alone(rep.plan)
    n = {s: sum(o.status == s for o in rep.outcomes) for s in ("rederived", "skipped", "failed")}
    print(f"{len(rep.outcomes)} stale run(s): {n['rederived']} re-derived, {n['skipped']} "
          f"already current, {n['failed']} failed  [warehouse {settings.warehouse}]")
    for o in rep.failed:
        print(f"  failed: {o.run.run_id} {o.run.original_path}\n    {o.message}", file=sys.stderr)
    if n["rederived"]:
        done = [o.run.short for o in rep.outcomes if o.status == "rederived"]
        runs = " " + " ".join(done) if len(done) <= 5 else ""
        print(f"next: `pwh build` (rebuilds the models of the re-derived runs), then "
              f"`pwh check --rerun{runs}` to validate their new rows")
    return 1 if n["failed"] else 0


def _left_alone(p) -> None:
    for what, rows in (("derived by a newer pwh than this one", p.newer),
                       ("of a format this pwh does not know", p.unknown)):
        if rows:
            print(f"left alone: {len(rows)} run(s) {what} ("
                  + ", ".join(sorted({f'{fmt} {v}' for _, fmt, v in rows})) + ")",
                  file=sys.stderr)
