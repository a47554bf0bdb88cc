"""The run-wide factor split from each kernel's own (issue 10, the bimodal watch list), on small
deterministic histories whose cells carry run ids (as ``marts.kernel_trends`` passes them).

Each test fails when its rule breaks: bimodal noise no longer leaves most cells inconclusive;
steps of one kernel, of a set of kernels and of every kernel are still found at their label;
'unchanged' stays powered on the kernel-specific values; no split without run ids or with too
few keys per run; the result does not depend on cell order; bad input stays NaN-free.
"""

from __future__ import annotations

import math
import random

import numpy as np

from warehouse.modelling import run_factors, stats
from warehouse.modelling.stats import VerdictConfig
from warehouse.modelling.verdicts import Cell, judge_series

FLAGS = ("regressed", "improved")


def bimodal(rng):
    return 1.12 if rng.random() < 0.5 else 1.0


def run_noise_3pct(rng):
    """3% log-normal noise shared by every kernel of a run: enough for the split."""
    return math.exp(rng.normal(0, 0.03))


def history(seed: int, labels: int = 16, repeats: int = 3, kernels: int = 19,
            steps: dict | None = None, run_noise=None, ids: bool = True) -> list[Cell]:
    """Like ``test_verdicts_rules.history``, each value tagged with its run's id."""
    rng = np.random.default_rng(seed)
    cells = []
    for lab in range(labels):
        lf = math.exp(rng.normal(0, 0.005))
        runs = [lf * math.exp(rng.normal(0, 0.01)) * (run_noise(rng) if run_noise else 1.0)
                for _ in range(repeats)]
        rid = [f"run-{lab}-{i}" for i in range(repeats)] if ids else []
        for k in range(kernels):
            f = 1.0
            if steps and k in steps:
                at, factor = steps[k]
                f = factor if lab >= at else 1.0
            vals = [100 * (k + 1) * rf * f * math.exp(rng.normal(0, 0.02)) for rf in runs]
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals, list(rid)))
    return cells


def flagged(rows):
    return {(r["key"], r["label_seq"]): r["verdict"] for r in rows if r["verdict"] in FLAGS}


def watch_share(rows):
    return sum(r["verdict"] == "inconclusive" and r["delta_pct"] is not None
               and abs(r["delta_pct"]) >= 5 for r in rows) / len(rows)


def test_bimodal_noise_no_longer_leaves_most_cells_inconclusive():
    """Each run +12% on every kernel with probability 1/2: without the split, 45-65% of cells
    were inconclusive beyond the floor; the run-wide part is now judged once per label."""
    for seed in range(3):
        rows = judge_series(history(seed, run_noise=bimodal))
        split = judge_series(history(seed, run_noise=bimodal, ids=False))
        assert watch_share(split) > 0.3, seed  # what the split removes
        assert watch_share(rows) < 0.2, seed
        assert not flagged(rows), seed
        assert {r["run_wide_verdict"] for r in rows} <= {*stats.VERDICTS}
        # the run-wide uncertainty is still reported, once per label, on every row of the label
        wide = {r["label_seq"]: (r["run_wide_verdict"], r["run_wide_pct"]) for r in rows}
        assert all(len({(r["run_wide_verdict"], r["run_wide_pct"]) for r in rows
                        if r["label_seq"] == s}) == 1 for s in wide)
        assert any(v == "inconclusive" and p is not None and abs(p) >= 5
                   for v, p in wide.values()), seed


def test_steps_under_bimodal_noise_are_found_at_their_label():
    """A lone kernel (+12%) and a set of three (+15%) under run-wide bimodal noise."""
    for seed in range(3):
        rows = judge_series(history(seed, run_noise=bimodal, steps={0: (5, 1.12)}))
        assert flagged(rows) == {("k0", 5): "regressed"}, seed
        rows = judge_series(history(seed, run_noise=bimodal,
                                    steps={k: (8, 1.15) for k in (3, 4, 5)}))
        assert flagged(rows) == {(f"k{k}", 8): "regressed" for k in (3, 4, 5)}, seed


