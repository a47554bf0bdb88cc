"""The lake configuration of the Dagster definitions: same asset keys, no writer pool, retries;
a partition ingested and the models built through Dagster; deploy/ samples validated."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipelines.lake import (
    RUN_RETRY_TAGS,
    LakeResource,
    build_lake_definitions,
    lake_model_assets,
    lake_raw_files,
)
from pipelines.raw import RAW_SPECS, raw_files
from warehouse.lake.catalog import open_catalog
from warehouse.lake.tables import read_table

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def test_same_keys_no_writer_pool_and_retries():
    defs = build_lake_definitions()
    keys = {k for a in defs.assets for k in a.keys}
    assert {s.key for s in RAW_SPECS} <= keys
    assert dg.AssetKey(["marts", "kernel_trends"]) in keys
    assert raw_files.op.pool == "duckdb_writer"  # the DuckDB configuration serialises writers
    assert lake_raw_files.op.pool is None  # the lake's does not
    assert lake_raw_files.op.retry_policy.max_retries >= 3
    for job in ("lake_ingest_file", "lake_refresh_models"):
        assert defs.resolve_job_def(job).tags.items() >= RUN_RETRY_TAGS.items()


def test_ingest_partition_then_models_through_dagster(sqlite_lake, seeds, tmp_path):
    from warehouse.config import settings
    from warehouse.ingesting import landing

    wh = settings(tmp_path / "state" / "warehouse.duckdb")
    lake = LakeResource(catalog=sqlite_lake.uri, location=sqlite_lake.location,
                        warehouse=str(wh.warehouse), engine="duckdb")
    instance = dg.DagsterInstance.ephemeral()
    for f in (seeds["profile"], seeds["audit"]):
        sha = landing.stage(wh, f)
        instance.add_dynamic_partitions("run_files", [sha])
        r = dg.materialize([lake_raw_files], partition_key=sha, instance=instance,
                           resources={"lake": lake})
        assert r.success
    models = lake_model_assets()
    r = dg.materialize([models], instance=instance, resources={"lake": lake},
                       selection=[dg.AssetKey(["staging", "runs"]),
                                  dg.AssetKey(["marts", "run_summary"])])
    assert r.success
    cat = open_catalog(sqlite_lake)
    assert read_table(cat, "marts.run_summary").num_rows == 2
    assert sorted(read_table(cat, "raw.files").column("source_format").to_pylist()) == [
        "conv_audit", "tile_profile"]


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("dagster*.yaml")),
                         ids=lambda p: str(p.relative_to(DEPLOY)))
def test_instance_samples_validate(path, tmp_path):
    """Each instance sample passes Dagster's own dagster.yaml schema (loaded, not run)."""
    from dagster._core.instance.config import dagster_instance_config

    (tmp_path / "dagster.yaml").write_text(path.read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["telemetry"]["enabled"] is False
    assert config["run_retries"]["enabled"] is True


# The executors' config fields (dagster-k8s k8s_job_executor, dagster-celery celery_executor):
# those packages are not installed here, so the samples are checked against these lists.
EXECUTOR_FIELDS = {
    "k8s": {"max_concurrent", "job_namespace", "env_vars", "step_k8s_config", "retries",
            "image_pull_policy", "service_account_name", "load_incluster_config",
            "kubeconfig_file", "tag_concurrency_limits"},
    "celery": {"broker", "backend", "include", "config_source", "retries"},
}


@pytest.mark.parametrize("name", sorted(EXECUTOR_FIELDS))
def test_executor_run_config_samples_validate(name):
    sample = yaml.safe_load((DEPLOY / name / "run_config.yaml").read_text())
    assert set(sample["execution"]["config"]) <= EXECUTOR_FIELDS[name]
    job = build_lake_definitions().resolve_job_def("lake_refresh_models")
    rest = {k: v for k, v in sample.items() if k != "execution"}
    assert dg.validate_run_config(job, rest)["resources"]["lake"]["config"]["engine"] == "spark"
