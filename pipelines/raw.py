"""Raw layer: one dynamic partition per run file, keyed by the file's SHA-256."""


import dagster as dg

from warehouse.landing import ingest_staged

from .resources import WarehouseResource

run_files = dg.DynamicPartitionsDefinition(name="run_files")

# Every asset that writes the DuckDB file takes this pool; dagster.yaml limits it to 1.
WRITER_POOL = "duckdb_writer"


@dg.asset(
    key=dg.AssetKey(["raw", "files"]),
    partitions_def=run_files,
    group_name="raw",
    kinds={"duckdb", "python"},
    pool=WRITER_POOL,
    description="Raw files ingested losslessly, atomically and idempotently into the raw.* "
    "tables (manifest raw.files plus one table per entity). Partition key = SHA-256 of the file.",
)
def raw_files(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    sha = context.partition_key
    result = ingest_staged(warehouse.settings, sha)
    if result.status == "failed":
        raise dg.Failure(
            description=result.message,
            metadata={"path": result.path, "quarantine": str(result.quarantine_path)},
        )
    context.log.info(f"{result.path}: {result.message}")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(result.path),
        "status": result.status,
        "source_format": result.source_format or "",
        **{k: dg.MetadataValue.int(v) for k, v in result.counts.items()},
        "seconds": dg.MetadataValue.float(round(result.seconds, 3)),
    })
