"""Issue 22, defect 4, on small deterministic histories.

A first label off by noise is the only baseline of the labels after it: two of its three runs
+30% (or -10%) on every kernel (whole-run heavy-tailed noise) or on a few kernels (their own
noise), nothing else changed. Before, later labels pooled against that one label "confirmed" a
change (-21.5% against label 1 alone). And a noise label whose runs straddle the baseline
(-10%, -5%, 0%), significant on its own, took the real step of the next label.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from warehouse.modelling.verdicts import Cell, judge_series

FLAGS = ("regressed", "improved")


def first_label_off(seed: int, spike: float, *, run_ids: bool, keys: int = 20,
                    spiked_keys: int | None = None, labels: int = 12,
                    step: tuple[int, float] | None = None) -> list[Cell]:
    """Heavy-tailed run noise (1 run in 20 +40% on every kernel), 2% per kernel and run; two of
    the first label's three runs times ``spike`` on every kernel (``spiked_keys`` None) or on
    the first ``spiked_keys`` kernels; ``step``: (label, factor) on kernels 0-2."""
    rng = np.random.default_rng(seed)
    run_f = {(lab, r): (1.4 if rng.random() < 0.05 else 1.0) for lab in range(labels)
             for r in range(3)}
    cells = []
    for k in range(keys):
        for lab in range(labels):
            vals = []
            for r in range(3):
                f = run_f[(lab, r)] * math.exp(rng.normal(0, 0.02))
                if lab == 0 and r < 2 and (spiked_keys is None or k < spiked_keys):
                    f *= spike
                if step and k < 3 and lab >= step[0]:
                    f *= step[1]
                vals.append(10.0 * (k + 1) * f)
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                              [f"r{lab}.{r}" for r in range(3)] if run_ids else []))
    return cells


def flags(rows):
    return {(r["key"], r["label_seq"]): r["verdict"] for r in rows if r["verdict"] in FLAGS}


@pytest.mark.parametrize("spike", [1.3, 0.9])
def test_a_first_label_off_by_noise_on_every_kernel_is_not_a_change(spike):
    """The runs carry ids: the kernels moved only as their runs did, and the run-wide component
    (judged by the same rules) did not establish the move, so no kernel is flagged."""
    for seed in range(8):
        rows = judge_series(first_label_off(seed, spike, run_ids=True))
        assert flags(rows) == {}, (seed, flags(rows))


@pytest.mark.parametrize("spike", [1.3, 0.9])
def test_a_first_label_off_by_its_own_noise_is_not_a_change(spike):
    """No run ids (no run-wide component): with one baseline label, a baseline run already at
    the new level says the baseline label may be what was off; no flag."""
    for seed in range(8):
        rows = judge_series(first_label_off(seed, spike, run_ids=False, spiked_keys=5))
        bad = flags(rows)
        assert bad == {}, (seed, bad)
        r = next(r for r in rows if r["key"] == "k0" and r["label_seq"] == 1)
        if abs(r["delta_pct"]) >= 5:
            assert r["verdict"] == "inconclusive"


def test_an_early_step_is_still_found_under_heavy_tails():
    """What the rules above must not cost: +15% on three kernels at the 2nd label, with the
    same heavy-tailed run noise, written on the 2nd label."""
    found = 0
    for seed in range(8):
        rows = judge_series(first_label_off(seed, 1.0, run_ids=True, step=(1, 1.15)))
        got = flags(rows)
        assert all(v == "regressed" and key in ("k0", "k1", "k2") for (key, _), v in got.items())
        found += sum(got.get((f"k{k}", 1)) == "regressed" for k in range(3))
    # of 24; the 3 left (seed 5): two of label 2's runs +40% on every kernel, a larger move
    # that supersedes the candidate (as before these rules: a known case, not their cost)
    assert found >= 21, found


def test_an_early_step_the_level_moved_on_from_is_found_at_the_next_label():
    """Held-out seed 502, ``early-label-2-tile``: a kernel +13% at the 2nd label and +19% from
    the 3rd on. The next two labels moved on from the 2nd by more than the floor, so the level
    moved at the 3rd (issue 22, defect 2); but the 2nd label then rejoined the baseline of the
    3rd, where its runs, already near the new level, kept the one-label-baseline rule from
    ever confirming: the step was never flagged. A label the level moved on from is in no
    baseline while the move after it is open: the change is written on the 3rd label."""
    for seed in range(6):
        rng = np.random.default_rng(seed)
        cells = []
        for lab in range(12):
            level = 1.0 if lab == 0 else 1.12 if lab == 1 else 1.20
            for k in range(3):
                vals = [10.0 * (k + 1) * (level if k == 0 else 1.0) * math.exp(rng.normal(0, 0.01))
                        for _ in range(3)]
                cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals))
        got = flags(judge_series(cells))
        assert got == {("k0", 2): "regressed"}, (seed, got)


def first_label_all_high(later_outlier: int | None, seed: int = 0, keys: int = 20,
                         labels: int = 12) -> list[Cell]:
    """Every one of the first label's three runs high on every kernel (two +30%, the third in
    the +40% tail: heavy-tails-first-high, fresh seeds 502 and 503), 2% per kernel and run;
    ``later_outlier``: the label of one later run in the +40% tail."""
    rng = np.random.default_rng(seed)
    run_f = {(0, 0): 1.3, (0, 1): 1.3, (0, 2): 1.4}
    if later_outlier is not None:
        run_f[(later_outlier, 1)] = 1.4
    cells = []
    for k in range(keys):
        for lab in range(labels):
            vals = [10.0 * (k + 1) * run_f.get((lab, r), 1.0) * math.exp(rng.normal(0, 0.02))
                    for r in range(3)]
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                              [f"r{lab}.{r}" for r in range(3)]))
    return cells


def test_a_first_label_whose_every_run_is_an_outlier_is_not_a_change_once_one_recurs():
    """No baseline run is at the new level, so the pooled labels confirm a run-wide -25% at
    the 2nd label against the 1st alone (fresh seed 503: at the 5th label, 12 vs 3 runs); a
    run of the later level as high as the baseline's (one run in 20 at +40%, here at the 7th
    label, after that confirmation) shows that this series' outlier runs reach the baseline
    label's level: the change is vetoed and the walk done again, so no kernel is flagged."""
    rows = judge_series(first_label_all_high(later_outlier=6))
    assert flags(rows) == {}, flags(rows)
    r = next(r for r in rows if r["key"] == "k0" and r["label_seq"] == 1)
    assert r["run_wide_verdict"] == "inconclusive" and r["run_wide_pct"] < -20
    # what the veto rests on: without a later outlier run nothing tells the first label's runs
    # from a change, which is then written on every kernel at the 2nd label
    rows = judge_series(first_label_all_high(later_outlier=None))
    assert set(flags(rows)) == {(f"k{k}", 1) for k in range(20)}
    assert {r["run_wide_verdict"] for r in rows if r["label_seq"] == 1} == {"improved"}


