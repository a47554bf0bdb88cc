"""What every source format module provides, and the raw-table description they share."""

from __future__ import annotations

import datetime as dt
import sys
from array import array
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Annotated, Any

import msgspec
import pyarrow as pa

# Field types of the source formats. The parser refuses, with the JSON path, what the raw tables
# could not hold or what no profiler writes: integers outside BIGINT, negative counts, cycles and
# durations, and strings longer than MAX_TEXT characters.
MAX_TEXT = 1 << 20
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # counts, cycles, offsets, indices
NonNeg = Annotated[float, msgspec.Meta(ge=0)]  # durations, milliseconds, cycle averages
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]

# DuckDB type -> Arrow type, for the few types raw tables use.
_ARROW = {
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "BIGINT[]": pa.list_(pa.int64()),
}


@dataclass(frozen=True)
class Table:
    """One raw table: its name in schema ``raw``, columns in order, and a one-line purpose."""

    name: str
    columns: tuple[tuple[str, str, str], ...]  # (name, duckdb type, description)
    primary_key: tuple[str, ...]
    doc: str
    # False for the big per-sample tables: the key is unique by construction (the loader writes
    # a run once, positions are generated), and an index on millions of rows per run would cost
    # more than the whole load and grow with history.
    indexed: bool = True

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c, _ARROW[t]) for c, t, _ in self.columns])

    def ddl(self) -> str:
        cols = ",\n    ".join(
            f"{c} {t}{' NOT NULL' if c in self.primary_key else ''}" for c, t, _ in self.columns
        )
        if not self.indexed:
            return f"CREATE TABLE IF NOT EXISTS raw.{self.name} (\n    {cols}\n)"
        return (
            f"CREATE TABLE IF NOT EXISTS raw.{self.name} (\n    {cols},\n"
            f"    PRIMARY KEY ({', '.join(self.primary_key)})\n)"
        )

    def arrow(self, data: dict[str, Any]) -> pa.Table:
        return _table(self.arrow_schema, data)

    @property
    def arrow_schema_without_run_id(self) -> pa.Schema:
        """The Arrow schema of a streamed batch: ``run_id`` is bound by the loader in SQL."""
        return pa.schema([(c, _ARROW[t]) for c, t, _ in self.columns if c != "run_id"])

    def batch(self, data: dict[str, Any]) -> pa.Table:
        """A streamed batch of this table: every column but ``run_id``."""
        return _table(self.arrow_schema_without_run_id, data)


# Arrow arrays are built from buffers here rather than with ``pa.array``: the first
# ``pa.array`` call of a process imports pandas (a quarter of a second of a CLI ingest). Lists
# are packed with the standard library (``array``), never importing NumPy: an ingest of Nsight
# Compute reports only runs without it (``forking.hide_numpy``: a third of its imports). Where
# NumPy is loaded anyway (any other ingest), offsets are summed with it (~2x quicker); both
# ways give the same bytes. A NumPy array (the other formats' columns) is taken as it is.

# Arrow type -> ``array`` type code of the same machine type (little-endian, as Arrow's).
_CODES = {pa.int64(): "q", pa.int32(): "i", pa.float64(): "d"}
assert array("q").itemsize == 8 and array("i").itemsize == 4 and array("d").itemsize == 8
assert sys.byteorder == "little"  # Arrow buffers are little-endian


def _table(schema: pa.Schema, data: dict[str, Any]) -> pa.Table:
    return pa.Table.from_arrays([to_arrow(data[f.name], f.type) for f in schema], schema=schema)


