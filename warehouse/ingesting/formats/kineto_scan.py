"""The compiled fast path of a chunk of Kineto events (``_kscan.c``): the same rows as
:meth:`kineto_columns.Columns.add` after the strict msgspec decode, without a Python object per
event.

:func:`add_chunk` hands the chunk (a JSON array of events) to the C scanner, which validates it
as strict JSON (grammar, escapes, UTF-8, no duplicate key in any object) and returns each
event's fields as packed arrays: the codes of ``ph``/``cat``/``name`` among their distinct
values, ``ts``/``dur`` as exact integer ns, and the byte slices of ``pid``, ``tid``, ``args`` and
the ``args``' ``device``/``stream``, the ``correlation`` integer, and the number of keys. The
columns are then built with numpy (names written with escapes are unescaped in C, once per
distinct spelling). Anything the scanner does not handle plainly (a syntax error, an escaped
key or id, a time it cannot prove exact, a complete event without its name, ...) makes
:func:`add_chunk` return ``False`` before anything is added: the caller then takes the msgspec
path, which decodes the chunk or raises the located error. So both paths give the same rows,
the same counts and the same errors (``tests/test_kineto_scan.py`` compares them).

Without the compiled module (a checkout not installed with ``pip install -e .``), every chunk
takes the msgspec path: slower, the same results. ``PWH_KINETO_SCAN=0`` forces that path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:  # numpy is imported where used: an ncu-only ingest never imports it
    import numpy as np

from warehouse.ingesting.formats import kineto_columns as kc
from warehouse.ingesting.formats import trace

try:
    from warehouse.ingesting.formats import _kscan
except ImportError:  # not built: the msgspec path only
    _kscan = None

TS_OK, DUR_OK, CORR_OK = 1, 2, 4
_SLICE = [("off", "<i4"), ("len", "<i4")]  # the numpy dtype of a slice


def available() -> bool:
    """Is the compiled scanner built and not switched off (``PWH_KINETO_SCAN=0``)?"""
    return _kscan is not None and os.environ.get("PWH_KINETO_SCAN", "1") != "0"


def add_chunk(cols: kc.Columns, chunk) -> bool:
    """Add the events of ``chunk`` (bytes of a JSON array of events) to ``cols``, as
    :meth:`Columns.add` would after decoding it; ``False`` (nothing added) when the chunk is
    not the plain case: decode it with msgspec instead."""
    import numpy as np

    if not available():
        return False
    r = _kscan.scan(chunk, trace.MAX_NAME)
    if r is None:
        return False
    (n_all, ph_b, ph_u, cat_b, cat_u, name_b, name_u, ts_b, dur_b, flags_b, corr_b,
     pid_b, tid_b, args_b, dev_b, stm_b, keys) = r
    ph = np.frombuffer(ph_b, np.int32)
    flags = np.frombuffer(flags_b, np.uint8)
    try:
        is_x = ph == ph_u.index("X")
    except ValueError:
        is_x = np.zeros(n_all, dtype=bool)
    xi = np.flatnonzero(is_x)
    names = np.frombuffer(name_b, np.int32)[xi]
    if (flags[xi] & (TS_OK | DUR_OK) != TS_OK | DUR_OK).any() or (
            None in name_u and (names == name_u.index(None)).any()):
        return False  # a complete event the exact path must judge (and refuse, located)
    for code, k in _first_seen_counts(ph):
        cols.count_phase(ph_u[code], k)
    cats = np.frombuffer(cat_b, np.int32)[xi]
    kinds = [kc._kind(c) for c in cat_u]
    for code, k in _first_seen_counts(cats):
        cols.kinds[kinds[code]] = cols.kinds.get(kinds[code], 0) + k
    rows = xi  # every complete event is a row (the CPU side too)
    cats, names = cats.astype(np.int64), names.astype(np.int64)
    n = len(rows)
    start = np.frombuffer(ts_b, np.int64)[rows]
    dur = np.frombuffer(dur_b, np.int64)[rows]
    cols.note_start(start, kinds, cats)
    corr_ok = (flags[rows] & CORR_OK) != 0
    c = cols.c
    c["event_idx"].append(rows.astype(np.int64) + cols.index)
    c["kind"].append(kc._interned(None, (kinds, cats)))
    c["category"].append(kc._interned(None, (cat_u, cats)))
    c["name"].append(kc._interned(None, (name_u, names)))
    c["device"].append(_strings(chunk, dev_b, rows))
    c["stream"].append(_strings(chunk, stm_b, rows))
    c["pid"].append(_strings(chunk, pid_b, rows))
    c["tid"].append(_strings(chunk, tid_b, rows))
    c["start_ns"].append(start)
    c["dur_ns"].append(dur)
    c["correlation"].append(_ints(np.frombuffer(corr_b, np.int64)[rows], corr_ok))
    c["args"].append(_strings(chunk, args_b, rows))
    cols.rows += n
    cols.index += n_all
    cols.keys += keys  # every key of the chunk (none repeated: the scanner checked)
    return True


def _first_seen_counts(codes: np.ndarray) -> list[tuple[int, int]]:
    """``(code, count)`` for each distinct code, in order of first appearance (the order a
    ``Counter`` of the decoded values has)."""
    import numpy as np

    if not len(codes):
        return []
    uniq, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return list(zip(uniq[order].tolist(), counts[order].tolist(), strict=True))


def _strings(chunk, slices: bytes, rows: np.ndarray) -> pa.Array:
    """A string column of the chunk's byte slices of ``rows`` (length -1: null)."""
    import numpy as np

    sl = np.frombuffer(slices, _SLICE)[rows]
    data, offsets = _kscan.gather(chunk, sl)
    valid = sl["len"] >= 0
    nulls = int(len(sl) - valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.string(), len(sl), [validity, pa.py_buffer(offsets),
                                                        pa.py_buffer(data)], null_count=nulls)


def _ints(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    import numpy as np

    nulls = int(len(values) - valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    data = np.where(valid, values, 0).astype(np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [validity, pa.py_buffer(data)],
                                 null_count=nulls)
