"""Statistics behind the regression verdicts of ``marts.kernel_trends``.

Everything here is plain Python/numpy so it can be unit-tested on its own; ``udfs.py`` exposes
:func:`judge_series` to SQL. The method (documented for analysts in ``docs/analyst-guide.md``):

* the unit of comparison is the **run** (never a sample): a (series, kernel, label) cell holds one
  value per run, the kernel's total time in that run;
* **rank test** — a two-sided Mann–Whitney U test between the runs of the label and the runs of
  its baseline (previous labels since the last accepted change, at most ``window_labels``),
  exact (permutation distribution with mid-ranks for ties) for small samples, normal
  approximation with tie correction for large ones [Mann & Whitney 1947];
* **attainability** — asv's check [asv ``statistics.is_different``]: a rank test on n and m runs
  can never give a p-value below 1/C(n+m, n) one-sided, 2/C(n+m, n) two-sided; when that bound
  is above ``alpha`` the test is not run (it could only ever say "no difference");
* **false discoveries** — p-values of the kernels of one (series, label) are adjusted with
  Benjamini–Hochberg [Benjamini & Hochberg 1995]; verdicts use the adjusted q-value;
* **practical floor** — a change must also be at least ``floor_pct`` (default 5%) of the baseline
  median to be called ``regressed``/``improved``;
* **MAD guard** — with too few repeats for a rank test, a change is called only when
  |delta| > max(k·MAD of the baseline labels' medians, k·MAD of the baseline runs, floor), MAD
  scaled to be consistent with σ (×1.4826) [Hampel 1974; Leys et al. 2013]; otherwise the
  verdict is ``inconclusive``, never ``unchanged``. One run cannot tell a changed build from an
  outlier run: a guard change is confirmed by the next label (also beyond the threshold, same
  direction) or re-judged ``inconclusive`` as a transient;
* **change points** — series with at least ``cp_min_labels`` labels are segmented with
  E-divisive means [Matteson & James 2014], as in Apache Otava/Hunter [Fleming et al. 2023;
  Daly et al. 2020], by binary segmentation; each split is accepted when a permutation test
  (``cp_permutations`` permutations seeded from the kernel's key, stopped early once it cannot
  succeed [Besag & Clifford 1991]) gives p <= ``cp_alpha`` and the segments' medians differ by
  at least the floor;
* **baselines restart** at accepted changes: rank-test verdicts, confirmed guard verdicts and
  change points, so a step change is reported once, where it happened.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache

import numpy as np

MAD_NORMAL = 1.482602218505602  # 1 / Phi^-1(3/4): MAD -> sigma for normal data
EXACT_MAX_N = 200  # exact MWU p-values up to this many runs in total, normal approximation above

VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")
METHODS = ("rank_test", "mad_guard", "change_point", "none")


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class VerdictConfig:
    """Knobs of the verdict method. Defaults are the documented method."""

    alpha: float = 0.05  # significance level of the rank test (on BH-adjusted q-values)
    floor_pct: float = 5.0  # practical floor: smallest relative change called regressed/improved
    window_labels: int = 10  # at most this many previous labels form the baseline
    min_repeats: int = 2  # runs needed on each side before a rank test is considered
    guard_k: float = 3.0  # MAD guard: |delta| > max(guard_k * MAD, floor)
    guard_min_labels: int = 3  # baseline labels needed for a MAD (fewer: inconclusive)
    cp_min_labels: int = 20  # change-point detection once a series has this many labels
    cp_alpha: float = 0.01  # significance of a change point (permutation test)
    cp_permutations: int = 199
    cp_min_segment: int = 3  # labels on each side of a change point, at least

    ENV_PREFIX = "PWH_VERDICT_"

    def __post_init__(self):
        problems = []
        if not 0 < self.alpha < 1:
            problems.append(f"alpha={self.alpha} must be in (0, 1)")
        if not 0 <= self.floor_pct < 100:
            problems.append(f"floor_pct={self.floor_pct} must be in [0, 100)")
        if not 0 < self.cp_alpha < 1:
            problems.append(f"cp_alpha={self.cp_alpha} must be in (0, 1)")
        for name in ("window_labels", "min_repeats", "guard_min_labels", "cp_min_labels",
                     "cp_permutations", "cp_min_segment"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if self.cp_min_segment < 2:
            problems.append(f"cp_min_segment={self.cp_min_segment} must be >= 2")
        if self.guard_k <= 0:
            problems.append(f"guard_k={self.guard_k} must be > 0")
        if problems:
            raise ValueError("verdict settings: " + "; ".join(problems))

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> VerdictConfig:
        """Defaults, then ``PWH_VERDICT_<FIELD>`` environment variables, then ``overrides``."""
        env = os.environ if env is None else env
        kw = {}
        for f in fields(cls):
            raw = env.get(cls.ENV_PREFIX + f.name.upper())
            if raw is not None and raw.strip():
                try:
                    kw[f.name] = int(raw) if f.type in ("int", int) else float(raw)
                except ValueError:
                    raise ValueError(
                        f"environment variable {cls.ENV_PREFIX}{f.name.upper()}={raw!r}: "
                        f"not a number") from None
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)

    def as_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# robust statistics


def median(values: Iterable[float]) -> float:
    v = sorted(values)
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def mad(values: Iterable[float], *, normal: bool = True) -> float:
    """Median absolute deviation; scaled by 1.4826 (consistent with σ) unless ``normal=False``."""
    v = list(values)
    if not v:
        return math.nan
    m = median(v)
    d = median(abs(x - m) for x in v)
    return d * MAD_NORMAL if normal else d


# --------------------------------------------------------------------------------------------
# Mann–Whitney U


@dataclass(frozen=True)
class MWU:
    u: float  # U statistic of the first sample (number of pairs x > y, ties count 1/2)
    p: float  # two-sided p-value
    method: str  # exact | normal


def min_attainable_p(n: int, m: int, sides: int = 2) -> float:
    """Smallest p-value a rank test on n vs m observations can give (no ties): sides/C(n+m, n).

    asv's check uses the one-sided bound 1/C(n+m, n); our test is two-sided, so its bound is
    twice that.
    """
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, sides / math.comb(n + m, n))


def _midranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties getting the mean of their ranks."""
    n = len(values)
    order = np.argsort(values, kind="mergesort")
    sv = values[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(sv[1:], sv[:-1], out=new[1:])
    ranks = np.empty(n)
    if new.all():  # no ties
        ranks[order] = np.arange(1, n + 1)
        return ranks
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, n))
    ranks[order] = np.repeat(starts + (counts + 1) / 2, counts)
    return ranks


