"""Kineto events -> ``raw.trace_events`` columns (:class:`Columns`), chunk after chunk.

Split from :mod:`.kineto` (the format: detection, the document, the header, the lossless
round trip); used by the whole-document path and by :mod:`.kineto_stream`. No ``pa.array``
and no ``pyarrow.compute`` here: the first use of either in a process imports pandas (seconds
of a small CLI ingest); arrays are built from buffers (:func:`base.to_arrow`).
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import TYPE_CHECKING

import msgspec
import pyarrow as pa

if TYPE_CHECKING:  # numpy is imported where used: an ncu-only ingest never imports it
    import numpy as np

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import trace
from warehouse.ingesting.formats.base import to_arrow

_NO = msgspec.Raw()  # a Raw field's default: the key was absent (msgspec has no Raw | None)


class Args(msgspec.Struct, gc=False):
    device: msgspec.Raw = _NO
    stream: msgspec.Raw = _NO
    correlation: msgspec.Raw = _NO


class ArgIds(msgspec.Struct, gc=False):
    """The ids inside ``args``, as their JSON text (read from the stored events' args)."""

    device: msgspec.Raw = _NO
    stream: msgspec.Raw = _NO
    correlation: msgspec.Raw = _NO


_ARG_IDS_DECODER = msgspec.json.Decoder(list[ArgIds])
_INTS_DECODER = msgspec.json.Decoder(list[int | None])
_GET = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args",
                                    "device", "stream", "correlation")}
_ARGS_DECODER = msgspec.json.Decoder(Args)
_ENCODER = msgspec.json.Encoder()

# cat (lower case) -> kind
_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "cuda_driver": "runtime", "runtime": "runtime",
    "hip_runtime": "runtime", "hip_api": "runtime", "cuda_api": "runtime",
    # the other backends' launch calls (libkineto include/ActivityType.h: Intel XPU, MTIA,
    # PrivateUse1 devices), which the device's kernels name by correlation like CUDA's
    "xpu_runtime": "runtime", "xpu_driver": "runtime", "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime", "privateuse1_driver": "runtime",
    # the CPU side (older traces: "Operator", ProfilerStep#N among them) and the rest kept
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "annotation", "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync", "xpu_sync": "sync",
}


NO_PHASE = "(none)"  # the metadata.phases key of events written without a ph
GPU_KINDS = frozenset(("kernel", "memcpy", "memset", "runtime"))


def colons(data) -> int:
    """The colons in ``data`` (numpy: one pass, no Python object per byte)."""
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == 58))


def _text(raw) -> str | None:
    """A JSON scalar as text: strings unquoted, numbers as written, null -> None."""
    if raw is None or raw is _NO:
        return None
    b = bytes(raw)
    if b[:1] == b'"':
        return msgspec.json.decode(b, type=str)
    if b == b"null":
        return None
    return b.decode()


def _bigint(raw) -> int | None:
    if raw is _NO:
        return None
    try:
        v = int(bytes(raw))
    except ValueError:
        return None
    return v if -(2**63) <= v < 2**63 else None


# ------------------------------------------------------------------ events -> columns


