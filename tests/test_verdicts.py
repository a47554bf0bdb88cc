"""Acceptance of marts.kernel_trends on generated histories (through the real loader and models).

* every planted change is found at the right label with the right direction;
* pure-noise histories (>= 30 labels x 19 kernels) give at most 1% regressed/improved rows;
* runs with one repeat never yield 'unchanged' (and never a rank test);
* a run whose checks failed drops out of trends and baselines.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from warehouse import db, synth
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.modelling import models


def build_history(tmp: Path, spec: synth.HistorySpec):
    """Generate ``spec``, ingest it through the loader, build every model. Returns (con, truth)."""
    truth = synth.generate(tmp / "history", spec)
    s = settings(tmp / "state" / "warehouse.duckdb")
    con = db.connect_rw(s.warehouse)
    db.ensure_schema(con)
    for p in loader.expand([tmp / "history" / "runs"]):
        r = loader.ingest_file(s, p, con=con)
        assert r.status == "ingested", r.message
    models.build(con)
    return con, truth


def trend_rows(con, where="true", params=()):
    cur = con.execute(f"select * from marts.kernel_trends where {where}", list(params))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


FLAGGED = ("regressed", "improved")


# ------------------------------------------------------------------ planted changes
@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    con, truth = build_history(tmp_path_factory.mktemp("planted"), synth.HistorySpec())
    yield con, truth
    con.close()


def test_every_planted_change_is_found_at_its_label(planted):
    con, truth = planted
    floor = 5.0
    strong = [e for e in truth["expected"] if abs(e["expected_delta_pct"]) >= 2 * floor]
    assert len(strong) >= 3 and {e["direction"] for e in strong} == set(FLAGGED)
    assert {e["kernel_kind"] for e in strong} == {"kernel", "family", "signature_category"}
    for e in strong:
        rows = {r["label_seq"]: r for r in trend_rows(
            con, "series = ? and kernel_kind = ? and kernel = ?",
            [e["series"], e["kernel_kind"], e["kernel"]])}
        at = rows[e["label_seq"]]
        assert at["label"] == e["label"]
        assert at["verdict"] == e["direction"], (e, at["evidence"])
        assert at["delta_pct"] == pytest.approx(e["expected_delta_pct"], abs=6)
        # found at the right label: not before it, and not again right after it
        for seq in range(e["label_seq"] - 3, e["label_seq"] + 4):
            if seq != e["label_seq"] and seq in rows:
                assert rows[seq]["verdict"] not in FLAGGED, (e, seq, rows[seq]["evidence"])


def test_planted_steps_are_change_points_and_restart_the_baseline(planted):
    con, truth = planted
    segment = 3  # cp_min_segment: a change point needs 3 labels on each side
    plants = [p for p in truth["plants"] if p["label_seq"] <= 24 - segment]
    assert len(plants) >= 3
    for p in plants:
        kind = "kernel" if p["match"] == "kernel" else "family"
        rows = {r["label_seq"]: r for r in trend_rows(
            con, "series = ? and kernel_kind = ? and kernel = ?", [p["series"], kind, p["kernel"]])}
        assert len(rows) == 24  # >= 20 labels: change points are detected
        assert [s for s, r in rows.items() if r["change_point"]] == [p["label_seq"]]
        after = rows[p["label_seq"] + 2]
        assert after["baseline_from_label"] == p["label"]


def test_unplanted_rows_of_the_planted_history_are_quiet(planted):
    con, truth = planted
    moved = {(e["series"], e["kernel_kind"], e["kernel"]) for e in truth["expected"]}
    rows = [r for r in trend_rows(con) if (r["series"], r["kernel_kind"], r["kernel"]) not in moved]
    flagged = [r for r in rows if r["verdict"] in FLAGGED]
    assert len(rows) > 1500
    assert len(flagged) <= 0.01 * len(rows), [(r["kernel"], r["evidence"]) for r in flagged]


def test_trend_table_shape_and_evidence(planted):
    con, truth = planted
    dup = con.execute("select series, kernel_kind, kernel, label, count(*) from marts.kernel_trends "
                      "group by all having count(*) > 1").fetchall()
    assert dup == []
    assert set(r[0] for r in con.execute("select distinct verdict from marts.kernel_trends")
               .fetchall()) <= {"regressed", "improved", "unchanged", "inconclusive"}
    # label order follows capture time, per series
    for series in ("decoder-tile", "vae-conv-audit"):
        seq = con.execute("select distinct label, label_seq, captured_at from marts.kernel_trends "
                          "where series = ? order by label_seq", [series]).fetchall()
        assert [r[0] for r in seq] == [x["label"] for x in truth["labels"]]
        assert [r[2] for r in seq] == sorted(r[2] for r in seq)
    flagged = trend_rows(con, "verdict = 'regressed' and method in ('confirmed', 'rank_test')")
    assert flagged
    for r in flagged:
        assert "% vs median of" in r["evidence"] and r["baseline_runs"] >= 2
        if r["method"] == "confirmed":  # settled by the next labels, written on this one
            assert "confirmed by label" in r["evidence"] and r["q_value"] <= 0.005
            assert r["confirmed_by_label"] in [x["label"] for x in truth["labels"]]
        else:  # this label alone: the newest label, or a label at a change point
            assert r["change_point"] or r["label"] == truth["labels"][-1]["label"]
    # every numeric column is NaN-free
    for col in ("median_us", "baseline_median_us", "baseline_mad_us", "delta_pct", "p_value",
                "q_value", "min_attainable_p", "min_detectable_pct"):
        assert con.execute(f"select count(*) from marts.kernel_trends where isnan({col})"
                           ).fetchone()[0] == 0, col
    assert r["median_us"] == pytest.approx(sorted(r["run_values_us"])[len(r["run_values_us"]) // 2])


def test_one_repeat_labels_never_unchanged(planted):
    con, _ = planted
    rows = trend_rows(con, "repeats = 1")
    assert len(rows) > 100
    assert not [r for r in rows if r["verdict"] == "unchanged"]
    assert not [r for r in rows if r["method"] == "rank_test" or r["p_value"] is not None]


# ------------------------------------------------------------------ pure noise
NOISE_SERIES = (synth.SeriesSpec("noise-tile", "tile_profile"),)


@pytest.fixture(scope="module")
def noise(tmp_path_factory):
    spec = synth.HistorySpec(seed=11, labels=30, series=NOISE_SERIES, plants=())
    con, truth = build_history(tmp_path_factory.mktemp("noise"), spec)
    yield con, truth
    con.close()


@pytest.fixture(scope="module")
def noise_single(tmp_path_factory):
    """CI-style: one run per label."""
    spec = synth.HistorySpec(seed=12, labels=30, repeats=1, single_repeat_every=0,
                             series=NOISE_SERIES, plants=())
    con, truth = build_history(tmp_path_factory.mktemp("noise1"), spec)
    yield con, truth
    con.close()


@pytest.mark.parametrize("which", ["noise", "noise_single"])
def test_pure_noise_is_at_most_one_percent_flagged(which, request):
    con, truth = request.getfixturevalue(which)
    assert truth["plants"] == []
    rows = trend_rows(con)
    assert len(rows) == 30 * 19
    flagged = [r for r in rows if r["verdict"] in FLAGGED]
    assert len(flagged) <= 0.01 * len(rows), [(r["kernel"], r["evidence"]) for r in flagged]
    if which == "noise_single":
        assert all(r["verdict"] != "unchanged" for r in rows)
        assert all(r["method"] != "rank_test" for r in rows)
    else:  # with repeats about half the rows can be vouched for, each with the power to
        unchanged = [r for r in rows if r["verdict"] == "unchanged"]  # see the floor (issue 10)
        assert len(unchanged) > 0.45 * len(rows)
        assert all(r["min_detectable_pct"] <= r["floor_pct"] for r in unchanged)


def test_single_run_labels_still_find_a_planted_step(tmp_path):
    spec = synth.HistorySpec(seed=5, labels=12, repeats=1, single_repeat_every=0,
                             series=NOISE_SERIES,
                             plants=(synth.Plant("noise-tile", 6, "copy_u64", 1.3),))
    con, truth = build_history(tmp_path, spec)
    try:
        rows = {r["label_seq"]: r for r in trend_rows(con, "kernel = 'copy_u64'")}
        assert rows[6]["verdict"] == "regressed" and rows[6]["method"] == "mad_guard"
        assert "confirmed by label" in rows[6]["evidence"]
        assert all(rows[s]["verdict"] not in FLAGGED for s in rows if s != 6)
    finally:
        con.close()


# ------------------------------------------------------------------ failed checks
def test_a_run_that_failed_its_checks_drops_out_of_trends_and_baselines(tmp_path):
    spec = synth.HistorySpec(seed=2, labels=5, repeats=3, single_repeat_every=0,
                             series=NOISE_SERIES, plants=())
    con, truth = build_history(tmp_path, spec)
    try:
        label2, label3 = truth["labels"][2]["label"], truth["labels"][3]["label"]
        run_id = con.execute("select run_id from staging.runs where label = ? order by run_id "
                             "limit 1", [label2]).fetchone()[0]
        value = con.execute("select total_us from marts.kernel_run_rollup where run_id = ? and "
                            "kernel = 'exchange'", [run_id]).fetchone()[0]

        def cell(label):
            return trend_rows(con, "kernel = 'exchange' and label = ?", [label])[0]

        before2, before3 = cell(label2), cell(label3)
        assert before2["repeats"] == 3 and value in before2["run_values_us"]
        assert before3["baseline_runs"] == 9
        con.execute(
            "insert into checks.results (run_id, suite, expectation, invariant_id, critical, "
            "success, unexpected_count, sample_failures, validated_at) values "
            "(?, 'tile_profile', 'expect_phase_ms', 'P3', true, false, 1, null, ?)",
            [run_id, dt.datetime(2026, 1, 1)])
        # a failing non-critical expectation on another run changes nothing
        other = con.execute("select run_id from staging.runs where label = ? limit 1",
                            [label3]).fetchone()[0]
        con.execute(
            "insert into checks.results (run_id, suite, expectation, invariant_id, critical, "
            "success, unexpected_count, sample_failures, validated_at) values "
            "(?, 'tile_profile', 'expect_note', 'NOTE', false, false, 1, null, ?)",
            [other, dt.datetime(2026, 1, 1)])
        models.build(con)
        after2, after3 = cell(label2), cell(label3)
        assert after2["repeats"] == 2 and value not in after2["run_values_us"]
        assert after3["baseline_runs"] == 8 and after3["repeats"] == 3
        assert con.execute("select count(*) from staging.trend_points where run_id = ?",
                           [run_id]).fetchone()[0] == 0
        status = dict(con.execute("select run_id, check_status from marts.run_summary "
                                  "where run_id in (?, ?)", [run_id, other]).fetchall())
        assert status == {run_id: "failed", other: "passed"}
        # the per-run facts keep the run (flagged), only trends leave it out
        assert con.execute("select check_status from marts.kernel_run_rollup where run_id = ? "
                           "limit 1", [run_id]).fetchone()[0] == "failed"
    finally:
        con.close()


def test_floor_is_configurable_at_build_time(tmp_path):
    spec = synth.HistorySpec(seed=2, labels=4, repeats=3, single_repeat_every=0,
                             series=NOISE_SERIES, plants=())
    con, _ = build_history(tmp_path, spec)
    try:
        from warehouse.modelling.stats import VerdictConfig

        models.build(con, select=["marts.kernel_trends"], config=VerdictConfig(floor_pct=12.5))
        assert con.execute("select distinct floor_pct from marts.kernel_trends").fetchall() == [
            (12.5,)]
    finally:
        con.close()


# ------------------------------------------------------------------ issue 10 through the pipeline
def test_an_early_step_scenario_is_written_on_its_own_label(tmp_path):
    """`pwh synth --scenario early-label-2` (8 labels): +15% at the 2nd label, 6 vs 3 runs, is
    confirmed by the later labels and written on label 1, in both formats."""
    import dataclasses

    from warehouse import scenarios

    spec = dataclasses.replace(scenarios.spec("early-label-2", 3), labels=8)
    con, truth = build_history(tmp_path, spec)
    try:
        strong = [e for e in truth["expected"] if abs(e["expected_delta_pct"]) >= 10]
        assert {e["kernel_kind"] for e in strong} == {"kernel", "family", "signature_category"}
        for e in strong:
            rows = {r["label_seq"]: r for r in trend_rows(
                con, "series = ? and kernel_kind = ? and kernel = ?",
                [e["series"], e["kernel_kind"], e["kernel"]])}
            assert rows[1]["verdict"] == "regressed", (e["kernel"], rows[1]["evidence"])
            assert rows[1]["confirmed_by_label"] is not None
            assert not [s for s, r in rows.items() if s != 1 and r["verdict"] in FLAGGED]
        unchanged = trend_rows(con, "verdict = 'unchanged'")
        assert unchanged and all(r["min_detectable_pct"] <= r["floor_pct"] for r in unchanged)
    finally:
        con.close()