def test_the_outlier_veto_itself():
    """``outlier_reach``: a run of the later level on the baseline's side of the nearest
    baseline run; the change's direction decides which side that is."""
    from warehouse.modelling.candidate_tests import outlier_reach

    base = [13.0, 13.1, 14.0]
    assert outlier_reach(base, [10.0, 10.1, 9.9, 14.0], -1) == (14.0, 13.0)
    assert outlier_reach(base, [10.0, 10.1, 9.9, 12.9], -1) is None
    assert outlier_reach(base, [10.0, 10.1, 9.9, 12.9], +1) == (10.0, 13.0)
    assert outlier_reach([], [1.0], -1) is None


def test_a_baseline_run_short_of_the_midpoint_does_not_hold_an_early_step_open():
    """Fresh seed 503, ``early-label-2-audit``: +10% at the 2nd label, one of the first label's
    runs 4.9% up, within the floor of the new level but nearer the old one. Taken for a run "at
    the new level" it held the step open for ten labels and the baseline restarted without a
    flag; a run past the midpoint still holds it (``heavy-tails-first-low``)."""
    rng = np.random.default_rng(3)

    def cells(third: float) -> list[Cell]:
        out = []
        for lab in range(12):
            for k in range(3):
                if lab == 0:
                    vals = [1.0, 1.0, third] if k == 0 else [1.0, 1.0, 1.0]
                else:
                    vals = [(1.10 if k == 0 else 1.0) for _ in range(3)]
                vals = [10.0 * (k + 1) * v * math.exp(rng.normal(0, 0.001)) for v in vals]
                out.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals))
        return out

    assert flags(judge_series(cells(1.049))) == {("k0", 1): "regressed"}
    # the same run past the midpoint: the first label may be the one off (two runs low)
    rows = judge_series(cells(1.085))
    assert flags(rows) == {}
    r = next(r for r in rows if r["key"] == "k0" and r["label_seq"] == 1)
    assert "already at the new level" in r["evidence"], r["evidence"]


def test_with_two_baseline_labels_each_must_hold_a_run_at_the_new_level():
    """Fresh seed 802, ``early-label-3-audit``: +10% at the 3rd label, one run of the 2nd label
    past the midpoint. The 1st label, every run at the old level, says the old level is real:
    the step is written on the 3rd label. With a run at the new level in both labels, the
    baseline may be what was off: no flag."""
    rng = np.random.default_rng(4)

    def cells(first_third: float) -> list[Cell]:
        out = []
        for lab in range(12):
            for k in range(3):
                vals = [1.0, 1.0, 1.0]
                if k == 0 and lab == 1:
                    vals = [1.0, 1.0, 1.08]
                if k == 0 and lab == 0:
                    vals = [1.0, 1.0, first_third]
                if k == 0 and lab >= 2:
                    vals = [1.10] * 3
                vals = [10.0 * (k + 1) * v * math.exp(rng.normal(0, 0.001)) for v in vals]
                out.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals))
        return out

    assert flags(judge_series(cells(1.0))) == {("k0", 2): "regressed"}
    assert flags(judge_series(cells(1.09))) == {}


