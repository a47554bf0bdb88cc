"""The lake configuration of the Dagster definitions (``PWH_BACKEND=lake``).

The same graph over the same code: the raw assets keep their keys and their dynamic partitions
(one per run file, keyed by SHA-256), the models keep their keys and the dependencies the runner
parses from the SQL. What changes is the resource and the rules that the single DuckDB file
imposed:

* ``LakeResource`` replaces the DuckDB file: catalog URI, warehouse location, and the engine the
  models run on (``duckdb``, or ``spark`` with a master URL: ``local[2]``, ``spark://…`` or a
  Spark Connect ``sc://…``); defaults ``$PWH_LAKE_CATALOG``, ``$PWH_LAKE_LOCATION``,
  ``$PWH_LAKE_ENGINE``, ``$PWH_SPARK_MASTER``.
* Ingestion has no single-writer pool: runs ingest in parallel, each file one exactly-once
  Iceberg commit (``warehouse.lake.commit``). A commit that still conflicts after its own
  retries fails the op with ``LakeCommitRetry``, which the op's retry policy retries; the jobs
  also carry run-retry tags (honoured when the instance enables ``run_retries``,
  deploy/dagster-lake.yaml).
* The models are one multi-asset (subsettable) that runs ``pwh lake build`` on the chosen engine.

Executors for production (Kubernetes, Celery) are configured by the deployment, not here:
deploy/ holds validated samples and docs/scale-out.md explains them.
"""

import os

import dagster as dg

from pipelines.raw import RAW_SPECS, raw_key, run_files
from warehouse.config import settings as wh_settings
from warehouse.modelling.models import SQL_DIR, load_project

RETRY = dg.RetryPolicy(max_retries=5, delay=0.5, backoff=dg.Backoff.EXPONENTIAL,
                       jitter=dg.Jitter.PLUS_MINUS)
RUN_RETRY_TAGS = {"dagster/max_retries": "3", "dagster/retry_strategy": "FROM_FAILURE"}


class LakeCommitRetry(Exception):
    """A lake commit still conflicted after its own retries: retry the op."""


class LakeResource(dg.ConfigurableResource):
    """Where the lake is and where its models run. Empty fields fall back to the environment."""

    catalog: str = ""
    location: str = ""
    warehouse: str = ""  # the DuckDB warehouse whose state folder holds the default lake
    engine: str = ""  # duckdb | spark
    spark_master: str = ""

    @property
    def settings(self):
        return wh_settings(self.warehouse or os.environ.get("PWH_WAREHOUSE") or None)

    @property
    def config(self):
        from warehouse.lake.catalog import resolve

        return resolve(self.settings, self.catalog or None, self.location or None)

    @property
    def model_engine(self) -> str:
        return self.engine or os.environ.get("PWH_LAKE_ENGINE", "duckdb")


LAKE_RAW_SPECS = [s.replace_attributes(kinds={"iceberg", "python"}) for s in RAW_SPECS]


@dg.multi_asset(
    name="lake_raw_files",
    specs=LAKE_RAW_SPECS,
    retry_policy=RETRY,
    description="Ingest one staged run file into the lake's raw tables: one exactly-once "
    "Iceberg commit across every raw table; no writer pool, runs ingest in parallel.",
)
def lake_raw_files(context: dg.AssetExecutionContext, lake: LakeResource):
    from warehouse.lake.catalog import LakeError, open_catalog
    from warehouse.lake.ingest import ingest_staged, prepare

    cfg = lake.config
    cat = open_catalog(cfg)
    prepare(cat)
    try:
        r = ingest_staged(lake.settings, cat, cfg, context.partition_key,
                          on_retry=lambda n, why: context.log.info(f"commit retry {n}: {why}"))
    except LakeError as exc:
        if "still conflicting" in str(exc):
            raise LakeCommitRetry(str(exc)) from exc
        raise
    if r.status == "failed":
        raise dg.Failure(description=r.message, metadata={"path": r.path})
    context.log.info(f"{r.path}: {r.message}")
    for spec in LAKE_RAW_SPECS:
        md = {"status": r.status} if spec.key == raw_key("files") else {}
        yield dg.MaterializeResult(asset_key=spec.key, metadata=md)


def lake_model_assets(sql_root=SQL_DIR):
    """One subsettable multi-asset over every model, dependencies from the runner."""
    project = load_project(sql_root)
    raw_keys = {s.key for s in RAW_SPECS}

    def key(name: str) -> dg.AssetKey:
        return dg.AssetKey(name.split("."))

    specs = []
    for n in project.order:
        m = project.models[n]
        deps = [key(d) for d in m.deps if key(d) in raw_keys or d in project.models]
        specs.append(dg.AssetSpec(key(n), deps=deps, group_name=m.schema,
                                  kinds={"iceberg", "sql"}, skippable=True,
                                  description=f"`{n}` in the lake: {m.purpose}"))

    @dg.multi_asset(name="lake_models", specs=specs, can_subset=True, retry_policy=RETRY)
    def lake_models(context: dg.AssetExecutionContext, lake: LakeResource):
        from warehouse.lake.build import build

        selected = [".".join(k.path) for k in context.selected_asset_keys]
        results = build(lake.config, engine=lake.model_engine,
                        master=lake.spark_master or None, select=selected)
        for r in results:
            if key(r.model) in context.selected_asset_keys:
                yield dg.MaterializeResult(asset_key=key(r.model), metadata={
                    "dagster/row_count": dg.MetadataValue.int(r.rows),
                    "engine": lake.model_engine})

    return lake_models


def executor():
    """``$PWH_DAGSTER_EXECUTOR``: ``multiprocess`` (default), ``k8s`` (dagster-k8s's
    k8s_job_executor) or ``celery`` (dagster-celery's celery_executor); deploy/ has samples."""
    name = os.environ.get("PWH_DAGSTER_EXECUTOR", "multiprocess")
    if name == "multiprocess":
        return dg.multiprocess_executor
    try:
        if name == "k8s":
            from dagster_k8s import k8s_job_executor

            return k8s_job_executor
        if name == "celery":
            from dagster_celery import celery_executor

            return celery_executor
    except ImportError as exc:
        raise dg.DagsterInvariantViolationError(
            f"PWH_DAGSTER_EXECUTOR={name} needs its package in the image: {exc}") from None
    raise dg.DagsterInvariantViolationError(
        f"PWH_DAGSTER_EXECUTOR={name!r}: multiprocess, k8s or celery")


def build_lake_definitions(sql_root=SQL_DIR) -> dg.Definitions:
    models = lake_model_assets(sql_root)
    ingest = dg.define_asset_job(
        "lake_ingest_file", selection=dg.AssetSelection.assets(*[s.key for s in RAW_SPECS]),
        tags=RUN_RETRY_TAGS,
        description="Ingest one run file into the lake (parallel runs, exactly-once commits).")
    refresh = dg.define_asset_job(
        "lake_refresh_models", selection=dg.AssetSelection.assets(models), tags=RUN_RETRY_TAGS,
        description="Build every model over the lake on the configured engine.")
    return dg.Definitions(
        assets=[lake_raw_files, models],
        jobs=[ingest, refresh],
        resources={"lake": LakeResource()},
        executor=executor(),
    )


__all__ = ["LakeResource", "build_lake_definitions", "run_files"]
