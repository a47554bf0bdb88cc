"""The run-wide component of a series, split from each kernel's own (issue 10, watch list).

Noise that moves a whole run (a busy node, a clock state, a bimodal machine: every kernel of the
run +12%) is shared by all the kernels of that run. Judged kernel by kernel it looks like a
kernel's change in half the labels and leaves them ``inconclusive``. ``verdicts.judge_series``
therefore, when the runs of a series carry at least ``run_factor_min_keys`` trend keys:

* gives every run a **run factor**: the median over the run's keys of (value / that key's median
  over the whole series) — robust while fewer than half of a run's keys change at once;
  normalised so that the series' median run factor is 1; the series is split only when dividing
  by them cuts the run-to-run spread within labels by ``run_factor_min_gain`` (a quarter): with
  little run-wide noise the split would add the factors' estimation noise and nothing else;
* judges the **run-wide** component once per label: a pseudo-key whose runs are the run factors
  of the label, by the same rules as a kernel (rank test, confirmation by the next label, power,
  MAD guard, change points);
* judges each kernel on its **kernel-specific** values (each run's value divided by its run
  factor), its baseline restarting where the run-wide component changed;
* combines them per (kernel, label) (:func:`combine`): a run-wide change flags every kernel that
  moved with it beyond the floor; otherwise the kernel-specific verdict stands, and the row says
  what the run as a whole did (``run_wide_pct``, ``run_wide_verdict``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from warehouse.modelling.label_rules import flagged
from warehouse.modelling.stats import VerdictConfig, mad, median

RUN_KEY = ("run", "*")
FLAGS = ("regressed", "improved")


def factors(cells: Sequence, cfg: VerdictConfig) -> dict[str, float] | None:
    """Run id -> run factor, or None when the series is not split (runs carry no id, fewer
    than ``run_factor_min_keys`` keys per run in the median run, or the split would not cut the
    spread). Independent of cell order."""
    est = estimate(cells, cfg)
    return est[0] if est is not None and est[1] else None


def estimate(cells: Sequence, cfg: VerdictConfig) -> tuple[dict[str, float], bool] | None:
    """(run id -> run factor, split?) or None when runs carry no id or too few keys. The run
    factors are judged as the run-wide component whether or not the kernels are then judged on
    their values divided by them (``split``: when that cuts the run-to-run spread)."""
    if cfg.run_factor_min_keys <= 0 or not cells or any(len(c.runs) != len(c.values)
                                                           for c in cells):
        return None
    per_key: dict[tuple[str, str], list[float]] = {}
    for c in cells:
        per_key.setdefault((c.kind, c.key), []).extend(c.values)
    ref = {k: median(v) for k, v in per_key.items() if v}
    ratios: dict[str, list[float]] = {}
    for c in cells:
        r0 = ref.get((c.kind, c.key))
        if not r0 or r0 <= 0:
            continue
        for v, run in zip(c.values, c.runs, strict=True):
            if v > 0:
                ratios.setdefault(run, []).append(v / r0)
    if not ratios or median([len(x) for x in ratios.values()]) < cfg.run_factor_min_keys:
        return None
    raw = {run: median(x) for run, x in ratios.items() if len(x) >= cfg.run_factor_min_keys}
    ok = [f for f in raw.values() if f > 0 and math.isfinite(f)]
    if not ok:
        return None
    mid = median(ok)
    f = {run: (raw[run] / mid if run in raw and raw[run] > 0 and math.isfinite(raw[run]) else 1.0)
         for run in ratios}
    before, after = _spread(cells, None), _spread(cells, f)
    # run-wide noise is not what spreads the runs: the split would only add noise
    split = not (before is None or after is None or after > (1 - cfg.run_factor_min_gain) * before)
    return f, split


def _spread(cells: Sequence, f: dict[str, float] | None) -> float | None:
    """Run-to-run spread within labels: the median over every (key, label) cell of 2+ runs of
    |value / the cell's median - 1| (the median run's 0 left out), on the values as measured
    (``f`` None) or divided by their run factors."""
    devs = []
    for c in cells:
        if len(c.values) < 2:
            continue
        vals = (c.values if f is None else
                [v / f.get(r, 1.0) for v, r in zip(c.values, c.runs, strict=True)])
        m = median(vals)
        if m > 0:
            devs += [abs(v / m - 1) for v in vals if v != m]
    return median(devs) if devs else None


def adjusted(cells: Sequence, f: dict[str, float], cell_type) -> list:
    """Each cell with every run's value divided by its run factor (kernel-specific values)."""
    return [cell_type(c.kind, c.key, c.label, c.label_seq,
                      [v / f.get(run, 1.0) for v, run in zip(c.values, c.runs, strict=True)],
                      list(c.runs))
            for c in cells]


