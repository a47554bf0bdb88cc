"""The verdict rules of ``marts.kernel_trends``: one series in, one verdict per (kernel, label) out.

``udfs.py`` exposes :func:`judge_series` to SQL; the statistics it uses are in ``stats.py``. The
method (documented for analysts in ``docs/analyst-guide.md``, "How verdicts are decided"):

* each kernel is judged **on its own**, label by label in capture order: the runs of a label vs
  its **baseline** (the runs of earlier labels since the kernel's last accepted change, at most
  ``window_labels`` labels, never a label still under suspicion);
* a label beyond the practical floor (|delta| >= ``floor_pct``) is a **candidate change**: it
  leaves the baseline until the following labels settle it. The next label **confirms** it when
  it moves the same way beyond the floor and the candidate's runs pooled with it differ from
  the baseline by a rank test (p <= ``alpha``) and beyond the floor (``candidate_tests.py``:
  that test, and what a flag alone on the newest label needs); the verdict is then written
  **on the candidate's own label** (retroactive attribution) and the baseline restarts there.
  A next label that goes back **refutes** it (a transient: the label is ``inconclusive``, its
  runs rejoin the baseline). A next label that keeps going the same way without significance
  yet extends the candidate, for at most ``max_pending_labels`` labels;
* a candidate the next label moved on from (same direction, beyond the floor) waits a label:
  when that one moved on too, the level moved at the second label, where the change is
  written (issue 22, defect 2);
* a change no pair of labels shows is found by the labels after it, pooled against the
  baseline before it (``late_confirm.py``, issue 22 defect 6) and written on its own label;
* false flags are controlled by that replication (two labels, one of them independent of the
  first decision) rather than by Benjamini–Hochberg across the kernels of a label, which made a
  lone kernel's change undetectable (issue 10);
* ``unchanged`` only with **power**: the label's runs shifted by the floor, spread kept, would
  have been significant in both directions (``min_detectable_pct`` <= floor); otherwise
  ``inconclusive`` with what is missing;
* too few runs for a rank test: the MAD guard (``stats.mad``) calls a change only beyond
  max(k·MAD of label medians, k·MAD of runs, floor), never ``unchanged``;
* E-divisive change points (``stats.change_points``) settle a kernel's history at once in long
  series: a change point restarts the baseline, and an inconclusive label at a change point is
  re-judged on the label medians of the two segments (``change_point_rules.py``);
* noise shared by all the kernels of a run (bimodal machines, heavy-tailed runs) is split off
  first when the runs carry enough keys and dividing by the run factors cuts the run-to-run
  spread (``run_factors.py``): the run-wide component is judged
  once per label by these same rules, each kernel on its values divided by its run's factor,
  and :func:`run_factors.combine` writes the verdict of both; in a series not split, a lone
  outlier run (every kernel of it far off its label's other runs) is judged at its label's
  level (:func:`run_factors.outlier_runs`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from warehouse.modelling import candidate_tests, change_point_rules, late_confirm, run_factors
from warehouse.modelling.label_rules import (
    at_new_level,
    decide,
    finite,
    flagged,
    fmt_p,
    fmt_pct,
    plural,
    quantile,
    superiority,
)
from warehouse.modelling.stats import (
    ChangePoint,
    VerdictConfig,
    equivalence,
    mad,
    mann_whitney_u,
    median,
    min_attainable_p,
    runs_needed,
)

FLAGS = ("regressed", "improved")


@dataclass
class Cell:
    """Input: the runs of one (kernel, label) of a series."""

    kind: str
    key: str
    label: str
    label_seq: int
    values: list[float]
    runs: list[str] = field(default_factory=list)  # run id of each value (same order), if known


def _cell(c: Cell | dict) -> Cell:
    if isinstance(c, dict):
        c = Cell(c["kind"], c["key"], c["label"], int(c["label_seq"]), list(c["values"] or []),
                 list(c.get("runs") or []))
    runs = c.runs if len(c.runs) == len(c.values) else [None] * len(c.values)
    keep = [(float(x), r) for x, r in zip(c.values, runs, strict=True)
            if x is not None and math.isfinite(float(x))]
    c.values = [x for x, _ in keep]
    c.runs = [str(r) for _, r in keep] if keep and all(r is not None for _, r in keep) else []
    return c


def judge_series(cells: Iterable[Cell | dict], cfg: VerdictConfig | None = None) -> list[dict]:
    """Verdicts for every (kernel, label) cell of ONE series (the keys of ``udfs.TREND_FIELDS``).

    Kernels are independent of each other: each one's labels are judged in ``label_seq`` order.
    """
    cfg = cfg or VerdictConfig()
    cells = [_cell(c) for c in cells]
    est = run_factors.estimate(cells, cfg)
    if est is None:  # no run ids or too few keys per run: judged as measured, no run-wide part
        out = _judge_keys(_by_key(cells), cfg, set())
        for r in out:
            r.update(run_factors=[], kernel_delta_pct=r["delta_pct"], run_wide_pct=None,
                     run_wide_verdict="none")
    else:
        f, split = est
        w_rows = _judge_keys(_by_key(run_factors.factor_cells(cells, f, Cell)), cfg, set())
        w_at = {r["label_seq"]: r for r in w_rows}
        raw = _by_key(cells)
        restarts = run_factors.restarts(w_rows)
        if split:  # each kernel on its values divided by the run factors
            out = _judge_keys(_by_key(run_factors.adjusted(cells, f, Cell)), cfg, restarts,
                              split=f)
            join = run_factors.combine
        else:  # as measured, the run-wide component judged all the same
            # a lone outlier run (every kernel of it far off its label's other runs) is judged
            # at its label's level; the rows say so and keep the values as measured
            level = run_factors.outlier_runs(cells, f, cfg)
            judged = _by_key(run_factors.repaired(cells, f, level, Cell)) if level else raw
            out = _judge_keys(judged, cfg, restarts, measured={**f, **level},
                              raw=raw if level else None)
            join = functools.partial(run_factors.combine_measured, level=level)
        for r in out:
            join(r, raw[(r["kind"], r["key"])], w_at.get(r["label_seq"]), f, cfg)
    for r in out:
        for private in [x for x in r if x.startswith("_")]:
            del r[private]
    out.sort(key=lambda r: (r["label_seq"], r["kind"], r["key"]))
    return out


def _by_key(cells: Iterable[Cell]) -> dict[tuple[str, str], list[Cell]]:
    by_key: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        by_key.setdefault((c.kind, c.key), []).append(c)
    for lst in by_key.values():
        lst.sort(key=lambda c: c.label_seq)
    return by_key


def _judge_keys(by_key: dict[tuple[str, str], list[Cell]], cfg: VerdictConfig,
                restarts: set[int], measured: dict[str, float] | None = None,
                split: dict[str, float] | None = None,
                raw: dict[tuple[str, str], list[Cell]] | None = None) -> list[dict]:
    """Every key judged on its own; ``restarts``: label_seqs where every baseline restarts (the
    run-wide component changed there); ``measured``: the run factors, when the values are as
    measured (they include that run-wide change and every run's own); ``split``: the run
    factors the values were divided by, when they are kernel-specific; ``raw``: the cells as
    measured, when lone outlier runs were taken at their label's level."""
    out: list[dict] = []
    for k, lst in by_key.items():
        cps = change_point_rules.find(k, [median(c.values) if c.values else None for c in lst],
                                      cfg)
        as_measured = raw.get(k) if raw else None
        judge = _KernelJudge(k, lst, cps, cfg, restarts, measured, split=split, raw=as_measured)
        rows = judge.run()
        while veto := judge.outliers_reached():  # each pass vetoes one more change at least
            judge = _KernelJudge(k, lst, cps, cfg, restarts, measured, judge.vetoed | veto,
                                 split=split, raw=as_measured)
            rows = judge.run()
        out += rows
    return out


class _KernelJudge:
    """The label-by-label state machine of one kernel (see the module doc)."""

    def __init__(self, k: tuple[str, str], lst: list[Cell], cps: dict[int, ChangePoint],
                 cfg: VerdictConfig, restarts: set[int] = frozenset(),
                 measured: dict[str, float] | None = None,
                 vetoed: dict[int, tuple[float, float]] | None = None,
                 split: dict[str, float] | None = None, raw: list[Cell] | None = None):
        self.k, self.lst, self.cps, self.cfg = k, lst, cps, cfg
        self.split = split  # run -> the factor its values were divided by (split series)
        self.raw = raw  # the cells as measured, by position (lone outlier runs repaired in lst)
        self.restarts = frozenset(restarts)  # label_seqs where the run-wide component changed
        # changes confirmed against fewer than guard_min_labels baseline labels: their
        # position -> the baseline's labels; and those a later run showed to be outlier runs
        self.early: dict[int, list[int]] = {}
        self.vetoed = dict(vetoed or {})
        self.run_wide = set(restarts) if measured is not None else set()
        self.factors = measured
        # lowest baseline position of each label: after the last run-wide change before it
        self.low = []
        for c in lst:
            rb = max((r for r in restarts if r < c.label_seq), default=None)
            self.low.append(0 if rb is None else
                            next(j for j, d in enumerate(lst) if d.label_seq >= rb))
        self.rows: list[dict | None] = [None] * len(lst)
        self.seg = 0  # first label of the current level (last accepted change)
        self.pend: list[int] = []  # candidate change: its labels, in order
        self.sign = 0  # its direction
        self.aside: set[int] = set()  # labels the level moved on from: in no baseline meanwhile
        self.meds = [median(c.values) if c.values else None for c in lst]

    def as_measured(self, j: int) -> list[float]:
        """The runs of label ``j`` as measured, in the order of ``lst[j].values``: times their
        run factors in a split series, before the repair of lone outlier runs in one that is
        not, else as judged."""
        c = self.lst[j]
        if self.split and len(c.runs) == len(c.values):
            return [v * self.split.get(r, 1.0) for v, r in zip(c.values, c.runs, strict=True)]
        return list(self.raw[j].values) if self.raw is not None else list(c.values)

    def measured_comparable(self, positions: list[int]) -> bool:
        """Can the runs of these labels be compared as measured? Not across a run-wide change
        of a split series: its values as measured carry that change, its kernel-specific ones
        do not."""
        seqs = [self.lst[j].label_seq for j in positions]
        return bool(seqs) and not any(min(seqs) < r <= max(seqs) for r in self.restarts)

    # ------------------------------------------------------------------ the walk
    def run(self) -> list[dict]:
        cfg, lst = self.cfg, self.lst
        i = 0
        while i < len(lst):
            if self.pend and lst[i].label_seq in self.run_wide:
                # values as measured: from here on every kernel moved with the whole run, so a
                # candidate of this kernel opened before cannot be confirmed by these labels
                self._drop(f"superseded by the run-wide change at label {lst[i].label}")
            if i in self.cps and self.pend:
                c0 = self.pend[0]
                if change_point_rules.settles(self, i):
                    i = c0 + 1  # the labels after the change are judged against the new level
                    continue
                self._drop(f"settled by the change point at label {lst[i].label}")
            base = self._baseline(i)
            r = self._assess(i, base)
            self.rows[i] = r
            d = r["delta_pct"]
            if i in self.cps:  # a change point: decided here, the level restarts here
                decide(r, cfg)
                change_point_rules.at_change_point(self, r)
                self.seg = i
                i += 1
                continue
            if self.pend:
                same = d is not None and d * self.sign >= cfg.floor_pct
                if not same and self._one_back(i, r):
                    decide(r, cfg)
                    self.pend.append(i)
                    self._hold(self.pend, f"label {lst[i].label} went back ({fmt_pct(d)}), but "
                                          "with too few runs for a rank test of its own one "
                                          "label back does not refute the candidate; two in a "
                                          "row do")
                    i += 1
                    continue
                if not same:  # refuted: the candidate was a transient; judge i again without it
                    self._drop(f"not confirmed by label {lst[i].label} "
                               f"({fmt_pct(d) if d is not None else 'no value'} vs the same "
                               "baseline): a transient (outlier runs or a reverted change)")
                    continue
                if all(self._gives_way(self.rows[j], r) for j in self.pend):
                    # the level moved at label i, not at the candidate: that was noise (whether
                    # or not the pooled test would confirm at once: issue 22, defect 2)
                    self._drop(f"superseded by the larger move at label {lst[i].label} "
                               f"({fmt_pct(d)})")
                    continue
                if (step := self._moved_on(i)) is not None:
                    if step:  # label i is the second label at the level past the candidate
                        j0 = self.pend[0]
                        self.rows[j0]["verdict"] = "inconclusive"
                        self.rows[j0]["evidence"] += (
                            f"; candidate change superseded by the larger move at label "
                            f"{lst[self.pend[1]].label}: it and label {lst[i].label} both "
                            f"moved on from this label by more than the floor")
                        self.pend = self.pend[1:]
                        self.aside.add(j0)
                        continue  # label i judged again, with the move at pend[0] open
                    decide(r, cfg)
                    self.pend.append(i)
                    self._hold(self.pend, f"label {lst[i].label} moved on from the candidate "
                                          "by more than the floor: the next label tells at "
                                          "which label the level moved")
                    i += 1
                    continue
                state, text = candidate_tests.confirm(self, self.pend + [i], base)
                if state == "confirmed":
                    c0, pooled = self.pend[0], self.pend + [i]
                    own = self._own_labels(c0, pooled)
                    if (kd := self._runs_move(own, c0)) is not None:
                        self._not_own(kd, f"confirmed by label {lst[i].label} as measured "
                                          f"({text})")
                        i = c0 + 1  # the labels after it judged again with it in the baseline
                        continue
                    self._flag(c0, i, text)
                    if own is pooled:
                        self.rows[c0]["_pooled"] = pooled
                    self.seg, self.pend = c0, []
                    i = c0 + 1  # the labels after the change are judged against the new level
                    continue
                decide(r, cfg)
                self.pend.append(i)
                note = (f"continues the candidate change since label {lst[self.pend[0]].label} "
                        f"({text})")
                if len(self.pend) >= cfg.max_pending_labels:
                    self._give_up(note)
                else:
                    self._hold(self.pend, note)
                if (c := self._sustained(i)) is not None:
                    i = c + 1
                    continue
                i += 1
                continue
            decide(r, cfg)
            if d is not None and abs(d) >= cfg.floor_pct and lst[i].values:
                self.pend, self.sign = [i], (1 if d > 0 else -1)
            if (c := self._sustained(i)) is not None:
                i = c + 1
                continue
            i += 1
        if self.pend:
            self._unresolved()
        return [r for r in self.rows if r is not None]

    def _sustained(self, i: int) -> int | None:
        """A change that no single pair of labels shows but the labels after it do
        (``late_confirm.sustained``, issue 22 defect 6): flagged on its own label
        (``confirmed_by_label`` = ``i``); the labels after it are judged again against the new
        level. Returns the onset, or None."""
        best = late_confirm.sustained(self, i)
        if best is None:
            return None
        p, c, sign = best[:3]
        lst = self.lst
        if self._runs_move(list(range(c, i + 1)), c) is not None:
            return None  # the labels moved as their runs did (see _runs_move)
        for j in [j for j in self.pend if j < c]:
            self.rows[j]["verdict"] = "inconclusive"
            self.rows[j]["evidence"] += (f"; candidate change superseded by the sustained "
                                         f"change from label {lst[c].label}")
        self.pend, self.sign = [], sign
        self._confirm_p = p
        self._flag(c, i, late_confirm.evidence(best, lst))
        self.rows[c]["_pooled"] = list(range(c, i + 1))
        self.seg = c
        return c

    def outliers_reached(self) -> dict[int, tuple[float, float]]:
        """Changes confirmed against one or two baseline labels whose level, up to the next
        flag, holds a run as far out on the baseline's side as the nearest baseline run
        (``candidate_tests.outlier_reach``): the baseline label may be made of this series'
        outlier runs, which no number of later labels tells from a change (issue 22, defect
        4). The walk is done again with them vetoed."""
        veto = {}
        flagged = [j for j, r in enumerate(self.rows) if r is not None and r["verdict"] in FLAGS]
        for c, base in self.early.items():
            if c not in flagged or c in self.vetoed:
                continue
            end = next((j for j in flagged if j > c), len(self.lst))
            reach = candidate_tests.reaches(self, base, list(range(c, end)),
                                            1 if self.rows[c]["verdict"] == "regressed" else -1)
            if reach is not None:
                veto[c] = reach
        return veto

    def _runs_move(self, pos: int | list[int], c: int) -> float | None:
        """In a series judged as measured, a change about to be written on label ``c`` (label
        ``pos``, or the labels ``pos`` pooled) whose kernel-specific delta (each run divided by
        its run factor) stays within the floor while the run-wide component did not change at
        ``c``: the move is the run's (``run_factors.combine_measured`` withdraws such a flag).
        Decided here, before the flag restarts the baseline: a withdrawn flag must not leave
        the level restarted at a label that did not change (issue 22: one run a label, a run
        +1.8% high took the baseline of a real +12% step at the next label). Returns that
        kernel-specific delta, or None."""
        if self.factors is None or self.lst[c].label_seq in self.run_wide:
            return None
        kd = run_factors.kernel_delta(self.lst, pos, self.rows[c]["_base"], self.factors)
        return kd if kd is not None and abs(kd) < self.cfg.floor_pct else None

    def _own_labels(self, c0: int, pooled: list[int]) -> int | list[int]:
        """The labels whose kernel-specific move tells whether a change confirmed by ``pooled``
        (``c0`` first) is this kernel's own (:meth:`_runs_move`): all of them, as the test that
        confirmed it, when ``c0`` alone is nearer the level of the labels after it than the
        baseline (held-out 903 `step-10pct-audit`: a family's step lifted the run factors,
        label 8 alone +4.0% relative to its runs, labels 8-9 +7.2%); else ``c0`` alone, which
        moved with its runs and is no part of the change (a run high on every kernel just
        before a real step: pooled, their median sits halfway and passes the floor). With one
        run a label ``c0`` alone: its one run says too little of its level (a run +1.8% high
        took a real +12% step at the next label)."""
        if self.factors is None or len(self.lst[c0].values) < 2:
            return c0
        base = self.rows[c0]["_base"]
        alone = run_factors.kernel_delta(self.lst, c0, base, self.factors)
        rest = run_factors.kernel_delta(self.lst, pooled[1:], base, self.factors)
        if alone is None or rest is None:
            return c0
        return pooled if rest * self.sign > 0 and at_new_level(alone, rest, self.sign) else c0

    def _not_own(self, kd: float, how: str) -> None:
        """The open candidate's first label moved only as its runs did (``_runs_move``): it is
        ``inconclusive`` and rejoins the baseline; the labels after it are judged again."""
        r = self.rows[self.pend[0]]
        r["verdict"] = "inconclusive"
        r["evidence"] += (f"; candidate change {how}, but this kernel moved {fmt_pct(kd)} "
                          "relative to its runs: the move is the run's, and the run-wide "
                          "component, judged by the same rules, did not change at this label")
        self.pend = []

    def _one_back(self, i: int, r: dict) -> bool:
        """Does label ``i``, which went back towards the baseline (within the floor, on the
        candidate's side of it), stay in the candidate instead of refuting it? When its runs are
        too few for a rank test of its own (one run a label), it weighs as little as one label
        of the candidate does, and the candidate needs three labels beyond the MAD guard or the
        pooled rank test to be confirmed; so one label back is noise inside the candidate
        unless the label before it went back too (issue 22: one run a label, a run 4% low
        just after a real +12% step refuted it, and the refuted labels, back in the baseline,
        hid the step for good). The pooled test then decides, with that label in it."""
        d, p = r["delta_pct"], self.pend
        if r["method"] == "rank_test" or d is None or d * self.sign <= 0:
            return False
        if len(p) + 1 >= self.cfg.max_pending_labels:
            return False
        return (self.rows[p[-1]]["delta_pct"] or 0) * self.sign >= self.cfg.floor_pct

    def _moved_on(self, i: int) -> bool | None:
        """Did label ``i`` move on from the candidate's first label (same direction, beyond the
        floor and the candidate's label-to-label spread, label medians)? With a candidate of one
        label: False (the next label decides: the level may have moved at ``i``, the
        candidate being noise before it; issue 22 defect 2); with a candidate of two labels
        whose second moved on: True when ``i`` did too (the move is at the second label).
        None: neither (confirm as usual)."""
        p = self.pend
        if len(p) > 2 or (len(p) == 2 and not self._moved(p[0], p[1])):
            return None
        if not self._moved(p[0], i):
            return None
        return len(p) == 2

    def _moved(self, c: int, j: int) -> bool:
        m0, m = self.meds[c], self.meds[j]
        if not m0 or m is None:
            return False
        lim = max(self.cfg.floor_pct, self.rows[c].get("_spread") or 0.0)
        return (m / m0 - 1) * 100 * self.sign >= lim

    def _gives_way(self, c: dict, r: dict) -> bool:
        """Does candidate row ``c`` give way to the next label's row ``r`` (same direction)? When
        it moved less than half as much, or when it was not significant on its own and ``r``
        is, moving further, or when some of its runs overlap the baseline's (fewer than
        ``min_superiority`` of the run pairs moved) while all of ``r``'s moved, further: the
        level moved at ``r``'s label, ``c`` was noise (issue 22: runs -10%, -5%, 0% of noise
        at label 6 took a -12% step at label 7)."""
        d0, d = abs(c["delta_pct"] or 0), abs(r["delta_pct"] or 0)
        if 2 * d0 < d:
            return True
        a, q = self.cfg.alpha, self.cfg.min_superiority
        if d > d0 and c.get("_sup") is not None and r.get("_sup") is not None \
                and c["_sup"] < q <= r["_sup"]:
            return True  # some of c's runs stayed at the old level, all of r's moved, further
        return (d > d0 and c["p_value"] is not None and c["p_value"] > a
                and r["p_value"] is not None and r["p_value"] <= a)

    def _baseline(self, i: int) -> list[int]:
        idx: list[int] = []
        pend = set(self.pend)
        low = self.low[i]
        if self.pend and self.pend[0] >= low:
            low = 0  # an open candidate at or after a run-wide change: judged on the level before
        for j in range(i - 1, max(self.seg, low) - 1, -1):
            if len(idx) >= self.cfg.window_labels:
                break
            if j not in pend and j not in self.aside and self.lst[j].values:
                idx.append(j)
        return idx[::-1]

    # ------------------------------------------------------------------ one label vs its baseline
    def _assess(self, i: int, base: list[int]) -> dict:
        cfg, lst = self.cfg, self.lst
        c = lst[i]
        vals = sorted(c.values)
        base_runs = [x for j in base for x in lst[j].values]
        label_meds = [self.meds[j] for j in base]
        med = median(vals) if vals else None
        bmed = median(base_runs) if base_runs else None
        delta = (med / bmed - 1) * 100 if med is not None and bmed else None
        n, m = len(vals), len(base_runs)
        r = {
            "kind": self.k[0], "key": self.k[1], "label": c.label, "label_seq": c.label_seq,
            "repeats": n, "run_values": vals, "median": med,
            "baseline_labels": len(base), "baseline_runs": m,
            "baseline_from_label": lst[base[0]].label if base else None,
            "baseline_median": bmed,
            "baseline_mad": mad(label_meds) if label_meds else None,
            "delta_pct": finite(delta), "p_value": None, "q_value": None,
            "min_attainable_p": min_attainable_p(n, m) if n and m else None,
            "min_detectable_pct": None, "runs_needed": None, "confirmed_by_label": None,
            "method": "none", "verdict": "inconclusive", "evidence": "",
            "change_point": i in self.cps, "floor_pct": cfg.floor_pct, "alpha": cfg.alpha,
            "_pos": i, "_base": base, "_threshold": None, "_base_runs": base_runs,
        }
        if r["delta_pct"] is None:
            return r
        r["_sup"] = None
        spread = cfg.spread_k * r["baseline_mad"] / bmed * 100 if len(base) >= 2 else 0.0
        if m >= 4 and n:  # run-level spread (IQR: robust to outlier runs, not to run modes)
            sd_median = 1.2533 * (quantile(base_runs, 0.75) - quantile(base_runs, 0.25)) \
                / 1.349 / math.sqrt(n)
            spread = max(spread, cfg.spread_k * sd_median / bmed * 100)
        r["_spread"] = max(cfg.floor_pct, spread)
        if n >= cfg.min_repeats and m >= cfg.min_repeats and r["min_attainable_p"] <= cfg.alpha:
            res = mann_whitney_u(vals, base_runs)
            r["p_value"] = res.p
            r["_sup"] = superiority(res.u, n, m, 1 if delta > 0 else -1)
            r["method"] = "rank_test"
            eq = equivalence(vals, base_runs, cfg.floor_pct, cfg.alpha)
            r["_equiv"] = eq
            if eq is not None and eq.bound_pct is not None:
                md = eq.bound_pct
                r["min_detectable_pct"] = finite(md)
                if r["min_detectable_pct"] is not None:
                    r["runs_needed"] = runs_needed(md, n, m, cfg.floor_pct, cfg.alpha)
                    if not eq.equivalent and r["runs_needed"] == n:
                        r["runs_needed"] = None  # ties at the margin: more of the same won't do
        elif len(base) >= cfg.guard_min_labels:
            bm = bmed
            mad_pct = cfg.guard_k * r["baseline_mad"] / bm * 100
            run_pct = cfg.guard_k * mad(base_runs) / bm * 100
            r["_threshold"] = max(mad_pct, run_pct, cfg.floor_pct)
            r["_guard"] = (f"max({cfg.guard_k:g}·MAD of label medians={mad_pct:.1f}%, "
                           f"{cfg.guard_k:g}·MAD of runs={run_pct:.1f}%, floor "
                           f"{cfg.floor_pct:g}%)")
            r["method"] = "mad_guard"
            r["min_detectable_pct"] = finite(r["_threshold"])
        if r["method"] != "rank_test":  # runs a rank test would need to be attainable
            r["runs_needed"] = next((k for k in range(max(n, cfg.min_repeats), 201)
                                     if m >= cfg.min_repeats and min_attainable_p(k, m)
                                     <= cfg.alpha), None)
        return r

    # ------------------------------------------------------------------ candidates
    def _flag(self, c0: int, by: int, text: str) -> None:
        """The candidate at ``c0`` is confirmed by label ``by``: its own row says so."""
        r = self.rows[c0]
        d = r["delta_pct"]
        r["verdict"] = "regressed" if self.sign > 0 else "improved"
        r["confirmed_by_label"] = self.lst[by].label
        r["q_value"] = getattr(self, "_confirm_p", None)
        if r["method"] != "mad_guard" or r["q_value"] is not None:
            r["method"] = "confirmed"
        base = f"vs median of {plural(r['baseline_labels'], 'label')}"
        own = (f"this label alone p={fmt_p(r['p_value'])}, " if r["p_value"] is not None else "")
        r["evidence"] = (f"{own}{fmt_pct(d)} {base}; confirmed by label {self.lst[by].label}: "
                         f"{text}")

    def _hold(self, idx: list[int], note: str) -> None:
        """Rows of a candidate still open: the newest may carry its own provisional verdict."""
        last = len(self.lst) - 1
        for j in idx:
            r = self.rows[j]
            if j == last and j == idx[0]:
                continue  # a fresh candidate on the newest label: _decide's verdict stands
            if r["verdict"] in FLAGS:  # its own flag, held until the next labels settle it
                r["evidence"] = f"was {flagged(r['verdict'])}: {r['evidence']}"
                r["verdict"] = "inconclusive"
            if note not in r["evidence"]:
                r["evidence"] += "; " + note

    def _drop(self, why: str) -> None:
        for j in self.pend:
            r = self.rows[j]
            was = f"was {flagged(r['verdict'])}: " if r["verdict"] in FLAGS else ""
            r["verdict"] = "inconclusive"
            r["evidence"] = f"{was}{r['evidence']}; candidate change {why}"
        self.pend = []
        self.aside = set()

    def _give_up(self, note: str) -> None:
        """Beyond the floor the same way for ``max_pending_labels`` labels, never significant:
        say so on each of them and take the new level as the baseline (never absorbed silently)."""
        c0 = self.pend[0]
        for j in self.pend:
            r = self.rows[j]
            r["verdict"] = "inconclusive"
            r["evidence"] += (f"; {note}; beyond the floor for {plural(len(self.pend), 'label')} "
                              "without significance: the baseline restarts at label "
                              f"{self.lst[c0].label}")
        self.seg, self.pend = c0, []

    def _unresolved(self) -> None:
        if len(self.pend) == 1:
            r = self.rows[self.pend[0]]
            if self.pend[0] == len(self.lst) - 1:
                why = candidate_tests.newest_unproven(self, r) if r["verdict"] in FLAGS else None
                if why is not None and r["method"] == "rank_test":
                    r["evidence"] = (f"was {flagged(r['verdict'])}: {r['evidence']}; alone on "
                                     f"the newest label a change needs {why}: the next build "
                                     "will confirm or refute it")
                    r["verdict"] = "inconclusive"
                elif r["verdict"] in FLAGS and r["method"] == "rank_test":
                    # its own test was held to confirm_alpha: the test that settled the flag
                    r["q_value"] = r["p_value"]
                elif r["verdict"] in FLAGS and r["method"] == "mad_guard":
                    r["evidence"] = (f"was {flagged(r['verdict'])}: {r['evidence']}; one run "
                                     "cannot tell a changed build from an outlier run")
                    r["verdict"] = "inconclusive"
                r["evidence"] += ("; the newest label: the next label will confirm or refute "
                                  "this change")
                return
        self._hold(self.pend, "open: later labels will confirm or refute it")
