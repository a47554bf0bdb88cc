"""Dagster definitions of Profile Warehouse (``dagster dev -m pipelines.definitions``).

The graph: ``raw/*`` (one dynamic partition per run file) -> ``staging/*`` -> ``marts/*``, one
asset per SQL model under ``sql/`` with dependencies parsed from the SQL, asset checks generated
from the expectation suites, ``checks/run_status`` for the full validation. Every run executes
in one process (``in_process_executor``): the writer pool serialises DuckDB writes anyway, and
one process per run keeps runs cheap.
"""

import os
from pathlib import Path

import dagster as dg

from pipelines import checks, jobs, observe, schedules, sensors
from pipelines.models import build_model_assets
from pipelines.raw import RAW_SPECS, raw_files
from pipelines.report import report
from pipelines.resources import ValidationResource, WarehouseResource
from pipelines.snapshot import snapshot_asset
from warehouse.modelling.models import SQL_DIR


def build_definitions(warehouse: str = "", landing: str = "",
                      sql_root: Path = SQL_DIR) -> dg.Definitions:
    """The code location; ``warehouse``/``landing`` override ``$PWH_WAREHOUSE``/``$PWH_LANDING``."""
    model_assets, external = build_model_assets(sql_root)
    keys = {s.key for s in RAW_SPECS} | {a.key for a in model_assets} | {checks.RUN_STATUS_KEY}
    external = [s for s in external if s.key not in keys]
    publish = snapshot_asset([a.key for a in model_assets])
    return dg.Definitions(
        assets=[raw_files, checks.run_status, *model_assets, *external, publish, report],
        asset_checks=checks.build_asset_checks(keys),
        jobs=[jobs.ingest_job, jobs.refresh_job, jobs.full_validation_job],
        sensors=[sensors.landing_sensor, observe.warehouse_sensor],
        schedules=[schedules.build_refresh_schedule(),
                   schedules.full_validation_schedule],
        resources={"warehouse": WarehouseResource(path=warehouse, landing=landing),
                   "validation": ValidationResource()},
        executor=dg.in_process_executor,
    )


# PWH_BACKEND=lake: the lake configuration of the same graph (pipelines/lake.py)
if os.environ.get("PWH_BACKEND") == "lake":
    from pipelines.lake import build_lake_definitions

    defs = build_lake_definitions()
else:
    defs = build_definitions()
