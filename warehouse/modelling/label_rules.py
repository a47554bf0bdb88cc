"""One label against its baseline: the verdict before later labels are known (``decide``) and
the small rules it shares with the walk of ``verdicts.py`` (effect size, quantiles, formatting).

Split from ``verdicts.py`` (issue 22): that module walks a kernel's labels and settles candidate
changes; this one says what a single comparison shows — a rank test beyond the floor and the
baseline's spread, ``unchanged`` only where the equivalence test at the floor passes
(``stats.equivalence``), the MAD guard when runs are too few.
"""

from __future__ import annotations

import math

from warehouse.modelling.stats import VerdictConfig, median


def fmt_p(p: float) -> str:
    if p < 0.001:
        return f"{p:.1e}"
    return f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def fmt_pct(x: float) -> str:
    return f"{x:+.1f}%"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def flagged(verdict: str) -> str:
    """A verdict as evidence text, neutral about direction: the engine judges facts where a rise
    is bad (durations) and metrics where it may be good (throughput, ``marts.metric_trends``
    maps the flags to increased/decreased), so the evidence says which way the value moved."""
    return {"regressed": "flagged as a rise", "improved": "flagged as a fall"}.get(verdict, verdict)


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def quantile(values: list[float], q: float) -> float:
    b = sorted(values)
    pos = q * (len(b) - 1)
    lo = int(math.floor(pos))
    return b[lo] + (b[min(lo + 1, len(b) - 1)] - b[lo]) * (pos - lo)


def beyond_quantile(new: list[float], base: list[float], sign: int, q: float) -> bool:
    """Is the median of ``new`` beyond the ``q`` quantile of ``base`` (the ``1 - q`` quantile
    when ``sign`` < 0)? Noise that moves whole runs (bimodal runs, heavy tails) puts baseline
    runs up there too, so a level no higher than the baseline's own slow runs is no change."""
    b = sorted(base)
    pos = (q if sign > 0 else 1 - q) * (len(b) - 1)
    lo = int(math.floor(pos))
    edge = b[lo] + (b[min(lo + 1, len(b) - 1)] - b[lo]) * (pos - lo)
    return median(new) > edge if sign > 0 else median(new) < edge


def equiv_text(eq, floor: float) -> str:
    """The equivalence test's two placements, as evidence."""
    return (f"runs placed at the baseline median +{floor:g}%: p={fmt_p(eq.p_up)}, "
            f"−{floor:g}%: p={fmt_p(eq.p_down)}")


def superiority(u: float, n: int, m: int, sign: int) -> float:
    """P(a run of the first sample is beyond a baseline run in direction ``sign``), ties half:
    the common-language effect size U / (n·m) [McGraw & Wong 1992; Vargha & Delaney 2000]."""
    a = u / (n * m) if n and m else 0.5
    return a if sign > 0 else 1 - a


def at_new_level(d_label: float, d_after: float, sign: int) -> bool:
    """Is a label that moved ``d_label`` % nearer the level after it (``d_after`` %, both
    against the same baseline, change direction ``sign``) than the baseline? The onset of a
    change is taken to be there; a label short of halfway moved with noise or with its runs,
    not with the change (``verdicts._KernelJudge._own_labels``, ``late_confirm.sustained``)."""
    return 2 * d_label * sign >= d_after * sign


