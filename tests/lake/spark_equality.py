"""Shared by the Spark test modules: a lake with the example runs, a small generated history,
a generated Kineto trace history (gzip too), a generated Nsight Compute export history and, when
``../shared/samples`` is there, real traces of every trace tool; every model built on DuckDB over
it once per session (every model's table must have rows: an empty table proves nothing), then
on each Spark deployment, tables compared.

What each deployment builds:

* ``local[2]`` (test_lake_spark_local): every model. It proves the models' Spark SQL (sqlglot's
  transpilation and the overrides) computes what DuckDB computes, model by model.
* the standalone cluster and Spark Connect: :func:`deployment_models`, the upstream of
  :data:`DEPLOYMENT_MODELS` (8 models; a third of the full build's time). The
  SQL each model runs is the same text on every deployment, parsed, planned and executed by the
  same Spark version, so what those tests add is what differs between deployments, and the
  reduced set goes through all of it: the session (``sc://`` or classic), the source views
  (every raw/checks table read by the executors or the server, the empty ``checks.results``
  made with ``createDataFrame``, ``checks__run_status``), every registered Python UDF run in
  the deployment's own Python workers (``pwh_kernel_name`` and ``pwh_kernel_family`` on
  strings, ``pwh_judge_series`` on arrays of structs; the workers import ``warehouse``
  themselves), joins, aggregates and windows shuffled between executors, models reading models
  built before them on the same deployment, a model with a Spark override, and each result
  written by the executors as Parquet then committed to the lake. :func:`deployment_models`
  fails when a UDF is added that the reduced set does not call.
"""

from __future__ import annotations

import os

from tests.lake.compare import diff
from warehouse.config import settings
from warehouse.lake import dialect
from warehouse.lake.catalog import LakeConfig, open_catalog, table_ident
from warehouse.lake.ingest import ingest_paths
from warehouse.lake.tables import read_table
from warehouse.modelling import models

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "samples"
# small real files of each trace tool: events (Kineto, rocprof), per-kernel summaries (nsys)
SAMPLE_FILES = ("kineto/hta__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                "kineto/hta__triton_example__triton_example.json.gz",
                "rocprof/omniperf__multikernel__MI200__timestamps.csv",
                "rocprof/jacc__results.json",
                "nsys_stats_csv/dsocr__scripts_example__summary_cuda_gpu_kern_sum.csv")


def trace_files(tmp) -> list:
    """A Kineto history (5 labels x 3 runs, one gzip-compressed, a planted change: enough runs
    for rank tests, so the verdict columns min_detectable_pct and runs_needed have values)
    plus the shared samples that are present."""
    import gzip

    from warehouse.ingesting.formats import kineto_gen

    folder = tmp / "traces"
    kineto_gen.write_history(folder, labels=5, repeats=3, plant_at=3)
    first = next(iter(sorted(folder.rglob("*.pt.trace.json"))))
    gz = first.with_name(first.name + ".gz")
    gz.write_bytes(gzip.compress(first.read_bytes(), mtime=0))
    first.with_name(first.name + ".meta.json").rename(gz.with_name(gz.name + ".meta.json"))
    first.unlink()
    from warehouse import trace_scenarios

    job = tmp / "trace-job"  # jobs of 3 rank files: trace_trends' step_time per rank ('rank N')
    trace_scenarios.generate(job, trace_scenarios.spec("trace-straggler", 1, labels=4, repeats=2,
                                                       ranks=3, steps=2, plant_at=2))
    from warehouse.ingesting.formats import ncu_gen

    ncu = tmp / "ncu"  # Nsight Compute exports: kernel_metrics, metric_trends, ncu_launches
    ncu_gen.write_history(ncu, labels=5, repeats=2, plant_at=3)
    return [folder, job / "runs", ncu,
            *(SAMPLES / f for f in SAMPLE_FILES if (SAMPLES / f).exists())]


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
                                                          hist / "runs", *trace_files(tmp)])
    assert res and all(r.status == "ingested" for r in res), [r.message for r in res]
    return cfg


# the models the standalone cluster and Spark Connect build: their upstream goes through every
# code path that differs between deployments (see the module's docstring)
DEPLOYMENT_MODELS = ("marts.kernel_trends",)


def model_tables(cat, names=None) -> dict:
    return {n: read_table(cat, n) for n in (names or models.load_project().order)}


def duckdb_tables(cfg: LakeConfig) -> dict:
    """Every model built on DuckDB over the lake, as Arrow tables (the reference every Spark
    deployment is compared with); each has rows, and the columns that need a trace history,
    a run history long enough for rank tests and a job of rank files have values."""
    from warehouse.lake import duck

    cat = open_catalog(cfg)
    duck.build(cat)
    on_duckdb = model_tables(cat)
    empty = [n for n, t in on_duckdb.items() if t.num_rows == 0]
    assert not empty, f"models without rows prove nothing: {empty}"
    trends = on_duckdb["marts.kernel_trends"]
    assert "trace_kernel/kineto_trace" in set(trends["kernel_kind"].to_pylist())
    for col in ("min_detectable_pct", "runs_needed", "confirmed_by_label"):
        assert set(trends[col].to_pylist()) - {None}, f"kernel_trends.{col} is all NULL"
    assert {k for k in on_duckdb["marts.trace_trends"]["key"].to_pylist()
            if k.startswith("rank ")}, "trace_trends has no step_time per rank: no job of ranks"
    steps = on_duckdb["marts.step_times"]  # the trace-job folders are jobs in the lake too
    assert set(steps["job"].to_pylist()) - {None}, "marts.step_times has no job: lake ingest " \
        "recorded no raw.trace_jobs for the folders of rank files"
    return on_duckdb


def deployment_models() -> list[str]:
    """The upstream of :data:`DEPLOYMENT_MODELS`, checked to still call every Python function
    registered on Spark, to hold a model with a Spark override and models reading models."""
    from warehouse.lake import spark

    project = models.load_project()
    names = project.upstream(DEPLOYMENT_MODELS)
    called = set().union(*(dialect.python_functions(project.models[n]) for n in names))
    assert called == set(spark.functions()), \
        f"the reduced set calls {sorted(called)}, not every UDF: {sorted(spark.functions())}"
    assert any(dialect.override_path(project.models[n]).exists() for n in names)
    assert any(set(project.models[n].deps) & set(names) for n in names)
    return names


def assert_spark_equals_duckdb(sp, cfg: LakeConfig, on_duckdb: dict, names=None) -> None:
    """``names`` (default: every model) built on Spark session ``sp`` over the lake, each lake
    table then written by Spark, equal to the DuckDB build ``on_duckdb``."""
    from warehouse.lake import spark

    cat = open_catalog(cfg)
    want = list(on_duckdb) if names is None else list(names)
    built = [r.model for r in spark.build(sp, cat, select=None if names is None else want)]
    assert built == want, f"Spark built {built}, not {want}"
    for n in built:
        snap = cat.load_table(table_ident(n)).current_snapshot()
        assert snap is not None and snap.summary["pwh.engine"] == "spark", \
            f"{n}: the lake table's current snapshot was not written by Spark"
    on_spark = model_tables(cat, built)
    problems = [p for n in built for p in diff(n, on_duckdb[n], on_spark[n])]
    assert not problems, "\n".join(problems)
