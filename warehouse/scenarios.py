"""Named histories for ``pwh synth --scenario NAME``: each shows one behaviour of the verdicts.

Every scenario is a :class:`warehouse.synth.HistorySpec` with two series, ``<name>-tile`` (tile
profiles, 19 kernels) and ``<name>-audit`` (conv audits, 59 trend keys), 16 labels of 3 runs
unless the scenario says otherwise, 2% log-normal noise per kernel and run. Plants are step
changes at known labels (the ground truth says where); the noise scenarios plant nothing. The
verdict benchmark (``python -m bench.verdicts``) scores ``marts.kernel_trends`` on all of them.
"""

from __future__ import annotations

from warehouse.synth import HistorySpec, Plant, SeriesSpec

# tile-profile kernels and conv-audit kernels / families the plants move
T1, T2, T3 = "copy_u64", "exchange", "reduce_sum_f16"
A_FAMILY = "cudnn::nchwToNhwcKernel"  # a family of its own in the audit seed
A_KERNEL = "cudnn::nhwcToNchwKernel"  # one audit kernel, alone in its family

# name -> (description, kind, spec overrides, plants as (label_seq, factor, extra Plant fields))
# kind: noise (nothing planted: every flag is false), steps (planted), drift (slow, no step)
SCENARIOS: dict[str, tuple[str, str, dict, list]] = {
    "gaussian": ("2% Gaussian (log-normal) noise, nothing planted", "noise", {}, []),
    "heavy-tails": ("heavy tails: 1 run in 20 is +40% on every kernel, nothing planted", "noise",
                    {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4}, []),
    "bimodal": ("bimodal runs: each run has a 50% chance of +12% on every kernel, nothing "
                "planted", "noise", {"run_outlier_rate": 0.5, "run_outlier_factor": 1.12}, []),
    "bimodal-steps": ("bimodal runs as above, and +12% on one kernel alone at label 5 and on "
                      "three kernels at label 10 (real steps under run-wide noise)", "steps",
                      {"run_outlier_rate": 0.5, "run_outlier_factor": 1.12},
                      [(5, 1.12, {"single": True}), (10, 1.12, {})]),
    "outlier-run": ("one run of label 8 is +50% on every kernel, nothing planted", "noise",
                    {"spike_runs": ((8, 0, 1.5),)}, []),
    "step-3pct": ("a +3% step at label 8 (below the 5% floor: must not be flagged)", "steps", {},
                  [(8, 1.03, {})]),
    "step-8pct": ("a +8% step at label 8", "steps", {}, [(8, 1.08, {})]),
    "step-10pct": ("a +10% step at label 8", "steps", {}, [(8, 1.10, {})]),
    "early-label-2": ("+15% on three kernels at the 2nd label (label_seq 1)", "steps", {},
                      [(1, 1.15, {})]),
    "early-label-3": ("+15% on three kernels at the 3rd label (label_seq 2)", "steps", {},
                      [(2, 1.15, {})]),
    "single-kernel": ("+10% on one kernel alone at label 5 (of 19 tile / 59 audit keys)",
                      "steps", {}, [(5, 1.10, {"single": True})]),
    "one-run": ("one run per label, a +12% step at label 8", "steps",
                {"repeats": 1}, [(8, 1.12, {})]),
    "revert": ("+15% at label 6, reverted at label 10", "steps", {}, [(6, 1.15, {"until": 10})]),
    "drift": ("slow drift: +1% per label from label 1 on one kernel", "drift", {},
              [(1, 1.01, {"mode": "drift", "single": True})]),
    "out-of-order": ("files in random order, capture times in mixed UTC offsets, a -12% step at "
                     "label 7", "steps", {"shuffle_files": True}, [(7, 0.88, {})]),
    "vanish-appear": ("tile kernel exchange vanishes from label 8, reduce_sum_f16 appears at "
                      "label 5; a +12% step at label 10 elsewhere", "steps",
                      {"absent": (("{s}-tile", T2, 8, 10**6), ("{s}-tile", T3, 0, 5))},
                      [(10, 1.12, {"skip_absent": True})]),
    "labels-12": ("12 labels, a +12% step at label 6", "steps", {"labels": 12}, [(6, 1.12, {})]),
    "labels-30": ("30 labels, +12% at label 12 and -15% at label 20", "steps", {"labels": 30},
                  [(12, 1.12, {}), (20, 0.85, {})]),
    # issue 22: the defects a CI gate would trip over
    "quantised": ("timings quantised in 2% steps (ties everywhere), nothing planted: "
                  "'unchanged' needs the equivalence test with ties counted exactly", "noise",
                  {"quantise_pct": 2.0}, []),
    "step-then-quiet": ("13 labels, -12% at label 7 and nothing after it: the newest label, "
                        "what a CI gate reads, must not be flagged", "steps", {"labels": 13},
                        [(7, 0.88, {})]),
    "noise-before-step": ("label noise of -5% at label 6 (its runs -10%, -5%, 0%: not "
                          "significant alone) on the kernels of a real -12% step at label 7: "
                          "label 6 must not take the step", "steps", {},
                          [(6, 0.95, {"mode": "nudge"}), (7, 0.88, {})]),
    "noise-before-step-one-run": ("one run per label: +5.5% of noise at label 6, a real +20% "
                                  "step at label 7", "steps", {"repeats": 1},
                                  [(6, 1.055, {"mode": "nudge"}), (7, 1.20, {})]),
    "heavy-tails-early": ("heavy tails (1 run in 20 +40% on every kernel) and +15% on three "
                          "kernels at the 2nd label: no flag against the one or two baseline "
                          "labels after it", "steps",
                          {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4},
                          [(1, 1.15, {})]),
    "whole-run-8pct": ("every kernel +8% at label 7 (a clock or driver change), little run "
                       "noise (the series is not split): one run-wide change on every kernel",
                       "steps", {}, [(7, 1.08, {"all": True})]),
    "whole-run-12pct-heavy": ("every kernel +12% at label 7 under heavy-tailed run noise",
                              "steps", {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4},
                              [(7, 1.12, {"all": True})]),
    "lone-kernel-heavy": ("one kernel +10% at label 5 under heavy tails (1 run in 20 +40%) and "
                          "8% noise per kernel and run: found once later labels confirm it",
                          "steps", {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4,
                                    "noise_pct": 8.0}, [(5, 1.10, {"single": True})]),
    # issue 22, defect 4: a first label off by noise is the only baseline of the labels after it
    "heavy-tails-first-high": ("heavy tails (1 run in 20 +40% on every kernel) and two of the "
                               "first label's three runs +30%: the first label high by noise, "
                               "nothing planted; no flag against the one or two baseline labels "
                               "after it", "noise",
                               {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4,
                                "spike_runs": ((0, 0, 1.3), (0, 1, 1.3))}, []),
    "heavy-tails-first-low": ("heavy tails as above and two of the first label's three runs "
                              "-10%: the first label low by noise, nothing planted", "noise",
                              {"run_outlier_rate": 0.05, "run_outlier_factor": 1.4,
                               "spike_runs": ((0, 0, 0.9), (0, 1, 0.9))}, []),
}