def outlier_in_baseline(seed: int, keys: int = 20, labels: int = 12) -> list[Cell]:
    """Fresh seed 901, ``heavy-tails-early-audit``: +15% on three kernels at the 2nd label; the
    first label's third run is in the +40% tail on every kernel (+37%): the one baseline label
    holds a run above every run of the new level. 2% per kernel and run, 1% per run."""
    rng = np.random.default_rng(seed)
    run_f = {(lab, r): math.exp(rng.normal(0, 0.01)) for lab in range(labels) for r in range(3)}
    run_f[(0, 2)] *= 1.37
    cells = []
    for k in range(keys):
        for lab in range(labels):
            vals = [10.0 * (k + 1) * run_f[(lab, r)] * (1.15 if k < 3 and lab >= 1 else 1.0)
                    * math.exp(rng.normal(0, 0.02)) for r in range(3)]
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                              [f"r{lab}.{r}" for r in range(3)]))
    return cells


def test_an_early_step_over_a_lone_outlier_run_in_its_baseline_is_found():
    """Against three baseline runs one of which is above every new run, no rank test reaches
    confirm_alpha (30 runs vs 3: p >= 0.0057), and the step stayed ``inconclusive`` on 11 keys
    of fresh seed 901. That run is off on every kernel, alone in its label: it is judged at its
    label's level (each value divided by its run factor, times the label's median factor), so
    the step is written on its label. The rows keep the values as measured and say what was
    judged: ``run_factors`` holds what each run was divided by (1 for the others)."""
    for seed in range(6):
        rows = judge_series(outlier_in_baseline(seed))
        assert flags(rows) == {(f"k{k}", 1): "regressed" for k in range(3)}, (seed, flags(rows))
        r0 = next(r for r in rows if r["key"] == "k5" and r["label_seq"] == 0)
        assert max(r0["run_values"]) > 1.3 * min(r0["run_values"])  # as measured
        assert r0["run_factors"][-1] == pytest.approx(1.37, abs=0.05)
        assert r0["run_factors"][:2] == [1.0, 1.0]
        r1 = next(r for r in rows if r["key"] == "k0" and r["label_seq"] == 1)
        assert "a lone outlier run taken at its label's level" in r1["evidence"]
        assert "r0.2 (+3" in r1["evidence"], r1["evidence"]


def test_a_label_whose_runs_all_moved_is_no_outlier_run():
    """A step of the whole run (every run of a label, every kernel) and a label of two runs
    are left as measured: only a run off its label's other runs is an outlier run."""
    from warehouse.modelling import run_factors
    from warehouse.modelling.stats import VerdictConfig

    cells = []
    for k in range(10):
        for lab in range(6):
            n = 2 if lab == 4 else 3
            f = [1.3] * n if lab == 3 else [1.0, 1.0, 1.5][:n] if lab == 4 else [1.0] * n
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab,
                              [10.0 * (k + 1) * x for x in f], [f"r{lab}.{r}" for r in range(n)]))
    est = run_factors.estimate(cells, VerdictConfig())
    assert est is not None
    assert run_factors.outlier_runs(cells, est[0], VerdictConfig()) == {}
    lone = [Cell(c.kind, c.key, c.label, c.label_seq,
                 [v * (1.5 if c.label_seq == 1 and r == "r1.0" else 1.0)
                  for v, r in zip(c.values, c.runs, strict=True)], c.runs) for c in cells]
    f = run_factors.estimate(lone, VerdictConfig())[0]
    assert set(run_factors.outlier_runs(lone, f, VerdictConfig())) == {"r1.0"}


