"""Per-run marts against rollups computed independently from the seed JSON."""

from __future__ import annotations

import collections
import datetime as dt
import json

import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED
from warehouse import db
from warehouse.ingesting import loader
from warehouse.modelling import models
from warehouse.modelling.kernel_names import parse

PROFILE = json.loads(PROFILE_SEED.read_bytes())
AUDIT = json.loads(AUDIT_SEED.read_bytes())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both seeds ingested and every model built, once for the module."""
    from warehouse.config import settings

    tmp = tmp_path_factory.mktemp("rollups")
    s = settings(tmp / "state" / "warehouse.duckdb")
    results = loader.ingest_paths(s, [PROFILE_SEED, AUDIT_SEED])
    assert [r.status for r in results] == ["ingested", "ingested"]
    ids = {r.source_format: r.sha256 for r in results}
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield con, ids
    con.close()


def rows(con, sql, params=()):
    cur = con.execute(sql, list(params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_profile_kernel_rollup_matches_the_json(built):
    con, ids = built
    C, T = PROFILE["clockHz"], PROFILE["tileCount"]
    got = {r["kernel"]: r for r in rows(
        con, "select * from marts.kernel_run_rollup where run_id = ?", [ids["tile_profile"]])}
    assert set(got) == {g["name"] for g in PROFILE["groups"]}
    total = sum(g["phaseCycles"] for g in PROFILE["groups"]) / C * 1e6
    for g in PROFILE["groups"]:
        r = got[g["name"]]
        assert r["calls"] == g["sampleCount"]
        assert r["total_us"] == pytest.approx(g["phaseCycles"] / C * 1e6, rel=1e-12)
        assert r["total_us"] == pytest.approx(g["phaseMs"] * 1000, rel=1e-9)
        assert r["share_of_run"] == pytest.approx(g["phaseCycles"] / C * 1e6 / total, rel=1e-12)
        assert r["p50_us"] == pytest.approx(g["p50Cycles"] / C * 1e6)
        assert r["p95_us"] == pytest.approx(g["p95Cycles"] / C * 1e6)
        assert r["max_us"] == pytest.approx(g["maximumCycles"] / C * 1e6)
        assert r["mean_us"] == pytest.approx(g["meanCycles"] / C * 1e6)
        for col, key in (("useful_utilization", "usefulUtilization"),
                         ("device_useful_utilization", "deviceUsefulUtilization"),
                         ("work_lane_occupancy", "workLaneOccupancy"),
                         ("average_active_tiles", "averageActiveTiles")):
            if g[key] is None:
                assert r[col] is None, (g["name"], col)
            else:
                assert r[col] == pytest.approx(g[key], rel=1e-9), (g["name"], col)
        assert r["tiles"] == g["tileCount"] <= T
        assert r["kernel_family"] == parse(g["name"]).family
        assert r["source_format"] == "tile_profile" and r["series"] == "runs"
    ranked = sorted(PROFILE["groups"], key=lambda g: -g["phaseCycles"])
    assert [got[g["name"]]["rank_in_run"] for g in ranked] == list(range(1, 20))


def test_tile_imbalance_from_the_samples_the_file_carries(built):
    con, ids = built
    busy = collections.defaultdict(lambda: collections.defaultdict(int))
    for s in PROFILE["samples"]:
        busy[s["kernel"]][s["physicalTile"]] += s["duration"]
    got = {r["kernel"]: r for r in rows(
        con, "select kernel, tile_imbalance, samples_in_file from marts.kernel_run_rollup "
             "where run_id = ?", [ids["tile_profile"]])}
    for k, r in got.items():
        if k in busy:
            t = list(busy[k].values())
            assert r["tile_imbalance"] == pytest.approx(max(t) / (sum(t) / len(t)))
            assert r["samples_in_file"] == sum(1 for s in PROFILE["samples"] if s["kernel"] == k)
        else:
            assert r["tile_imbalance"] is None and r["samples_in_file"] == 0


def test_audit_kernel_rollup_matches_the_json(built):
    con, ids = built
    want_us, want_calls, want_sigs = (collections.Counter(), collections.Counter(),
                                      collections.defaultdict(set))
    for i, row in enumerate(AUDIT["rows"]):
        for k in row["kernels"]:
            short = parse(k["name"]).short
            want_us[short] += k["duration_us"]
            want_calls[short] += 1
            want_sigs[short].add(i)
    got = {r["kernel"]: r for r in rows(
        con, "select * from marts.kernel_run_rollup where run_id = ?", [ids["conv_audit"]])}
    assert set(got) == set(want_us)
    total = sum(want_us.values())
    for k, r in got.items():
        assert r["total_us"] == pytest.approx(want_us[k], rel=1e-12)
        assert r["calls"] == want_calls[k]
        assert r["signatures"] == len(want_sigs[k])
        assert r["share_of_run"] == pytest.approx(want_us[k] / total, rel=1e-12)
        assert r["useful_utilization"] is None and r["tile_imbalance"] is None


def test_shares_sum_to_one_per_run(built):
    con, _ = built
    for run_id, s, n in con.execute(
            "select run_id, sum(share_of_run), count(*) from marts.kernel_run_rollup "
            "group by run_id").fetchall():
        assert s == pytest.approx(1.0, abs=1e-12), run_id
        assert n > 0


def test_audit_category_rollup_matches_components_and_kernels(built):
    con, ids = built
    got = rows(con, "select * from marts.audit_category_rollup where run_id = ?",
               [ids["conv_audit"]])
    sig_rows = {(r["signature"], r["category"]): r for r in got if r["level"] == "signature"}
    run_rows = {r["category"]: r for r in got if r["level"] == "run"}
    want_run = collections.Counter()
    for row in AUDIT["rows"]:
        sig = "x".join(map(str, row["input_shape"])) + "->" + "x".join(map(str, row["output_shape"]))
        for c in row["components"]:
            r = sig_rows[(sig, c["category"])]
            # the audit's own per-category total equals the sum of its kernels (A4) ...
            kernels = sum(k["duration_us"] for k in row["kernels"] if k["category"] == c["category"])
            assert r["us"] == pytest.approx(kernels, rel=1e-12)
            assert r["us"] == pytest.approx(c["us"], rel=1e-9)
            assert r["share"] == pytest.approx(c["fraction_of_profiled_sum"], rel=1e-9)
            assert r["launches"] == sum(1 for k in row["kernels"] if k["category"] == c["category"])
            assert list(r["input_shape"]) == row["input_shape"]
            want_run[c["category"]] += kernels
    assert len(sig_rows) == sum(len(r["components"]) for r in AUDIT["rows"]) == 52
    assert set(run_rows) == set(want_run)
    total = sum(want_run.values())
    for cat, r in run_rows.items():
        assert r["signature"] is None
        assert r["us"] == pytest.approx(want_run[cat], rel=1e-12)
        assert r["share"] == pytest.approx(want_run[cat] / total, rel=1e-12)
    for (sig,), s in [((k,), v) for k, v in con.execute(
            "select coalesce(signature, '*run*'), sum(share) from marts.audit_category_rollup "
            "group by run_id, level, signature").fetchall()]:
        assert s == pytest.approx(1.0, abs=1e-12), sig


def test_run_summary(built):
    con, ids = built
    got = {r["source_format"]: r for r in rows(con, "select * from marts.run_summary")}
    p, a = got["tile_profile"], got["conv_audit"]
    assert p["run_id"] == ids["tile_profile"] and a["run_id"] == ids["conv_audit"]
    assert p["kernel_count"] == 19 and p["top_kernel"] == "exchange"
    assert p["top_kernel_share"] == pytest.approx(94608 / sum(
        g["phaseCycles"] for g in PROFILE["groups"]))
    assert p["total_us"] == pytest.approx(sum(g["phaseMs"] for g in PROFILE["groups"]) * 1000)
    assert p["profile_span_us"] == pytest.approx(PROFILE["profileSpanMs"] * 1000)
    assert p["samples_in_file"] == 3 and p["sample_count"] == 232260
    assert a["total_us"] == pytest.approx(sum(r["total_profiled_us"] for r in AUDIT["rows"]))
    assert a["signatures"] == 17 and a["audit_scope"] == AUDIT["scope"]
    assert a["top_kernel"] == "sm90_xmma_fprop_implicit_gemm_tf32_128x128x32_segment_k_off"
    assert {p["check_status"], a["check_status"]} == {"unchecked"}
    assert p["in_trends"] and p["series"] == "runs" and isinstance(p["captured_at"], dt.datetime)


def test_staging_types_metadata_and_signatures(built):
    con, ids = built
    s = rows(con, "select * from staging.profile_samples order by sample_idx")
    assert len(s) == 3
    meta = {m["name"]: m["value"] for m in PROFILE["samples"][0]["metadata"]}
    r = s[0]
    assert r["useful_cycles"] == int(meta["usefulCycles"]) and isinstance(r["useful_cycles"], int)
    assert r["physical_work_cycles"] == int(meta["physicalWorkCycles"])
    assert r["uniform_invocations"] is True
    assert r["arguments"] == json.loads(meta["arguments"])
    assert r["invocations"] == 1 and r["kernel_spec"] == meta["kernelSpec"]
    assert r["metadata"]["workEstimateBasis"] == meta["workEstimateBasis"]
    assert r["duration_us"] == pytest.approx(48552 / PROFILE["clockHz"] * 1e6)
    types = dict(con.execute(
        "select column_name, data_type from information_schema.columns "
        "where table_schema = 'staging' and table_name = 'profile_samples'").fetchall())
    assert types["useful_cycles"] == "BIGINT" and types["uniform_invocations"] == "BOOLEAN"
    assert types["arguments"] == "BIGINT[]"
    sigs = rows(con, "select * from staging.audit_signatures order by row_idx")
    assert len(sigs) == 17
    assert sigs[0]["signature"] == "1x96x6x706x322->1x96x4x704x320"
    assert (sigs[0]["in_channels"], sigs[0]["out_frames"], sigs[0]["out_width"]) == (96, 4, 320)
    k = rows(con, "select * from staging.audit_kernels where row_idx = 0 and kernel_idx = 2")[0]
    assert (k["kernel"], k["kernel_family"], k["kernel_arch"], k["kernel_tile"],
            k["kernel_precision"]) == (
        "sm90_xmma_fprop_implicit_gemm_tf32_256x32x32_segment_k_off",
        "xmma_fprop_implicit_gemm", "sm90", "256x32x32", "tf32")


def test_malformed_metadata_values_become_null_not_a_failed_build(tmp_path, seeds):
    from warehouse.config import settings

    doc = json.loads(seeds["profile"].read_bytes())
    for m in doc["samples"][0]["metadata"]:
        if m["name"] == "usefulCycles":
            m["value"] = "lots"
        if m["name"] == "arguments":
            m["value"] = "not a list"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, indent=2))
    s = settings(tmp_path / "w" / "warehouse.duckdb")
    assert loader.ingest_file(s, bad).status == "ingested"
    with db.writer(s.warehouse) as con:
        models.build(con)
        r = con.execute("select useful_cycles, arguments, metadata['usefulCycles'] "
                        "from staging.profile_samples where sample_idx = 0").fetchone()
    assert r == (None, None, "lots")


def test_check_status_reaches_run_summary(built):
    con, ids = built
    now = dt.datetime(2026, 1, 1)
    con.execute("insert into checks.results (run_id, suite, expectation, invariant_id, critical, "
                "success, unexpected_count, sample_failures, validated_at) values "
                "(?, 'raw', 'e1', 'P3', true, false, 1, null, ?), "
                "(?, 'raw', 'e2', 'A1', true, true, 0, null, ?)",
                [ids["tile_profile"], now, ids["conv_audit"], now])
    try:
        models.build(con, select=["marts.run_summary"])
        got = dict(con.execute("select source_format, check_status from marts.run_summary")
                   .fetchall())
        assert got == {"tile_profile": "failed", "conv_audit": "passed"}
        fi = con.execute("select failed_invariants, in_trends from marts.run_summary "
                         "where source_format = 'tile_profile'").fetchone()
        assert fi == (["P3"], False)
    finally:
        con.execute("delete from checks.results")
        models.build(con)