def decide(r: dict, cfg: VerdictConfig) -> None:
    """The verdict of one label against its baseline, before later labels are known."""
    n, m, nl = r["repeats"], r["baseline_runs"], r["baseline_labels"]
    delta, floor = r["delta_pct"], cfg.floor_pct
    base = f"vs median of {plural(nl, 'label')}"
    if delta is None:
        if not n:
            why = "no run of this kernel in this label"
        elif r["_pos"] == 0:
            why = "first label of this kernel in the series"
        elif not m:
            why = "no earlier runs since the last accepted change"
        else:
            why = "the baseline median is 0"
        r["verdict"], r["evidence"] = "inconclusive", f"no baseline: {why}"
        return
    d = fmt_pct(delta)
    if r["method"] == "rank_test":
        p, md = r["p_value"], r["min_detectable_pct"]
        sig = p <= cfg.alpha
        test = f"Mann-Whitney U, {n} vs {m} runs"
        power = (f"smallest margin the runs exclude {md:.1f}%" if md is not None
                 else "no shift detectable")
        if sig and abs(delta) >= floor and (
                r["_sup"] < cfg.min_superiority
                or not beyond_quantile(r["run_values"], r["_base_runs"], 1 if delta > 0 else -1,
                                        cfg.min_superiority)):
            r["verdict"] = "inconclusive"
            r["evidence"] = (f"p={fmt_p(p)}, {d} {base}: significant and beyond the floor, but "
                             f"the runs overlap the baseline's ({r['_sup']:.0%} of run pairs "
                             f"moved that way; a change needs {cfg.min_superiority:.0%} and the "
                             f"label's median beyond {cfg.min_superiority:.0%} of the baseline "
                             f"runs) ({test})")
        elif sig and abs(delta) >= r["_spread"]:
            r["verdict"] = "regressed" if delta > 0 else "improved"
            r["evidence"] = f"p={fmt_p(p)}, {d} {base} ({test})"
        elif sig and abs(delta) >= floor:
            r["verdict"] = "inconclusive"
            r["evidence"] = (f"p={fmt_p(p)}, {d} {base}: significant and beyond the floor, but "
                             f"within the label-to-label spread of the baseline "
                             f"({cfg.spread_k:g}·MAD of label medians: {r['_spread']:.1f}%) "
                             f"({test})")
        elif abs(delta) >= floor:
            r["verdict"] = "inconclusive"
            r["evidence"] = (f"p={fmt_p(p)}, {d} {base}: beyond the {floor:g}% floor but not "
                             f"significant at {cfg.alpha:g} ({test}; {power})")
        elif (eq := r.get("_equiv")) is not None and eq.equivalent:
            r["verdict"] = "unchanged"
            extra = "significant but " if sig else ""
            r["evidence"] = (f"p={fmt_p(p)}, {d} {base}: {extra}within the {floor:g}% floor, "
                             f"and a {floor:g}% change would have been seen ({equiv_text(eq, floor)})"
                             f" ({test}; {power})")
        else:
            r["verdict"] = "inconclusive"
            need = r["runs_needed"]
            what = (f"needs ≥ {need} runs of this label to see {floor:g}%" if need is not None
                    else f"the baseline's spread hides {floor:g}%: needs more runs on both sides")
            shown = (f"the data do not exclude a {floor:g}% change ({equiv_text(eq, floor)})"
                     if eq is not None else f"no equivalence test ({power})")
            r["evidence"] = (f"p={fmt_p(p)}, {d} {base}: within the {floor:g}% floor, but "
                             f"underpowered: {shown}; {what} ({test})")
        return
    few = (f"{plural(n, 'run')} vs {plural(m, 'baseline run')}"
           + (f", smallest attainable p={fmt_p(r['min_attainable_p'])}"
              if r["min_attainable_p"] is not None else ""))
    need = (f"; a rank test needs ≥ {r['runs_needed']} runs of this label"
            if r["runs_needed"] is not None else "")
    if r["method"] == "mad_guard":
        thr = r["_threshold"]
        if abs(delta) > thr:
            r["verdict"] = "regressed" if delta > 0 else "improved"
            r["evidence"] = (f"{d} {base} exceeds {r['_guard']}; too few runs for a rank test "
                             f"({few})")
        else:
            r["verdict"] = "inconclusive"
            r["evidence"] = (f"{d} {base} within {r['_guard']}; too few runs for a rank test "
                             f"({few}{need}), so no claim of 'unchanged'")
        return
    r["verdict"] = "inconclusive"
    r["evidence"] = (f"{d} {base}: too few runs for a rank test ({few}{need}) and fewer than "
                     f"{cfg.guard_min_labels} baseline labels for the MAD guard")
