"""Tile profile: a profile of one program on a tile-based accelerator.

Three levels: run scalars, ``groups[]`` (one aggregate per kernel name) and ``samples[]`` (one
record per tile and kernel invocation, with ``metadata[]`` string pairs). A file may carry fewer
samples than its ``sampleCount``. Field list and invariants: ``docs/formats.md``.
"""

from __future__ import annotations

import gc
import re
import typing
from collections.abc import Iterator
from typing import TYPE_CHECKING

import msgspec
import pyarrow as pa

if TYPE_CHECKING:  # numpy is imported where used: an ncu-only ingest never imports it
    import numpy as np

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats.base import Count, NonNeg, Parsed, Table, Text, to_arrow

NAME = "tile_profile"
# Bump when parsing changes what lands in raw tables; every run records the version it went through.
PARSER_VERSION = "tile_profile/1"


# gc=False: these never form reference cycles, and millions of them would otherwise be tracked.
class MetaPair(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: Text
    value: Text


class Sample(msgspec.Struct, forbid_unknown_fields=True, rename="camel", gc=False):
    physical_tile: Count
    offset: Count
    duration: Count
    phase: Count
    epoch: Count
    kind: Text
    operation: Text
    kernel: Text
    metadata: list[MetaPair]


class Group(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    name: Text
    dimensions: msgspec.Raw
    sample_count: Count
    tile_count: Count
    phase_count: Count
    phase_cycles: Count
    phase_ms: NonNeg
    work_cycles: Count
    average_active_tiles: NonNeg
    useful_cycles: NonNeg
    estimated_work_cycles: Count
    useful_utilization: float | None
    work_lane_occupancy: float | None
    device_useful_utilization: float | None
    mean_cycles: NonNeg
    p50_cycles: Count
    p95_cycles: Count
    maximum_cycles: Count
    first_offset: Count
    last_offset: Count


class Profile(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    clock_hz: Count
    tile_count: Count
    sample_count: Count
    matched_sample_count: Count
    profile_span_cycles: Count
    profile_span_ms: NonNeg
    at_offset: Count | None
    groups: list[Group]
    samples: list[Sample]


TOP_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(Profile))

RUNS = Table(
    "profile_runs",
    (
        ("run_id", "VARCHAR", "SHA-256 of the raw file (= raw.files.sha256)"),
        ("clock_hz", "BIGINT", "clockHz: device clock in Hz"),
        ("tile_count", "BIGINT", "tileCount: tiles on the device (T)"),
        ("sample_count", "BIGINT", "sampleCount: samples the profiler recorded"),
        ("matched_sample_count", "BIGINT", "matchedSampleCount: samples matched to a kernel group"),
        ("profile_span_cycles", "BIGINT", "profileSpanCycles"),
        ("profile_span_ms", "DOUBLE", "profileSpanMs"),
        ("at_offset", "BIGINT", "atOffset (nullable)"),
        ("samples_in_file", "BIGINT", "len(samples[]) actually carried by the file"),
    ),
    ("run_id",),
    "one row per tile-profile run: the document's scalars",
)
GROUPS = Table(
    "profile_groups",
    (
        ("run_id", "VARCHAR", "run"),
        ("group_idx", "INTEGER", "position in groups[] (0-based)"),
        ("name", "VARCHAR", "kernel name"),
        ("dimensions", "JSON", "the dimensions object, verbatim JSON text"),
        ("sample_count", "BIGINT", "sampleCount"),
        ("tile_count", "BIGINT", "tileCount: tiles that ran the kernel"),
        ("phase_count", "BIGINT", "phaseCount"),
        ("phase_cycles", "BIGINT", "phaseCycles"),
        ("phase_ms", "DOUBLE", "phaseMs"),
        ("work_cycles", "BIGINT", "workCycles"),
        ("average_active_tiles", "DOUBLE", "averageActiveTiles"),
        ("useful_cycles", "DOUBLE", "usefulCycles"),
        ("estimated_work_cycles", "BIGINT", "estimatedWorkCycles"),
        ("useful_utilization", "DOUBLE", "usefulUtilization (null when estimatedWorkCycles = 0)"),
        ("work_lane_occupancy", "DOUBLE", "workLaneOccupancy (nullable)"),
        ("device_useful_utilization", "DOUBLE", "deviceUsefulUtilization (nullable)"),
        ("mean_cycles", "DOUBLE", "meanCycles"),
        ("p50_cycles", "BIGINT", "p50Cycles"),
        ("p95_cycles", "BIGINT", "p95Cycles"),
        ("maximum_cycles", "BIGINT", "maximumCycles"),
        ("first_offset", "BIGINT", "firstOffset"),
        ("last_offset", "BIGINT", "lastOffset"),
    ),
    ("run_id", "group_idx"),
    "one row per (run, kernel group)",
)
SAMPLES = Table(
    "profile_samples",
    (
        ("run_id", "VARCHAR", "run"),
        ("sample_idx", "BIGINT", "position in samples[] (0-based)"),
        ("physical_tile", "BIGINT", "physicalTile"),
        ("offset_cycles", "BIGINT", "offset: start cycle of the sample"),
        ("duration_cycles", "BIGINT", "duration in cycles"),
        ("phase", "BIGINT", "phase"),
        ("epoch", "BIGINT", "epoch"),
        ("kind", "VARCHAR", "kind"),
        ("operation", "VARCHAR", "operation"),
        ("kernel", "VARCHAR", "kernel: names a group"),
    ),
    ("run_id", "sample_idx"),
    "one row per (run, sample); the key is unique by construction, not indexed",
    indexed=False,
)
METADATA = Table(
    "profile_sample_metadata",
    (
        ("run_id", "VARCHAR", "run"),
        ("sample_idx", "BIGINT", "sample"),
        ("meta_idx", "INTEGER", "position in the sample's metadata[] (0-based)"),
        ("name", "VARCHAR", "pair name"),
        ("value", "VARCHAR", "pair value, always a string in the source"),
    ),
    ("run_id", "sample_idx", "meta_idx"),
    "one row per (run, sample, metadata pair), values kept as the source's strings; the key is "
    "unique by construction, not indexed",
    indexed=False,
)
TABLES = (RUNS, GROUPS, SAMPLES, METADATA)


def detect(top_keys: frozenset[str]) -> bool:
    return {"clockHz", "groups", "samples"} <= top_keys


def _expected_keys(doc: Profile) -> int:
    n = len(TOP_KEYS) + len(doc.groups) * 20 + len(doc.samples) * 9
    n += sum(len(s.metadata) for s in doc.samples) * 2
    n += sum(jsonstrict.approx_key_count(bytes(g.dimensions)) for g in doc.groups)
    return n


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    gc_was = gc.isenabled()
    gc.disable()  # the cyclic GC dominates decoding time of large documents
    try:
        doc: Profile = jsonstrict.decode(data, Profile, path)
        _check_dimensions(doc, path)
        jsonstrict.check_no_duplicate_keys(data, _expected_keys(doc), path)
        return _to_tables(doc, run_id)
    finally:
        if gc_was:
            gc.enable()


def _with_run_id(batch: pa.Table, run_id: str) -> pa.Table:
    return batch.add_column(0, pa.field("run_id", pa.string()),
                            to_arrow([run_id] * batch.num_rows, pa.string()))


def _to_tables(doc: Profile, run_id: str) -> Parsed:
    stab, mtab = sample_batches(doc.samples, 0)
    runs, gtab = header_batches(doc, len(doc.samples))
    return Parsed(
        NAME, PARSER_VERSION,
        {t.name: _with_run_id(b, run_id)
         for t, b in zip(TABLES, (runs, gtab, stab, mtab), strict=True)},
        {"groups": gtab.num_rows, "samples": stab.num_rows, "metadata_pairs": mtab.num_rows},
    )


def rebuild(con, run_id: str) -> dict:
    """Rebuild the source document of ``run_id`` from raw tables (the lossless round trip)."""
    import json

    r = con.execute("SELECT * FROM raw.profile_runs WHERE run_id = ?", [run_id]).fetchone()
    cols = [c for c, _, _ in RUNS.columns]
    run = dict(zip(cols, r, strict=True))
    gcols = [c for c, _, _ in GROUPS.columns]
    groups = []
    for row in con.execute(
        "SELECT * FROM raw.profile_groups WHERE run_id = ? ORDER BY group_idx", [run_id]
    ).fetchall():
        d = dict(zip(gcols, row, strict=True))
        out = {}
        for f in msgspec.structs.fields(Group):
            out[f.encode_name] = json.loads(d[f.name]) if f.name == "dimensions" else d[f.name]
        groups.append(out)
    meta: dict[int, list] = {}
    for sidx, name, value in con.execute(
        "SELECT sample_idx, name, value FROM raw.profile_sample_metadata WHERE run_id = ? "
        "ORDER BY sample_idx, meta_idx", [run_id]
    ).fetchall():
        meta.setdefault(sidx, []).append({"name": name, "value": value})
    samples = []
    for row in con.execute(
        "SELECT sample_idx, physical_tile, offset_cycles, duration_cycles, phase, epoch, kind, "
        "operation, kernel FROM raw.profile_samples WHERE run_id = ? ORDER BY sample_idx", [run_id]
    ).fetchall():
        samples.append({
            "physicalTile": row[1], "offset": row[2], "duration": row[3], "phase": row[4],
            "epoch": row[5], "kind": row[6], "operation": row[7], "kernel": row[8],
            "metadata": meta.get(row[0], []),
        })
    return {
        "clockHz": run["clock_hz"], "tileCount": run["tile_count"],
        "sampleCount": run["sample_count"], "matchedSampleCount": run["matched_sample_count"],
        "profileSpanCycles": run["profile_span_cycles"], "profileSpanMs": run["profile_span_ms"],
        "atOffset": run["at_offset"], "groups": groups, "samples": samples,
    }


# ------------------------------------------------------------------ columns from decoded samples


def sample_batches(samples: list[Sample], base: int,
                   strings: dict[str, pa.Array] | None = None,
                   lens: np.ndarray | None = None) -> tuple[pa.Table, pa.Table]:
    """``profile_samples`` and ``profile_sample_metadata`` rows (without ``run_id``) of
    ``samples``, the first of which is ``samples[base]`` of the document. ``strings``: the
    string columns, already extracted (see :func:`_token_strings`); ``lens``: the metadata
    lengths, if already known."""
    import numpy as np

    n = len(samples)
    if lens is None:
        lens = _meta_lens(samples)
    m = int(lens.sum())
    if strings is None:
        pairs = [p for s in samples for p in s.metadata]
        strings = {
            "kind": [s.kind for s in samples],
            "operation": [s.operation for s in samples],
            "kernel": [s.kernel for s in samples],
            "name": [p.name for p in pairs],
            "value": [p.value for p in pairs],
        }
    stab = SAMPLES.batch({
        "sample_idx": np.arange(base, base + n, dtype=np.int64),
        "physical_tile": np.fromiter((s.physical_tile for s in samples), np.int64, n),
        "offset_cycles": np.fromiter((s.offset for s in samples), np.int64, n),
        "duration_cycles": np.fromiter((s.duration for s in samples), np.int64, n),
        "phase": np.fromiter((s.phase for s in samples), np.int64, n),
        "epoch": np.fromiter((s.epoch for s in samples), np.int64, n),
        "kind": strings["kind"],
        "operation": strings["operation"],
        "kernel": strings["kernel"],
    })
    starts = np.cumsum(lens) - lens
    mtab = METADATA.batch({
        "sample_idx": np.repeat(np.arange(base, base + n, dtype=np.int64), lens),
        "meta_idx": (np.arange(m, dtype=np.int64) - np.repeat(starts, lens)).astype(np.int32),
        "name": strings["name"],
        "value": strings["value"],
    })
    return stab, mtab


def _meta_lens(samples: list[Sample]) -> np.ndarray:
    import numpy as np

    return np.fromiter(map(len, (s.metadata for s in samples)), dtype=np.int64, count=len(samples))


# Layout of the string tokens (keys and string values) of one sample and one metadata pair, in
# the order profilers write them: (token slot, key) for keys, (slot, column) for string values.


def _is_str(typ) -> bool:
    """``str``, or ``str`` with constraints (``Annotated[str, msgspec.Meta(...)]``, e.g. Text)."""
    if typing.get_origin(typ) is typing.Annotated:
        typ = typing.get_args(typ)[0]
    return typ is str


_SAMPLE_FIELDS = msgspec.structs.fields(Sample)
_SAMPLE_KEY_SLOTS: list[tuple[int, bytes]] = []
_SAMPLE_STR_SLOTS: dict[str, int] = {}
_slot = 0
for _f in _SAMPLE_FIELDS:
    _SAMPLE_KEY_SLOTS.append((_slot, _f.encode_name.encode()))
    _slot += 1
    if _is_str(_f.type):
        _SAMPLE_STR_SLOTS[_f.name] = _slot
        _slot += 1
_SAMPLE_NTOK = _slot
del _slot, _f
_PAIR_NTOK = 4  # "name", <name>, "value", <value>


def _indices(a: np.ndarray) -> pa.Array:
    import numpy as np

    return to_arrow(a.astype(np.int64, copy=False), pa.int64())


def _token_strings(buf, a: int, b: int, lens: np.ndarray) -> dict[str, pa.Array] | None:
    """The string columns of the samples in ``buf[a:b + 1]`` (already decoded and validated,
    with metadata lengths ``lens``), sliced out of the JSON text by C code instead of one Python
    call per string. Only for chunks without escapes (so every quote delimits a string and a
    string's bytes are its UTF-8 text) whose keys are in the usual order (checked key by key);
    otherwise ``None``, and the caller converts the decoded objects instead."""
    import numpy as np

    if b + 1 - a >= 1 << 31 or buf.find(b"\\", a, b + 1) >= 0:
        return None
    n = len(lens)
    m = int(lens.sum())
    ntok = _SAMPLE_NTOK * n + _PAIR_NTOK * m
    arr = np.frombuffer(buf, dtype=np.uint8, count=b + 1 - a, offset=a)
    try:
        q = np.flatnonzero(arr == 0x22)
        if len(q) != 2 * ntok:
            return None  # a repeated key: verify_keys names it
        opens, closes = q[0::2], q[1::2]
        tlen = closes - opens - 1
        before = np.cumsum(lens) - lens  # pairs before each sample
        ts = _SAMPLE_NTOK * np.arange(n, dtype=np.int64) + _PAIR_NTOK * before
        pt = (np.repeat(ts + _SAMPLE_NTOK, lens)
              + _PAIR_NTOK * (np.arange(m, dtype=np.int64) - np.repeat(before, lens)))
        first = arr[opens + 1]  # first byte of every token
        # metadata pairs have two keys with different first letters: one check each
        if m and not (np.all(first[pt] == 0x6E) and np.all(first[pt + 2] == 0x76)):  # n, v
            return None  # keys in another order
        for slot, key in _SAMPLE_KEY_SLOTS:
            t = ts + slot
            if n and not (np.all(first[t] == key[0]) and np.all(tlen[t] == len(key))):
                return None
        offsets = np.empty(2 * ntok, dtype=np.int32)
        offsets[0::2] = opens + 1
        offsets[1::2] = closes
        with memoryview(buf) as mv, mv[a: b + 1] as view:
            # element 2k is the text of token k (odd elements are the JSON between tokens)
            tokens = pa.StringArray.from_buffers(max(0, 2 * ntok - 1), pa.py_buffer(offsets),
                                                 pa.py_buffer(view))
            out = {c: tokens.take(_indices(2 * (ts + slot))) for c, slot in
                   _SAMPLE_STR_SLOTS.items()}
            out["name"] = tokens.take(_indices(2 * (pt + 1)))
            out["value"] = tokens.take(_indices(2 * (pt + 3)))
            del tokens
        return out
    finally:
        del arr


def header_batches(doc: Profile, samples_in_file: int) -> tuple[pa.Table, pa.Table]:
    """``profile_runs`` and ``profile_groups`` rows (without ``run_id``) of a document."""
    groups = doc.groups
    runs = RUNS.batch({
        "clock_hz": [doc.clock_hz], "tile_count": [doc.tile_count],
        "sample_count": [doc.sample_count], "matched_sample_count": [doc.matched_sample_count],
        "profile_span_cycles": [doc.profile_span_cycles], "profile_span_ms": [doc.profile_span_ms],
        "at_offset": [doc.at_offset], "samples_in_file": [samples_in_file],
    })
    gcols = {c: [getattr(x, c) for x in groups] for c, _, _ in GROUPS.columns[2:] if c != "dimensions"}
    gcols["dimensions"] = [bytes(x.dimensions).decode() for x in groups]
    gtab = GROUPS.batch({"group_idx": list(range(len(groups))), **gcols})
    return runs, gtab


def _check_dimensions(doc: Profile, path: str) -> None:
    for i, g in enumerate(doc.groups):
        raw = bytes(g.dimensions)
        if not raw.lstrip().startswith(b"{"):
            raise FormatError(path, f"$.groups[{i}].dimensions", "an object")
        jsonstrict.find_duplicate_key(raw, path, f"$.groups[{i}].dimensions")


# ------------------------------------------------------------------ streaming (large files)
#
# A profile whose ``samples`` array is its last key (as profilers write them) is parsed a chunk
# of samples at a time straight from a writable view of the file (a private memory map), so
# memory does not grow with the sample count and documents over 4 GiB work. Chunks are cut at a
# comma followed by ``{"<first key of a sample>"``; the comma before a chunk is overwritten with
# ``[`` and the one after it with ``]``, so each chunk decodes in place as a JSON array, without a
# copy, at the same byte offsets as in the document.
#
# Soundness: the header (the document with ``samples`` emptied) and every chunk are decoded with
# the same strict typed decoders as the whole-document path. In valid JSON such a comma is always
# outside strings (the quote after ``{`` would otherwise close a string that ``<key>`` then
# follows), so a valid document always splits into valid chunks; and if the header and every
# chunk decode, the whole document is valid. Duplicate keys inside samples are found by counting
# quotes per chunk (see :meth:`SampleStream.verify_keys`).

CHUNK_BYTES = 8 << 20
MAX_HEADER_BYTES = 64 << 20
_WS = b" \t\r\n"
_SAMPLES_KEY = re.compile(rb'"samples"[ \t\r\n]*:[ \t\r\n]*\[')
_FIRST_KEY = re.compile(rb'\A[ \t\r\n]*\{[ \t\r\n]*("[A-Za-z0-9_]+")')
_TAIL = re.compile(rb"\][ \t\r\n]*\}[ \t\r\n]*\Z")
_SAMPLES_DECODER = msgspec.json.Decoder(list[Sample])
_SAMPLE_KEYS = len(msgspec.structs.fields(Sample))
_PAIR_KEYS = len(msgspec.structs.fields(MetaPair))


class NotStreamable(Exception):
    """The document is not laid out for streaming; parse it whole."""


def samples_start(prefix: bytes) -> int | None:
    """Offset of the ``[`` opening the top-level ``samples`` array, if ``prefix`` holds it."""
    if not prefix.lstrip(_WS).startswith(b"{"):
        return None
    for m in _SAMPLES_KEY.finditer(prefix):
        probe = prefix[: m.start()] + b'"samples":[]}'
        try:  # decodes only if the key sits at the top level of a well-formed prefix
            msgspec.json.decode(probe, type=dict[str, msgspec.Raw])
        except msgspec.MsgspecError:
            continue
        return m.end() - 1
    return None


def samples_end(tail: bytes) -> int | None:
    """Offset in ``tail`` (the document's last bytes) of the ``]`` closing a last-key array."""
    m = _TAIL.search(tail)
    return m.start() if m else None


def _last_cut(buf, key: bytes, lo: int, hi: int) -> int:
    """Offset of the last comma in ``buf[lo:hi]`` that separates two samples, or -1."""
    pos = hi
    while True:
        k = buf.rfind(key, lo, pos)
        if k < 0:
            return -1
        j = k - 1
        while j > lo and buf[j] in _WS:
            j -= 1
        if j > lo and buf[j] == 0x7B:  # {
            j -= 1
            while j > lo and buf[j] in _WS:
                j -= 1
            if j > lo and buf[j] == 0x2C:  # ,
                return j
        pos = k


class SampleStream:
    """Parse a streamable tile profile in place; see :meth:`tables`.

    After the iteration, :attr:`samples`, :attr:`pairs` and :attr:`groups` are the counts, and
    :meth:`verify_keys` must be called.
    """

    def __init__(self, path: str, file: str | None = None, chunk_bytes: int | None = None):
        self.path = path  # as shown in errors
        self.file = file  # on disk: to locate errors in huge documents, and for the slow checks
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.fast_strings = True
        self.unproven: list[tuple[int, int, int]] = []  # chunks (a, b, first sample) whose keys
        # were not proven unique while parsing: verify_keys checks them
        self.samples = self.pairs = self.groups = 0
        self.start = self.end = -1  # offsets of samples' "[" and "]"
        self.key = b'"physicalTile"'
        self._doc: bytes | None = None

    def _locate(self, offset: int) -> str:
        if self.file:
            return jsonstrict.line_col_in_file(self.file, offset)
        return f"byte {offset}"

    def tables(self, buf, release=None) -> Iterator[tuple[str, pa.Table]]:
        """Yield ``(raw table name, Arrow batch without run_id)`` from the document in ``buf``
        (a writable buffer: mmap or bytearray; commas between chunks are overwritten): groups
        first, then samples and metadata chunk by chunk, then the run row.

        ``release(offset)`` is called when the bytes before ``offset`` are no longer needed.
        Raises :class:`FormatError` for a bad document, :class:`NotStreamable` (before yielding
        anything) for another layout.
        """
        size = len(buf)
        start = samples_start(bytes(buf[: min(size, MAX_HEADER_BYTES)]))
        tail_at = max(0, size - 4096)
        end = samples_end(bytes(buf[tail_at:]))
        if start is None or end is None or tail_at + end <= start:
            raise NotStreamable("not a profile whose last key is its samples array")
        self.start, self.end = start, tail_at + end
        prefix = bytes(buf[:start])
        header_bytes = prefix + b"[]}"
        try:
            top = msgspec.json.decode(header_bytes, type=dict[str, msgspec.Raw])
        except msgspec.MsgspecError:
            raise NotStreamable("the document before samples is not well-formed") from None
        if not TOP_KEYS <= top.keys():
            raise NotStreamable("samples is not the last key")
        doc: Profile = jsonstrict.decode(header_bytes, Profile, self.path)
        _check_dimensions(doc, self.path)
        jsonstrict.check_no_duplicate_keys(header_bytes, _expected_keys(doc), self.path)
        runs, gtab = header_batches(doc, 0)
        self.groups = len(doc.groups)
        yield GROUPS.name, gtab

        m = _FIRST_KEY.match(bytes(buf[start + 1: start + 4096]))
        if m:
            self.key = m.group(1)
        # buf[a] is "[" (the array's own, or a comma overwritten), buf[b] the "]" or a comma
        for a, b, last in self._chunks(buf):
            buf[b] = 0x5D  # "]"
            yield from self._chunk(buf, a, b, last=last)
            if not last:
                buf[b] = 0x5B  # "[" opens the next chunk
                if release is not None:
                    release(b)
        runs = runs.set_column(runs.schema.get_field_index("samples_in_file"), "samples_in_file",
                               to_arrow([self.samples], pa.int64()))
        yield RUNS.name, runs

    def _chunks(self, buf) -> Iterator[tuple[int, int, bool]]:
        """``(a, b, last)``: the samples between offsets ``a`` and ``b``, chunk by chunk."""
        a = self.start
        while True:
            hi = min(a + self.chunk_bytes, self.end)
            cut = -1
            while hi < self.end:
                cut = _last_cut(buf, self.key, a + 1, hi)
                if cut >= 0:
                    break
                hi = min(hi + self.chunk_bytes, self.end)  # a huge sample: look further
            if cut < 0:
                yield a, self.end, True
                return
            yield a, cut, False
            a = cut

    def _chunk(self, buf, a: int, b: int, *, last: bool) -> Iterator[tuple[str, pa.Table]]:
        first = self.samples
        part = jsonstrict.Part(
            json_path=lambda p: "$.samples" + re.sub(r"^\$\[(\d+)\]",
                                                     lambda m: f"[{first + int(m.group(1))}]", p),
            byte_base=a, locate=self._locate, decoder=_SAMPLES_DECODER)
        with memoryview(buf) as mv, mv[a: b + 1] as view:
            samples: list[Sample] = jsonstrict.decode(view, list[Sample], self.path, part=part)
        if not samples and (first or not last):
            raise FormatError(self.path, f"$.samples[{first}]", "well-formed JSON: an array "
                              "element between two commas (found an empty one)", kind="malformed")
        if not samples:
            return
        lens = _meta_lens(samples)
        strings = _token_strings(buf, a, b, lens) if self.fast_strings else None
        if strings is None:
            self.unproven.append((a, b, first))
        stab, mtab = sample_batches(samples, first, strings, lens)
        self.samples += len(samples)
        self.pairs += mtab.num_rows
        del samples
        yield SAMPLES.name, stab
        yield METADATA.name, mtab

    def verify_keys(self, buf=None) -> None:
        """Raise :class:`FormatError` if a sample or a metadata pair repeats a key.

        Chunks sliced by :func:`_token_strings` are proven free of repeated keys already: with
        no backslash in a chunk no quote can hide inside a string, so the chunk holds exactly
        two quotes per string token of its decoded samples, and a repeated key would add a
        token. The other chunks (escapes present, unusual key order) are checked here like the
        whole-document path does, from ``buf`` (a fresh, unmodified view of the document) or
        else by reading the file again.
        """
        if not self.unproven:
            return
        if buf is None:
            if not self.file:
                raise FormatError(self.path, "$.samples", "unique object keys (the document "
                                  "could not be read again to check them)", kind="malformed")
            with open(self.file, "rb") as fh:
                for a, b, first in self.unproven:
                    fh.seek(a + 1)
                    self._check_chunk(fh.read(b - a - 1), first)
        else:
            for a, b, first in self.unproven:
                self._check_chunk(bytes(buf[a + 1: b]), first)

    def _check_chunk(self, inner: bytes, first: int) -> None:
        chunk = b"[" + inner + b"]"
        samples = _SAMPLES_DECODER.decode(chunk)
        n = len(samples)
        expected = n * _SAMPLE_KEYS + _PAIR_KEYS * sum(len(x.metadata) for x in samples)
        if jsonstrict.keys_counted(chunk) != expected:
            jsonstrict.find_duplicate_key(chunk, self.path, f"$.samples[{first}:{first + n}]")