class Columns:
    """Accumulates ``raw.trace_events`` columns from decoded events, chunk after chunk.

    Column-wise: each field is gathered with a C-level map over the events, times converted by
    :func:`trace.decimal_ns_array` (numpy), verbatim texts (``args``, numeric pid/tid) become
    Arrow strings straight from the decoded JSON bytes."""

    def __init__(self, path: str, rank: str | None, *, count_keys: bool = False):
        self.path, self.rank = path, rank
        self.count_keys = count_keys  # always count keys (else only for chunks with a "\\")
        self.index = 0  # events seen (all phases), the JSON index of the next one
        self.rows = 0  # rows written so far (event_idx of the next row)
        self.phases: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self.keys = 0  # object keys decoded (for the duplicate-key check)
        self.colons = 0  # colons in the decoded events re-encoded (the same check, fast path)
        self.min_start: int | None = None
        self.min_any: int | None = None  # earliest start of any complete event (CPU-only clock)
        self.unended: dict[str, int] = {}  # complete events with a negative dur, not rows
        self._reset()

    def _reset(self) -> None:
        self.c: dict[str, list] = {c: [] for c, _, _ in trace.EVENTS.columns if c != "run_id"}

    def add(self, events: list, raw: bytes | None = None) -> None:
        """Add decoded ``events`` (:class:`kineto.Event`; ``raw``, the JSON array they were decoded from, is not needed
        any more: kept for the callers).

        Per event only C-level iteration (``map``/``compress`` over attribute getters); times,
        positions and string columns are built with numpy from joined texts."""
        import numpy as np

        path, base = self.path, self.index
        n_all = len(events)
        phs = list(map(_GET["ph"], events))
        for ph, k in Counter(phs).items():
            self.count_phase(ph, k)
        is_x = list(map(eq, phs, repeat("X")))
        if all(is_x):
            xs, xi = events, range(n_all)
        else:
            xs, xi = list(compress(events, is_x)), list(compress(range(n_all), is_x))
        ts = list(map(_GET["ts"], xs))
        durs = list(map(_GET["dur"], xs))
        names = list(map(_GET["name"], xs))
        for col, what in ((ts, "ts"), (durs, "dur"), (names, "name")):
            if (None in col) if what == "name" else not all(map(len, col)):
                k = _first_missing(col)
                raise FormatError(path, f"$.traceEvents[{base + xi[k]}]",
                                  f"a complete event (ph X) with {what}")
        start = trace.decimal_ns_array(ts, path, lambda k: f"$.traceEvents[{base + xi[k]}].ts",
                                       negative=True)
        dur = trace.decimal_ns_array(durs, path,
                                     lambda k: f"$.traceEvents[{base + xi[k]}].dur",
                                     negative=True)
        if len(dur) and int(dur.min()) < 0:  # rare: ranges that never ended (see _unended)
            xs, xi, start, dur = self._unended(xs, xi, start, dur, durs, base)
            names = list(map(_GET["name"], xs))
        del ts, durs
        cats = list(map(_GET["cat"], xs))
        per_cat = Counter(cats)
        for c, k in per_cat.items():
            kd = _kind(c)
            self.kinds[kd] = self.kinds.get(kd, 0) + k
        # every complete event was validated above and is a row (kind "other" included): the
        # CPU side (operators, annotations) as well as the GPU and runtime events
        n = len(xs)
        args = list(map(_GET["args"], xs))
        joined, objects = _args_keys_unique(args, path,
                                            lambda k: f"$.traceEvents[{base + xi[k]}].args")
        device, stream, corr = _ids(args, joined, objects)
        uniq, code = _codes(cats)
        self.note_start(start, [_kind(x) for x in uniq], code)
        c = self.c
        c["event_idx"].append(np.fromiter(xi, dtype=np.int64, count=n) + base)
        c["kind"].append(_interned(None, ([_kind(x) for x in uniq], code)))
        c["category"].append(_interned(None, (uniq, code)))
        c["name"].append(_interned(names))
        c["device"].append(device)
        c["stream"].append(stream)
        c["pid"].append(_scalars(list(map(_GET["pid"], xs))))
        c["tid"].append(_scalars(list(map(_GET["tid"], xs))))
        c["start_ns"].append(start)
        c["dur_ns"].append(dur)
        c["correlation"].append(corr)
        c["args"].append(_raw_texts(args))
        self.rows += n
        self.index += n_all
        # keys present, counted on the re-encoded events (absent fields are omitted; msgspec
        # writes no blank before a colon): the duplicate-key check compares it with the file
        enc = _ENCODER.encode(events)
        self.colons += colons(enc)
        if self.count_keys or b"\\" in enc:
            self.keys += jsonstrict.approx_key_count(enc)

    def _unended(self, xs, xi, start, dur, durs, base):
        """Drop the CPU-side complete events that end at time 0 (Kineto before PyTorch 1.13
        wrote an operator or annotation whose end was never recorded with end 0, so ``dur`` =
        -``ts``: pytorch/kineto#646), counting them by kind in :attr:`unended`. Any other
        negative ``dur``, and a GPU activity (kernel, copy, set) ending at 0, is refused naming
        it, as before."""
        import numpy as np

        neg = np.flatnonzero(dur < 0).tolist()
        for k in neg:
            kd = _kind(xs[k].cat)
            if kd in ("kernel", "memcpy", "memset") or int(start[k]) + int(dur[k]) != 0:
                trace.decimal_ns(bytes(durs[k]), self.path, f"$.traceEvents[{base + xi[k]}].dur")
            self.unended[kd] = self.unended.get(kd, 0) + 1
        keep = dur >= 0
        return (list(compress(xs, keep.tolist())), list(compress(xi, keep.tolist())),
                start[keep], dur[keep])

    def count_phase(self, ph: str | None, k: int) -> None:
        """Count ``k`` events of phase ``ph`` (an event without ``ph``, such as the empty ``{}``
        PaddlePaddle's profiler ends its array with, under :data:`NO_PHASE`: the counts are
        JSON object keys)."""
        key = NO_PHASE if ph is None else ph
        self.phases[key] = self.phases.get(key, 0) + k

    def note_start(self, start: np.ndarray, kinds: list[str], code: np.ndarray) -> None:
        """Track the earliest start of the GPU and runtime events (``min_start``: the time
        base and the file's clock are judged on those, as before the CPU side was kept) and of
        any complete event (``min_any``: the clock of a trace without GPU work)."""
        import numpy as np

        if len(start):
            m = int(start.min())
            self.min_any = m if self.min_any is None else min(self.min_any, m)
        gpu = np.array([k in GPU_KINDS for k in kinds], dtype=bool)
        if len(code) and gpu.any():
            s = start[gpu[code]]
            if len(s):
                m = int(s.min())
                self.min_start = m if self.min_start is None else min(self.min_start, m)

    def pending(self) -> int:
        return len(self.c["event_idx"])

    def batch(self) -> pa.Table:
        """The rows added since the last call, without ``run_id``; clears them."""
        import numpy as np

        cols = {}
        for name, typ in zip(trace.EVENTS.arrow_schema.names, trace.EVENTS.arrow_schema.types,
                             strict=True):
            if name == "run_id" or name in ("rank", "mangled_name"):
                continue
            parts = [to_arrow(p, typ) for p in self.c[name]]
            cols[name] = pa.concat_arrays(parts) if parts else to_arrow([], typ)
        n = len(cols["event_idx"])
        cols["mangled_name"] = pa.nulls(n, pa.string())
        cols["rank"] = _interned(None, ([self.rank], np.zeros(n, np.int64))) \
            if self.rank is not None \
            else pa.nulls(n, pa.string())
        t = trace.EVENTS.batch(cols)
        self._reset()
        return t


