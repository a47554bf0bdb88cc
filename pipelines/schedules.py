"""Schedules: refresh the models after new partitions, and validate everything daily.

Both are STOPPED by default (tests and a plain ``dagster dev`` never fire them); ``make ui``
starts them (``PWH_AUTOMATION=on``), and the UI's Automation page can toggle them.

``refresh_models`` (every 5 minutes) is the fallback of the landing sensor, which requests the
same refresh on its own ticks: a run of the staging models and marts only when raw partitions
whose blocking raw checks passed arrived since the last refresh (``pipelines/refresh.py``). A
partition whose blocking check failed never triggers a build; while nothing new and good has
arrived, a failing staging check is not retried automatically either, so marts are never
rebuilt from a run the checks refused.
"""

import dagster as dg

from pipelines.jobs import full_validation_job, refresh_job
from pipelines.refresh import refresh_request
from pipelines.sensors import automation_status

REFRESH_CRON = "*/5 * * * *"
VALIDATION_CRON = "30 5 * * *"


def build_refresh_schedule() -> dg.ScheduleDefinition:
    @dg.schedule(
        name="refresh_models_schedule",
        cron_schedule=REFRESH_CRON,
        job=refresh_job,
        default_status=automation_status(dg.DefaultScheduleStatus),
        description="Every 5 minutes: rebuild staging and marts if raw partitions were ingested "
        "(and passed their blocking checks) since the last build; otherwise skip, saying why.",
    )
    def refresh_models_schedule(context: dg.ScheduleEvaluationContext):
        return refresh_request(context.instance)

    return refresh_models_schedule


full_validation_schedule = dg.ScheduleDefinition(
    name="full_validation_schedule",
    cron_schedule=VALIDATION_CRON,
    job=full_validation_job,
    default_status=automation_status(dg.DefaultScheduleStatus),
    description="Daily at 05:30: re-validate every run against every suite and rebuild the "
    "models, so statuses that changed (cross-run invariants, fixed suites) reach the marts.",
)