@lru_cache(maxsize=4096)
def _rank_sum_distribution(scores: tuple[int, ...], n: int) -> tuple[np.ndarray, int]:
    """Null distribution of the sum of ``n`` of ``scores`` drawn without replacement.

    Returns (probabilities indexed by sum - offset, offset). Dynamic programming over items;
    counts are kept as float64 (exact up to 2**53, relative precision beyond).
    """
    total = sum(scores)
    f = np.zeros((n + 1, total + 1))
    f[0, 0] = 1.0
    for i, s in enumerate(scores):
        for k in range(min(i + 1, n), 0, -1):
            if s:
                f[k, s:] += f[k - 1, : total + 1 - s]
            else:
                f[k] += f[k - 1]
    dist = f[n]
    nz = np.nonzero(dist)[0]
    lo, hi = int(nz[0]), int(nz[-1])
    d = dist[lo:hi + 1]
    return d / d.sum(), lo


def mann_whitney_u(x: Sequence[float], y: Sequence[float], method: str = "auto") -> MWU:
    """Two-sided Mann–Whitney U test of x vs y.

    ``exact`` uses the permutation distribution of the rank sum (mid-ranks for ties, so it is
    exact with ties too); ``normal`` the normal approximation with tie and continuity
    correction. ``auto`` is exact up to ``EXACT_MAX_N`` observations in total.
    """
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    n, m = len(xa), len(ya)
    if n == 0 or m == 0:
        raise ValueError("mann_whitney_u needs at least one observation on each side")
    allv = np.concatenate([xa, ya])
    ranks = _midranks(allv)
    w = ranks[:n].sum()
    u = w - n * (n + 1) / 2
    N = n + m
    if method == "auto":
        method = "exact" if N <= EXACT_MAX_N else "normal"
    if np.all(allv == allv[0]):
        return MWU(float(u), 1.0, method)
    if method == "exact":
        # doubled mid-ranks are integers; draw the smaller side for a smaller table
        scores = tuple(np.sort(np.rint(2 * ranks).astype(np.int64)).tolist())
        k = min(n, m)
        probs, lo = _rank_sum_distribution(scores, k)
        stat = int(round(2 * (w if k == n else ranks[n:].sum())))
        idx = stat - lo
        lower = float(probs[: idx + 1].sum()) if idx >= 0 else 0.0
        upper = float(probs[max(idx, 0):].sum()) if idx < len(probs) else 0.0
        p = min(1.0, 2 * min(lower, upper))
        return MWU(float(u), float(p), "exact")
    if method != "normal":
        raise ValueError(f"unknown method {method!r} (auto, exact or normal)")
    _, counts = np.unique(allv, return_counts=True)
    tie = (counts ** 3 - counts).sum() / (N * (N - 1))
    var = n * m / 12 * ((N + 1) - tie)
    mu = n * m / 2
    if var <= 0:
        return MWU(float(u), 1.0, "normal")
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return MWU(float(u), min(1.0, p), "normal")


