"""Raw layer: one dynamic partition per run file, keyed by the file's SHA-256.

One op (``raw_files``) ingests staged files through the same loader as ``pwh ingest`` and
materialises one asset per raw table (``raw/files`` is the manifest, then one asset per entity
table), so column lineage from the marts reaches the exact raw column. A run covers one
partition (a backfill, the UI) or a batch: the landing sensor puts every file that settled
during a tick in one run whose config lists their partitions (a run's start-up costs seconds, a
small file's ingestion milliseconds). Each file still gets its own transaction and its own
partition materialisations; a bad file is quarantined, is not materialised, and fails the run
after the others are in.

The raw checks run inside this op when the run does not select the ``raw_checks`` step (the
sensor's runs): one validation of all the batch's runs, Great Expectations loaded once per run,
one check evaluation per suite for the batch (each partition's outcome is on its ``raw/files``
materialisation). The op takes the ``duckdb_writer`` pool; it opens
the warehouse only inside the op and closes it before returning.
"""

import datetime as dt
import re

import dagster as dg

from pipelines.resources import ValidationResource, WarehouseResource
from warehouse import db
from warehouse.ingesting.formats import ALL_TABLES
from warehouse.ingesting.landing import ingest_staged_batch

PARTITIONS_NAME = "run_files"
run_files = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)

# Every op that writes the DuckDB file takes this pool; dagster.yaml limits every pool to 1.
WRITER_POOL = "duckdb_writer"

KINDS_RAW = {"duckdb", "python"}


def _ddl_columns(ddl: str) -> list[tuple[str, str, str]]:
    """(name, type, comment) of each column line of a ``CREATE TABLE`` with ``--`` comments."""
    out = []
    for line in ddl.splitlines():
        m = re.match(r"\s+(\w+)\s+([A-Z]+(?:\[\])?)\b[^-]*--\s*(.*)$", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3).strip()))
    return out


# raw table name -> (columns, description); the manifest first, then every format's tables.
RAW_TABLES: dict[str, tuple[list[tuple[str, str, str]], str]] = {
    "files": (_ddl_columns(db.MANIFEST_DDL),
              "Manifest of ingested run files: one row per file; sha256 is every table's run_id. "
              "Partition key = SHA-256 of the file."),
    **{t.name: (list(t.columns), t.doc[0].upper() + t.doc[1:] + ".") for t in ALL_TABLES},
}


def raw_key(table: str) -> dg.AssetKey:
    return dg.AssetKey(["raw", table])


def table_schema(columns) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name=c, type=t, description=d or None)
                                   for c, t, d in columns])


RAW_SPECS = [
    dg.AssetSpec(
        key=raw_key(name),
        description=f"`raw.{name}`: {doc}",
        group_name="raw",
        kinds=KINDS_RAW,
        partitions_def=run_files,
        skippable=True,  # a rejected file is not materialised; its run says why
        metadata={
            "dagster/column_schema": table_schema(cols),
            "dagster/table_name": f"raw.{name}",
        },
    )
    for name, (cols, doc) in RAW_TABLES.items()
]


def _file_metadata(f, batch) -> dict:
    """Metadata of one partition's ``raw/files`` materialisation: the file, its identity, checks."""
    r, ident = f.result, f.identity
    md = {
        "dagster/row_count": dg.MetadataValue.int(f.rows.get("files", 0)),
        "file_name": f.file_name,
        "path": dg.MetadataValue.path(r.path),
        "status": r.status,
        "source_format": f.source_format,
        "series": ident.get("series", ""),
        "label": ident.get("label", ""),
        "captured_at": ident.get("captured_at", ""),
        "runs_ingested": dg.MetadataValue.int(batch.runs_in_warehouse),
        "files_in_this_run": dg.MetadataValue.int(len(batch.files)),
        "seconds": dg.MetadataValue.float(round(r.seconds, 3)),
        "ingested_at": dg.MetadataValue.timestamp(dt.datetime.now(dt.UTC).timestamp()),
    }
    return md


