"""Change points in the walk of a kernel's labels (``verdicts._KernelJudge``).

Split from ``verdicts.py`` (issue 22): that module walks a kernel's labels and settles candidate
changes label by label; this one brings in what the whole history says at once. In a series of
at least ``cp_min_labels`` labels the E-divisive change points of the label medians
(``stats.change_points``, over the newest ``cp_max_labels`` labels) are found first
(:func:`find`); during the walk

* a change point in the direction of an open candidate **settles** it (:func:`settles`): the
  E-divisive split needs ``cp_min_segment`` labels a side, so it may sit a label or two after
  the change, which is written on the candidate's first label (the change point moves there);
* a label at a change point is decided there and the level restarts there; when it is
  ``inconclusive`` on its own it is **re-judged on the label medians** of the baseline labels
  and of the new segment up to the next change point (:func:`at_change_point`): a rank test at
  ``alpha`` beyond the floor.

The functions take the judge (its ``lst``, ``rows``, ``cps``, ``pend``, ``sign``, ``seg``, ``cfg``)
as ``late_confirm.sustained`` does.
"""

from __future__ import annotations

from warehouse.modelling.label_rules import fmt_p, fmt_pct, plural
from warehouse.modelling.stats import (
    ChangePoint,
    VerdictConfig,
    change_points,
    mann_whitney_u,
    median,
    min_attainable_p,
)


def find(k: tuple[str, str], meds: list[float | None], cfg: VerdictConfig) -> dict[int, ChangePoint]:
    """Position of each label -> its change point, over the kernel's label medians ``meds``
    (none when a label has no value or the series is shorter than ``cp_min_labels``)."""
    if len(meds) < cfg.cp_min_labels or any(m is None for m in meds):
        return {}
    off = max(0, len(meds) - cfg.cp_max_labels)
    return {off + cp.index: cp for cp in change_points(meds[off:], cfg, key=f"{k[0]}\x1f{k[1]}")}


def settles(judge, i: int) -> bool:
    """A change point at ``i`` in the direction of the open candidate: the change is written on
    the candidate's first label and the change point moves there. False when it goes the other
    way (the caller drops the candidate)."""
    cp = judge.cps[i]
    if (cp.shift_pct > 0) != (judge.sign > 0):
        return False
    c0 = judge.pend[0]
    judge.rows[c0]["change_point"] = True
    judge._confirm_p = None
    judge._flag(c0, i, f"a change point (E-divisive, p={fmt_p(cp.p)}, "
                       f"{fmt_pct(cp.shift_pct)} between segments) at label {judge.lst[i].label}")
    judge.rows[c0]["method"] = "change_point"
    del judge.cps[i]
    judge.cps[c0] = cp
    judge.seg, judge.pend = c0, []
    return True


def at_change_point(judge, r: dict) -> None:
    """Row ``r`` of a label at a change point (already decided alone): an ``inconclusive`` is
    re-judged on the label medians of the two segments; the evidence names the change point."""
    cp = judge.cps[r["_pos"]]
    note = (f"change point at this label (E-divisive, p={fmt_p(cp.p)}, "
            f"{fmt_pct(cp.shift_pct)} between segments)")
    if r["verdict"] == "inconclusive":
        confirmed = _segments(judge, r)
        if confirmed is not None:
            r["verdict"] = confirmed[0]
            r["method"] = "change_point"
            note += f"; confirmed against the baseline labels: {confirmed[1]}"
    r["evidence"] += "; " + note


def _segments(judge, r: dict) -> tuple[str, str] | None:
    """Compare the baseline labels' medians with the new segment's (to the next change point)."""
    cfg, lst, i = judge.cfg, judge.lst, r["_pos"]
    before = [median(lst[j].values) for j in r["_base"]]
    after = []
    for j in range(i, len(lst)):
        if j != i and j in judge.cps:
            break
        if lst[j].values:
            after.append(median(lst[j].values))
        if len(after) >= cfg.window_labels:
            break
    if len(before) < cfg.min_repeats or len(after) < cfg.min_repeats:
        return None
    if min_attainable_p(len(after), len(before)) > cfg.alpha:
        return None
    res = mann_whitney_u(after, before)
    shift = (median(after) / median(before) - 1) * 100 if median(before) else 0.0
    if res.p <= cfg.alpha and abs(shift) >= cfg.floor_pct:
        txt = (f"p={fmt_p(res.p)}, {fmt_pct(shift)} over {plural(len(after), 'label')} vs "
               f"{plural(len(before), 'label')}")
        return ("regressed" if shift > 0 else "improved"), txt
    return None
