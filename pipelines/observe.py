"""The warehouse sensor: work done outside Dagster shows in the UI within one tick.

``pwh ingest``, ``pwh check``, ``pwh build`` and the Python API write the warehouse without
Dagster. Every ``PWH_OBSERVE_TICK_S`` seconds (default 15) this sensor asks the warehouse what
changed since its last look (``warehouse.serving.activity.peek``: read-only, only when the file
changed, never while a writer holds it) and reports it to the instance as runless events:

* a run ingested outside Dagster becomes a partition of the raw layer, materialised on every
  raw asset (row counts, 0 for the other format's tables; file name, series, label,
  ``reported_from``);
* a validation recorded in ``checks.results`` becomes check evaluations, one per suite over
  the runs validated (skipped for a run whose validation a Dagster run of this instance
  recorded itself);
* a model built outside Dagster (``meta.model_builds``) becomes a materialisation of its asset,
  unless Dagster's own latest materialisation is newer.

The cursor holds three watermarks (ingested, validated, built) and the file's signature. A new
instance (or a reset cursor) reports the warehouse's whole history once.
"""

import datetime as dt
import json
import os
from collections import defaultdict

import dagster as dg

from pipelines.checks import check_evaluation
from pipelines.models import table_key
from pipelines.raw import (
    KEY_HASH_LEN,
    PARTITIONS_NAME,
    RAW_TABLES,
    key_prefix,
    partition_key,
    raw_key,
)
from pipelines.refresh import REPORTED_KEY
from pipelines.resources import WarehouseResource
from pipelines.sensors import automation_status
from warehouse import checks as wchecks
from warehouse.serving import activity

TICK_SECONDS = int(os.environ.get("PWH_OBSERVE_TICK_S", "15"))
RAW_RUN_COLUMNS = {t: ("sha256" if t == "files" else "run_id") for t in RAW_TABLES}
REPORTED = "warehouse (pwh CLI or Python API)"


def _ts(when: dt.datetime) -> float:
    return when.replace(tzinfo=dt.UTC).timestamp() if when.tzinfo is None else when.timestamp()


def _load(cursor: str | None) -> dict:
    try:
        data = json.loads(cursor or "{}")
    except ValueError:
        data = {}
    return data if data.get("v") == 1 else {}


def _when(data: dict, key: str) -> dt.datetime:
    return dt.datetime.fromisoformat(data[key]) if data.get(key) else activity.EPOCH


def _raw_events(act: activity.Activity, materialized: set[str], existing: dict[str, str]
                ) -> tuple[list, list[str]]:
    """``materialized``: SHA-256 prefixes of the materialised partitions; ``existing``: prefix ->
    partition key of every partition (a run keeps the key it has, old 64-digit ones too)."""
    events, keys = [], []
    for run in act.runs:
        sha = run["sha256"]
        if sha[:KEY_HASH_LEN] in materialized:
            continue  # ingested by a Dagster run, which reported it already
        key = existing.get(sha[:KEY_HASH_LEN]) or partition_key(sha, run["file_name"])
        keys.append(key)
        rows = act.rows.get(sha, {})
        for name in RAW_TABLES:
            md = {REPORTED_KEY: REPORTED}
            if name != "files":  # one row per partition: "Row count 1" would mislead
                md["dagster/row_count"] = dg.MetadataValue.int(rows.get(name, 0))
            if name == "files":
                md.update({"file_name": run["file_name"], "sha256": sha,
                           "path": dg.MetadataValue.path(run["original_path"]),
                           "source_format": run["source_format"], "series": run["series"],
                           "label": run["label"], "captured_at": str(run["captured_at"]),
                           "ingested_at": dg.MetadataValue.timestamp(_ts(run["ingested_at"]))})
            events.append(dg.AssetMaterialization(asset_key=raw_key(name), partition=key,
                                                  description=run["file_name"], metadata=md))
    return events, keys


