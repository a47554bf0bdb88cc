"""The jobs automation launches: one per kind of work, so runs are easy to read in the UI."""

import dagster as dg

from pipelines.raw import RAW_SPECS

# One run per landing file: the raw tables of one partition, then the checks on them.
ingest_job = dg.define_asset_job(
    name="ingest_file",
    selection=dg.AssetSelection.assets(*[s.key for s in RAW_SPECS]),
    description="Ingest one run file (one partition of the raw layer) and run the raw checks. "
    "Launched by the landing sensor, one run per new file; run key = the file's SHA-256.",
)

# Staging then marts, each model followed by its checks; blocking checks stop the models below.
refresh_job = dg.define_asset_job(
    name="refresh_models",
    selection=dg.AssetSelection.groups("staging", "marts", "snapshot"),
    description="Rebuild every staging model and mart from all raw partitions, with their "
    "checks, then publish the analysts' snapshot. A failing blocking check (ERROR) on a staging "
    "model stops the marts built on it (and the publish).",
)

# The daily full validation: every run against every suite, then every model, so run statuses
# (a later run can break a cross-run invariant of an earlier one) reach the marts.
full_validation_job = dg.define_asset_job(
    name="full_validation",
    selection=dg.AssetSelection.assets(dg.AssetKey(["checks", "run_status"]))
    | dg.AssetSelection.groups("staging", "marts", "snapshot"),
    description="Re-validate every run against every suite (checks/run_status), then rebuild "
    "and check every model.",
)