def _bits(flags) -> bytes:
    """Arrow's bitmap of ``flags`` (truthy = 1): bit ``i`` of byte ``i // 8`` (least significant
    first), ``ceil(n / 8)`` bytes, the padding bits 0 (NumPy's ``packbits(bitorder="little")``)."""
    text = "".join(["1" if f else "0" for f in reversed(flags)])
    return int(text, 2).to_bytes((len(text) + 7) // 8, "little") if text else b""


def _validity(values) -> tuple[pa.Buffer | None, int]:
    nulls = [v is None for v in values]
    if True not in nulls:
        return None, 0
    return pa.py_buffer(_bits([not null for null in nulls])), nulls.count(True)


def _numpy():
    """NumPy if this process has loaded it, else ``None`` (never imported here)."""
    return sys.modules.get("numpy")


def _is_ndarray(values) -> bool:
    np = _numpy()  # a NumPy array implies NumPy is loaded
    return np is not None and isinstance(values, np.ndarray)


def _offsets(lens, n: int, what: str):
    """Arrow's int32 offsets buffer (``n + 1`` values from 0) of ``n`` lengths ``lens`` (an
    iterable); ``ValueError`` naming ``what`` when the total passes 2**31 - 1."""
    np = _numpy()
    if np is not None:
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(lens, dtype=np.int64, count=n), out=offsets[1:])
        total = int(offsets[-1])
    else:
        offsets = list(accumulate(lens, initial=0))
        total = offsets[-1]
    if total >= 1 << 31:
        raise ValueError(f"{what} over 2 GiB in one batch")
    return offsets.astype(np.int32) if np is not None else array("i", offsets)


def _packed(values: list, typ: pa.DataType):
    """The data buffer of a fixed-width column (``None`` -> 0). A value the machine type does
    not take as it is (a float in an integer column) is converted as NumPy converts it."""
    data = [0 if v is None else v for v in values]
    try:
        return array(_CODES[typ], data)
    except TypeError:
        import numpy as np

        return np.array(data, dtype=_np_dtype(typ))


def _np_dtype(typ: pa.DataType):
    """The NumPy type of a fixed-width Arrow type of ``_CODES`` (NumPy imported: only called
    where NumPy is needed anyway)."""
    import numpy as np

    return {"q": np.int64, "i": np.int32, "d": np.float64}[_CODES[typ]]


def to_arrow(values, typ: pa.DataType) -> pa.Array:
    """An Arrow array of ``typ`` from an Arrow array, a numpy array or a list (``None`` = null)."""
    if isinstance(values, pa.Array):
        return values if values.type == typ else values.cast(typ)
    if typ in _CODES and _is_ndarray(values):
        import numpy as np

        data = np.ascontiguousarray(values, dtype=_np_dtype(typ))
        return pa.Array.from_buffers(typ, len(data), [None, pa.py_buffer(data)])
    values = list(values)
    n = len(values)
    if typ in _CODES:
        valid, nulls = _validity(values)
        data = _packed(values, typ)
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(data)], null_count=nulls)
    if typ == pa.string():
        return string_array(values)
    if typ == pa.bool_():
        valid, nulls = _validity(values)
        bits = _bits(values)
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(bits)], null_count=nulls)
    if pa.types.is_list(typ):
        offsets = _offsets((0 if v is None else len(v) for v in values), n, "list column")
        flat = to_arrow([x for v in values if v is not None for x in v], typ.value_type)
        valid, nulls = _validity(values)
        return pa.ListArray.from_buffers(typ, n, [valid, pa.py_buffer(offsets)],
                                         null_count=nulls, children=[flat])
    raise TypeError(f"no Arrow conversion for {typ}")


def string_array(values: list[str | None]) -> pa.Array:
    """A UTF-8 Arrow string array from Python strings (``None`` = null)."""
    n = len(values)
    valid, nulls = _validity(values)
    enc = [b"" if v is None else v.encode() for v in values]
    offsets = _offsets(map(len, enc), n, "string column")
    return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets),
                                                  pa.py_buffer(b"".join(enc))], null_count=nulls)


@dataclass
class Parsed:
    """A parsed document: one Arrow table per raw table, plus facts for the manifest."""

    source_format: str
    parser_version: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    summary: dict[str, int] = field(default_factory=dict)
    # The file's own clock (naive UTC), the default capture time before the file's mtime.
    captured_at: dt.datetime | None = None