def factor_cells(cells: Sequence, f: dict[str, float], cell_type) -> list:
    """One pseudo-kernel cell per label: the run factors of its runs."""
    labels: dict[int, tuple[str, set[str]]] = {}
    for c in cells:
        labels.setdefault(c.label_seq, (c.label, set()))[1].update(c.runs)
    out = []
    for seq, (label, runs) in labels.items():
        rs = sorted(runs)
        out.append(cell_type(RUN_KEY[0], RUN_KEY[1], label, seq, [f.get(r, 1.0) for r in rs], rs))
    return out


def restarts(w_rows: list[dict]) -> set[int]:
    """Labels (label_seq) where the run-wide component changed: every kernel's baseline restarts."""
    return {r["label_seq"] for r in w_rows if r["verdict"] in FLAGS}


def _pct(x: float | None) -> str:
    return "no value" if x is None else f"{x:+.1f}%"


def moved_with(delta: float | None, kd: float | None, sign: int, cfg: VerdictConfig) -> bool:
    """Did a kernel move with a run-wide change of direction ``sign``? By the floor as measured
    (``delta``), or that way at all while its kernel-specific value (``kd``: relative to its
    runs) stayed within the floor: a step of every kernel is then written on every kernel, also
    where its own noise left it a little under the floor (issue 22, defect 5)."""
    if delta is None or delta * sign <= 0:
        return False
    return delta * sign >= cfg.floor_pct or (kd is not None and abs(kd) < cfg.floor_pct)


def kernel_delta(raw: Sequence, pos: int | list[int], base: list[int],
                 f: dict[str, float]) -> float | None:
    """The kernel-specific delta of label ``pos`` (or of the labels ``pos`` pooled) vs the labels
    ``base`` (positions in ``raw``, the kernel's cells): each run's value divided by its run
    factor."""
    def adj(c):
        return [v / f.get(r, 1.0) for v, r in zip(c.values, c.runs, strict=True)]
    own = [x for j in ([pos] if isinstance(pos, int) else pos) for x in adj(raw[j])]
    b = [x for j in base for x in adj(raw[j])]
    if not own or not b or median(b) <= 0:
        return None
    d = (median(own) / median(b) - 1) * 100
    return d if math.isfinite(d) else None


def combine_measured(k: dict, raw: Sequence, w: dict | None, f: dict[str, float],
                     cfg: VerdictConfig, level: dict[str, float] | None = None) -> None:
    """Row ``k`` of a kernel judged on its values as measured (the series not split: too little
    run-wide noise), with the run-wide component ``w`` of its label judged all the same: a
    run-wide change flags every kernel that moved with it (:func:`moved_with`), so a change of
    every kernel (a clock or driver change) is found as one change at its label, whether or
    not the split is used against noise."""
    k.update(run_factors=[], kernel_delta_pct=k["delta_pct"], run_wide_pct=None,
             run_wide_verdict="none")
    if level:
        _as_measured(k, raw, level, f)
    if w is None:
        return
    wd, wv = w["delta_pct"], w["verdict"]
    k["run_wide_pct"], k["run_wide_verdict"] = wd, wv
    kflag = k["verdict"] if k["verdict"] in FLAGS else None
    delta = k["delta_pct"]
    if wv not in FLAGS:
        if kflag is not None:
            # a change found by the labels pooled after it: their kernel-specific move
            kd = kernel_delta(raw, k.get("_pooled") or k["_pos"], k["_base"], f)
            if kd is not None and abs(kd) < cfg.floor_pct:
                # the kernel moved only as its runs did: the move is the run's, and the run-wide
                # component, judged by the same rules, did not establish it (issue 22, defect
                # 4: a first label whose runs were high by noise on every kernel, the only
                # baseline of the labels after it)
                k["evidence"] = (f"was {flagged(kflag)}: {k['evidence']}; but this kernel moved "
                                 f"{_pct(kd)} relative to its runs: the move is the run's "
                                 f"({_pct(wd)}, {flagged(wv)} as a whole)")
                k["verdict"] = "inconclusive"
        return
    sign = 1 if wv == "regressed" else -1
    if kflag == wv:
        k["evidence"] = f"run-wide change ({w['evidence']}); this kernel {_pct(delta)} with it; " \
                        f"its own: {k['evidence']}"
        return
    if kflag is not None:
        k["evidence"] += f"; against the run-wide change ({flagged(wv)}, {_pct(wd)})"
        return
    kd = kernel_delta(raw, k["_pos"], k["_base"], f)
    if moved_with(delta, kd, sign, cfg):
        was = k["verdict"]
        k.update(verdict=wv, method=w["method"], p_value=w["p_value"], q_value=w["q_value"],
                 confirmed_by_label=w["confirmed_by_label"])
        k["evidence"] = (f"run-wide change ({w['evidence']}); this kernel {_pct(delta)} with it "
                         f"({_pct(kd)} relative to its runs); was {flagged(was)} on its own: "
                         f"{k['evidence']}")
    else:
        k["evidence"] += (f"; the run as a whole {_pct(wd)} ({flagged(wv)}), this kernel {_pct(delta)}")