def test_a_step_of_every_kernel_is_a_run_wide_change_flagged_on_each_kernel():
    for seed in range(3):
        rows = judge_series(history(seed, run_noise=run_noise_3pct,
                                    steps={k: (8, 1.15) for k in range(19)}))
        assert flagged(rows) == {(f"k{k}", 8): "regressed" for k in range(19)}, seed
        at = [r for r in rows if r["label_seq"] == 8]
        assert all(r["run_wide_verdict"] == "regressed" and r["run_wide_pct"] > 10 for r in at)
        assert all(abs(r["kernel_delta_pct"]) < 5 and "run-wide change" in r["evidence"]
                   for r in at)
        # every kernel's baseline restarts at the run-wide change: the +15% is not seen again
        later = [r for r in rows if r["label_seq"] == 12]
        assert all(r["baseline_from_label"] == "L8" and abs(r["delta_pct"]) < 10 for r in later)


def test_unchanged_is_powered_on_the_kernel_specific_values():
    """Every 'unchanged' row: its runs divided by their run factors, placed at the baseline
    median x (1 +- floor), differ from the baseline's (divided likewise) at alpha; the factors
    are those of the row."""
    cells = history(4, run_noise=bimodal)
    rows = judge_series(cells)
    f = run_factors.factors(cells, VerdictConfig())
    adj = {(c.key, c.label_seq): [v / f[r] for v, r in zip(c.values, c.runs, strict=True)]
           for c in cells}
    unchanged = [r for r in rows if r["verdict"] == "unchanged"]
    assert len(unchanged) > 150
    for r in unchanged:
        assert sorted(v / g for v, g in zip(r["run_values"], r["run_factors"], strict=True)) \
            == sorted(adj[(r["key"], r["label_seq"])])
        lo = int(r["baseline_from_label"][1:])
        base = [x for s in range(lo, r["label_seq"]) for x in adj[(r["key"], s)]]
        own = adj[(r["key"], r["label_seq"])]
        for g in (1.05, 0.95):  # the equivalence rule (issue 22): placed at the baseline's +-5%
            placed = [x * stats.median(base) * g / stats.median(own) for x in own]
            assert stats.mann_whitney_u(placed, base).p <= 0.05, r


def test_no_split_without_run_ids_few_keys_or_little_run_wide_noise():
    """Gaussian noise (1% per run, 2% per kernel): dividing by the run factors would cut the
    run-to-run spread by less than a quarter, so the series is judged as measured; its
    run-wide component is still judged (issue 22). Without run ids or with too few keys there
    is no run-wide component at all."""
    for cells in (history(1, ids=False, run_noise=bimodal), history(1, kernels=5,
                                                                    run_noise=bimodal)):
        rows = judge_series(cells)
        assert {r["run_wide_verdict"] for r in rows} == {"none"}
        assert all(r["run_factors"] == [] and r["kernel_delta_pct"] == r["delta_pct"]
                   for r in rows)
    for cells in (history(1), history(1, steps={k: (8, 1.15) for k in range(19)})):
        rows = judge_series(cells)
        assert all(r["run_factors"] == [] and r["kernel_delta_pct"] == r["delta_pct"]
                   for r in rows)
        assert "none" not in {r["run_wide_verdict"] for r in rows if r["label_seq"] > 0}
    off = judge_series(history(1, run_noise=bimodal), VerdictConfig(run_factor_min_keys=0))
    assert {r["run_wide_verdict"] for r in off} == {"none"}


def test_the_split_does_not_depend_on_cell_order():
    cells = history(2, run_noise=bimodal, steps={0: (5, 1.12)})
    rows = judge_series(cells)
    shuffled = list(cells)
    random.Random(0).shuffle(shuffled)
    assert judge_series(shuffled) == rows


def test_one_run_per_label_vanishing_kernels_and_bad_values_stay_nan_free():
    cells = history(3, repeats=1, run_noise=bimodal, steps={0: (8, 1.2)})
    cells = [c for c in cells if not (c.key == "k1" and c.label_seq >= 8)]  # vanishes
    cells = [c for c in cells if not (c.key == "k2" and c.label_seq < 5)]  # appears
    cells.append({"kind": "kernel", "key": "odd", "label": "L3", "label_seq": 3,
                  "values": [float("nan"), 0.0], "runs": ["run-3-0", "run-3-0"]})
    rows = judge_series(cells)
    assert len(rows) == len(cells)
    for r in rows:
        for k, v in r.items():
            assert not (isinstance(v, float) and not math.isfinite(v)), (r["key"], k, v)
            if isinstance(v, list):
                assert all(math.isfinite(x) for x in v), (r["key"], k, v)
    assert not any(r["verdict"] == "unchanged" for r in rows)  # one run: never 'unchanged'


