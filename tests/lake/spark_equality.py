"""Shared by the Spark test modules: a lake with the example runs and a small generated
history, every model built on DuckDB then on Spark over it, tables compared."""

from __future__ import annotations

import os

from tests.lake.compare import diff
from warehouse.config import settings
from warehouse.lake.catalog import LakeConfig, open_catalog
from warehouse.lake.ingest import ingest_paths
from warehouse.lake.tables import read_table
from warehouse.modelling import models

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def make_lake(tmp) -> LakeConfig:
    from warehouse import synth

    hist = tmp / "history"
    labels = int(os.environ.get("PWH_LAKE_SPARK_LABELS", 3))
    spec = synth.HistorySpec(labels=labels)  # the demo history at 24 labels
    if labels < 24:
        spec = synth.HistorySpec(labels=labels, repeats=2, plants=())
    synth.generate(hist, spec)
    cfg = LakeConfig(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "lake"))
    res = ingest_paths(settings(tmp / "wh.duckdb"), cfg, [ROOT / "examples" / "runs",
                                                          hist / "runs"])
    assert res and all(r.status == "ingested" for r in res), [r.message for r in res]
    return cfg


def model_tables(cat) -> dict:
    return {n: read_table(cat, n) for n in models.load_project().order}


def assert_spark_equals_duckdb(sp, cfg: LakeConfig) -> None:
    from warehouse.lake import duck, spark

    cat = open_catalog(cfg)
    duck.build(cat)
    on_duckdb = model_tables(cat)
    assert on_duckdb["marts.kernel_trends"].num_rows > 0
    assert on_duckdb["staging.profile_samples"].num_rows > 0
    spark.build(sp, cat)
    on_spark = model_tables(cat)
    problems = [p for n in on_duckdb for p in diff(n, on_duckdb[n], on_spark[n])]
    assert not problems, "\n".join(problems)
