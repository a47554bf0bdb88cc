"""Lake mode: the warehouse as Apache Iceberg tables that many writers feed and any engine reads
(needs the [lake] extra). See docs/scale-out.md.

  pwh lake ingest PATH… [--series S --label L --captured-at T --job J]   runs into the lake
  pwh lake sync  [--warehouse W]          publish a DuckDB warehouse (only new runs, changed keys)
  pwh lake build --engine duckdb|spark    run the SQL models over the lake, write them back

Every subcommand takes --catalog URI (default $PWH_LAKE_CATALOG, else a SQLite catalog
<state>/lake/catalog.db beside the warehouse) and --location DIR (default $PWH_LAKE_LOCATION,
else <state>/lake/warehouse). Namespaces raw, checks, staging, marts hold the DuckDB
warehouse's tables under the same names; read them with plain pyiceberg:
load_catalog("pwh", type="sql", uri=URI, warehouse=DIR).
"""

from __future__ import annotations

import argparse
import sys

COMMAND = (90, "lake", "Iceberg lake mode: ingest, sync a DuckDB warehouse, build models on "
                       "DuckDB or Spark")


def _lake_options(p) -> None:
    p.add_argument("--catalog", metavar="URI",
                   help="catalog database: sqlite:///FILE or postgresql://… "
                        "(default: $PWH_LAKE_CATALOG, else <state>/lake/catalog.db)")
    p.add_argument("--location", metavar="DIR",
                   help="warehouse location of the table files "
                        "(default: $PWH_LAKE_LOCATION, else <state>/lake/warehouse)")
    p.add_argument("--warehouse", metavar="PATH", default=argparse.SUPPRESS,
                   help="DuckDB warehouse file: the state folder beside it holds the default "
                        "lake; `sync` publishes it")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="lake_command", metavar="SUBCOMMAND", required=True)
    fmt = argparse.RawDescriptionHelpFormatter
    ing = sub.add_parser("ingest", formatter_class=fmt,
                         help="ingest run files into the lake, one exactly-once commit per run",
                         description=INGEST_DOC)
    ing.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    ing.add_argument("--series", help="workload profiled (default: parent folder name)")
    ing.add_argument("--label", help="build/version that produced the runs (default: file stem; "
                     "rank files of a job: the job's name)")
    ing.add_argument("--captured-at", metavar="TIME",
                     help="ISO 8601 capture time, UTC if no offset (default: the trace's own "
                          "clock where it has one, else file mtime)")
    ing.add_argument("--job", metavar="NAME",
                     help="the distributed job these Kineto rank files belong to (default: the "
                          "folder, when its traces are the rank files of one job; else none)")
    ing.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    _lake_options(ing)
    syn = sub.add_parser("sync", formatter_class=fmt, description=SYNC_DOC,
                         help="publish a DuckDB warehouse to the lake (incremental)")
    _lake_options(syn)
    bld = sub.add_parser("build", formatter_class=fmt, description=BUILD_DOC,
                         help="run the SQL models over the lake on DuckDB or Spark")
    bld.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb",
                     help="where the models run (default: duckdb)")
    bld.add_argument("--spark-master", metavar="URL",
                     help="spark: master URL, e.g. local[2] or spark://127.0.0.1:7077 "
                          "(default: $PWH_SPARK_MASTER, else local[2]); sc://host:port for "
                          "Spark Connect")
    bld.add_argument("--select", nargs="+", metavar="MODEL",
                     help="build only these models (and what they read)")
    _lake_options(bld)


INGEST_DOC = """\
Ingest run files or folders into the lake's raw tables: every format `pwh ingest` accepts (tile
profiles, conv audits, kernel traces: Kineto, Nsight Systems, rocprof; gzip too), through the
same parsers. Each run (identity: the SHA-256 of its bytes) is one atomic commit across every
raw table it writes, exactly once: a run the lake already holds is "already ingested", even
when two writers race on it. Any number of processes or machines may ingest into one catalog at
once; commit conflicts are retried. A writer killed at any point leaves no part of its run
visible; run it again.
Run identity options and <file>.meta.json sidecars as for `pwh ingest`.

Jobs of many ranks as for `pwh ingest` (raw.trace_jobs): --job NAME or a sidecar's "job" names
the job, else a folder whose Kineto files carry the same distributedInfo (world_size >= 2) with
distinct ranks is one job named after the folder. A rank file is checked against the job's
ranks the lake already holds (same job, series and label), in the commit itself: a duplicated
rank or a foreign rank is refused naming the file and the rule, and quarantined, even when two
writers commit ranks of one job at once."""

SYNC_DOC = """\
Publish an existing DuckDB warehouse to the lake: runs the lake does not hold yet (each one
commit, exactly once, as `pwh lake ingest` does), the check results, and the staging models and
marts: for incremental models only the keys (runs or series) whose rows changed since the last
sync, other models whole when they were rebuilt. A rank file of a job whose rank the lake holds
from another file (or whose distributedInfo is another job's) is not synced: it is reported,
and the command exits 1."""

BUILD_DOC = """\
Run the SQL models under sql/ over the lake and write the staging models and marts back to it.
--engine duckdb: the same SQL on DuckDB, reading the lake's tables through pyiceberg.
--engine spark: the SQL transpiled to Spark SQL with sqlglot (per-model overrides in
sql/<layer>/<name>.spark.sql), the Python functions registered as Spark UDFs, the lake read
through pyiceberg's file plan and the results committed with add_files. Both engines give
equal tables."""


def run(args, settings) -> int:
    from warehouse.lake.catalog import resolve

    cfg = resolve(settings, args.catalog, args.location)
    if args.lake_command == "ingest":
        return _ingest(args, settings, cfg)
    if args.lake_command == "sync":
        from warehouse.lake import sync

        def show(msg: str) -> None:
            print(msg, flush=True)

        out = sync.sync(settings, cfg, progress=show)
        if out["refused"]:  # duplicated or foreign ranks of a job: not mixed into the lake
            print(f"pwh lake sync: {out['refused']} run(s) not synced (see above)",
                  file=sys.stderr)
            return 1
        return 0
    from warehouse.lake import build

    def shown(r) -> None:
        print(f"{r.model}: {r.rows} rows ({r.seconds:.2f} s)", flush=True)

    results = build.build(cfg, engine=args.engine, master=args.spark_master,
                          select=args.select, progress=shown)
    print(f"{len(results)} model(s) built on {args.engine} [{cfg.shown}]")
    return 0


def _ingest(args, settings, cfg) -> int:
    from warehouse.cli.ingest import ingest_and_report
    from warehouse.lake.ingest import ingest_paths

    return ingest_and_report(args, "pwh lake ingest", cfg.shown,
                             lambda paths, **kw: ingest_paths(settings, cfg, paths, **kw))
