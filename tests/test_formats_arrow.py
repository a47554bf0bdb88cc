"""Arrow arrays built from buffers (warehouse.ingesting.formats.base.to_arrow) equal what pyarrow builds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from warehouse.ingesting.formats.base import string_array, to_arrow

CASES = [
    ([1, None, -3, 2**62], pa.int64()),
    ([7, 0, None], pa.int32()),
    ([1.5, None, 0.0, -2.25, 1e300], pa.float64()),
    (["a", None, "", "caf\u00e9 \u2603", "x" * 1000], pa.string()),
    ([True, None, False], pa.bool_()),
    ([[1, 2, 3], None, [], [4]], pa.list_(pa.int64())),
    ([], pa.string()),
    ([], pa.int64()),
]


@pytest.mark.parametrize("values,typ", CASES, ids=[f"{t}-{i}" for i, (_, t) in enumerate(CASES)])
def test_to_arrow_matches_pyarrow(values, typ):
    got = to_arrow(values, typ)
    got.validate(full=True)
    assert got.type == typ
    assert got.equals(pa.array(values, typ))
    assert got.to_pylist() == values


def test_numpy_and_arrow_inputs():
    a = np.arange(5, dtype=np.int64)
    assert to_arrow(a, pa.int64()).to_pylist() == [0, 1, 2, 3, 4]
    assert to_arrow(a.astype(np.int32), pa.int64()).type == pa.int64()
    arr = pa.array([1, 2], pa.int32())
    assert to_arrow(arr, pa.int64()).type == pa.int64()


def test_string_array_is_utf8():
    s = string_array(["\u00e9", "ab"])
    s.validate(full=True)
    assert s.to_pylist() == ["\u00e9", "ab"]
