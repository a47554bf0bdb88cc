"""Shared by the Spark test modules: a lake with the example runs, a small generated history,
a generated Kineto trace history (gzip too), a generated Nsight Compute export history and, when ``../shared/samples`` is there, real
traces of every trace tool; every model built on DuckDB then on Spark over it, tables
compared, and every model's table must have rows (an empty table proves nothing)."""

from __future__ import annotations

import os

from tests.lake.compare import diff
from warehouse.config import settings
from warehouse.lake.catalog import LakeConfig, open_catalog
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


def model_tables(cat) -> dict:
    return {n: read_table(cat, n) for n in models.load_project().order}


def assert_spark_equals_duckdb(sp, cfg: LakeConfig) -> None:
    from warehouse.lake import duck, spark

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
    spark.build(sp, cat)
    on_spark = model_tables(cat)
    problems = [p for n in on_duckdb for p in diff(n, on_duckdb[n], on_spark[n])]
    assert not problems, "\n".join(problems)
