"""The jobs automation launches: one per kind of work, so runs are easy to read in the UI."""

import dagster as dg

from pipelines.raw import RAW_SPECS

# One run per landing-sensor tick: the raw tables of every new partition (file); the raw checks
# run inside the same op (one validation for the batch), not as a step of their own.
ingest_job = dg.define_asset_job(
    name="ingest_file",
    selection=dg.AssetSelection.assets(*[s.key for s in RAW_SPECS]).without_checks(),
    description="Ingest the run files of one landing-sensor tick (one partition of the raw "
    "layer per file, listed in the run's config) and validate them against the raw suites "
    "(the raw asset checks). Run key derived from the files' SHA-256s.",
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