def _measured(k: dict, raw: Sequence, divisor=None) -> float | None:
    """Row ``k``'s run values, median, baseline and delta as measured (``raw``: the kernel's raw
    cells by position); the delta it was judged on becomes ``kernel_delta_pct``; ``divisor``
    (run id -> what its value was divided by to be judged) fills ``run_factors`` in the order
    of ``run_values``. Returns the delta as measured (before the finite check)."""
    pos, base = k["_pos"], k["_base"]
    c = raw[pos]
    order = sorted(range(len(c.values)), key=lambda j: (c.values[j], c.runs[j]))
    vals = [c.values[j] for j in order]
    base_runs = [x for j in base for x in raw[j].values]
    med = median(vals) if vals else None
    bmed = median(base_runs) if base_runs else None
    delta = (med / bmed - 1) * 100 if med is not None and bmed else None
    k.update(run_values=vals, median=med, baseline_median=bmed,
             baseline_mad=mad([median(raw[j].values) for j in base]) if base else None,
             delta_pct=delta if delta is not None and math.isfinite(delta) else None,
             kernel_delta_pct=k["delta_pct"])
    if divisor is not None:
        k["run_factors"] = [divisor(c.runs[j]) for j in order]
    return delta


def _as_measured(k: dict, raw: Sequence, level: dict[str, float], f: dict[str, float]) -> None:
    """Row ``k`` judged with lone outlier runs at their label's level (:func:`outlier_runs`) in
    its label or its baseline: its values, median and delta go back to as measured, the judged
    delta is ``kernel_delta_pct`` and the evidence names the runs."""
    pos, base = k["_pos"], k["_base"]
    # the labels pooled to confirm the row's change are judged with them too
    by = k.get("confirmed_by_label")
    end = next((j for j in range(pos, len(raw)) if raw[j].label == by), pos) if by else pos
    runs = sorted({r for j in [*base, *range(pos, end + 1)] for r in raw[j].runs if r in level})
    if not runs:
        return
    own = any(r in level for r in raw[pos].runs)
    _measured(k, raw, (lambda r: f.get(r, 1.0) / level[r] if r in level else 1.0)
              if own else None)  # run_factors: what its values were divided by to be judged
    # a run id of the marts is its file's SHA-256: its first 12 digits name it
    off = ", ".join(f"{r[:12] if len(r) == 64 else r} "
                    f"({_pct((f.get(r, 1.0) / level[r] - 1) * 100)})" for r in runs[:3])
    more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
    k["evidence"] += (f"; judged with {'a lone outlier run' if len(runs) == 1 else 'lone outlier runs'}"
                      f" taken at its label's level (every kernel of the run off its label's "
                      f"other runs: {off}{more})")
    kd, d = k["kernel_delta_pct"], k["delta_pct"]
    if kd is not None and d is not None and abs(kd - d) >= 0.05:
        k["evidence"] += f": {_pct(kd)} so judged (kernel_delta_pct), {_pct(d)} as measured"


