"""Kernel traces through the SQL models: kernel time vs busy time on overlapping streams, the
per-device rollup, tool-separated trends, kernel families, and the blocking trace checks."""

from __future__ import annotations

import json

import pytest

from warehouse import checks, db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen
from warehouse.modelling import kernel_names, models

GEMM = "void gemm_kernel<float, 128>(float const*, float*, int)"


def k(name, ts, dur, stream=7, device=0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts,
            "dur": dur, "args": {"device": device, "stream": stream}}


OVERLAP = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "GPU zero"}, {"id": 1, "name": "GPU one"}],
    "traceEvents": [
        k(GEMM, 1000, 100, stream=7),   # [1000, 1100] on stream 7
        k("copy", 1050, 100, stream=13),  # [1050, 1150] on stream 13: overlaps
        k(GEMM, 2000, 10.5, stream=7),  # [2000, 2010.5]
        k("copy", 1000, 20, device=1),
    ],
}


# review finding 2: kernA 60 us on each of two devices, kernB 100 us on one
MULTI_GPU = {
    "schemaVersion": 1,
    "traceEvents": [k("kernA", 0, 60, device=0), k("kernA", 0, 60, device=1),
                    k("kernB", 100, 100, device=0)],
}


def _fake_run(con, sha: str, fmt: str, series: str, label: str, when: str, total_ns: int):
    """A trace run of another tool (as the Nsight Systems parser writes it)."""
    con.execute("insert into raw.files values (?, ?, ?, ?, ?, 1, now(), ?, ?, ?, 'cli', ?)",
                [sha, f"/x/{sha[:8]}", f"{sha[:8]}.sqlite", fmt, f"{fmt}/1", series, label,
                 when, f"/x/{sha}"])
    con.execute("insert into raw.trace_runs values (?, ?, 'Nsight Systems', '2025.1', "
                "'session', 0, false, 1, '{}')", [sha, fmt])
    con.execute("insert into raw.trace_events values (?, 0, 'kernel', 'CUPTI_ACTIVITY_KIND_"
                "KERNEL', ?, null, '0', '7', null, '1', '1', 0, ?, 1, null)",
                [sha, GEMM, total_ns])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace-models")
    s = settings(root / "state" / "warehouse.duckdb")
    d = root / "mix"
    d.mkdir()
    (d / "overlap.json").write_text(json.dumps(OVERLAP))
    (root / "multi").mkdir()
    (root / "multi" / "multi.json").write_text(json.dumps(MULTI_GPU))
    gen = root / "gen" / "gen.pt.trace.json"
    kineto_gen.write_file(gen, steps=2, seed=1)
    ids = {"overlap": loader.ingest_file(s, d / "overlap.json", label="b1",
                                         captured_at="2026-01-01T00:00Z").sha256,
           "gen": loader.ingest_file(s, gen).sha256,
           "multi": loader.ingest_file(s, root / "multi" / "multi.json").sha256}
    with db.writer(s.warehouse) as con:
        _fake_run(con, "f" * 64, "nsys_sqlite", "mix", "b2", "2026-01-02", 150_000)
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, ids
    con.close()


def test_kernel_time_and_busy_time_per_device(built):
    con, ids = built
    got = con.execute(
        "select device, device_name, kernel_calls, kernel_ns, busy_ns from staging.trace_devices "
        "where run_id = ? order by device", [ids["overlap"]]).fetchall()
    # device 0: kernels sum to 210.5 us, but streams overlap: busy = 150 + 10.5 us
    assert got == [("0", "GPU zero", 3, 210_500, 160_500), ("1", "GPU one", 1, 20_000, 20_000)]
    summary = con.execute(
        "select total_us, kernel_count, kernel_calls, busy_us, device_names, tool "
        "from marts.run_summary where run_id = ?", [ids["overlap"]]).fetchone()
    # two kernels (gemm and copy), copy ran on both devices
    assert summary == (230.5, 2, 4, 180.5, "GPU one, GPU zero", "PyTorch Profiler (Kineto)")