# No ``pa.array`` and no ``pyarrow.compute`` here: the first use of either in a process imports
# pandas (seconds of a small CLI ingest); arrays are built from buffers (base.to_arrow).


def _ids(args: list, joined_objects: bytes | None = None, objects: list | None = None
         ) -> tuple[pa.Array, pa.Array, pa.Array]:
    """device, stream (text as written, strings unquoted) and correlation (BIGINT, null if
    absent or not an integer within BIGINT) from the stored events' ``args``: read from
    ``objects`` (their decode by :func:`_args_keys_unique`) when given, else one typed decode of
    their texts joined into an array; event by event only if some ``args`` is not an object."""
    import numpy as np

    n = len(args)
    if objects is not None and len(objects) == n:
        return tuple(f(list(map(dict.get, objects, repeat(key), repeat(_NO))))
                     for f, key in ((_scalars, "device"), (_scalars, "stream"),
                                    (_bigints, "correlation")))
    if joined_objects is None:
        lens = np.fromiter(map(len, args), dtype=np.int64, count=n)
        parts = args if n == 0 or lens.min() > 0 else [a if len(a) else b"{}" for a in args]
        joined_objects = b"[" + b",".join(parts) + b"]"
    try:
        ids = _ARG_IDS_DECODER.decode(joined_objects)
    except msgspec.MsgspecError:
        ids = None  # an args that is not an object: kept verbatim, no ids
    if ids is not None and len(ids) == n:
        dev = list(map(_GET["device"], ids))
        stm = list(map(_GET["stream"], ids))
        corr = list(map(_GET["correlation"], ids))
    else:
        dev, stm, corr = [_NO] * n, [_NO] * n, [_NO] * n
        for k in range(n):
            if len(args[k]):
                try:
                    a = _ARGS_DECODER.decode(args[k])
                except msgspec.MsgspecError:
                    continue
                dev[k], stm[k], corr[k] = a.device, a.stream, a.correlation
    return _scalars(dev), _scalars(stm), _bigints(corr)


_ARGS_OBJECTS = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])


def _args_keys_unique(args: list, path: str, where) -> tuple[bytes | None, list | None]:
    """Refuse an ``args`` object that repeats a key (kept verbatim, its ids read by a decoder
    that keeps the last one: the colon check of the events cannot see inside it). One decode of
    the joined objects counts their keys; only when that count differs from the keys written,
    or an ``args`` nests objects or escapes, is that ``args`` checked exactly. Returns the
    JSON array of all the ``args`` when each is an object (for :func:`_ids`), else ``None``,
    and their decode (a dict each) when it was made and every ``args`` is an object."""
    import numpy as np

    n = len(args)
    if not n:
        return None, None
    lens = np.fromiter(map(len, args), dtype=np.int64, count=n)
    joined = b"[" + b",".join(args) + b"]"
    # the first byte of each args text (an absent one: the comma after it, never a "{")
    firsts = np.frombuffer(joined, dtype=np.uint8)[np.cumsum(lens + 1) - lens]
    all_objects = bool(lens.min() > 0 and (firsts == 0x7B).all())  # the usual case
    objs = args
    if not all_objects:
        objs = [a for a in map(bytes, args) if a[:1] == b"{"]
        if not objs:
            return None, None
        joined = b"[" + b",".join(objs) + b"]"
    flat = (int(np.count_nonzero(np.frombuffer(joined, dtype=np.uint8) == 0x7B)) == len(objs)
            and b"\\" not in joined)
    decoded = None
    try:
        if flat:
            decoded = _ARGS_OBJECTS.decode(joined)
        counted = sum(map(len, decoded)) if flat else -1
    except msgspec.MsgspecError:
        counted = -1
    if counted != jsonstrict.approx_key_count(joined):
        decoded = None
        for k, a in enumerate(map(bytes, args)):
            if a[:1] == b"{":
                jsonstrict.find_duplicate_key(a, path, where(k))
    return (joined, decoded) if all_objects else (None, None)