def names() -> list[str]:
    return list(SCENARIOS)


def kind(name: str) -> str:
    return SCENARIOS[name][1]


def spec(name: str, seed: int = 1) -> HistorySpec:
    """The history of scenario ``name`` (KeyError names the known ones)."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
    _, _, over, plants = SCENARIOS[name]
    tile, audit = f"{name}-tile", f"{name}-audit"
    out = []
    for seq, factor, extra in plants:
        extra = dict(extra)
        single = extra.pop("single", False)
        if extra.pop("all", False):  # every kernel of both series: a change of the whole run
            out += [Plant(tile, seq, "*", factor, match="all", **extra),
                    Plant(audit, seq, "*", factor, match="all", **extra)]
            continue
        skip_absent = extra.pop("skip_absent", False)
        tile_kernels = [T1] if single or skip_absent else [T1, T2, T3]
        out += [Plant(tile, seq, k, factor, **extra) for k in tile_kernels]
        if single:
            out.append(Plant(audit, seq, A_KERNEL, factor, **extra))
        else:
            out.append(Plant(audit, seq, A_FAMILY, factor, match="family", **extra))
    kw = {"seed": seed, "labels": 16, "repeats": 3, "single_repeat_every": 0,
          "outlier_rate": 0.0, **over}
    if "absent" in kw:
        kw["absent"] = tuple((s.format(s=name), k, lo, hi) for s, k, lo, hi in kw["absent"])
    return HistorySpec(series=(SeriesSpec(tile, "tile_profile"), SeriesSpec(audit, "conv_audit")),
                       plants=tuple(out), **kw)