def combine(k: dict, raw: Sequence, w: dict | None, f: dict[str, float],
            cfg: VerdictConfig) -> None:
    """Turn kernel-specific row ``k`` (judged on adjusted values) into the row of the kernel:
    the label's own runs and deltas as measured (``raw``: the raw cells of the kernel by position),
    the run-wide component ``w`` of the label, and the verdict of both (see the module doc)."""
    delta = _measured(k, raw, lambda r: f.get(r, 1.0))
    kd = k["kernel_delta_pct"]
    if w is None:
        return
    wd, wv = w["delta_pct"], w["verdict"]
    k["run_wide_pct"], k["run_wide_verdict"] = wd, wv
    own = f"kernel-specific (each run divided by its run-wide factor): {k['evidence']}"
    whole = f"the run-wide factor of this label: {_pct(wd)}, {flagged(wv)}"
    if wv not in FLAGS:
        k["evidence"] = f"{own}; {whole}"
        return
    sign = 1 if wv == "regressed" else -1
    kflag = k["verdict"] if k["verdict"] in FLAGS else None
    if kflag == wv or (kflag is None and moved_with(delta, kd, sign, cfg)):
        if kflag is None:  # the flag comes from the run-wide test
            k.update(verdict=wv, method=w["method"], p_value=w["p_value"], q_value=w["q_value"],
                     confirmed_by_label=w["confirmed_by_label"])
        k["evidence"] = (f"run-wide change ({w['evidence']}); this kernel {_pct(delta)} with it; "
                         f"{own}")
    elif kflag is not None and delta is not None \
            and delta * (1 if kflag == "regressed" else -1) >= cfg.floor_pct:
        k["evidence"] = (f"{own}; against the run-wide change ({flagged(wv)}, {_pct(wd)}): this kernel "
                         f"{_pct(delta)}")
    elif kflag is not None or k["verdict"] == "unchanged" and delta is not None \
            and abs(delta) >= cfg.floor_pct:
        k["evidence"] = (f"was {flagged(k['verdict'])}: the run as a whole moved {_pct(wd)} ({flagged(wv)}) and "
                         f"this kernel {_pct(delta)}, {_pct(kd)} relative to its runs: {own}")
        k["verdict"] = "inconclusive"
    else:
        k["evidence"] = f"{own}; {whole}, this kernel {_pct(delta)}"


OUTLIER_RUN_FLOORS = 2.0  # a lone outlier run: off by this many floors from its label and series


def outlier_runs(cells: Sequence, f: dict[str, float], cfg: VerdictConfig) -> dict[str, float]:
    """Run id -> the level it is taken at, for the lone outlier runs of a series judged as
    measured: in a label of 3 runs at least, the one run whose factor is off by
    ``OUTLIER_RUN_FLOORS`` floors, the same way, both from the series' median run (1) and from
    the median factor of its label's other runs, which is that level — every kernel of that run
    moved together, alone (a heavy-tailed run: a busy node, a throttled clock). Its values are
    judged at that level (divided by its factor, times the level). A label where two runs or
    more are so off on one side (a step of the whole run, two modes) and one with too few runs
    to tell are left as measured, as is a run id found in two labels. Independent of cell order."""
    lab: dict[int, set[str]] = {}
    for c in cells:
        lab.setdefault(c.label_seq, set()).update(c.runs)
    seen = Counter(r for runs in lab.values() for r in runs)
    thr = OUTLIER_RUN_FLOORS * cfg.floor_pct / 100
    out = {}
    for seq in sorted(lab):
        runs = sorted(lab[seq])
        if len(runs) < 3:
            continue
        off: dict[int, list[tuple[str, float]]] = {1: [], -1: []}
        for r in runs:
            x = f.get(r, 1.0)
            level = median([f.get(o, 1.0) for o in runs if o != r])
            if level > 0 and abs(x / level - 1) >= thr and abs(x - 1) >= thr \
                    and (x > level) == (x > 1):
                off[1 if x > level else -1].append((r, level))
        for side in off.values():
            if len(side) == 1 and seen[side[0][0]] == 1:
                out[side[0][0]] = side[0][1]
    return out


def repaired(cells: Sequence, f: dict[str, float], level: dict[str, float], cell_type) -> list:
    """Each cell with the values of the runs of ``level`` (:func:`outlier_runs`) taken at that
    level: divided by their run factor, times the level."""
    if not level:
        return list(cells)
    return [cell_type(c.kind, c.key, c.label, c.label_seq,
                      [v / f.get(run, 1.0) * level[run] if run in level else v
                       for v, run in zip(c.values, c.runs, strict=True)], list(c.runs))
            if any(r in level for r in c.runs) else c
            for c in cells]
