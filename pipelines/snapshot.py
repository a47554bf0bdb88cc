"""The analysts' snapshot: published atomically after the models are built (docs/operations.md).

Analysts never read the live DuckDB file; ``warehouse.serving.snapshot.publish`` copies it (or updates a
spare snapshot) and swaps the ``current`` pointer in one rename. Dagster skips this asset when a
model upstream fails, which gives "publish after each successful build".
"""

import dagster as dg

from pipelines.raw import WRITER_POOL
from pipelines.resources import WarehouseResource
from warehouse.serving import snapshot

SNAPSHOT_KEY = dg.AssetKey(["snapshot", "current"])


def snapshot_asset(model_keys: list[dg.AssetKey]) -> dg.AssetsDefinition:
    @dg.asset(
        key=SNAPSHOT_KEY,
        deps=model_keys,
        group_name="snapshot",
        kinds={"duckdb", "python"},
        pool=WRITER_POOL,
        description="Read-only snapshot analysts query (`pwh sql`, `pwh shell`, "
        "`warehouse.connect()`), published atomically after the models are built.",
    )
    def analyst_snapshot(context: dg.AssetExecutionContext, warehouse: WarehouseResource
                         ) -> dg.MaterializeResult:
        with warehouse.exclusive(context.log):
            r = snapshot.publish(warehouse.settings)
        context.log.info(r.summary())
        return dg.MaterializeResult(metadata={
            "version": str(r.version), "method": r.method, "reason": r.reason,
            "seconds": dg.MetadataValue.float(round(r.seconds, 3)),
            "bytes": dg.MetadataValue.int(r.bytes),
            "rows_written": dg.MetadataValue.int(sum(r.rows_written.values())),
        })

    return analyst_snapshot
