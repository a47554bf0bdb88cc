"""The statistics behind verdicts, checked against scipy, brute force and known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats as ss

from warehouse.modelling import stats
from warehouse.modelling.stats import VerdictConfig
from warehouse.modelling.verdicts import Cell, judge_series


# ------------------------------------------------------------------ Mann–Whitney U
@pytest.mark.parametrize("n,m", [(2, 2), (3, 3), (3, 15), (5, 7), (2, 9), (10, 30), (1, 12)])
def test_mwu_exact_matches_scipy_without_ties(n, m):
    rng = np.random.default_rng(n * 100 + m)
    for shift in (0.0, 0.7, 2.0):
        x, y = rng.normal(shift, 1, n), rng.normal(0, 1, m)
        ours = stats.mann_whitney_u(x, y)
        ref = ss.mannwhitneyu(x, y, method="exact")
        assert ours.method == "exact"
        assert ours.u == pytest.approx(ref.statistic)
        assert ours.p == pytest.approx(ref.pvalue, rel=1e-9)


def test_mwu_exact_with_ties_is_the_permutation_distribution():
    x, y = [1, 2, 2, 3, 3], [2, 3, 3, 4, 5, 5]
    allv = np.array(x + y, float)
    ranks = stats._midranks(allv)
    w = ranks[: len(x)].sum()
    lo = hi = total = 0
    for c in itertools.combinations(range(len(allv)), len(x)):
        s = ranks[list(c)].sum()
        total += 1
        lo += s <= w + 1e-9
        hi += s >= w - 1e-9
    assert stats.mann_whitney_u(x, y).p == pytest.approx(min(1, 2 * min(lo, hi) / total))


def test_mwu_normal_approximation_is_close_to_exact_for_large_samples():
    rng = np.random.default_rng(5)
    x, y = rng.normal(0.3, 1, 40), rng.normal(0, 1, 60)
    exact = stats.mann_whitney_u(x, y, method="exact").p
    normal = stats.mann_whitney_u(x, y, method="normal").p
    assert normal == pytest.approx(exact, abs=0.01)
    ref = ss.mannwhitneyu(x, y, method="asymptotic", use_continuity=True)
    assert normal == pytest.approx(ref.pvalue, rel=1e-6)


def test_mwu_identical_values_and_bad_input():
    assert stats.mann_whitney_u([1, 1], [1, 1, 1]).p == 1.0
    with pytest.raises(ValueError, match="at least one"):
        stats.mann_whitney_u([], [1.0])


def test_min_attainable_p_is_asvs_bound_two_sided():
    assert stats.min_attainable_p(3, 3) == pytest.approx(2 / 20)
    assert stats.min_attainable_p(3, 3, sides=1) == pytest.approx(1 / 20)  # asv's 1/C(n+m, n)
    assert stats.min_attainable_p(1, 30) == pytest.approx(2 / 31)
    assert stats.min_attainable_p(2, 2) == 1 / 3
    # the bound is attained: completely separated samples
    assert stats.mann_whitney_u([10, 11, 12], [1, 2, 3]).p == pytest.approx(0.1)


# ------------------------------------------------------------------ BH, MAD
def test_benjamini_hochberg_matches_scipy():
    rng = np.random.default_rng(3)
    p = list(rng.uniform(0, 0.2, 25)) + [0.0001, 0.5, 1.0]
    assert stats.benjamini_hochberg(p) == pytest.approx(list(ss.false_discovery_control(p)))
    q = stats.benjamini_hochberg([0.01, math.nan, 0.04])
    assert math.isnan(q[1]) and q[0] == pytest.approx(0.02) and q[2] == pytest.approx(0.04)
    assert stats.benjamini_hochberg([]) == []


def test_mad():
    assert stats.mad([1, 2, 3, 4, 100], normal=False) == 1
    assert stats.mad([1, 2, 3, 4, 100]) == pytest.approx(1.482602218505602)
    rng = np.random.default_rng(0)
    assert stats.mad(rng.normal(0, 2, 20000)) == pytest.approx(2, rel=0.03)


# ------------------------------------------------------------------ change points
def _series(rng, n, step_at=None, step=0.0, noise=0.02):
    v = np.exp(rng.normal(0, noise, n))
    if step_at is not None:
        v[step_at:] *= 1 + step
    return 100 * v


def test_change_point_found_at_the_step():
    cfg = VerdictConfig()
    for seed, at, step in [(1, 12, 0.15), (2, 20, -0.12), (3, 5, 0.3)]:
        v = _series(np.random.default_rng(seed), 30, at, step)
        cps = stats.change_points(v, cfg, key=f"k{seed}")
        assert [c.index for c in cps] == [at]
        assert (cps[0].shift_pct > 0) == (step > 0)
        assert cps[0].p <= cfg.cp_alpha


def test_two_change_points_and_determinism():
    rng = np.random.default_rng(9)
    v = _series(rng, 40)
    v[12:] *= 1.2
    v[28:] /= 1.2
    cfg = VerdictConfig()
    a = stats.change_points(v, cfg, key="same")
    assert [c.index for c in a] == [12, 28]
    assert a == stats.change_points(v, cfg, key="same")


def test_no_change_points_in_noise_or_short_series():
    cfg = VerdictConfig()
    found = sum(len(stats.change_points(_series(np.random.default_rng(s), 30), cfg, f"n{s}"))
                for s in range(40))
    assert found <= 1
    # below cp_min_labels nothing is detected, however clear the step
    assert stats.change_points(_series(np.random.default_rng(1), 15, 7, 0.5), cfg) == []


def test_small_steps_below_the_floor_are_not_change_points():
    v = _series(np.random.default_rng(4), 40, 20, 0.03, noise=0.002)
    assert stats.change_points(v, VerdictConfig()) == []
    assert len(stats.change_points(v, VerdictConfig(floor_pct=1.0))) == 1


# ------------------------------------------------------------------ judge_series
def _cells(values_by_label: list[list[float]], key="k", kind="kernel"):
    return [Cell(kind, key, f"L{i}", i, list(v)) for i, v in enumerate(values_by_label)]


def _noise(rng, labels, repeats, noise=0.02, base=100.0):
    return [list(base * np.exp(rng.normal(0, noise, repeats))) for _ in range(labels)]


def test_first_label_is_inconclusive_without_baseline():
    rows = judge_series(_cells([[1.0, 1.1, 0.9]]))
    assert rows[0]["verdict"] == "inconclusive" and "no baseline" in rows[0]["evidence"]


def test_rank_test_regression_found_once_then_baseline_restarts():
    rng = np.random.default_rng(1)
    data = _noise(rng, 12, 3)
    for i in range(6, 12):
        data[i] = [x * 1.2 for x in data[i]]
    rows = judge_series(_cells(data))
    v = [r["verdict"] for r in rows]
    assert v[6] == "regressed" and rows[6]["method"] == "confirmed"
    assert rows[6]["confirmed_by_label"] == "L7" and rows[6]["q_value"] <= 0.005
    assert rows[6]["delta_pct"] == pytest.approx(20, abs=4)
    assert "p=" in rows[6]["evidence"] and "vs median of 6 labels" in rows[6]["evidence"]
    assert "confirmed by label L7" in rows[6]["evidence"]
    assert "regressed" not in v[7:] and "improved" not in v[7:]
    assert rows[8]["baseline_from_label"] == "L6"


def test_unattainable_significance_is_inconclusive_not_unchanged():
    # 2 vs 3 runs: the smallest two-sided p is 2/C(5,2) = 0.2 > 0.05
    rows = judge_series(_cells([[100, 101, 99], [100.5, 99.5]]))
    r = rows[1]
    assert r["method"] == "none" and r["p_value"] is None
    assert r["min_attainable_p"] == pytest.approx(0.2)
    assert r["verdict"] == "inconclusive"


def test_one_repeat_never_unchanged_and_never_a_rank_test():
    rng = np.random.default_rng(7)
    data = _noise(rng, 30, 1)
    rows = judge_series(_cells(data))
    assert all(r["verdict"] != "unchanged" for r in rows)
    assert all(r["method"] in ("mad_guard", "none", "change_point") for r in rows)
    assert all(r["p_value"] is None for r in rows)


def test_mad_guard_flags_a_big_single_run_change_confirmed_by_the_next_labels():
    """One run a label: two runs beyond the guard can be noise before a real step (issue 22), so
    the change at label 6 is confirmed by the third label that agrees (L8), on its own label."""
    rng = np.random.default_rng(2)
    data = _noise(rng, 10, 1, noise=0.01)
    for i in range(6, 10):
        data[i] = [x * 1.25 for x in data[i]]
    rows = judge_series(_cells(data))
    assert rows[6]["verdict"] == "regressed" and rows[6]["method"] == "mad_guard"
    assert "confirmed by label L8" in rows[6]["evidence"]
    assert all(r["verdict"] == "inconclusive" for r in rows[7:])  # new baseline: too short


def test_mad_guard_transient_outlier_is_re_judged_inconclusive():
    rng = np.random.default_rng(2)
    data = _noise(rng, 10, 1, noise=0.01)
    data[6] = [data[6][0] * 1.3]  # one slow run, the next label is back to normal
    rows = judge_series(_cells(data))
    assert rows[6]["verdict"] == "inconclusive"
    assert rows[6]["evidence"].startswith("was flagged as a rise") and "transient" in rows[6]["evidence"]
    assert rows[7]["baseline_from_label"] == "L0"  # the old baseline is kept
    # the newest label has no next label yet: one run alone is never a verdict
    data[9] = [data[9][0] * 1.3]
    r = judge_series(_cells(data))[9]
    assert r["verdict"] == "inconclusive" and "cannot tell a changed build" in r["evidence"]
    assert r["evidence"].startswith("was flagged as a rise")


def test_practical_floor_turns_small_significant_changes_into_unchanged():
    rng = np.random.default_rng(4)
    data = _noise(rng, 8, 5, noise=0.002)
    data[7] = [x * 1.03 for x in data[7]]
    r = judge_series(_cells(data))[7]
    assert r["p_value"] < 0.01 and r["verdict"] == "unchanged"
    assert "significant but within the 5% floor" in r["evidence"]
    r = judge_series(_cells(data), VerdictConfig(floor_pct=2.0))[7]
    assert r["verdict"] == "regressed"


def test_large_but_insignificant_change_is_inconclusive():
    data = [[100, 80, 120], [90, 125, 105], [110, 95, 85], [130, 118, 102]]
    r = judge_series(_cells(data))[3]
    assert r["method"] == "rank_test" and r["verdict"] == "inconclusive"
    assert "not significant" in r["evidence"]


def test_a_lone_kernel_among_many_is_judged_on_its_own():
    """No adjustment across the kernels of a label: 58 quiet kernels do not hide the 59th."""
    rng = np.random.default_rng(11)
    cells = []
    for k in range(59):
        data = _noise(rng, 10, 3)
        if k == 7:
            for i in range(5, 10):
                data[i] = [x * 1.10 for x in data[i]]
        cells += _cells(data, key=f"k{k}")
    rows = judge_series(cells)
    flagged = [(r["key"], r["label_seq"]) for r in rows if r["verdict"] in ("regressed", "improved")]
    assert flagged == [("k7", 5)]


def test_change_point_restarts_the_baseline_in_long_series():
    rng = np.random.default_rng(6)
    data = _noise(rng, 30, 3)
    for i in range(15, 30):
        data[i] = [x * 0.85 for x in data[i]]
    rows = judge_series(_cells(data))
    assert rows[15]["change_point"] and rows[15]["verdict"] == "improved"
    assert [r["label_seq"] for r in rows if r["change_point"]] == [15]
    assert "change point at this label" in rows[15]["evidence"]
    assert all(r["verdict"] not in ("regressed", "improved") for r in rows[16:])


def test_config_validation_and_environment():
    with pytest.raises(ValueError, match="floor_pct"):
        VerdictConfig(floor_pct=-1)
    cfg = VerdictConfig.from_env({"PWH_VERDICT_FLOOR_PCT": "2.5", "PWH_VERDICT_WINDOW_LABELS": "4"})
    assert cfg.floor_pct == 2.5 and cfg.window_labels == 4
    with pytest.raises(ValueError, match="PWH_VERDICT_ALPHA"):
        VerdictConfig.from_env({"PWH_VERDICT_ALPHA": "lots"})
    assert VerdictConfig.from_env({}, floor_pct=7).floor_pct == 7


def _brute_p(x, y):
    """Two-sided exact rank-sum p by enumerating every assignment (mid-ranks: ties exact)."""
    allv = list(x) + list(y)
    ranks = ss.rankdata(allv)
    n = len(x)
    w = sum(ranks[:n])
    mu = n * (len(allv) + 1) / 2
    sums = [sum(ranks[i] for i in c) for c in itertools.combinations(range(len(allv)), n)]
    lo = sum(s <= w + 1e-9 for s in sums) / len(sums)
    hi = sum(s >= w - 1e-9 for s in sums) / len(sums)
    assert mu  # the null is centred
    return min(1.0, 2 * min(lo, hi))


def test_equivalence_places_the_runs_at_the_margins_not_where_they_lean():
    """Issue 22 defect 1: a label leaning +2.5% got credit for the upward direction. Its runs
    placed at the baseline median +5% (spread kept) give p 0.064: a 5% regression is not
    excluded, although the old shift-from-where-they-are rule said 4.4% was detectable."""
    x = [5.892, 6.152, 6.172]
    y = [5.80, 5.90, 5.95, 6.00, 6.02, 6.05, 6.10, 6.20, 6.30]
    old = stats.min_detectable_shift(x, y, 0.05)
    assert max(old) * 100 < 5  # the old rule's 'power'
    eq = stats.equivalence(x, y, 5.0, 0.05)
    assert not eq.equivalent and eq.p_up == pytest.approx(0.0636, abs=1e-3)
    assert eq.p_down <= 0.05 and eq.bound_pct > 5
    placed = [v * 6.02 * 1.05 / stats.median(x) for v in x]
    assert eq.p_up == pytest.approx(_brute_p(placed, y))
    # the same spread centred on the baseline's median passes
    centred = [v * 6.02 / stats.median(x) for v in x]
    tight = [v for v in y for _ in range(2)]
    assert stats.equivalence(centred, tight, 5.0, 0.05).equivalent


def test_equivalence_counts_ties_exactly():
    """Quantised timings: the runs placed at -5% land exactly on baseline values. The p-value is
    the exact permutation p with mid-ranks, not the tie-free bound."""
    y = [100.0] * 6 + [95.0] * 3 + [105.0] * 3
    x = [100.0, 100.0, 100.0]
    eq = stats.equivalence(x, y, 5.0, 0.05)
    assert eq.p_down == pytest.approx(_brute_p([95.0] * 3, y))
    assert eq.p_up == pytest.approx(_brute_p([105.0] * 3, y))
    assert eq.p_down > 0.05 and not eq.equivalent  # ties with the baseline's 95s: not excluded
    assert stats.equivalence(x, [100.0] * 12, 5.0, 0.05).equivalent  # no ties at the margins
    assert stats.equivalence([0.0, 1.0], y, 5.0, 0.05) is None


def test_beyond_margin_p_is_small_only_for_changes_larger_than_the_margin():
    rng = np.random.default_rng(5)
    base = list(100 * np.exp(rng.normal(0, 0.02, 15)))
    big = [v * 1.15 for v in 100 * np.exp(rng.normal(0, 0.02, 3))]
    small = [v * 1.055 for v in 100 * np.exp(rng.normal(0, 0.02, 3))]
    assert stats.beyond_margin_p(big, base, 5.0, 1) <= 0.005
    assert stats.beyond_margin_p(small, base, 5.0, 1) > 0.05
    assert stats.beyond_margin_p(big, base, 5.0, -1) == 1.0  # the wrong way
    assert stats.beyond_margin_p([v * 0.85 / 1.15 for v in big], base, 5.0, -1) <= 0.005
