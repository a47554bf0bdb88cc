"""Schedules: refresh the models after new partitions, and validate everything daily.

Both are STOPPED by default (tests and a plain ``dagster dev`` never fire them); ``make ui``
starts them (``PWH_AUTOMATION=on``), and the UI's Automation page can toggle them.

``refresh_models`` (every 5 minutes) requests a run of the staging models and marts only when
raw partitions were materialised since the last staging build *by runs that succeeded*, i.e.
whose blocking raw checks passed. A partition whose blocking check failed never triggers a
build; while nothing new and good has arrived, a failing staging check is not retried
automatically either, so marts are never rebuilt from a run the checks refused.
"""

import dagster as dg
from dagster import DagsterRunStatus, RunsFilter

from pipelines.jobs import full_validation_job, refresh_job
from pipelines.raw import raw_key
from pipelines.sensors import automation_status

REFRESH_CRON = "*/5 * * * *"
VALIDATION_CRON = "30 5 * * *"


def _latest_storage_id(instance, key: dg.AssetKey) -> int:
    records = instance.fetch_materializations(key, limit=1).records
    return records[0].storage_id if records else 0


def refresh_request(instance, staging_keys: list[dg.AssetKey]) -> dg.RunRequest | dg.SkipReason:
    """What the refresh schedule does on a tick (separate so tests can call it directly)."""
    watermark = min((_latest_storage_id(instance, k) for k in staging_keys), default=0)
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=raw_key("files"), after_storage_id=watermark),
        limit=10_000).records
    if not records:
        return dg.SkipReason("no raw partition materialised since the last staging build")
    runs = {r.dagster_run.run_id: r.dagster_run.status for r in instance.get_run_records(
        RunsFilter(run_ids=list({r.run_id for r in records})))}
    good = [r for r in records if runs.get(r.run_id) == DagsterRunStatus.SUCCESS]
    done = [r for r in records if runs.get(r.run_id) in (DagsterRunStatus.SUCCESS,
                                                           DagsterRunStatus.FAILURE)]
    if not good:
        if len(done) < len(records):
            return dg.SkipReason("new raw partitions are still being ingested or checked")
        keys = ", ".join(sorted({(r.partition_key or "")[:12] for r in records}))
        return dg.SkipReason(
            f"{len(records)} raw partition(s) materialised since the last build, but their "
            f"runs failed (blocking checks or ingestion): {keys}; models are not rebuilt from them")
    newest = max(r.storage_id for r in good)
    return dg.RunRequest(
        run_key=f"refresh-after-{newest}",
        tags={"pwh/new_partitions": str(len({r.partition_key for r in good}))},
    )


def build_refresh_schedule(staging_keys: list[dg.AssetKey]) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="refresh_models_schedule",
        cron_schedule=REFRESH_CRON,
        job=refresh_job,
        default_status=automation_status(dg.DefaultScheduleStatus),
        description="Every 5 minutes: rebuild staging and marts if raw partitions were ingested "
        "(and passed their blocking checks) since the last build; otherwise skip, saying why.",
    )
    def refresh_models_schedule(context: dg.ScheduleEvaluationContext):
        return refresh_request(context.instance, staging_keys)

    return refresh_models_schedule


full_validation_schedule = dg.ScheduleDefinition(
    name="full_validation_schedule",
    cron_schedule=VALIDATION_CRON,
    job=full_validation_job,
    default_status=automation_status(dg.DefaultScheduleStatus),
    description="Daily at 05:30: re-validate every run against every suite and rebuild the "
    "models, so statuses that changed (cross-run invariants, fixed suites) reach the marts.",
)
