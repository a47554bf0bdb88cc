"""Bench ``verdict_limits`` (issue 22): what the generated data let an oracle test find.

    python -m bench.verdict_limits [--histories 4000] [--seed-base 1]

``bench.verdicts`` scores the engine against the ground truth of each scenario. This bench asks
what the same noise allows, so that a goal the data cannot meet is told apart from a defect of
the engine. It draws the values as the generator does (``synth._planted_factors`` and
``synth._run_factors`` on the scenario's ``HistorySpec``, with the keys of ``synth.run_keys``,
seed by seed), with no files, no warehouse and no verdict code. Only the tile series of each
scenario (19 keys) is drawn.

* **lone kernel under heavy tails** (``lone-kernel-heavy``: one kernel +10% at label 5, 8% noise
  per kernel and run, 1 run in 20 +40% on every kernel). An *oracle* that knows the onset and
  divides every run by its exact run-wide factor (what a perfect run-factor split would do)
  tests the runs of labels 5–9 (the onset and the 4 after it: the goal's "by the 4th label")
  against labels 0–4, one-sided: a z-test on the mean of the logs that also knows the noise
  (8%): the most powerful test of a +10% shift in this log-normal noise, an upper bound for
  any test; Welch's t on the logs and the exact Mann–Whitney U, which do not know it. *Found*
  = p <= alpha and the estimate (mean of the logs; pooled median for Mann–Whitney, as the
  engine's) beyond the floor, as a flag needs. The same oracle with nothing planted gives the
  false-positive rate at each alpha. Also in the form of the engine's late test
  (``late_confirm.sustained`` at the 4th label after the onset: labels 6–9 only, exact
  Mann–Whitney at its level split over the 4 onsets that have 3 baseline labels by then).
* **first label high** (``heavy-tails-first-high``: two of the first label's three runs are
  forced +30%): the share of histories whose third first-label run is a +40% outlier too while
  none of the 45 later runs is (exactly 0.05 × 0.95^45). There every kernel is ~25% lower from
  label 1 on and no outlier run shows anywhere else: by the labels' levels, a run-wide step
  at label 1.
* **noise before a step** (``noise-before-step``: label 6 nudged −5%, a real −12% step at label
  7, 3 tile kernels): the share of (history, kernel) where label 6's median is beyond the floor
  from the level before it (the median of labels 0–5) and within the floor of the level after
  it (labels 7–15). The floor is the smallest change that matters: there label 6 is at the new
  level, and the data put the step at label 6, not at the plant's label 7.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

import numpy as np

FLOOR_PCT = 5.0
ALPHAS = (0.001, 0.0025, 0.005, 0.01, 0.05)


@functools.cache
def _tile_keys() -> tuple[tuple[str, ...], dict[str, str]]:
    """``synth.run_keys("tile_profile")``, read from the seed documents once."""
    from warehouse import synth

    keys, family_of = synth.run_keys("tile_profile")
    return tuple(keys), family_of


def _kernel_runs(spec, series: str, kernels: list[str], labels: range, *,
                 split: bool) -> np.ndarray:
    """log values of ``kernels`` in a tile series, shape (kernels, labels, repeats), drawn as
    ``synth.generate`` draws them; divided by the run's exact run-wide factor when ``split``."""
    from warehouse import synth

    keys, family_of = _tile_keys()
    out = np.empty((len(kernels), len(labels), spec.repeats))
    for li, seq in enumerate(labels):
        for rep in range(spec.repeats_of(seq)):
            planted = synth._planted_factors(spec, series, seq, rep, keys, family_of)
            f, run_f = synth._run_factors(spec, series, seq, rep, keys, planted)
            for ki, k in enumerate(kernels):
                out[ki, li, rep] = math.log(f[k] / run_f if split else f[k])
    return out


def late_alpha() -> float:
    """The per-onset level of the engine's late test at the 4th label after an onset at label 5
    (label 9): onsets 3..6 have the ``guard_min_labels`` baseline labels it needs."""
    from warehouse.modelling import late_confirm
    from warehouse.modelling.stats import VerdictConfig

    cfg = VerdictConfig()
    i = 9
    onsets = range(max(cfg.guard_min_labels, i - late_confirm.MAX_SPAN + 1),
                   i - late_confirm.MIN_SPAN + 2)
    return late_confirm.ALPHA_FRACTION * cfg.confirm_alpha / len(onsets)


def lone_kernel(histories: int, seed_base: int = 1) -> dict:
    """Power and false-positive rate of the oracle on ``lone-kernel-heavy-tile``."""
    from scipy import stats as sst

    from warehouse import scenarios, synth

    onset, after = 5, 4
    cases = {}
    for name, nothing in (("plant +10%", False), ("nothing planted", True)):
        before, new = [], []
        for seed in range(seed_base, seed_base + histories):
            spec = scenarios.spec("lone-kernel-heavy", seed)
            if nothing:
                spec = synth.noise_only(spec)
            x = _kernel_runs(spec, "lone-kernel-heavy-tile", [scenarios.T1],
                             range(onset + after + 1), split=True)[0]
            before.append(x[:onset].ravel())
            new.append(x[onset:].ravel())
        b, a = np.array(before), np.array(new)
        sigma = spec.noise_pct / 100  # the kernel noise the z-test knows
        z = (a.mean(1) - b.mean(1)) / (sigma * math.sqrt(1 / a.shape[1] + 1 / b.shape[1]))
        pz = sst.norm.sf(z)
        t = sst.ttest_ind(a, b, axis=1, equal_var=False, alternative="greater").pvalue
        u = sst.mannwhitneyu(a, b, axis=1, alternative="greater", method="exact").pvalue
        est_mean = (np.exp(a.mean(1) - b.mean(1)) - 1) * 100
        est_median = (np.exp(np.median(a, 1) - np.median(b, 1)) - 1) * 100
        later = a[:, 3:]  # labels 6-9: the late test leaves the onset's own runs out
        ul = sst.mannwhitneyu(later, b, axis=1, alternative="greater", method="exact").pvalue
        cases[name] = {
            "histories": histories,
            "estimate_below_floor": {"mean": float(np.mean(est_mean < FLOOR_PCT)),
                                     "median": float(np.mean(est_median < FLOOR_PCT))},
            "found": {str(al): {
                "z_known_noise": float(np.mean((pz <= al) & (est_mean >= FLOOR_PCT))),
                "welch_t": float(np.mean((t <= al) & (est_mean >= FLOOR_PCT))),
                "mann_whitney": float(np.mean((u <= al) & (est_median >= FLOOR_PCT)))}
                for al in ALPHAS},
            "late_test_form": {"alpha": late_alpha(),
                               "found": float(np.mean((ul <= late_alpha()) &
                                                      (est_median >= FLOOR_PCT)))},
        }
    return cases