def test_a_run_factor_that_lifts_a_baseline_run_to_the_new_level_does_not_hold_a_step_open():
    """Held-out seed 1002, ``heavy-tails-early-audit``: +15% on three kernels at the 2nd label,
    a split series (heavy-tailed run noise). One run of the 1st label was 5% low on every
    other kernel, so its run factor (~0.95) divided this kernel's value, at the old level as
    measured, up near the new level: taken for "a baseline run already at the new level" (the
    1st label may be what was off), it held the step open for ten labels and the step was
    never flagged, nor was it confirmed while a later run "reached" that lifted run. A
    baseline run counts as at the new level only if it is there as measured too."""

    def cells(lift: bool) -> list[Cell]:
        rng = np.random.default_rng(11)
        # run-wide noise (3% a run) larger than each kernel's own (1%): the series is split
        run_f = {(lab, r): math.exp(rng.normal(0, 0.03)) for lab in range(12) for r in range(3)}
        run_f[(0, 1)] = 0.95
        out = []
        for k in range(20):
            for lab in range(12):
                vals = []
                for r in range(3):
                    f = run_f[(lab, r)] * math.exp(rng.normal(0, 0.01))
                    if lab == 0 and r == 1 and k == 0 and lift:
                        f /= 0.95  # kernel 0's own noise cancels its run's 5% there
                    if k < 3 and lab >= 1:
                        f *= 1.10
                    vals.append(10.0 * (k + 1) * f)
                out.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                                [f"r{lab}.{r}" for r in range(3)]))
        return out

    for lift in (True, False):
        rows = judge_series(cells(lift))
        r0 = next(r for r in rows if r["key"] == "k0" and r["label_seq"] == 0)
        assert r0["run_factors"] and min(r0["run_factors"]) < 0.97, r0["run_factors"]
        got = flags(rows)
        assert {key for key, _ in got} == {"k0", "k1", "k2"}, (lift, got)
        assert all(lab == 1 and v == "regressed" for (_, lab), v in got.items()), (lift, got)


def _split_series(seed: int, *, run_wide_step: float | None = None, low0: float | None = None,
                  out: float | None = None, step: float | None = None, x: bool = False,
                  y: bool = False, labels: int = 12) -> list[Cell]:
    """20 kernels x ``labels`` labels x 3 runs, run-wide noise 3% a run and 1% per kernel (the
    series is split). On k0 alone: ``low0`` its 1st label off by its own noise, ``out`` one of
    its runs at label 7 as far off, ``step`` a real step at label 1, ``x`` run r7.0 +12% on
    every kernel with k0 back at the old level there, ``y`` run r9.1 -20% on every kernel;
    ``run_wide_step``: every kernel from label 5 on."""
    rng = np.random.default_rng(seed)
    rf = {(lab, r): math.exp(rng.normal(0, 0.03)) for lab in range(labels) for r in range(3)}
    if x:
        rf[(7, 0)] *= 1.12
    if y:
        rf[(9, 1)] *= 0.80
    cells = []
    for k in range(20):
        for lab in range(labels):
            vals = []
            for r in range(3):
                f = rf[(lab, r)] * math.exp(rng.normal(0, 0.01))
                if k == 0 and low0 and lab == 0:
                    f *= low0
                if k == 0 and out and (lab, r) == (7, 0):
                    f *= out
                if k == 0 and step and lab >= 1:
                    f *= step
                if k == 0 and x and (lab, r) == (7, 0):
                    f *= 0.84
                if run_wide_step and lab >= 5:
                    f *= run_wide_step
                vals.append(10.0 * (k + 1) * f)
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                              [f"r{lab}.{r}" for r in range(3)]))
    return cells


def _k0_flags(rows) -> dict[int, str]:
    """k0's own flags (the run-wide step's label 5 left out)."""
    return {r["label_seq"]: r["verdict"] for r in rows if r["key"] == "k0"
            and r["verdict"] in FLAGS and r["label_seq"] != 5}


@pytest.mark.parametrize("seed", [1, 3, 7, 9, 11])
def test_values_as_measured_are_not_compared_across_a_run_wide_change(seed):
    """Review of 8486077: k0's 1st label 13% low by its own noise and one later run of it as
    low; nothing else changes on k0. That later run says the baseline label may be made of
    such runs: no flag. With every kernel +20% from label 5 (a run-wide change), the later
    run as measured carries the +20% and no longer reached the baseline's level: a false
    early flag on k0. Runs as measured are compared only within one run-wide level."""
    assert _k0_flags(judge_series(_split_series(seed, low0=0.87, out=0.87))) == {}
    assert _k0_flags(judge_series(_split_series(seed, run_wide_step=1.2, low0=0.87, out=0.87))) == {}


@pytest.mark.parametrize("seed", [12, 13, 14, 15])
def test_a_later_run_reaches_the_baseline_only_if_it_does_so_both_ways(seed):
    """Review of 8486077: a real +15% step of k0 at label 1. Run X (label 7) +12% on every
    kernel with k0 back at the old level reaches the baseline only kernel-specifically; run Y
    (label 9) -20% on every kernel only as measured. Each alone left the step flagged; both
    together held it open for ten labels and it was lost: the two tests were passed by two
    different runs."""
    for x, y in ((True, False), (False, True), (True, True)):
        got = _k0_flags(judge_series(_split_series(seed, step=1.15, x=x, y=y)))
        assert got == {1: "regressed"}, (x, y, got)
