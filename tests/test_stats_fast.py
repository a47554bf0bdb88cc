"""The cheaper statistics give exactly what the code they replaced gave (same bits, same types).

Each ``_ref_*`` below is a frozen copy of the implementation before the speed-up (commit
da526a1); the current one must agree with it on many random inputs — ties, equal values, runs
of 1 to 30 values — compared by ``repr`` (every bit of a float) and type.
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np
import pyarrow as pa
import pytest

from warehouse.modelling import stats, udfs
from warehouse.modelling.stats import VerdictConfig
from warehouse.modelling.verdicts import Cell, judge_series


# ------------------------------------------------------------------ frozen reference code
def _ref_median(values):
    v = sorted(values)
    if not v:
        return math.nan
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _ref_mad(values, *, normal=True):
    v = list(values)
    if not v:
        return math.nan
    m = _ref_median(v)
    d = _ref_median(abs(x - m) for x in v)
    return d * stats.MAD_NORMAL if normal else d


def _ref_min_attainable_p(n, m, sides=2):
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, sides / math.comb(n + m, n))


def _ref_edivisive_stats(z, min_size):
    P, T = z.shape
    d = np.abs(z[:, :, None] - z[:, None, :])
    upper = np.triu(d, 1)
    col = upper.sum(axis=1)
    row = upper.sum(axis=2)
    total = upper.sum(axis=(1, 2))
    within_left = np.cumsum(col, axis=1)
    within_right = np.cumsum(row[:, ::-1], axis=1)[:, ::-1]
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


def _ref_rank_sum_distribution(scores, n):
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


def _ref_mann_whitney_u(x, y, method="auto"):
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("mann_whitney_u needs at least one observation on each side")
    N = n + m
    if method in ("auto", "exact") and N <= stats.EXACT_MAX_N:
        ys = sorted(map(float, y))
        xs = [float(v) for v in x]
        if len(set(ys).union(xs)) == N:
            ui = sum(bisect_left(ys, v) for v in xs)
            cdf, sf = stats._u_distribution(n, m)
            return stats.MWU(float(ui), float(min(1.0, 2 * min(cdf[ui], sf[ui]))), "exact")
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    allv = np.concatenate([xa, ya])
    ranks = stats._midranks(allv)
    w = ranks[:n].sum()
    u = w - n * (n + 1) / 2
    if method == "auto":
        method = "exact" if N <= stats.EXACT_MAX_N else "normal"
    if np.all(allv == allv[0]):
        return stats.MWU(float(u), 1.0, method)
    if method == "exact":
        scores = tuple(np.sort(np.rint(2 * ranks).astype(np.int64)).tolist())
        k = min(n, m)
        probs, lo = stats._rank_sum_distribution(scores, k)
        stat = int(round(2 * (w if k == n else ranks[n:].sum())))
        idx = stat - lo
        lower = float(probs[: idx + 1].sum()) if idx >= 0 else 0.0
        upper = float(probs[max(idx, 0):].sum()) if idx < len(probs) else 0.0
        return stats.MWU(float(u), float(min(1.0, 2 * min(lower, upper))), "exact")
    if method != "normal":
        raise ValueError(f"unknown method {method!r} (auto, exact or normal)")
    _, counts = np.unique(allv, return_counts=True)
    tie = (counts ** 3 - counts).sum() / (N * (N - 1))
    var = n * m / 12 * ((N + 1) - tie)
    mu = n * m / 2
    if var <= 0:
        return stats.MWU(float(u), 1.0, "normal")
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return stats.MWU(float(u), min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))), "normal")


def _ref_runs_needed(detectable_pct, n, m, floor_pct, alpha, limit=200):
    if detectable_pct <= floor_pct and _ref_min_attainable_p(n, m) <= alpha:
        return n
    if n < 1 or m < 1:
        return None
    base = math.sqrt(1 / n + 1 / m)
    for k in range(max(n, 1) + 1, limit + 1):
        if (_ref_min_attainable_p(k, m) <= alpha
                and detectable_pct * math.sqrt(1 / k + 1 / m) / base <= floor_pct):
            return k
    return None


# ------------------------------------------------------------------ random inputs
def _samples(rng, count):
    """Lists of 1..30 values: continuous, ties from a small grid, all equal, huge and tiny."""
    out = []
    for i in range(count):
        n = int(rng.integers(1, 31))
        kind = i % 6
        if kind == 0:
            v = rng.lognormal(0, 0.1, n)
        elif kind == 1:
            v = rng.integers(1, 5, n).astype(float)  # many ties
        elif kind == 2:
            v = np.full(n, float(rng.integers(1, 9)) / 7)  # every value equal
        elif kind == 3:
            v = np.round(rng.normal(100, 3, n), 1)  # a few ties
        elif kind == 4:
            v = rng.normal(0, 1, n)  # negative and positive
        else:
            v = rng.lognormal(0, 3, n) * 1e-9  # tiny and spread
        out.append([float(x) for x in v])
    return out


def _same(a, b):
    assert type(a) is type(b), (a, b)
    assert repr(a) == repr(b)


def test_median_and_mad_bit_for_bit():
    rng = np.random.default_rng(1)
    for v in _samples(rng, 3000):
        _same(stats.median(v), _ref_median(v))
        _same(stats.mad(v), _ref_mad(v))
        _same(stats.mad(v, normal=False), _ref_mad(v, normal=False))
        # other iterables the callers pass: tuples, generators, numpy arrays
        _same(stats.median(tuple(v)), _ref_median(tuple(v)))
        _same(stats.median(x for x in v), _ref_median(x for x in v))
        _same(stats.mad(x for x in v), _ref_mad(x for x in v))
        _same(stats.mad(np.asarray(v)), _ref_mad(np.asarray(v)))
    for empty in ([], (), iter([])):
        assert math.isnan(stats.median(empty)) and math.isnan(stats.mad(empty))
    # NaN (never judged, but the same answer all the same: same order of the same sort)
    for v in ([1.0, math.nan, 3.0], [math.nan, 2.0], [5.0, 1.0, math.nan, 2.0, 0.5]):
        assert repr(stats.mad(v)) == repr(_ref_mad(v))
        assert repr(stats.median(v)) == repr(_ref_median(v))
    assert stats.mad([3, 1, 2]) == _ref_mad([3, 1, 2])  # ints


def test_mad_does_not_change_its_input():
    v = [3.0, 1.0, 2.0, 2.0]
    stats.mad(v)
    assert v == [3.0, 1.0, 2.0, 2.0]


def test_min_attainable_p_bit_for_bit():
    for n in range(0, 40):
        for m in range(0, 40):
            for sides in (1, 2):
                _same(stats.min_attainable_p(n, m, sides), _ref_min_attainable_p(n, m, sides))
                _same(stats.min_attainable_p(n, m, sides=sides),
                      _ref_min_attainable_p(n, m, sides))


@pytest.mark.parametrize("T", [4, 6, 7, 12, 20, 33, 60, 120])
def test_edivisive_stats_bit_for_bit(T):
    rng = np.random.default_rng(T)
    for z in (rng.normal(0, 1, (5, T)), np.round(rng.normal(0, 1, (4, T)), 1),
              np.zeros((2, T)), np.log(rng.lognormal(0, 0.05, (3, T))),
              rng.integers(0, 3, (25, T)).astype(float)):
        for min_size in (2, 3, 5):
            got, ref = stats._edivisive_stats(z, min_size), _ref_edivisive_stats(z, min_size)
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert got.tobytes() == ref.tobytes()


def test_change_points_bit_for_bit(monkeypatch):
    cfg = VerdictConfig()
    rng = np.random.default_rng(7)
    series = []
    for i in range(30):
        T = int(rng.integers(18, 130))
        v = rng.lognormal(0, 0.03, T)
        if i % 3 == 0:
            v[T // 2:] *= 1.15
        if i % 5 == 0:
            v = np.round(v, 2)  # ties
        if i % 7 == 0:
            v[T // 3: T // 2] *= 0.8
        series.append([float(x) for x in v])
    got = [stats.change_points(v, cfg, key=f"k{i}") for i, v in enumerate(series)]
    monkeypatch.setattr(stats, "_edivisive_stats", _ref_edivisive_stats)
    ref = [stats.change_points(v, cfg, key=f"k{i}") for i, v in enumerate(series)]
    assert repr(got) == repr(ref)
    assert sum(len(c) for c in got) > 5  # the comparison saw accepted change points


def test_rank_sum_distribution_bit_for_bit():
    rng = np.random.default_rng(2)
    cases = [(tuple(range(2, 2 * 60 + 1, 2)), 30), ((0, 0, 3, 5, 5), 2), ((4,), 1), ((2, 4), 0)]
    for _ in range(300):
        counts = rng.integers(1, 4, int(rng.integers(1, 25)))
        scores, pos = [], 0
        for c in counts:
            scores += [2 * pos + int(c) + 1] * int(c)
            pos += int(c)
        cases.append((tuple(scores), int(rng.integers(0, len(scores) + 1))))
    for scores, n in cases:
        (got, glo), (ref, rlo) = (stats._rank_sum_distribution.__wrapped__(scores, n),
                                  _ref_rank_sum_distribution(scores, n))
        assert glo == rlo and got.tobytes() == ref.tobytes()


def test_mann_whitney_u_bit_for_bit():
    rng = np.random.default_rng(3)
    xs, ys = _samples(rng, 1500), _samples(rng, 1500)
    for x, y in zip(xs, ys, strict=True):
        for a, b in ((x, y), (x, x), (x[:3], y), ([v * 1.05 for v in x], y)):
            _same(stats.mann_whitney_u(a, b), _ref_mann_whitney_u(a, b))


def test_mann_whitney_u_other_inputs_bit_for_bit():
    cases = [([1, 2, 2, 3], [2, 3, 3, 4, 5]), (np.array([1.0, 1.0, 2.0]), (1.0, 2.0, 2.0)),
             ([0.0, -0.0, 1.0], [0.0, 2.0]), ([5.0] * 4, [5.0] * 7), ([1.0], [1.0, 2.0]),
             ([1.0, math.nan, 2.0], [2.0, 3.0]), ([math.inf, 1.0], [1.0, 2.0]),
             (list(range(120)), [v + 0.5 for v in range(0, 120, 2)] + [3.0])]
    for x, y in cases:
        for method in ("auto", "exact", "normal"):
            _same(stats.mann_whitney_u(x, y, method), _ref_mann_whitney_u(x, y, method))


def test_equivalence_and_bounds_match_a_direct_computation():
    """equivalence() now reads its p-values from precomputed lists: each equals the exact test
    on the placed runs (the definition), which the reference computes from scratch."""
    rng = np.random.default_rng(11)
    checked = 0
    for x, y in zip(_samples(rng, 800), _samples(rng, 800), strict=True):
        x, y = [abs(v) + 1e-3 for v in x], [abs(v) + 1e-3 for v in y]
        eq = stats.equivalence(x, y, 5.0, 0.05)
        xc = stats.place(x, stats.median(y))
        for k, p in ((1.05, eq.p_up), (0.95, eq.p_down)):
            ratio = sorted(yv / xv for xv in xc for yv in y)
            lo = bisect_left(ratio, k)
            if len(set(xc)) == len(xc) and len(set(y)) == len(y) and (
                    lo == len(ratio) or ratio[lo] != k):
                cdf, sf = stats._u_distribution(len(xc), len(y))
                ref = float(min(1.0, 2 * min(cdf[lo], sf[lo])))
            else:
                ref = _ref_mann_whitney_u([v * k for v in xc], y).p
            _same(p, ref)
            checked += 1
    assert checked == 1600


def test_runs_needed_bit_for_bit():
    rng = np.random.default_rng(5)
    for _ in range(4000):
        n, m = int(rng.integers(0, 12)), int(rng.integers(0, 40))
        d = float(rng.choice([rng.uniform(0, 40), rng.uniform(-3, 3), 0.0, math.inf, math.nan,
                              -math.inf, 1e300]))
        floor = float(rng.choice([5.0, 0.0, 2.5, -1.0]))
        alpha = float(rng.choice([0.05, 0.005, 0.2]))
        limit = int(rng.choice([200, 30, 1, 5]))
        _same(stats.runs_needed(d, n, m, floor, alpha, limit),
              _ref_runs_needed(d, n, m, floor, alpha, limit))


# ------------------------------------------------------------------ UDF marshalling
def _dict_per_row(per_series):
    """The UDF's result as it was built before: a dict per row, converted by ``pa.array``."""
    return pa.array([None if rows is None else
                     [{n: r[n] for n, _, _ in udfs.TREND_FIELDS} for r in rows]
                     for rows in per_series], type=udfs._TREND_ARROW)