def raw_materializations(batch, checks_status: dict[str, str], *, as_outputs: bool):
    """One materialisation per raw table per file loaded (partition = its SHA-256); a file that
    failed is not materialised. ``raw/files`` carries the file's name, identity and the outcome
    of its blocking raw checks (``raw_checks``: passed / failed: invariants / not run).

    ``as_outputs`` (a partitioned run): the op's outputs, so that steps below it in the same run
    (the ``raw_checks`` step, models) run; otherwise (the sensor's batch run) one event per
    partition. A batch run is not itself partitioned: Dagster would otherwise plan, and record,
    one event per partition and asset before the run even starts (72 s for 100 files), and a
    bad file would mark its partition failed on all nine assets."""
    for f in batch.files:
        if not f.result.ok:
            continue
        for name in RAW_TABLES:
            md = (_file_metadata(f, batch) if name == "files" else
                  {"dagster/row_count": dg.MetadataValue.int(f.rows.get(name, 0))})
            if name == "files":
                md["raw_checks"] = checks_status.get(f.sha, "not run in this run")
            if as_outputs:
                yield dg.MaterializeResult(asset_key=raw_key(name), metadata=md)
            else:
                # every raw table, 0 rows for the other format's: a partition is complete on
                # every raw asset, as after a backfill, never shown as missing
                yield dg.AssetMaterialization(asset_key=raw_key(name), partition=f.sha,
                                              description=f.file_name, metadata=md)


def failure_description(batch) -> str:
    bad = batch.failed
    lines = [f"{len(bad)} of {len(batch.files)} file(s) could not be ingested (quarantined; "
             "`pwh runs --errors` lists them; the other files are ingested):"]
    lines += [f"- {f.result.message}" for f in bad[:20]]
    if len(bad) > 20:
        lines.append(f"- … and {len(bad) - 20} more")
    return "\n".join(lines)


class RawFilesConfig(dg.Config):
    """``files``: the partitions (SHA-256s) a batch run of the landing sensor ingests. Empty: the
    run's own partition (a backfill, a launch from the UI)."""

    files: list[str] = []


@dg.multi_asset(
    name="raw_files",
    specs=RAW_SPECS,
    pool=WRITER_POOL,
    description="Ingest run files (staged in the archive by the landing sensor; one partition "
    "per file, all the files of a sensor tick in one run) into every raw table, one "
    "transaction per file, through the same loader as `pwh ingest`; then validate them against "
    "the raw suites at once (the raw asset checks, per partition).",
)
def raw_files(context: dg.AssetExecutionContext, config: RawFilesConfig,
              warehouse: WarehouseResource, validation: ValidationResource):
    from pipelines import checks as pchecks  # checks.py imports this module

    batch_run = bool(config.files)
    keys = list(config.files) if batch_run else list(context.partition_keys)
    inline = not pchecks.raw_checks_in_run(context)  # else the raw_checks step validates
    with warehouse.exclusive(context.log):
        batch = ingest_staged_batch(warehouse.settings, keys,
                                    suites=pchecks.raw_suites() if inline else None)
    status = pchecks.partition_status(batch.check_results) if inline else {}
    yield from raw_materializations(batch, status, as_outputs=not batch_run)
    if inline:
        yield from pchecks.raw_evaluations(batch)
    failed_checks = sorted(k for k, v in status.items() if v != "passed")
    context.log.info(
        f"{len(batch.files)} file(s): {len(batch.files) - len(batch.failed)} loaded, "
        f"{len(batch.failed)} rejected; raw checks failed for {len(failed_checks)} run(s)"
        + "".join(f"\n{f.file_name} ({f.sha[:12]}): {f.result.message}" for f in batch.files))
    if batch.failed:
        raise dg.Failure(description=failure_description(batch), metadata={
            "rejected_files": dg.MetadataValue.json(
                [{"file": f.result.path, "sha256": f.sha, "error": f.result.message,
                  "quarantine": f.result.quarantine_path} for f in batch.failed[:50]])},
            allow_retries=False)
