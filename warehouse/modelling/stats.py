"""Statistics behind the regression verdicts of ``marts.kernel_trends``.

Plain Python/numpy, unit-tested on its own; the verdict rules that use them are in
``verdicts.py`` (documented for analysts in ``docs/analyst-guide.md``):

* :class:`VerdictConfig` — the method's knobs (``PWH_VERDICT_*`` environment variables);
* :func:`mann_whitney_u` — two-sided Mann–Whitney U test, exact (permutation distribution with
  mid-ranks for ties) for small samples, normal approximation with tie correction for large ones
  [Mann & Whitney 1947];
* :func:`min_attainable_p` — asv's attainability check [asv ``statistics.is_different``]: a rank
  test on n and m runs can never give a p-value below 2/C(n+m, n) two-sided;
* :func:`min_detectable_shift` — power: the smallest relative shift of all of a label's runs
  (spread kept) that the exact test would call significant, up and down, from the pairwise
  ratios of the runs and the exact null distribution of U;
* :func:`equivalence` — the equivalence rule behind ``unchanged``: the label's runs placed at
  the baseline median × (1 ± floor), spread kept, must each differ from the baseline by the
  exact test (ties exact) — the two one-sided tests of an equivalence margin [Schuirmann 1987;
  Wellek 2010], in the rank form this project uses;
* :func:`beyond_margin_p` — the companion minimum-effect test: the label's runs moved back by
  the floor still differ from the baseline the same way (a change larger than the floor);
* :func:`mad`, :func:`median` — robust spread [Hampel 1974; Leys et al. 2013];
* :func:`benjamini_hochberg` — BH step-up q-values [Benjamini & Hochberg 1995] (kept as a
  utility; verdicts control false flags by confirmation instead, see ``verdicts.py``);
* :func:`change_points` — E-divisive means [Matteson & James 2014] as in Apache Otava/Hunter
  [Fleming et al. 2023; Daly et al. 2020]: binary segmentation, each split accepted on a
  permutation test stopped early once it cannot succeed [Besag & Clifford 1991].
"""

from __future__ import annotations

import math
import os
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from itertools import groupby

import numpy as np

MAD_NORMAL = 1.482602218505602  # 1 / Phi^-1(3/4): MAD -> sigma for normal data
EXACT_MAX_N = 200  # exact MWU p-values up to this many runs in total, normal approximation above

VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")
METHODS = ("rank_test", "confirmed", "mad_guard", "change_point", "none")


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class VerdictConfig:
    """Knobs of the verdict method. Defaults are the documented method."""

    alpha: float = 0.05  # significance level of the rank tests (per kernel; see verdicts.py)
    floor_pct: float = 5.0  # practical floor: smallest relative change called regressed/improved
    window_labels: int = 10  # at most this many previous labels form the baseline
    min_repeats: int = 2  # runs needed on each side before a rank test is considered
    guard_k: float = 3.0  # MAD guard: |delta| > max(guard_k * MAD, floor)
    spread_k: float = 2.0  # a flagged label is beyond spread_k * MAD of the baseline label medians
    guard_min_labels: int = 3  # baseline labels needed for a MAD (fewer: inconclusive)
    min_superiority: float = 0.9  # a change: P(new run > baseline run) >= this (or <= 1 - this)
    confirm_alpha: float = 0.005  # significance of the pooled test that confirms a candidate
    max_pending_labels: int = 10  # a candidate change waits at most this many labels for proof
    cp_min_labels: int = 20  # change-point detection once a series has this many labels
    cp_max_labels: int = 120  # ... over its most recent this many labels (cost grows as T^2)
    cp_alpha: float = 0.01  # significance of a change point (permutation test)
    cp_permutations: int = 199
    cp_min_segment: int = 3  # labels on each side of a change point, at least
    run_factor_min_keys: int = 8  # run-wide factor split off when runs have this many keys (0: off)
    run_factor_min_gain: float = 0.25  # ... and dividing by it cuts the run-to-run spread this much

    ENV_PREFIX = "PWH_VERDICT_"

    def __post_init__(self):
        problems = []
        if not 0 < self.alpha < 1:
            problems.append(f"alpha={self.alpha} must be in (0, 1)")
        if not 0 <= self.floor_pct < 100:
            problems.append(f"floor_pct={self.floor_pct} must be in [0, 100)")
        if not 0.5 <= self.min_superiority <= 1:
            problems.append(f"min_superiority={self.min_superiority} must be in [0.5, 1]")
        if not 0 < self.confirm_alpha < 1:
            problems.append(f"confirm_alpha={self.confirm_alpha} must be in (0, 1)")
        if not 0 < self.cp_alpha < 1:
            problems.append(f"cp_alpha={self.cp_alpha} must be in (0, 1)")
        for name in ("window_labels", "min_repeats", "guard_min_labels", "max_pending_labels",
                     "cp_min_labels", "cp_max_labels",
                     "cp_permutations", "cp_min_segment"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        if not 0 <= self.run_factor_min_gain < 1:
            problems.append(f"run_factor_min_gain={self.run_factor_min_gain} must be in [0, 1)")
        if self.run_factor_min_keys < 0:
            problems.append(f"run_factor_min_keys={self.run_factor_min_keys} must be >= 0")
        if self.cp_min_segment < 2:
            problems.append(f"cp_min_segment={self.cp_min_segment} must be >= 2")
        for name in ("guard_k", "spread_k"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be > 0")
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
    n = len(v)
    if n % 2:
        return v[n >> 1]
    if not n:
        return math.nan
    return (v[(n >> 1) - 1] + v[n >> 1]) / 2


def mad(values: Iterable[float], *, normal: bool = True) -> float:
    """Median absolute deviation; scaled by 1.4826 (consistent with σ) unless ``normal=False``."""
    v = values if type(values) is list else list(values)
    n = len(v)
    if not n:
        return math.nan
    s, h = sorted(v), n >> 1
    if n % 2:
        m = s[h]
        d = sorted([abs(x - m) for x in v])[h]
    else:
        m = (s[h - 1] + s[h]) / 2
        s = sorted([abs(x - m) for x in v])
        d = (s[h - 1] + s[h]) / 2
    return d * MAD_NORMAL if normal else d


# --------------------------------------------------------------------------------------------
# Mann–Whitney U


@dataclass(frozen=True)
class MWU:
    u: float  # U statistic of the first sample (number of pairs x > y, ties count 1/2)
    p: float  # two-sided p-value
    method: str  # exact | normal


@lru_cache(maxsize=65536, typed=True)
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
        # every k at once: f[k] gains the old f[k-1] shifted by s (the same additions, element
        # by element, as one k at a time from the top)
        top = min(i + 1, n)
        if s:
            f[1:top + 1, s:] += f[:top, : total + 1 - s].copy()
        else:
            f[1:top + 1] += f[:top].copy()
    dist = f[n]
    nz = np.nonzero(dist)[0]
    lo, hi = int(nz[0]), int(nz[-1])
    d = dist[lo:hi + 1]
    return d / d.sum(), lo


@lru_cache(maxsize=4096)
def _u_distribution(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """P(U <= u) and P(U >= u), u = 0..nm, of the U statistic without ties (both samples)."""
    k = min(n, m)
    probs, lo = _rank_sum_distribution(tuple(range(2, 2 * (n + m) + 1, 2)), k)
    p = probs[::2]  # doubled rank sums are even; lo = k(k+1) = 2·(smallest rank sum)
    return np.cumsum(p), np.cumsum(p[::-1])[::-1]


@lru_cache(maxsize=4096)
def _u_two_sided(n: int, m: int) -> list[float]:
    """The exact two-sided p of each U = 0..nm without ties (as :func:`mann_whitney_u` computes
    it from :func:`_u_distribution`), as a list: indexing it costs no numpy scalar."""
    cdf, sf = _u_distribution(n, m)
    return [float(min(1.0, 2 * min(cdf[u], sf[u]))) for u in range(n * m + 1)]


@lru_cache(maxsize=16384)
def _tie_scores(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Doubled mid-ranks, ascending, of N values whose tie groups (in value order) have these
    sizes: a group of c values starting at 0-based position s has mid-rank s + (c + 1) / 2."""
    out: list[int] = []
    s = 0
    for c in counts:
        out += [2 * s + c + 1] * c
        s += c
    return tuple(out)


@lru_cache(maxsize=65536)
def _tie_p(counts: tuple[int, ...], k: int, stat: int) -> float:
    """Exact two-sided p of the doubled rank sum ``stat`` of ``k`` of the values whose tie
    groups are ``counts`` (the permutation distribution of :func:`_rank_sum_distribution`)."""
    probs, lo = _rank_sum_distribution(_tie_scores(counts), k)
    idx = stat - lo
    lower = float(probs[: idx + 1].sum()) if idx >= 0 else 0.0
    upper = float(probs[max(idx, 0):].sum()) if idx < len(probs) else 0.0
    return float(min(1.0, 2 * min(lower, upper)))


def _mwu_exact_ties(xs: list[float], allv: list[float], n: int, m: int) -> MWU:
    """The exact test with ties of :func:`mann_whitney_u` (``xs``: the first sample, ``allv``:
    both samples sorted, every value finite), in integers: a value's doubled mid-rank is
    2·(values below it) + (values equal to it) + 1, so the doubled rank sum of ``xs`` is an
    exact integer and U = that / 2 − n(n+1)/2 is the float the mid-ranks give."""
    N = n + m
    w2 = 0
    for v in xs:
        lo = bisect_left(allv, v)
        w2 += 2 * lo + bisect_right(allv, v, lo) - lo + 1
    u = w2 / 2 - n * (n + 1) / 2
    if allv[0] == allv[-1]:  # every value equal
        return MWU(float(u), 1.0, "exact")
    counts = tuple(len(list(g)) for _, g in groupby(allv))
    k = min(n, m)
    stat = w2 if k == n else N * (N + 1) - w2  # the smaller side's doubled rank sum
    return MWU(float(u), _tie_p(counts, k, stat), "exact")


def mann_whitney_u(x: Sequence[float], y: Sequence[float], method: str = "auto") -> MWU:
    """Two-sided Mann–Whitney U test of x vs y.

    ``exact`` uses the permutation distribution of the rank sum (mid-ranks for ties, so it is
    exact with ties too); ``normal`` the normal approximation with tie and continuity
    correction. ``auto`` is exact up to ``EXACT_MAX_N`` observations in total.
    """
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("mann_whitney_u needs at least one observation on each side")
    N = n + m
    if method in ("auto", "exact") and N <= EXACT_MAX_N:  # fast path: no ties, exact
        ys = sorted(map(float, y))
        xs = [float(v) for v in x]
        if len(set(ys).union(xs)) == N:
            ui = sum(bisect_left(ys, v) for v in xs)  # pairs with x > y
            return MWU(float(ui), _u_two_sided(n, m)[ui], "exact")
        allv = sorted(xs + ys)
        if all(map(math.isfinite, allv)):  # ties, exact: the same numbers without numpy
            return _mwu_exact_ties(xs, allv, n, m)
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    allv = np.concatenate([xa, ya])
    ranks = _midranks(allv)
    w = ranks[:n].sum()
    u = w - n * (n + 1) / 2
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
# power: the smallest shift a rank test on these runs would see


@lru_cache(maxsize=4096)
def u_threshold(n: int, m: int, alpha: float) -> int | None:
    """Smallest U (of either sample) whose two-sided p-value is <= ``alpha``, without ties.

    U's null distribution is symmetric about nm/2 and the same for both samples. Exact up to
    ``EXACT_MAX_N`` observations (the rank-sum distribution of :func:`mann_whitney_u`), normal
    approximation with continuity correction above. None when no U reaches ``alpha``.
    """
    if n < 1 or m < 1 or min_attainable_p(n, m) > alpha:
        return None
    N = n + m
    if N <= EXACT_MAX_N:
        k = min(n, m)
        probs, lo = _rank_sum_distribution(tuple(range(2, 2 * N + 1, 2)), k)
        upper = np.cumsum(probs[::-1])[::-1]  # upper[j] = P(2W >= lo + j)
        ok = np.flatnonzero(2 * upper <= alpha * (1 + 1e-12))
        if not len(ok):
            return None
        w = (lo + int(ok[0])) / 2
        u = int(math.ceil(w - k * (k + 1) / 2 - 1e-9))
    else:
        z = _z_two_sided(alpha)
        u = int(math.ceil(n * m / 2 + 0.5 + z * math.sqrt(n * m * (N + 1) / 12)))
    return u if u <= n * m else None


def _z_two_sided(alpha: float) -> float:
    """z with erfc(z / sqrt 2) = alpha (bisection: no scipy at run time)."""
    lo, hi = 0.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erfc(mid / math.sqrt(2)) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def min_detectable_shift(x: Sequence[float], y: Sequence[float],
                         alpha: float) -> tuple[float, float] | None:
    """Smallest relative shifts (up, down) of every value of ``x`` that make the two-sided
    Mann–Whitney test of ``x`` vs ``y`` significant at ``alpha``: ``x·(1+up)`` and ``x·(1-down)``
    (just beyond these) give p <= alpha. The spread of ``x`` is kept (every run moves alike).

    Without ties U counts the pairs with x > y. Shifting x up by s counts pair (x, y) once
    s > y/x - 1, so U(s) reaches the threshold U* (:func:`u_threshold`) just above the U*-th
    smallest of those pairwise ratios; down likewise with 1 - y/x. A value below 0 means the
    runs are already that far beyond the threshold. None when no shift can be significant (too
    few runs) or a value is not positive.
    """
    if not len(x) or not len(y) or min(x) <= 0 or min(y) <= 0:
        return None
    u = u_threshold(len(x), len(y), alpha)
    if u is None:
        return None
    ratio = sorted(yv / xv for xv in x for yv in y)
    # up: the u-th smallest y/x - 1; down: the u-th smallest 1 - y/x = 1 - the u-th largest y/x
    return float(ratio[u - 1] - 1), float(1 - ratio[len(ratio) - u])


def place(x: Sequence[float], center: float) -> list[float]:
    """``x`` scaled so that its median is ``center`` (the spread, relative, kept)."""
    mx = median(x)
    return [v * center / mx for v in x]


@dataclass(frozen=True)
class Equivalence:
    """The equivalence rule at margin ``margin_pct`` (see :func:`equivalence`)."""

    p_up: float  # exact two-sided p of the runs placed at median(y)·(1 + margin) vs y
    p_down: float  # ... placed at median(y)·(1 − margin)
    equivalent: bool  # both <= alpha: a change of the margin would have been seen either way
    bound_pct: float | None  # smallest margin (percent) the runs would exclude, both ways


def equivalence(x: Sequence[float], y: Sequence[float], margin_pct: float,
                alpha: float) -> Equivalence | None:
    """Do the data exclude a change of ``margin_pct`` from the baseline ``y``?

    The runs ``x`` are placed at median(y)·(1 + margin) and at median(y)·(1 − margin), their
    spread kept (scaled by one factor each), and each placement must differ from ``y`` by the
    two-sided Mann–Whitney test at ``alpha`` (:func:`mann_whitney_u`: exact permutation
    distribution with mid-ranks, so ties are exact). This is Schuirmann's two one-sided tests of
    an equivalence margin [Schuirmann 1987; Wellek 2010] evaluated where it matters: at the
    margins themselves, centred on the baseline, so a label already leaning one way gets no
    credit for it. ``bound_pct``: the smallest margin that the centred runs would exclude both
    ways (:func:`min_detectable_shift` of the runs placed at median(y); without ties at the
    boundary). None when a value is not positive or a side is empty.
    """
    if not len(x) or not len(y) or min(x) <= 0 or min(y) <= 0:
        return None
    c = median(y)
    f = margin_pct / 100
    if f >= 1:
        return None
    xc = place(x, c)  # centred on the baseline median: placed at c·k is xc·k
    n, m = len(xc), len(y)
    # U of xc·k vs y (no ties) counts the pairs with y/xc < k: one sorted list of the pairwise
    # ratios gives both placements' U and the margin the runs exclude (min_detectable_shift)
    ratio = sorted([yv / xv for xv in xc for yv in y])
    distinct = n + m <= EXACT_MAX_N and len(set(xc)) == n and len(set(y)) == m
    ps = []
    for k in (1 + f, 1 - f):
        lo = bisect_left(ratio, k)
        if distinct and (lo == len(ratio) or ratio[lo] != k):
            ps.append(_u_two_sided(n, m)[lo])
        else:  # ties (within a side or at the margin): the exact test with mid-ranks
            ps.append(float(mann_whitney_u([v * k for v in xc], y).p))
    u = u_threshold(n, m, alpha)
    bound = None if u is None else max(ratio[u - 1] - 1, 1 - ratio[len(ratio) - u], 0.0) * 100
    return Equivalence(ps[0], ps[1], ps[0] <= alpha and ps[1] <= alpha, bound)


def beyond_margin_p(x: Sequence[float], y: Sequence[float], margin_pct: float,
                    sign: int) -> float:
    """p of the minimum-effect test: the runs ``x`` moved back toward ``y`` by the margin
    (divided by 1 + margin for a slowdown, ``sign`` > 0; by 1 − margin for a speed-up) against
    ``y``, two-sided, and 1.0 when they no longer lie that way. Small only when the change is
    larger than the margin: the effect-size condition of a claim no later label confirms."""
    if not len(x) or not len(y):
        return 1.0
    f = margin_pct / 100
    back = [v / (1 + f) if sign > 0 else v / (1 - f) for v in x]
    if (median(back) - median(y)) * sign <= 0:
        return 1.0
    return float(mann_whitney_u(back, y).p)


def runs_needed(detectable_pct: float, n: int, m: int, floor_pct: float,
                alpha: float, limit: int = 200) -> int | None:
    """An estimate of the runs this label needs (baseline unchanged) for a shift of ``floor_pct``
    to be detectable, given the shift ``detectable_pct`` detectable with ``n`` runs now.

    The detectable shift scales like the standard error of a two-sample location difference,
    sqrt(1/n + 1/m), and the count must also make the test attainable. None when even ``limit``
    runs would not do: the baseline's own spread and size are the limit.
    """
    if detectable_pct <= floor_pct and min_attainable_p(n, m) <= alpha:
        return n
    if n < 1 or m < 1:
        return None
    base = math.sqrt(1 / n + 1 / m)

    def enough(k: int) -> bool:
        return (min_attainable_p(k, m) <= alpha
                and detectable_pct * math.sqrt(1 / k + 1 / m) / base <= floor_pct)

    lo, hi = max(n, 1) + 1, limit
    if floor_pct < 0:  # a shift < 0 may then be enough for few runs and not for more
        return next((k for k in range(lo, hi + 1) if enough(k)), None)
    # the first k that is enough, by bisection: both conditions only ever turn true as k grows
    # (C(k+m, k) grows; 1/k shrinks, and rounding is monotone: a shift >= 0 times a shrinking
    # factor never grows, a shift < 0 is always within a floor >= 0, NaN never is)
    if lo > hi or not enough(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


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


@lru_cache(maxsize=64)
def _not_strict_upper(T: int) -> np.ndarray:
    """True on and below the diagonal of a T × T matrix (what ``np.triu(d, 1)`` zeroes)."""
    return ~np.triu(np.ones((T, T), dtype=bool), 1)


def _edivisive_stats(z: np.ndarray, min_size: int) -> np.ndarray:
    """Q(τ) for every split τ of each row of ``z`` (shape P × T), κ = T (Hunter's variant).

    Q(τ) = τ(T-τ)/T · [2/(τ(T-τ)) Σ|x-y| − 1/C(τ,2) Σ|x-x'| − 1/C(T-τ,2) Σ|y-y'|]
    Splits with fewer than ``min_size`` points on a side get -inf.
    """
    P, T = z.shape
    upper = np.subtract(z[:, :, None], z[:, None, :])
    np.abs(upper, out=upper)
    np.copyto(upper, 0.0, where=_not_strict_upper(T))  # np.triu(d, 1), without temporaries
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