def _series(seed, labels=14, keys=9, repeats=3):
    rng = np.random.default_rng(seed)
    cells = []
    for k in range(keys):
        for lab in range(labels):
            step = 1.2 if k == 0 and lab >= 7 else 1.0
            vals = [float(x) for x in rng.lognormal(0, 0.03, repeats) * (k + 1) * step]
            cells.append(Cell("kernel", f"k{k}", f"L{lab:02d}", lab, vals,
                              [f"r{lab}_{j}" for j in range(repeats)]))
    return cells


def test_trend_array_equals_the_dict_per_row_conversion():
    rows = [judge_series(_series(s), VerdictConfig()) for s in range(3)]
    rows.insert(1, None)
    rows += [[], None, judge_series(_series(9, labels=3, keys=2, repeats=1), VerdictConfig())]
    got, ref = udfs.trend_array(rows), _dict_per_row(rows)
    got.validate(full=True)
    assert got.type == ref.type and got.equals(ref)
    assert repr(got.to_pylist()) == repr(ref.to_pylist())
    assert got.null_count == 2 and sum(len(r) for r in rows if r) > 100
    for edge in ([], [None], [None, None], [[]], [[], None]):
        assert udfs.trend_array(edge).equals(_dict_per_row(edge)), edge


def test_trend_array_refuses_a_row_missing_a_field():
    row = judge_series(_series(1, labels=2, keys=1), VerdictConfig())[0]
    del row["verdict"]
    with pytest.raises(KeyError):
        udfs.trend_array([[row]])
