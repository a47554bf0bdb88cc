"""Nsight Systems and rocprof runs through ingest and the SQL models: per-kernel calls and
total ns in ``staging.trace_kernels`` / ``marts.kernel_run_rollup`` equal the samples'
``expected.json`` (and the generators' ground truth), per device too, 0-kernel files are runs
with 0 kernels, and each tool keeps its own trend series."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tests import gen_vendor_traces as gen
from tests.vendor_trace_checks import SAMPLES, expected_sums
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.modelling import models

FOLDERS = ("nsys_sqlite", "nsys_stats_csv", "rocprof")
SAMPLE_FILES = [p for d in FOLDERS if (SAMPLES / d).is_dir()
                for p in sorted((SAMPLES / d).iterdir()) if not p.name.endswith(".expected.json")]
KS = gen.kernels(21, 40)
GENERATED = {
    "report.sqlite": gen.nsys_sqlite(KS),
    "kern_sum.csv": gen.nsys_kern_sum_csv(KS),
    "kernel_trace.csv": gen.rocprof_csv(KS, "v3"),
    "kernel_stats.csv": gen.rocprof_stats_csv(KS, v3=True),
    "results.db": gen.rocprof_results_db(KS),
}
# valid files without a kernel: runs with 0 kernels in the marts
ZERO = {
    "zero_skipped_kern_sum.csv": b"SKIPPED: report1.sqlite does not contain CUDA kernel data.\n",
    "zero_kern_sum.csv": gen.nsys_kern_sum_csv([], preamble=False),
    "zero_timestamps.csv": gen.rocprof_csv([]),
    "zero_kernel_stats.csv": gen.rocprof_stats_csv([], v3=True),
    "zero_report.sqlite": gen.nsys_sqlite([], kernel_table=False),
    "zero_results.db": gen.rocprof_results_db([]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("vendor-models")
    gen_dir = root / "generated"
    gen_dir.mkdir()
    for name, data in {**GENERATED, **ZERO}.items():
        (gen_dir / name).write_bytes(data)
    files = [*SAMPLE_FILES, *sorted(gen_dir.iterdir())]
    s = settings(root / "state" / "warehouse.duckdb")
    results = loader.ingest_paths(s, files)
    assert [r.status for r in results] == ["ingested"] * len(files), [r.message for r in results]
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, {Path(r.path).name: r.sha256 for r in results}
    con.close()


def _kernels(con, run: str) -> dict[str, tuple[int, int]]:
    return {k: (c, t) for k, c, t in con.execute(
        "select kernel, sum(calls)::bigint, sum(total_ns)::bigint from staging.trace_kernels "
        "where run_id = ? group by kernel", [run]).fetchall()}


def _mart(con, run: str):
    return con.execute(
        "select count(distinct kernel), coalesce(sum(calls), 0)::bigint, "
        "coalesce(sum(total_ns), 0)::bigint, sum(share_of_run) from marts.kernel_run_rollup "
        "where run_id = ?", [run]).fetchone()


@pytest.mark.parametrize("f", SAMPLE_FILES or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"no samples in {SAMPLES}"))], ids=lambda f: f.name[:40] if f else "none")
def test_samples_per_kernel_and_per_device_equal_the_ground_truth(built, f):
    con, ids = built
    run = ids[f.name]
    want = expected_sums(f)
    assert _kernels(con, run) == want
    n, calls, total, share = _mart(con, run)
    assert (n, calls, total) == (len(want), sum(c for c, _ in want.values()),
                                 sum(t for _, t in want.values()))
    if want:
        assert share == pytest.approx(1.0, abs=1e-12)
    exp = json.loads(Path(str(f) + ".expected.json").read_text())
    devices = {str(d): (c, k, b) for d, c, k, b in con.execute(
        "select device, kernel_calls, kernel_ns, busy_ns from staging.trace_devices "
        "where run_id = ?", [run]).fetchall()}
    for d, v in exp["devices"].items():
        assert devices[d][:2] == (v["events"], expected_ns(v["total_us"]))
        if "busy_union_us" in v:
            assert devices[d][2] == expected_ns(v["busy_union_us"])


def expected_ns(us) -> int:
    from decimal import Decimal
    return int(Decimal(str(us)) * 1000)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_runs_per_kernel_exact(built, name):
    con, ids = built
    assert _kernels(con, ids[name]) == gen.expected(KS)
    assert _mart(con, ids[name])[3] == pytest.approx(1.0, abs=1e-12)


def test_nsys_run_summary_devices_tool_and_file_clock(built):
    con, ids = built
    row = con.execute(
        "select kernel_calls, tool, tool_version, device_names, captured_at "
        "from marts.run_summary where run_id = ?", [ids["report.sqlite"]]).fetchone()
    assert row[:3] == (len(KS), "NVIDIA Nsight Systems", "2025.1.1.110")
    assert "NVIDIA H200" in row[3] and "NVIDIA H100 80GB HBM3" in row[3]
    assert row[4] == dt.datetime(2025, 3, 12, 15, 36, 59, 42497)  # the session start
    # kernels on several streams overlap: busy time (union) is below the summed kernel time
    for kernel_ns, busy_ns in con.execute(
            "select kernel_ns, busy_ns from staging.trace_devices where run_id = ?",
            [ids["report.sqlite"]]).fetchall():
        assert 0 < busy_ns < kernel_ns


@pytest.mark.parametrize("name", ["jacc__results.json", *ZERO])
def test_zero_kernel_files_are_runs_with_zero_kernels(built, name):
    con, ids = built
    if name not in ids:
        pytest.skip("no 0-kernel rocprof sample")
    row = con.execute("select kernel_count, kernel_calls from marts.run_summary "
                      "where run_id = ?", [ids[name]]).fetchone()
    assert row == (0, 0)
    assert _mart(con, ids[name])[:3] == (0, 0, 0)


def test_each_tool_keeps_its_own_trend_series(built):
    con, ids = built
    kinds = dict(con.execute(
        "select run_id, any_value(kernel_kind) from staging.trend_points "
        "where run_id in (select unnest(?)) group by run_id",
        [[ids[n] for n in GENERATED]]).fetchall())
    assert {kinds[ids[n]] for n in GENERATED} == {
        "trace_kernel/nsys_sqlite", "trace_kernel/nsys_kern_sum_csv", "trace_kernel/rocprof_csv",
        "trace_kernel/rocprof_stats_csv", "trace_kernel/rocprof_db"}