def _bigints(raws: list) -> pa.Array:
    """BIGINT values of JSON texts; null where absent or not an integer within BIGINT."""
    import numpy as np

    n = len(raws)
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    texts = raws if n == 0 or lens.min() > 0 else [r if len(r) else b"null" for r in raws]
    try:
        values = _INTS_DECODER.decode(b"[" + b",".join(texts) + b"]")
        if None not in values:
            return to_arrow(np.array(values, dtype=np.int64), pa.int64())
        return to_arrow(values, pa.int64())
    except (msgspec.MsgspecError, OverflowError):
        return to_arrow([_bigint(r) for r in raws], pa.int64())


def _codes(values: list) -> tuple[list, np.ndarray]:
    """The distinct values in order of appearance and each row's index among them."""
    import numpy as np

    uniq = list(dict.fromkeys(values))
    codes = {v: i for i, v in enumerate(uniq)}
    return uniq, np.fromiter(map(codes.__getitem__, values), dtype=np.int64, count=len(values))


def _interned(values: list | None, coded: tuple[list, np.ndarray] | None = None) -> pa.Array:
    """A string array of few distinct values (kinds, categories, kernel names; ``coded``:
    their :func:`_codes`, given when the caller has them): each distinct string is encoded
    once, the rows are joined from those bytes."""
    import numpy as np

    uniq, code = coded if coded is not None else _codes(values)
    n = len(code)
    enc = [b"" if v is None else v.encode() for v in uniq]
    lens = np.array([len(b) for b in enc], dtype=np.int64)[code] if n else np.zeros(0, np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        raise ValueError("string column over 2 GiB in one batch")
    validity, nulls = None, 0
    if None in uniq:
        valid = code != uniq.index(None)
        nulls = int(n - valid.sum())
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    data = enc[0] * n if len(enc) == 1 else b"".join(map(enc.__getitem__, code.tolist()))
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(data)], null_count=nulls)


def constant(value: str, n: int) -> pa.Array:
    """A string column of ``n`` times ``value`` (the run id of every row), without a Python
    string per row."""
    import numpy as np

    return _interned(None, ([value], np.zeros(n, np.int64)))


def _first_missing(col: list) -> int | None:
    if _NO not in col and None not in col:
        return None
    for k, v in enumerate(col):
        if v is _NO or v is None:
            return k
    return None


_KIND_CACHE: dict[str | None, str] = {}


def _kind(cat: str | None) -> str:
    k = _KIND_CACHE.get(cat)
    if k is None:
        k = _KIND.get(cat.lower(), "other") if cat is not None else "other"
        if len(_KIND_CACHE) < 4096:
            _KIND_CACHE[cat] = k
    return k


def _raw_texts(raws: list, joined: bytes | None = None) -> pa.Array:
    """A string array of verbatim JSON texts (``_NO``: null), straight from their bytes
    (``joined``: ``b"".join(raws)`` when the caller has it already)."""
    import numpy as np

    n = len(raws)
    lens = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    validity = None
    nulls = int((lens == 0).sum())
    if nulls:
        validity = pa.py_buffer(np.packbits(lens != 0, bitorder="little"))
    if offsets[-1] >= 1 << 31:
        raise ValueError("string column over 2 GiB in one batch")
    data = pa.py_buffer(b"".join(raws) if joined is None else joined)
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  data], null_count=nulls)


def _scalars(raws: list) -> pa.Array:
    """pid/tid as text: numbers as written, strings unquoted, absent/null as null."""
    joined = b"".join(raws)  # numbers side by side never spell a quote or an n
    if b'"' not in joined and b"n" not in joined:
        return _raw_texts(raws, joined)
    out = raws
    for k, r in enumerate(raws):
        if r is not _NO and memoryview(r)[0] in (0x22, 0x6E):  # a string or null
            if out is raws:
                out = list(raws)
            out[k] = _text(r).encode() if memoryview(r)[0] == 0x22 else _NO
    return _raw_texts(out)
