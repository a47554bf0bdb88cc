"""marts.hta_temporal_breakdown and marts.hta_kernel_type_breakdown equal HolisticTraceAnalysis
0.5's own ``get_temporal_breakdown`` and kernel-type breakdown (``get_gpu_kernel_breakdown``),
run as the independent reference on every real Kineto sample (``../shared/samples/kineto/``)
and on generated traces. A trace HTA cannot break down (it raises) has no row in the marts.
Skipped where HTA is not installed (``pip install holistictraceanalysis``, the ``dev`` extra)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from tests.conftest import ROOT
from warehouse import db
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen
from warehouse.modelling import models

hta_analysis = pytest.importorskip("hta.trace_analysis")

SAMPLES = ROOT.parent / "shared" / "samples" / "kineto"
SAMPLE_FILES = sorted(SAMPLES.glob("*.json.gz")) if SAMPLES.is_dir() else []
COLUMNS = ("idle_time_us", "compute_time_us", "non_compute_time_us", "kernel_time_us",
           "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg")
HTA_COLUMNS = ("idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)",
               "idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg")


def _inputs(folder: Path) -> list[Path]:
    out = []
    for seed, relative, steps in ((5, False, 4), (6, True, 5), (7, True, 1)):
        f = folder / f"gen{seed}.pt.trace.json"
        # correlation ids of real size: HTA 0.5 under pandas 3 fails on ids that fit an int8
        # (transform_correlation_to_index assigns row numbers into a downcast column)
        kineto_gen.write_file(f, steps=steps, seed=seed, relative=relative, rank=seed,
                              first_correlation=1_000_000)
        out.append(f)
    return out + SAMPLE_FILES


def _hta(path: Path, work: Path):
    """HTA's two breakdowns of one trace, or None where HTA raises."""
    d = work / path.name.replace(".", "_")
    d.mkdir()
    (d / path.name).symlink_to(path)
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ta = hta_analysis.TraceAnalysis(trace_dir=str(d))
            temporal = ta.get_temporal_breakdown(visualize=False)
            types, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    except Exception:  # noqa: BLE001 - HTA's own failure: "cannot compute it"
        return None
    finally:
        logging.disable(logging.NOTSET)
    [row] = temporal.to_dict("records")
    return ({c: float(row[h]) for c, h in zip(COLUMNS, HTA_COLUMNS, strict=True)},
            {r["kernel_type"]: (float(r["sum"]), float(r["percentage"]))
             for r in types.to_dict("records") if r["sum"] != 0})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from warehouse.config import settings

    root = tmp_path_factory.mktemp("hta")
    s = settings(root / "state" / "warehouse.duckdb")
    files = _inputs(root)
    results = loader.ingest_paths(s, files)
    assert [r.status for r in results] == ["ingested"] * len(files), [r.message for r in results]
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, {Path(r.path).name: (Path(r.path), r.sha256) for r in results}, root
    con.close()


NAMES = ["gen5.pt.trace.json", "gen6.pt.trace.json", "gen7.pt.trace.json"] + [
    f.name for f in SAMPLE_FILES]


@pytest.mark.parametrize("name", NAMES, ids=lambda n: n[:40])
def test_hta_breakdowns_equal_hta_itself(built, name, tmp_path):
    con, runs, _ = built
    path, run_id = runs[name]
    want = _hta(path, tmp_path)
    got = con.execute(f"select {', '.join(COLUMNS)} from marts.hta_temporal_breakdown "  # noqa: S608
                      "where run_id = ?", [run_id]).fetchall()
    types = {k: (s, p) for k, s, p in con.execute(
        "select kernel_type, sum_us, percentage from marts.hta_kernel_type_breakdown "
        "where run_id = ?", [run_id]).fetchall()}
    if want is None:  # HTA cannot break this trace down (no GPU event it keeps)
        assert got == [] and types == {}
        return
    assert [dict(zip(COLUMNS, got[0], strict=True))] == [want[0]]
    assert types == want[1]


def test_the_samples_hta_computes_are_compared(built, tmp_path):
    """Not a vacuous pass: most samples and every generated multi-step trace have HTA rows."""
    con, runs, _ = built
    n = con.execute("select count(*) from marts.hta_temporal_breakdown").fetchone()[0]
    assert n >= 2 + (len(SAMPLE_FILES) // 2)