# --------------------------------------------------------------------------------------------
# Benjamini–Hochberg


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """BH-adjusted q-values (step-up), in the input order. NaN/None entries are passed through."""
    idx = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    out: list[float] = [math.nan] * len(pvalues)
    m = len(idx)
    if not m:
        return out
    order = sorted(idx, key=lambda i: pvalues[i])
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        out[i] = min(1.0, running)
    return out


# --------------------------------------------------------------------------------------------
# change points: E-divisive means


def _edivisive_stats(z: np.ndarray, min_size: int) -> np.ndarray:
    """Q(τ) for every split τ of each row of ``z`` (shape P × T), κ = T (Hunter's variant).

    Q(τ) = τ(T-τ)/T · [2/(τ(T-τ)) Σ|x-y| − 1/C(τ,2) Σ|x-x'| − 1/C(T-τ,2) Σ|y-y'|]
    Splits with fewer than ``min_size`` points on a side get -inf.
    """
    P, T = z.shape
    d = np.abs(z[:, :, None] - z[:, None, :])
    upper = np.triu(d, 1)
    col = upper.sum(axis=1)  # col[k] = Σ_{i<k} d[i,k]
    row = upper.sum(axis=2)  # row[i] = Σ_{k>i} d[i,k]
    total = upper.sum(axis=(1, 2))
    within_left = np.cumsum(col, axis=1)  # index τ-1: Σ over pairs inside the first τ points
    within_right = np.cumsum(row[:, ::-1], axis=1)[:, ::-1]  # index τ: pairs inside z[τ:]
    out = np.full((P, T + 1), -np.inf)
    lo, hi = max(min_size, 2), T - max(min_size, 2)
    if lo > hi:
        return out
    taus = np.arange(lo, hi + 1)
    wl = within_left[:, taus - 1]
    wr = within_right[:, taus]
    between = total[:, None] - wl - wr
    nl, nr = taus.astype(float), (T - taus).astype(float)
    e = 2 * between / (nl * nr) - wl / (nl * (nl - 1) / 2) - wr / (nr * (nr - 1) / 2)
    out[:, taus] = nl * nr / T * e
    return out


def _best_split(z: np.ndarray, min_size: int) -> tuple[int, float]:
    q = _edivisive_stats(z[None, :], min_size)[0]
    tau = int(np.argmax(q))
    return tau, float(q[tau])


