"""Tile profile: a profile of one program on a tile-based accelerator.

Three levels: run scalars, ``groups[]`` (one aggregate per kernel name) and ``samples[]`` (one
record per tile and kernel invocation, with ``metadata[]`` string pairs). A file may carry fewer
samples than its ``sampleCount``. Field list and invariants: ``docs/formats.md``.
"""

from __future__ import annotations

import gc

import msgspec

from .. import jsonstrict
from ..errors import FormatError
from .base import Parsed, Table

NAME = "tile_profile"
# Bump when parsing changes what lands in raw tables; every run records the version it went through.
PARSER_VERSION = "tile_profile/1"


class MetaPair(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    value: str


class Sample(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    physical_tile: int
    offset: int
    duration: int
    phase: int
    epoch: int
    kind: str
    operation: str
    kernel: str
    metadata: list[MetaPair]


class Group(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    name: str
    dimensions: msgspec.Raw
    sample_count: int
    tile_count: int
    phase_count: int
    phase_cycles: int
    phase_ms: float
    work_cycles: int
    average_active_tiles: float
    useful_cycles: float
    estimated_work_cycles: int
    useful_utilization: float | None
    work_lane_occupancy: float | None
    device_useful_utilization: float | None
    mean_cycles: float
    p50_cycles: int
    p95_cycles: int
    maximum_cycles: int
    first_offset: int
    last_offset: int


class Profile(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    clock_hz: int
    tile_count: int
    sample_count: int
    matched_sample_count: int
    profile_span_cycles: int
    profile_span_ms: float
    at_offset: int | None
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
    "one row per (run, sample)",
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
    "one row per (run, sample, metadata pair), values kept as the source's strings",
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
        for i, g in enumerate(doc.groups):
            raw = bytes(g.dimensions)
            if not raw.lstrip().startswith(b"{"):
                raise FormatError(path, f"$.groups[{i}].dimensions", "an object")
            jsonstrict.find_duplicate_key(raw, path, f"$.groups[{i}].dimensions")
        jsonstrict.check_no_duplicate_keys(data, _expected_keys(doc), path)
        return _to_tables(doc, run_id)
    finally:
        if gc_was:
            gc.enable()


def _to_tables(doc: Profile, run_id: str) -> Parsed:
    samples = doc.samples
    groups = doc.groups
    n, g = len(samples), len(groups)
    runs = RUNS.arrow({
        "run_id": [run_id], "clock_hz": [doc.clock_hz], "tile_count": [doc.tile_count],
        "sample_count": [doc.sample_count], "matched_sample_count": [doc.matched_sample_count],
        "profile_span_cycles": [doc.profile_span_cycles], "profile_span_ms": [doc.profile_span_ms],
        "at_offset": [doc.at_offset], "samples_in_file": [n],
    })
    gcols = {c: [getattr(x, c) for x in groups] for c, _, _ in GROUPS.columns[2:] if c != "dimensions"}
    gcols["dimensions"] = [bytes(x.dimensions).decode() for x in groups]
    gtab = GROUPS.arrow({"run_id": [run_id] * g, "group_idx": list(range(g)), **gcols})
    stab = SAMPLES.arrow({
        "run_id": [run_id] * n,
        "sample_idx": list(range(n)),
        "physical_tile": [s.physical_tile for s in samples],
        "offset_cycles": [s.offset for s in samples],
        "duration_cycles": [s.duration for s in samples],
        "phase": [s.phase for s in samples],
        "epoch": [s.epoch for s in samples],
        "kind": [s.kind for s in samples],
        "operation": [s.operation for s in samples],
        "kernel": [s.kernel for s in samples],
    })
    lens = [len(s.metadata) for s in samples]
    m = sum(lens)
    mtab = METADATA.arrow({
        "run_id": [run_id] * m,
        "sample_idx": [i for i, k in enumerate(lens) for _ in range(k)],
        "meta_idx": [j for k in lens for j in range(k)],
        "name": [p.name for s in samples for p in s.metadata],
        "value": [p.value for s in samples for p in s.metadata],
    })
    return Parsed(
        NAME, PARSER_VERSION,
        {t.name: tab for t, tab in zip(TABLES, (runs, gtab, stab, mtab), strict=True)},
        {"groups": g, "samples": n, "metadata_pairs": m},
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
