"""When to rebuild the models: after raw partitions that passed their blocking checks arrive.

Shared by the landing sensor (which asks on every tick, so a dropped file reaches the marts
seconds after its ingestion) and the ``refresh_models_schedule`` (a fallback when the sensor is
off). Every ``refresh_models`` run they request is tagged with the newest ``raw/files``
materialisation it covers (``pwh/raw_storage_id``); the next request covers what came after.

A partition counts when its blocking raw checks passed: the batch runs of the landing sensor
record that on the ``raw/files`` materialisation (metadata ``raw_checks``); a run that validated
in its own ``raw_checks`` step (a backfill, a launch from the UI) passed them if it succeeded.
Partitions whose checks failed never trigger a build, and while nothing new and good arrives a
failed refresh is not retried automatically either. Materialisations reported from work done
outside Dagster (``pwh ingest``/``pwh build``, see ``pipelines/observe.py``) never trigger one:
whoever ingested them builds.
"""

import time

import dagster as dg
from dagster import DagsterRunStatus, RunsFilter

from pipelines.raw import raw_key

REFRESH_JOB = "refresh_models"
INGEST_JOB = "ingest_file"
IN_PROGRESS = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
               DagsterRunStatus.STARTED]
MAX_WAIT_S = 60.0
COVERS_TAG = "pwh/raw_storage_id"
REPORTED_KEY = "reported_from"  # metadata of materialisations reported by the warehouse sensor


def covered_watermark(instance) -> int:
    """The newest raw/files storage id the latest refresh_models run covers (0: none yet)."""
    runs = instance.get_runs(RunsFilter(job_name=REFRESH_JOB), limit=1)
    if not runs:
        return 0
    try:
        return int(runs[0].tags.get(COVERS_TAG, "0"))
    except ValueError:
        return 0


def _checks_text(record) -> str | None:
    md = record.asset_materialization.metadata if record.asset_materialization else {}
    v = md.get("raw_checks")
    return getattr(v, "value", v) if v is not None else None


def refresh_request(instance) -> dg.RunRequest | dg.SkipReason:
    """A refresh_models run request if good raw partitions arrived since the last one."""
    watermark = covered_watermark(instance)
    records = [r for r in instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=raw_key("files"), after_storage_id=watermark),
        limit=10_000).records
        if REPORTED_KEY not in (r.asset_materialization.metadata or {})]
    if not records:
        return dg.SkipReason("no raw partition ingested since the last refresh")
    need_status = [r for r in records if not (_checks_text(r) or "").startswith(("passed",
                                                                                  "failed"))]
    status = {r.dagster_run.run_id: r.dagster_run.status for r in instance.get_run_records(
        RunsFilter(run_ids=list({r.run_id for r in need_status})))} if need_status else {}
    good, waiting = [], []
    for r in records:
        text = _checks_text(r) or ""
        if text.startswith("passed"):
            good.append(r)
        elif text.startswith("failed"):
            continue
        elif status.get(r.run_id) == DagsterRunStatus.SUCCESS:
            good.append(r)
        elif status.get(r.run_id) != DagsterRunStatus.FAILURE:
            waiting.append(r)
    if waiting:
        return dg.SkipReason("new raw partitions are still being checked")
    in_flight = instance.get_runs_count(RunsFilter(job_name=INGEST_JOB, statuses=IN_PROGRESS))
    if good and in_flight and time.time() - min(r.timestamp for r in good) < MAX_WAIT_S:
        # its partitions are being recorded right now: one refresh for the whole batch (but
        # never more than MAX_WAIT_S behind, however busy the landing folder is)
        return dg.SkipReason("an ingest_file run is still recording its partitions")
    if not good:
        keys = ", ".join(sorted({r.partition_key or "" for r in records})[:10])
        return dg.SkipReason(
            f"{len(records)} raw partition(s) ingested since the last refresh, but their blocking "
            f"checks (or their runs) failed: {keys}; models are not rebuilt from them")
    newest = max(r.storage_id for r in records)
    return dg.RunRequest(
        run_key=f"refresh-after-{newest}", job_name=REFRESH_JOB,
        tags={COVERS_TAG: str(newest),
              "pwh/new_partitions": str(len({r.partition_key for r in good}))})