def _dagster_validated(instance, runs: list[str]) -> dict[str, float]:
    """Per run (SHA-256): when a Dagster run last materialised its partition (its checks ran
    just before)."""
    if not runs:
        return {}
    existing = {key_prefix(k): k for k in instance.get_dynamic_partitions(PARTITIONS_NAME)}
    by_key = {existing[r[:KEY_HASH_LEN]]: r for r in runs if r[:KEY_HASH_LEN] in existing}
    if not by_key:
        return {}
    recs = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=raw_key("files"), asset_partitions=list(by_key)),
        limit=10 * len(by_key)).records
    out: dict[str, float] = {}
    for r in recs:
        if r.run_id and REPORTED_KEY not in (r.asset_materialization.metadata or {}):
            sha = by_key.get(r.partition_key)
            if sha:
                out[sha] = max(out.get(sha, 0.0), r.timestamp)
    return out


def _check_events(instance, act: activity.Activity) -> list:
    """One evaluation per suite, over the runs validated outside Dagster since the last look."""
    suites = {s.name: s for s in wchecks.load_suites()}
    by_dagster = _dagster_validated(instance, sorted({r.run_id for r in act.results}))
    per_suite: dict[str, list] = defaultdict(list)
    for r in act.results:
        if r.suite not in suites:
            continue  # a suite removed since
        if by_dagster.get(r.run_id, 0.0) >= _ts(r.validated_at):
            continue  # a Dagster run validated it and reported the outcome itself
        per_suite[r.suite].append(r)
    return [check_evaluation(suites[name], res, partition=None,
                             runs_validated=len({r.run_id for r in res}))
            for name, res in sorted(per_suite.items())]


def _model_events(instance, act: activity.Activity) -> list:
    events = []
    for model, built in sorted(act.builds.items()):
        key = table_key(model)
        latest = instance.get_latest_materialization_event(key)
        if latest is not None and latest.timestamp >= _ts(built):
            continue  # Dagster built it (or already heard of this build)
        md = {REPORTED_KEY: REPORTED,
              "built_at": dg.MetadataValue.timestamp(_ts(built))}
        if model in act.models:
            md["dagster/row_count"] = dg.MetadataValue.int(act.models[model])
        events.append(dg.AssetMaterialization(asset_key=key, metadata=md,
                                              description="built outside Dagster"))
    return events


def observe(instance, settings, cursor: str | None) -> dg.SensorResult | dg.SkipReason:
    """One tick (separate from the decorator so tests can call it)."""
    data = _load(cursor)
    sig = activity.file_signature(settings)
    if sig is None:
        return dg.SkipReason(f"no warehouse at {settings.warehouse} yet")
    if sig == data.get("sig"):
        return dg.SkipReason("the warehouse has not changed since the last look")
    act = activity.peek(settings, _when(data, "ingested"), _when(data, "validated"),
                        _when(data, "built"), RAW_RUN_COLUMNS)
    if act is None:
        return dg.SkipReason("the warehouse is being written; looking again next tick")
    materialized = {key_prefix(k) for k in instance.get_materialized_partitions(
        raw_key("files"))} if act.runs else set()
    existing = {key_prefix(k): k for k in instance.get_dynamic_partitions(PARTITIONS_NAME)
                } if act.runs else {}
    raw_events, new_keys = _raw_events(act, materialized, existing)
    events = raw_events + _check_events(instance, act) + _model_events(instance, act)
    add = [k for k in new_keys if k not in set(existing.values())]
    new_cursor = json.dumps({"v": 1, "sig": sig, "ingested": act.ingested_at.isoformat(),
                             "validated": act.validated_at.isoformat(),
                             "built": act.built_at.isoformat()})
    return dg.SensorResult(
        asset_events=events, cursor=new_cursor,
        dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest(PARTITIONS_NAME, add)]
        if add else [],
        skip_reason=None if events else dg.SkipReason("nothing done outside Dagster"))


@dg.sensor(
    name="warehouse_sensor",
    minimum_interval_seconds=TICK_SECONDS,
    default_status=automation_status(dg.DefaultSensorStatus),
    description="Reports work done outside Dagster (pwh ingest / check / build, the Python "
    "API) as runless events: new runs become raw partitions with their materialisations and "
    "check results, models built become materialisations. Reads the warehouse read-only and "
    "only when nobody is writing it.",
)
def warehouse_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    result = observe(context.instance, warehouse.settings, context.cursor)
    if isinstance(result, dg.SkipReason):
        return dg.SensorResult(skip_reason=result, cursor=context.cursor)
    return result
