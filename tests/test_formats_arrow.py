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


# ------------------------------------------------------------------ built without NumPy


def _numpy_reference(values, typ):
    """What ``to_arrow`` built with NumPy before it packed lists itself: the buffers must stay
    byte for byte the same (validity bitmap, padding bits, offsets, data)."""
    def validity(vals):
        nulls = [v is None for v in vals]
        if not any(nulls):
            return None, 0
        return pa.py_buffer(np.packbits(~np.array(nulls, dtype=bool), bitorder="little")), \
            sum(nulls)

    dtypes = {pa.int64(): np.int64, pa.int32(): np.int32, pa.float64(): np.float64}
    n = len(values)
    valid, nulls = validity(values)
    if typ in dtypes:
        data = np.array([0 if v is None else v for v in values], dtype=dtypes[typ])
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(data)], null_count=nulls)
    if typ == pa.string():
        enc = [b"" if v is None else v.encode() for v in values]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=n), out=offsets[1:])
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets.astype(np.int32)),
                                              pa.py_buffer(b"".join(enc))], null_count=nulls)
    if typ == pa.bool_():
        bits = np.packbits(np.array([bool(v) for v in values], dtype=bool), bitorder="little")
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(bits)], null_count=nulls)
    lens = [0 if v is None else len(v) for v in values]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    flat = _numpy_reference([x for v in values if v is not None for x in v], typ.value_type)
    return pa.ListArray.from_buffers(typ, n, [valid, pa.py_buffer(offsets)], null_count=nulls,
                                     children=[flat])


def _buffers(a: pa.Array) -> list[bytes | None]:
    return [None if b is None else b.to_pybytes() for b in a.buffers()]


def _random_columns(seed: int = 7):
    import random

    rng = random.Random(seed)
    draw = {pa.int64(): lambda: rng.randint(-(2**63), 2**63 - 1),
            pa.int32(): lambda: rng.randint(-(2**31), 2**31 - 1),
            pa.float64(): lambda: rng.choice([rng.uniform(-1e9, 1e9), float("nan"), -0.0,
                                              float("inf")]),
            pa.string(): lambda: rng.choice(["", "a", "caf\u00e9", "x" * rng.randint(0, 40)]),
            pa.bool_(): lambda: rng.random() < 0.5,
            pa.list_(pa.int64()): lambda: [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]}
    for typ, one in draw.items():
        for n in (0, 1, 7, 8, 9, 15, 16, 17, 64, 100):  # bitmaps end inside and at a byte
            for null_share in (0.0, 0.3, 1.0):
                yield typ, [None if rng.random() < null_share else one() for _ in range(n)]


@pytest.mark.parametrize("numpy_loaded", [True, False])
def test_lists_are_packed_byte_for_byte_as_numpy_packed_them(monkeypatch, numpy_loaded):
    """Both ways (NumPy loaded or not: ``base._numpy``) give the old bytes."""
    from warehouse.ingesting.formats import base

    if not numpy_loaded:
        monkeypatch.setattr(base, "_numpy", lambda: None)
    for typ, values in _random_columns():
        got, want = to_arrow(values, typ), _numpy_reference(values, typ)
        got.validate(full=True)
        assert got.null_count == want.null_count, (typ, values)
        assert _buffers(got) == _buffers(want), (typ, values)


def test_a_value_the_machine_type_refuses_is_converted_as_numpy_converts_it():
    assert to_arrow([1.9, None, -2.5], pa.int64()).to_pylist() == [1, None, -2]
    assert to_arrow([np.int32(3), 4], pa.int64()).to_pylist() == [3, 4]
    assert to_arrow([1, True], pa.float64()).to_pylist() == [1.0, 1.0]
    with pytest.raises(OverflowError):
        to_arrow([2**63], pa.int64())


def test_to_arrow_needs_no_numpy():
    """In a process where NumPy cannot be imported (an ingest of ``.ncu-rep`` reports only,
    ``forking.hide_numpy``), the raw tables come out the same, byte for byte."""
    import subprocess
    import sys
    from pathlib import Path

    from warehouse.ingesting.formats import ncu

    sample = {"VARCHAR": lambda i: "caf\u00e9"[: i % 5] * (i % 3),
              "BIGINT": lambda i: (i * 7919) % 2**40 - 2**39, "INTEGER": lambda i: i - 100,
              "DOUBLE": lambda i: float("nan") if i % 11 == 0 else i / 7,
              "BOOLEAN": lambda i: i % 3 == 0}
    data = {c: [None if c != "run_id" and i % 5 == 0 else sample[t](i) for i in range(203)]
            for c, t, _ in ncu.METRICS.columns}
    table = ncu.METRICS.arrow(data)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    code = (
        "import sys, json\n"
        "sys.modules['numpy'] = None\n"
        "import pyarrow as pa\n"
        "from warehouse.ingesting.formats import ncu\n"
        "data = json.loads(sys.stdin.read())\n"
        "t = ncu.METRICS.arrow(data)\n"
        "assert sys.modules['numpy'] is None and pa.lib.np is None\n"
        "sink = pa.BufferOutputStream()\n"
        "w = pa.ipc.new_stream(sink, t.schema); w.write_table(t); w.close()\n"
        "sys.stdout.buffer.write(sink.getvalue().to_pybytes())\n")
    import json

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "-c", code], input=json.dumps(data).encode(),
                       capture_output=True, cwd=root, timeout=300)
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert p.stdout == sink.getvalue().to_pybytes()