def test_a_kernel_against_a_run_wide_change():
    """Every kernel +15% at label 8 but k0 -30% (net about -20%): k0 improved, the rest regressed;
    k1 +0% (net about -13% relative to its runs, 0% as measured): not flagged."""
    steps = {k: (8, 1.15) for k in range(2, 19)}
    steps[0] = (8, 0.80)
    for seed in range(3):
        rows = judge_series(history(seed, run_noise=run_noise_3pct, steps=steps))
        want = {(f"k{k}", 8): "regressed" for k in range(2, 19)}
        want[("k0", 8)] = "improved"
        assert flagged(rows) == want, seed


def test_a_step_of_every_kernel_is_one_run_wide_change_whether_split_or_not():
    """Issue 22 defect 5: every kernel +8% at label 7 (a clock or driver change) under little
    run noise, where the split is not used, was judged kernel by kernel: keys whose next label
    landed under the floor were never flagged or flagged late. Now the run-wide component is
    judged all the same and its change written on every kernel at its label; likewise in a
    split series (3% run noise, where +8% is within the run factors' own spread: +12%)."""
    for seed in range(3):
        for kernels, noise, factor in ((19, None, 1.08), (59, None, 1.08),
                                       (59, run_noise_3pct, 1.12)):
            cells = history(seed, kernels=kernels, run_noise=noise,
                            steps={k: (7, factor) for k in range(kernels)})
            rows = judge_series(cells)
            assert flagged(rows) == {(f"k{k}", 7): "regressed" for k in range(kernels)}, \
                (seed, kernels, noise is None)
            at7 = [r for r in rows if r["label_seq"] == 7]
            assert {r["run_wide_verdict"] for r in at7} == {"regressed"}
            assert all("run-wide change" in r["evidence"] for r in at7)


def test_a_sustained_change_keeps_its_flag_when_the_run_wide_part_is_judged():
    """Issue 22 defect 6: a change found by the labels after it (``late_confirm``) starts at a
    label that moved less than the floor on its own (+4.5%); with the run-wide component judged
    beside the kernel (run ids, the series judged as measured), the guard against a move of
    the run's (the kernel's own delta within the floor) must look at the labels pooled, not
    at the onset alone, or the flag is dropped for good. Since the minimum-effect test (the
    pooled runs beyond the floor with significance) the late confirmation comes by label 8 to
    11, and seed 4's +4.5%, +12%, +3%, +11%, +4% is written on label 6 (one late) once label
    12 is in; with 12 labels it was not flagged at all. Label 5's +4.5% sits about midway to
    the level after it: on seed 0 its median lands nearer the baseline, and the late test's
    onset at label 6 (at the new level) is preferred to it."""
    level = {5: 1.045, 6: 1.12, 7: 1.03, 8: 1.11, 9: 1.04}
    late = 0
    for seed in range(6):
        cells = history(seed, labels=14)
        cells = [Cell(c.kind, c.key, c.label, c.label_seq,
                      [v * level.get(c.label_seq, 1.10 if c.label_seq > 9 else 1.0)
                       for v in c.values] if c.key == "k0" else c.values, c.runs)
                 for c in cells]
        rows = judge_series(cells)
        assert {r["run_wide_verdict"] for r in rows if r["label_seq"] > 0} != {"none"}
        assert all(r["run_factors"] == [] for r in rows)  # judged as measured
        got = flagged(rows)
        assert got in ({("k0", 5): "regressed"}, {("k0", 6): "regressed"}), (seed, got)
        (_, at), = got
        r = next(r for r in rows if (r["key"], r["label_seq"]) == ("k0", at))
        if "a sustained change" in r["evidence"]:  # else label 5's noise made it a candidate
            late += 1
            assert r["confirmed_by_label"] in ("L8", "L9", "L10", "L11", "L12")[
                :4 + (at - 5)], (seed, at, r["confirmed_by_label"])
    assert late >= 3


