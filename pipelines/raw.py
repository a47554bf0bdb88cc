"""Raw layer: one dynamic partition per run file, keyed by the file's SHA-256.

One op (``raw_files``) ingests a staged file through the same loader as ``pwh ingest`` and
materialises one asset per raw table (``raw/files`` is the manifest, then one asset per entity
table), so column lineage from the marts reaches the exact raw column. The op takes the
``duckdb_writer`` pool; it opens the warehouse only inside the op and closes it before returning.
"""

import datetime as dt
import json
import re

import dagster as dg

from pipelines.resources import WarehouseResource
from warehouse import db
from warehouse.ingesting.formats import ALL_TABLES
from warehouse.ingesting.landing import ingest_staged, staged_meta_path

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
        metadata={
            "dagster/column_schema": table_schema(cols),
            "dagster/table_name": f"raw.{name}",
        },
    )
    for name, (cols, doc) in RAW_TABLES.items()
]


def _counts(settings, sha: str) -> tuple[dict[str, int], int]:
    """Rows of this run in every raw table, and the number of runs in the warehouse."""
    rows = {}
    with db.writer(settings.warehouse, quiet=True) as con:
        for name in RAW_TABLES:
            col = "sha256" if name == "files" else "run_id"
            rows[name] = con.execute(
                f"SELECT count(*) FROM raw.{name} WHERE {col} = ?", [sha]).fetchone()[0]  # noqa: S608 - names from RAW_TABLES
        total = con.execute("SELECT count(*) FROM raw.files").fetchone()[0]
    return rows, total


@dg.multi_asset(
    name="raw_files",
    specs=RAW_SPECS,
    pool=WRITER_POOL,
    description="Ingest one run file (staged in the archive by the landing sensor) into every "
    "raw table, atomically and idempotently, through the same loader as `pwh ingest`.",
)
def raw_files(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    s = warehouse.settings
    sha = context.partition_key
    with warehouse.exclusive(context.log):
        result = ingest_staged(s, sha)
        if result.status == "failed":
            raise dg.Failure(
                description=result.message,
                metadata={"path": result.path, "quarantine": str(result.quarantine_path)},
            )
        context.log.info(f"{result.path}: {result.message}")
        rows, total = _counts(s, sha)
    meta = json.loads(staged_meta_path(s, sha).read_text()) if staged_meta_path(s, sha).exists() \
        else {}
    for name in RAW_TABLES:
        md = {"dagster/row_count": dg.MetadataValue.int(rows[name])}
        if name == "files":
            md.update({
                "path": dg.MetadataValue.path(result.path),
                "status": result.status,
                "source_format": result.source_format or "",
                "series": meta.get("series", ""),
                "label": meta.get("label", ""),
                "captured_at": meta.get("captured_at", ""),
                "runs_ingested": dg.MetadataValue.int(total),
                "seconds": dg.MetadataValue.float(round(result.seconds, 3)),
                "ingested_at": dg.MetadataValue.timestamp(
                    dt.datetime.now(dt.UTC).timestamp()),
            })
        yield dg.MaterializeResult(asset_key=raw_key(name), metadata=md)