def _split_pvalue(z: np.ndarray, observed: float, min_size: int, permutations: int,
                  rng: np.random.Generator, alpha: float) -> float:
    """Permutation p-value of the best split, (exceed + 1) / (permutations + 1).

    Stops early once the split can no longer reach ``alpha`` (sequential Monte Carlo test,
    Besag & Clifford 1991): the decision is the same as with every permutation; the p-value
    returned is then a lower bound above ``alpha``.
    """
    T = len(z)
    limit = math.floor(alpha * (permutations + 1)) - 1  # most exceedances still significant
    batch = max(1, min(25, 2_000_000 // max(T * T, 1)))
    exceed, done = 0, 0
    while done < permutations:
        k = min(batch, permutations - done)
        zs = rng.permuted(np.tile(z, (k, 1)), axis=1)
        qmax = _edivisive_stats(zs, min_size).max(axis=1)
        exceed += int((qmax >= observed - 1e-12).sum())
        done += k
        if exceed > limit:
            return (exceed + 1) / (done + 1)
    return (exceed + 1) / (permutations + 1)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first position of the new segment
    p: float  # permutation p-value of the split
    shift_pct: float  # median(after) / median(before) - 1, in percent, of the split's segments


def change_points(values: Sequence[float], cfg: VerdictConfig, key: str = "") -> list[ChangePoint]:
    """E-divisive change points of ``values`` (e.g. label medians in capture order).

    Works on log values, so a split reflects relative change. Deterministic: the permutation
    generator is seeded from ``key``. Returns accepted change points sorted by index.
    """
    v = np.asarray(values, dtype=float)
    if len(v) < max(cfg.cp_min_labels, 2 * cfg.cp_min_segment) or np.any(~np.isfinite(v)):
        return []
    if np.any(v <= 0):
        z = v.copy()
    else:
        z = np.log(v)
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    accepted: list[ChangePoint] = []

    def recurse(lo: int, hi: int) -> None:
        seg = z[lo:hi]
        if len(seg) < 2 * cfg.cp_min_segment or np.ptp(seg) == 0:
            return
        tau, q = _best_split(seg, cfg.cp_min_segment)
        if not np.isfinite(q) or q <= 0:
            return
        p = _split_pvalue(seg, q, cfg.cp_min_segment, cfg.cp_permutations, rng, cfg.cp_alpha)
        if p > cfg.cp_alpha:
            return
        before, after = v[lo:lo + tau], v[lo + tau:hi]
        mb = median(before)
        shift = (median(after) / mb - 1) * 100 if mb else math.inf
        if abs(shift) >= cfg.floor_pct:
            accepted.append(ChangePoint(lo + tau, float(p), float(shift)))
        recurse(lo, lo + tau)
        recurse(lo + tau, hi)

    recurse(0, len(z))
    return sorted(accepted, key=lambda c: c.index)


# --------------------------------------------------------------------------------------------
# verdicts for one series


@dataclass
class Cell:
    """Input: the runs of one (kernel, label) of a series."""

    kind: str
    key: str
    label: str
    label_seq: int
    values: list[float]


def _fmt_p(p: float) -> str:
    if p < 0.001:
        return f"{p:.1e}"
    return f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def _fmt_pct(x: float) -> str:
    return f"{x:+.1f}%"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def judge_series(cells: Iterable[Cell | dict], cfg: VerdictConfig | None = None) -> list[dict]:
    """Verdicts for every (kernel, label) cell of ONE series.

    Labels are processed in ``label_seq`` order; at each label every kernel is compared with its
    own baseline, the rank-test p-values of that label are BH-adjusted together, verdicts are
    decided, and the baselines of kernels with an accepted change (rank-test verdict, guard
    verdict confirmed by the next label, change point) restart there. Returns one dict per cell
    (the keys of ``udfs.TREND_FIELDS``).
    """
    cfg = cfg or VerdictConfig()
    by_key: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        if isinstance(c, dict):
            c = Cell(c["kind"], c["key"], c["label"], int(c["label_seq"]),
                     [float(x) for x in c["values"] if x is not None])
        by_key.setdefault((c.kind, c.key), []).append(c)
    for lst in by_key.values():
        lst.sort(key=lambda c: c.label_seq)

    # change points per kernel, on the label medians
    cps: dict[tuple[str, str], dict[int, ChangePoint]] = {}
    for k, lst in by_key.items():
        meds = [median(c.values) for c in lst if c.values]
        if len(meds) == len(lst) and len(lst) >= cfg.cp_min_labels:
            found = change_points(meds, cfg, key=f"{k[0]}\x1f{k[1]}")
            cps[k] = {cp.index: cp for cp in found}
        else:
            cps[k] = {}

    pos_of = {k: {c.label_seq: i for i, c in enumerate(lst)} for k, lst in by_key.items()}
    seg_start = dict.fromkeys(by_key, 0)
    awaiting: dict[tuple[str, str], dict] = {}  # MAD-guard verdicts waiting for the next label
    seqs = sorted({c.label_seq for lst in by_key.values() for c in lst})
    out: list[dict] = []
    for seq in seqs:
        rows = []
        for k, lst in by_key.items():
            i = pos_of[k].get(seq)
            if i is None:
                continue
            w = awaiting.pop(k, None)
            if w is not None and _confirmed(w, lst[i]):
                seg_start[k] = w["_pos"]
            rows.append(_assess(k, lst, i, seg_start[k], cps[k], cfg))
        qs = benjamini_hochberg([r["p_value"] if r["p_value"] is not None else math.nan
                                 for r in rows])
        for r, q in zip(rows, qs, strict=True):
            r["q_value"] = None if math.isnan(q) else q
            _decide(r, cfg, cfg.floor_pct)
            k = (r["kind"], r["key"])
            if r["change_point"] or (r["verdict"] in ("regressed", "improved")
                                     and r["method"] != "mad_guard"):
                seg_start[k] = r["_pos"]
            elif r["verdict"] in ("regressed", "improved"):
                awaiting[k] = r
            out.append(r)
    for r in out:
        for private in [x for x in r if x.startswith("_")]:
            del r[private]
    return out


def _confirmed(w: dict, nxt: Cell) -> bool:
    """Is a MAD-guard change (too few runs for a rank test) confirmed by the kernel's next label?

    The guard sees one label with one or two runs, which cannot tell a changed build from an
    outlier run. Its change is accepted (and the baseline restarts there) only when the next
    label is also beyond the guard's threshold, in the same direction, against the same
    baseline. Otherwise the guarded label is re-judged ``inconclusive`` (a transient: an outlier
    run, or a change reverted at once) and later labels keep the old baseline. The newest label
    has no next label yet: its guard verdict stands until one arrives.
    """
    if not nxt.values:
        return False
    d = (median(nxt.values) / w["baseline_median"] - 1) * 100
    ok = (d > 0) == (w["delta_pct"] > 0) and abs(d) > w["_threshold"]
    if ok:
        w["evidence"] += f"; confirmed by the next label ({_fmt_pct(d)} vs the same baseline)"
    else:
        w["evidence"] = (f"was {w['verdict']}: " + w["evidence"] +
                         f"; not confirmed by the next label ({_fmt_pct(d)} vs the same "
                         "baseline): a transient (outlier run or reverted change)")
        w["verdict"] = "inconclusive"
    return ok


def _assess(k, lst: list[Cell], i: int, seg: int, cps: dict[int, ChangePoint],
            cfg: VerdictConfig) -> dict:
    c = lst[i]
    vals = sorted(c.values)
    lo = max(seg, i - cfg.window_labels)
    base_cells = [b for b in lst[lo:i] if b.values]
    base_runs = [x for b in base_cells for x in b.values]
    label_meds = [median(b.values) for b in base_cells]
    med = median(vals) if vals else math.nan
    bmed = median(base_runs) if base_runs else math.nan
    delta = (med / bmed - 1) * 100 if base_runs and bmed else None
    bmad = mad(label_meds) if len(label_meds) >= 1 else None
    n, m = len(vals), len(base_runs)
    r = {
        "kind": k[0], "key": k[1], "label": c.label, "label_seq": c.label_seq,
        "repeats": n, "run_values": vals, "median": med if vals else None,
        "baseline_labels": len(base_cells), "baseline_runs": m,
        "baseline_from_label": base_cells[0].label if base_cells else None,
        "baseline_median": bmed if base_runs else None,
        "baseline_mad": bmad if label_meds else None,
        "delta_pct": delta, "p_value": None, "q_value": None,
        "min_attainable_p": min_attainable_p(n, m) if n and m else None,
        "method": "none", "verdict": "inconclusive", "evidence": "",
        "change_point": i in cps, "floor_pct": cfg.floor_pct, "alpha": cfg.alpha,
        "_pos": i, "_cp": cps.get(i), "_seg": (lst, lo, i, cps),
        "_run_mad": mad(base_runs) if base_runs else 0.0,
    }
    if (n >= cfg.min_repeats and m >= cfg.min_repeats and delta is not None
            and r["min_attainable_p"] <= cfg.alpha):
        r["p_value"] = mann_whitney_u(vals, base_runs).p
        r["method"] = "rank_test"
    return r


def _decide(r: dict, cfg: VerdictConfig, floor: float) -> None:
    n, m, nl = r["repeats"], r["baseline_runs"], r["baseline_labels"]
    delta = r["delta_pct"]
    base = f"vs median of {_plural(nl, 'label')}" if nl else ""
    if delta is None:
        if r["_seg"][2] == 0:
            why = "first label of this kernel in the series"
        elif not m:
            why = "no earlier runs since the last accepted change"
        else:
            why = "the baseline median is 0"
        r["evidence"] = f"no baseline: {why}"
        if r["_cp"] is not None:
            r["evidence"] += f"; change point at this label ({_fmt_pct(r['_cp'].shift_pct)})"
        return
    d = _fmt_pct(delta)
    if r["method"] == "rank_test":
        p, q = r["p_value"], r["q_value"]
        ptxt = f"p={_fmt_p(p)}" + (f" (BH q={_fmt_p(q)})" if q is not None and q != p else "")
        sig = q is not None and q <= cfg.alpha
        test = f"Mann-Whitney U, {n} vs {m} runs"
        if sig and abs(delta) >= floor:
            r["verdict"] = "regressed" if delta > 0 else "improved"
            r["evidence"] = f"{ptxt}, {d} {base} ({test})"
        elif abs(delta) < floor:
            r["verdict"] = "unchanged"
            extra = "significant but " if sig else ""
            r["evidence"] = f"{ptxt}, {d} {base}: {extra}within the {floor:g}% floor ({test})"
        else:
            r["verdict"] = "inconclusive"
            r["evidence"] = (f"{ptxt}, {d} {base}: beyond the {floor:g}% floor but not "
                             f"significant at {cfg.alpha:g} ({test})")
    else:
        why_few = (f"{_plural(n, 'repeat')} vs {_plural(m, 'baseline run')}" +
                   (f", smallest attainable p={_fmt_p(r['min_attainable_p'])}"
                    if r["min_attainable_p"] is not None else ""))
        if nl >= cfg.guard_min_labels and r["baseline_mad"] is not None:
            bm = r["baseline_median"]
            mad_pct = cfg.guard_k * r["baseline_mad"] / bm * 100
            run_pct = cfg.guard_k * r["_run_mad"] / bm * 100
            thr = max(mad_pct, run_pct, floor)
            r["_threshold"] = thr
            r["method"] = "mad_guard"
            guard = (f"max({cfg.guard_k:g}·MAD of label medians={mad_pct:.1f}%, "
                     f"{cfg.guard_k:g}·MAD of runs={run_pct:.1f}%, floor {floor:g}%)")
            if abs(delta) > thr:
                r["verdict"] = "regressed" if delta > 0 else "improved"
                r["evidence"] = f"{d} {base} exceeds {guard}; too few runs for a rank test ({why_few})"
            else:
                r["evidence"] = (f"{d} {base} within {guard}; too few runs for a rank test "
                                 f"({why_few}), so no claim of 'unchanged'")
        else:
            r["evidence"] = (f"{d} {base}: too few runs for a rank test ({why_few}) and fewer "
                             f"than {cfg.guard_min_labels} baseline labels for the MAD guard")
    cp = r["_cp"]
    if cp is not None:
        note = f"change point at this label (E-divisive, p={_fmt_p(cp.p)}, " \
               f"{_fmt_pct(cp.shift_pct)} between segments)"
        if r["verdict"] == "inconclusive":
            confirmed = _confirm_change_point(r, cfg)
            if confirmed is not None:
                r["verdict"] = confirmed[0]
                r["method"] = "change_point"
                note += f"; confirmed against the baseline labels: {confirmed[1]}"
        r["evidence"] += "; " + note


def _confirm_change_point(r: dict, cfg: VerdictConfig) -> tuple[str, str] | None:
    """At an E-divisive change point whose label alone is inconclusive: compare the baseline
    labels' medians with the medians of the new segment (up to the next change point)."""
    lst, lo, i, cps = r["_seg"]
    before = [median(b.values) for b in lst[lo:i] if b.values]
    # the new segment: labels from i up to the kernel's next change point (or the end)
    after = []
    for j in range(i, len(lst)):
        if j != i and j in cps:
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
    shift = (median(after) / median(before) - 1) * 100
    if res.p <= cfg.alpha and abs(shift) >= cfg.floor_pct:
        txt = (f"p={_fmt_p(res.p)}, {_fmt_pct(shift)} over {_plural(len(after), 'label')} vs "
               f"{_plural(len(before), 'label')}")
        return ("regressed" if shift > 0 else "improved"), txt
    return None