def first_high(histories: int, seed_base: int = 1) -> dict:
    """How often ``heavy-tails-first-high`` draws a history the data read as a run-wide step."""
    from warehouse import scenarios, synth

    keys, _ = _tile_keys()
    step_like = 0
    for seed in range(seed_base, seed_base + histories):
        spec = scenarios.spec("heavy-tails-first-high", seed)
        first, later = [], []
        for seq in range(spec.labels):
            for rep in range(spec.repeats_of(seq)):
                _, run_f = synth._run_factors(spec, "heavy-tails-first-high-tile", seq, rep,
                                              keys, {})
                (first if seq == 0 else later).append(run_f)
        step_like += min(first) >= 1.2 and max(later) < 1.2
    return {"histories": histories, "all_first_runs_high_none_later": step_like / histories,
            "expected": spec.run_outlier_rate * (1 - spec.run_outlier_rate) ** 45}


def noise_before_step(histories: int, seed_base: int = 1) -> dict:
    """How often label 6 of ``noise-before-step-tile`` is at the new level by its own runs."""
    from warehouse import scenarios

    at_new, n = 0, 0
    kernels = [scenarios.T1, scenarios.T2, scenarios.T3]
    for seed in range(seed_base, seed_base + histories):
        spec = scenarios.spec("noise-before-step", seed)
        xs = _kernel_runs(spec, "noise-before-step-tile", kernels, range(spec.labels),
                          split=False)
        for x in xs:
            old, new, lab6 = np.median(x[:6]), np.median(x[7:]), np.median(x[6])
            n += 1
            at_new += abs(math.exp(lab6 - old) - 1) * 100 >= FLOOR_PCT and \
                abs(math.exp(new - lab6) - 1) * 100 < FLOOR_PCT
    return {"histories": histories, "kernel_histories": n,
            "label6_at_new_level_beyond_floor": at_new / n}


def table(res: dict) -> str:
    lk = res["lone_kernel"]
    lines = ["lone kernel +10% under heavy tails (tile series), oracle: onset known, exact run "
             "factors, labels 5-9 vs 0-4, one-sided:",
             "| alpha | found: z-test, noise known / Welch t / exact Mann-Whitney | false "
             "positives, nothing planted (same order) |", "|---|---|---|"]
    for al in ALPHAS:
        f, z = lk["plant +10%"]["found"][str(al)], lk["nothing planted"]["found"][str(al)]
        lines.append(f"| {al} | {f['z_known_noise']:.1%} / {f['welch_t']:.1%} / "
                     f"{f['mann_whitney']:.1%} | {z['z_known_noise']:.2%} / {z['welch_t']:.2%} / "
                     f"{z['mann_whitney']:.2%} |")
    lt, lz = lk["plant +10%"]["late_test_form"], lk["nothing planted"]["late_test_form"]
    lines.append(f"in the late test's form at the 4th label (labels 6-9 only, exact Mann-Whitney "
                 f"at {lt['alpha']:.2g}): found {lt['found']:.1%}, false positives "
                 f"{lz['found']:.2%}")
    eb = lk["plant +10%"]["estimate_below_floor"]
    lines.append(f"estimate below the {FLOOR_PCT:g}% floor (so no flag at any alpha): "
                 f"{eb['mean']:.1%} (mean of the logs), {eb['median']:.1%} (pooled medians), "
                 f"of {lk['plant +10%']['histories']} histories")
    fh = res["first_high"]
    lines.append(f"first label high: all three first-label runs high and none of the 45 later "
                 f"runs an outlier in {fh['all_first_runs_high_none_later']:.2%} of "
                 f"{fh['histories']} histories (exactly 0.05 x 0.95^45 = {fh['expected']:.2%})")
    nb = res["noise_before_step"]
    lines.append(f"noise before a step: label 6 beyond the floor from the old level and within it "
                 f"of the new one in {nb['label6_at_new_level_beyond_floor']:.1%} of "
                 f"{nb['kernel_histories']} kernel histories ({nb['histories']} histories x 3 "
                 "kernels)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.verdict_limits", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--histories", type=int, default=4000,
                    help="generated histories per case (default 4000)")
    ap.add_argument("--seed-base", type=int, default=1, help="first seed (default 1)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args(argv)
    if a.histories < 1:
        ap.error("--histories must be at least 1")
    res = {"lone_kernel": lone_kernel(a.histories, a.seed_base),
           "first_high": first_high(a.histories, a.seed_base),
           "noise_before_step": noise_before_step(max(1, a.histories // 4), a.seed_base)}
    print(json.dumps(res, indent=1) if a.json else table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