# bimodal-steps-tile, fresh seed 703 (python -m bench.verdicts --seed-base 701): the run-wide
# factor of each run, label by label. A 50/50 two-mode machine (x1.12): 9 of the 24 runs of
# labels 0-7 in its slow mode, 16 of the 21 of labels 9-15; each mode stays where it was (+2%)
BIMODAL_703 = [
    [0.9, 0.929, 1.009], [0.926, 1.013, 1.019], [0.902, 0.911, 0.929], [0.997, 1.008, 1.02],
    [0.903, 0.904, 1.008], [0.89, 0.911, 0.918], [0.929, 1.013, 1.026], [0.9, 0.901, 0.904],
    [0.909, 1.01, 1.021], [0.913, 0.916, 1.003], [1.026, 1.035, 1.038], [0.912, 0.996, 1.021],
    [1.041, 1.047, 1.05], [0.92, 0.936, 1.02], [0.995, 1.038, 1.051], [1.033, 1.035, 1.041]]


def test_runs_falling_in_the_other_mode_more_often_are_no_run_wide_change():
    """The run-wide component of a two-mode machine: the runs of the later labels fell in the
    slow mode more often (9 of 24 before, 16 of 21 after), which moves the pooled median by the
    gap between the modes (+10%) and gives a late confirmation p = 8e-5, while neither mode
    moved. It flagged every kernel at label 8 (18 false cells, 5.9% of the series); a change
    must move the level within a mode (late_confirm.modes)."""
    rng = np.random.default_rng(703)
    cells = []
    for lab, runs in enumerate(BIMODAL_703):
        for k in range(19):
            vals = [10.0 * (k + 1) * f * math.exp(rng.normal(0, 0.02)) for f in runs]
            cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals,
                              [f"r{lab}-{j}" for j in range(len(runs))]))
    rows = judge_series(cells)
    flags = sorted({(r["label_seq"], r["verdict"]) for r in rows if r["verdict"] in FLAGS})
    assert flags == [], flags
    assert all(r["run_wide_verdict"] not in FLAGS for r in rows)


def test_modes_are_a_two_mode_machine_not_heavy_tails():
    """``late_confirm.modes``: the widest gap of at least the floor with a fifth of the runs on
    each side at least; outlier runs of heavy-tailed noise are no mode."""
    from warehouse.modelling import late_confirm

    two = [0.9, 0.91, 0.92, 0.93, 1.01, 1.02, 1.03, 0.9, 1.0, 0.91]
    cut = late_confirm.modes(two, 5.0)
    assert cut is not None and 0.93 < cut < 1.0
    tails = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.4]  # one run in ten +40%
    assert late_confirm.modes(tails, 5.0) is None
    assert late_confirm.modes([1.0, 1.01, 0.99, 1.02, 0.98, 1.0], 5.0) is None  # one mode
    # within the modes: the mix moved, no mode did -> no change; both moved -> a change
    before = two
    mix = [0.9, 1.0, 1.01, 1.02, 1.03, 1.0, 1.02, 1.01, 0.92, 1.03]
    assert not late_confirm._moved_within_modes(mix, before, 1, 5.0)
    step = [x * 1.08 for x in before]
    assert late_confirm._moved_within_modes(step, before, 1, 5.0)


# step-10pct-audit, held-out seed 903 (python -m bench.verdicts --seed-base 901): the runs of
# cudnn::nchwToNhwcKernel as measured (/1500) and the run-wide factor of each run, label by label.
# A +10% step of its family at label 8 lifts the run factors of labels 8-9 by ~1-3%
STEP_903 = [
    [0.9654, 0.9958, 1.0171], [0.9599, 0.9768, 0.9769], [0.9951, 1.0197, 1.0236],
    [0.957, 0.9979, 1.0067], [0.9774, 0.9821, 1.005], [0.9909, 1.0028, 1.0079],
    [0.9686, 0.9789, 0.9894], [0.9959, 1.0003, 1.0448], [1.0629, 1.0668, 1.0775],
    [1.0853, 1.0941, 1.1163], [1.0742, 1.0831, 1.0885], [1.0906, 1.1112, 1.1129],
    [1.0843, 1.0933, 1.1291], [1.0651, 1.0689, 1.0845], [1.0683, 1.1027, 1.1292],
    [1.0247, 1.0674, 1.0904]]
