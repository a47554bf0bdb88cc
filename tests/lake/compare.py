"""Comparing model tables built by two engines: same columns, same rows (order ignored),
floats equal to a relative tolerance, lists and maps compared element by element."""

from __future__ import annotations

import math

import pyarrow as pa

REL = 1e-9


def _norm(v):
    """A hashable, order-stable form with floats kept for the tolerance check."""
    if isinstance(v, float):
        return ("f", v)
    if isinstance(v, dict):
        return tuple((k, _norm(x)) for k, x in v.items())
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_norm(x) for x in v)
    return v


def _key(v):
    """Sort key: floats rounded so both sides sort the same way."""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "f":
        x = v[1]
        return ("f", None if x is None or math.isnan(x) else float(f"{x:.9g}"))
    if isinstance(v, tuple):
        return tuple(_key(x) for x in v)
    return (type(v).__name__, v)


def _close(a, b) -> bool:
    if isinstance(a, tuple) and len(a) == 2 and a[0] == "f":
        if not (isinstance(b, tuple) and len(b) == 2 and b[0] == "f"):
            return False
        x, y = a[1], b[1]
        if x is None or y is None:
            return x is y
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        return x == y or abs(x - y) <= REL * max(abs(x), abs(y))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def diff(name: str, left: pa.Table, right: pa.Table) -> list[str]:
    """Differences between two tables (empty: equal)."""
    if left.column_names != right.column_names:
        return [f"{name}: columns {left.column_names} != {right.column_names}"]
    if left.num_rows != right.num_rows:
        return [f"{name}: {left.num_rows} rows != {right.num_rows} rows"]
    a = sorted((_norm(tuple(r.values())) for r in left.to_pylist()), key=_key)
    b = sorted((_norm(tuple(r.values())) for r in right.to_pylist()), key=_key)
    out = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if not _close(x, y):
            cols = [c for c, u, v in zip(left.column_names, x, y, strict=True)
                    if not _close(u, v)]
            out.append(f"{name}: row {i} differs in {cols}: {x} != {y}"[:600])
            if len(out) >= 3:
                break
    return out