def test_run_summary_counts_and_ranks_kernels_over_all_devices(built):
    con, ids = built
    got = con.execute("select kernel_count, top_kernel, top_kernel_share, total_us "
                      "from marts.run_summary where run_id = ?", [ids["multi"]]).fetchone()
    # kernA: 60 + 60 us over two devices beats kernB's 100 us on one; two kernels, not 3 rows
    assert got == (2, "kernA", pytest.approx(120 / 220, abs=1e-12), 220.0)
    rollup = con.execute("select device, kernel, rank_in_run, share_of_run "
                         "from marts.kernel_run_rollup where run_id = ? order by rank_in_run",
                         [ids["multi"]]).fetchall()
    # the rollup stays per (device, kernel): ranks and shares of device rows, as documented
    assert [r[:3] for r in rollup] == [("0", "kernB", 1), ("0", "kernA", 2), ("1", "kernA", 3)]
    assert [r[3] for r in rollup] == pytest.approx([100 / 220, 60 / 220, 60 / 220], abs=1e-12)


def test_rollup_is_per_device_with_exact_ns_and_shares_summing_to_one(built):
    con, ids = built
    rows = con.execute(
        "select device, kernel, kernel_family, calls, total_ns, streams, share_of_run "
        "from marts.kernel_run_rollup where run_id = ? order by device, kernel",
        [ids["overlap"]]).fetchall()
    assert [r[:6] for r in rows] == [
        ("0", "copy", "copy", 1, 100_000, "13"),
        ("0", GEMM, "gemm_kernel", 2, 110_500, "7"),
        ("1", "copy", "copy", 1, 20_000, "7"),
    ]
    assert sum(r[6] for r in rows) == pytest.approx(1.0, abs=1e-12)


def test_trend_series_never_mix_tools(built):
    con, ids = built
    kinds = con.execute(
        "select kernel_kind, count(*) from marts.kernel_trends where series = 'mix' "
        "and kernel = ? group by kernel_kind order by 1", [GEMM]).fetchall()
    # the same kernel name from Kineto and from Nsight Systems: two series of one label each
    assert kinds == [("trace_kernel/kineto_trace", 1), ("trace_kernel/nsys_sqlite", 1)]
    values = dict(con.execute(
        "select kernel_kind, value_us from staging.trend_points where series = 'mix' "
        "and kernel = ?", [GEMM]).fetchall())
    assert values == {"trace_kernel/kineto_trace": 110.5, "trace_kernel/nsys_sqlite": 150.0}


@pytest.mark.parametrize("name,family", [
    (GEMM, "gemm_kernel"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1.kd", "Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1"),
    ("void foo::bar<int, 4>(int*, int) [clone .kd]", "foo::bar"),
    ("__amd_rocclr_fillBufferAligned.kd", "__amd_rocclr_fillBufferAligned"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>(float*)",
     "at::native::(anonymous namespace)::CatArrayBatchedCopy"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_"
     "tensorop_s1688gemm_64x64_16x6_nn_align4::Params)", "cutlass_80_tensorop_s1688gemm_64x64_"
     "16x6_nn_align4"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
])
def test_kernel_family_strips_templates_and_kd_suffixes(name, family):
    assert kernel_names.normalise(name) == family


def test_trace_checks_pass_and_catch_a_negative_duration(built):
    con, ids = built
    results = checks.validate_run(con, ids["gen"])
    suites = {r.suite for r in results}
    assert {"raw.trace_events", "trace_event_invariants", "trace_run_invariants",
            "staging.trace_kernels", "kernel_run_rollup_shares"} <= suites
    assert all(r.success for r in results), [r for r in results if not r.success]
    con.execute("update raw.trace_events set dur_ns = -1 where run_id = ? and event_idx = "
                "(select min(event_idx) from raw.trace_events where run_id = ? and kind = "
                "'kernel')", [ids["gen"], ids["gen"]])
    con.execute("update raw.trace_runs set event_count = event_count + 1 where run_id = ?",
                [ids["gen"]])
    bad = [r for r in checks.validate_run(con, ids["gen"]) if not r.success]
    rules = {r.rule for r in bad}
    assert "every event's duration is >= 0 ns" in rules
    assert "trace_runs.event_count equals the run's rows in raw.trace_events" in rules
    assert all(r.invariant_id == "SCHEMA" and r.critical for r in bad)