FACTORS_903 = [
    [0.9758, 0.9719, 0.9997], [0.9487, 0.9639, 0.9663], [1.0043, 1.0094, 1.0003],
    [0.9904, 0.9659, 0.9695], [0.9783, 0.998, 0.9719], [1.0004, 1.0127, 0.9827],
    [1.0034, 0.9766, 0.9907], [0.9975, 0.9715, 1.0131], [1.0113, 1.0151, 0.9921],
    [1.0022, 1.0095, 1.0125], [1.0009, 1.0101, 1.0034], [0.9892, 1.0095, 0.9943],
    [1.0023, 0.9931, 0.9879], [1.0041, 1.0199, 1.0304], [1.0139, 0.9742, 1.0327],
    [0.966, 1.0088, 1.0053]]


def test_a_kernels_own_move_is_judged_on_the_labels_that_confirmed_it():
    """Held-out seed 903, ``step-10pct-audit``: label 8 moved +7.2% as measured (p = 6.8e-4)
    and label 9 confirmed it (+8.6% pooled, p = 3.4e-6), but label 8 alone moved +4.0%
    relative to its runs, within the floor, so the flag was withdrawn as the run's move and
    written a label late, on label 9. The kernel's own move is now judged on the labels that
    confirmed it, pooled, as the test that confirmed it (with one run a label, on the
    candidate's label alone: tests/test_verdicts_one_run.py). Replayed among 58 keys that carry
    the run factors with 2% noise of their own (the series is judged as measured, as there)."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        cells = []
        for lab, (v0, f) in enumerate(zip(STEP_903, FACTORS_903, strict=True)):
            runs = [f"r{lab}_{j}" for j in range(3)]
            for k in range(59):
                vals = v0 if k == 0 else [x * math.exp(rng.normal(0, 0.02)) for x in f]
                cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab,
                                  [100.0 * (k + 1) * v for v in vals], runs))
        rows = judge_series(cells)
        k0 = {r["label_seq"]: r for r in rows if r["key"] == "k0"}
        assert all(r["run_factors"] == [] for r in k0.values())  # judged as measured
        got = {s: r["verdict"] for s, r in k0.items() if r["verdict"] in FLAGS}
        assert got == {8: "regressed"}, (seed, got)
        assert k0[8]["confirmed_by_label"] == "L9"


def test_a_label_high_with_its_runs_just_before_a_real_step_does_not_take_it():
    """Review of the pooled own move (helper 57): every kernel's runs of label 4 +8% (the whole
    run, not a change the run-wide component establishes), then this kernel's real +12% step at
    label 5. Pooled with label 5, label 4's own move sits halfway (+6%) and would pass the
    floor: the step was written on label 4. Label 4 alone, nearer the old level, moved with its
    runs: it rejoins the baseline and the step is written on label 5."""
    for seed in range(4):
        rng = np.random.default_rng(seed)
        cells = []
        for lab in range(10):
            runs = [f"r{lab}_{j}" for j in range(3)]
            for k in range(20):
                vals = [100.0 * (k + 1) * math.exp(rng.normal(0, 0.01))
                        * (1.08 if lab == 4 else 1.0) * (1.12 if k == 0 and lab > 4 else 1.0)
                        for _ in runs]
                cells.append(Cell("kernel", f"k{k}", f"L{lab}", lab, vals, runs))
        rows = judge_series(cells)
        k0 = {r["label_seq"]: r for r in rows if r["key"] == "k0"}
        got = {s: r["verdict"] for s, r in k0.items() if r["verdict"] in FLAGS}
        assert got == {5: "regressed"}, (seed, got)
        assert "the move is the run's" in k0[4]["evidence"]
        assert not any(r["verdict"] in FLAGS for r in rows if r["key"] != "k0")
