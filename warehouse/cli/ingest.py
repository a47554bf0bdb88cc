"""Ingest raw files: tile profiles and conv audits (JSON), kernel traces (PyTorch profiler /
Kineto *.pt.trace.json, plain or gzip; the formats in docs/formats.md). Content decides the
format, never the file name. Folders are scanned recursively (hidden files, *.tmp,
*.part and *.meta.json sidecars are skipped). Each file is loaded atomically and identified by
the SHA-256 of its bytes: the same bytes again, under any name, are "already ingested".
Bad files are copied to quarantine/ with an .error.json record; the batch keeps going and
exits 1 with a per-file summary.

run identity (series, label, captured_at, job), field by field: these options, then a
sidecar <file>.meta.json {"series": …, "label": …, "captured_at": …, "job": …}, then the
defaults: series = parent folder name, label = file stem (a rank file of a job: the job's
name), captured_at = the file's own clock where its format has one (Kineto: the earliest
GPU/runtime event; nsys: the session start), else the file mtime (UTC).

jobs of many ranks: the Kineto traces of one distributed job (one file per rank,
distributedInfo.rank / world_size) form one job; each file stays its own run. --job NAME
(or a sidecar's "job") names it, within its series and label (the same name under another
label is another job); without one, a folder whose Kineto files carry the same
distributedInfo (world_size >= 2) with distinct ranks is one job named after the folder.
A job may hold only some of its ranks. A duplicated rank (a second file of one rank) or a
foreign rank (another world_size or distributedInfo, rank >= world_size) is refused naming
the file and the rule, and quarantined.
"""

from __future__ import annotations

import sys

COMMAND = (10, "ingest", "ingest raw files (profiles, audits, kernel traces) or folders")
IMPORTS = ("warehouse.ingesting.loader", "warehouse.serving.status")


def add_arguments(p):
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    p.add_argument("--series", help="workload profiled (default: parent folder name)")
    p.add_argument("--label", help="build/version that produced the runs (default: file stem; "
                   "rank files of a job: the job's name)")
    p.add_argument("--captured-at", metavar="TIME",
                   help="ISO 8601 capture time, UTC if no offset (default: the file's own "
                   "clock, else its mtime)")
    p.add_argument("--job", metavar="NAME",
                   help="the distributed job these Kineto rank files belong to (default: the "
                   "folder, when its traces are the rank files of one job; else none)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def run(args, settings) -> int:
    from warehouse.ingesting.loader import ingest_paths

    return ingest_and_report(args, "pwh ingest", f"warehouse {settings.warehouse}",
                             lambda paths, **kw: ingest_paths(settings, paths, **kw))


def ingest_and_report(args, prog: str, where: str, ingest) -> int:
    """The body of ``pwh ingest`` and ``pwh lake ingest``: the identity options checked once (a
    bad one is a usage error, exit 2), a line per file as it goes, a summary, the failures with
    their quarantine copies; exit 1 if any file failed. ``ingest(paths, progress=…,
    series=…, label=…, captured_at=…[, job=…])`` returns the per-file results (``job`` only
    when ``--job`` was given)."""
    from warehouse.errors import FormatError
    from warehouse.ingesting.runmeta import check_name, parse_time

    try:  # a bad option is a usage error, reported once rather than once per file
        for field in ("series", "label", "job"):
            if getattr(args, field, None):
                check_name(getattr(args, field), f"--{field}", field)
        if args.captured_at:
            parse_time(args.captured_at, "--captured-at")
    except FormatError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2

    def progress(r):
        if not args.quiet or r.status == "failed":
            tag = {"ingested": "ok  ", "skipped": "skip", "failed": "FAIL"}[r.status]
            print(f"{tag} {r.path}: {without_path(r.message, r.path)} ({r.seconds:.2f} s)",
                  flush=True)

    job = {"job": args.job} if getattr(args, "job", None) else {}
    results = ingest(args.paths, progress=progress, series=args.series, label=args.label,
                     captured_at=args.captured_at, **job)
    if not results:
        print(f"{prog}: no files found", file=sys.stderr)
        return 1
    n = {s: sum(r.status == s for r in results) for s in ("ingested", "skipped", "failed")}
    print(f"{len(results)} file(s): {n['ingested']} ingested, {n['skipped']} already ingested, "
          f"{n['failed']} failed  [{where}]")
    for r in results:
        if r.status == "failed":
            print(f"  failed: {r.path}\n    {without_path(r.message, r.path)}\n"
                  f"    quarantined: {r.quarantine_path}", file=sys.stderr)
    return 1 if n["failed"] else 0


def without_path(message: str, path) -> str:
    """``message`` without the file name it starts with when the line already names the file
    ("FAIL x.json: x.json: at $ …" says it twice)."""
    prefix = f"{path}: "
    return message[len(prefix):] if path and message.startswith(prefix) else message
