"""Convolution audit: Nsight-Compute audit of 3-D convolution signatures on a GPU.

Document: ``status``, ``rows[]``, ``audit_sha256`` (opaque upstream reference) and ``scope`` (a
caveat for analysts). Each row is one conv signature with its time split into ``components[]``
(per category) and ``kernels[]`` (every launch). Field list and invariants: ``docs/formats.md``.
"""

from __future__ import annotations

import gc
import json

import msgspec

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats.base import Int64, NonNeg, Parsed, Table, Text

NAME = "conv_audit"
PARSER_VERSION = "conv_audit/1"


class Component(msgspec.Struct, forbid_unknown_fields=True):
    category: Text
    us: NonNeg
    fraction_of_profiled_sum: float


class Kernel(msgspec.Struct, forbid_unknown_fields=True):
    id: Text
    name: Text
    category: Text
    duration_us: NonNeg


class Row(msgspec.Struct, forbid_unknown_fields=True):
    scheduler_note: msgspec.Raw
    input_sha256: Text
    input_shape: list[Int64]
    output_shape: list[Int64]
    ncu_output: Text
    total_profiled_us: NonNeg
    components: list[Component]
    kernels: list[Kernel]


class Audit(msgspec.Struct, forbid_unknown_fields=True):
    status: Text
    rows: list[Row]
    audit_sha256: Text
    scope: Text


DOCUMENTS = Table(
    "audit_documents",
    (
        ("run_id", "VARCHAR", "SHA-256 of the raw file (= raw.files.sha256)"),
        ("status", "VARCHAR", "status"),
        ("audit_sha256", "VARCHAR", "audit_sha256: opaque upstream reference (form-checked only)"),
        ("scope", "VARCHAR", "scope: caveat on what the fractions mean"),
        ("row_count", "BIGINT", "len(rows[])"),
    ),
    ("run_id",),
    "one row per audit document",
)
ROWS = Table(
    "audit_rows",
    (
        ("run_id", "VARCHAR", "run"),
        ("row_idx", "INTEGER", "position in rows[] (0-based)"),
        ("input_sha256", "VARCHAR", "SHA-256 of the input tensor"),
        ("input_shape", "BIGINT[]", "input shape, NCTHW"),
        ("output_shape", "BIGINT[]", "output shape, NCTHW"),
        ("ncu_output", "VARCHAR", "where the raw Nsight-Compute report lived"),
        ("total_profiled_us", "DOUBLE", "sum of isolated kernel durations, microseconds"),
        ("scheduler_note", "JSON", "scheduler_note array, verbatim JSON text"),
    ),
    ("run_id", "row_idx"),
    "one row per (run, conv signature)",
)
COMPONENTS = Table(
    "audit_components",
    (
        ("run_id", "VARCHAR", "run"),
        ("row_idx", "INTEGER", "conv signature row"),
        ("component_idx", "INTEGER", "position in components[] (0-based)"),
        ("category", "VARCHAR", "kernel category"),
        ("us", "DOUBLE", "microseconds in this category"),
        ("fraction_of_profiled_sum", "DOUBLE", "us / total_profiled_us"),
    ),
    ("run_id", "row_idx", "component_idx"),
    "one row per (run, signature, category)",
)
KERNELS = Table(
    "audit_kernels",
    (
        ("run_id", "VARCHAR", "run"),
        ("row_idx", "INTEGER", "conv signature row"),
        ("kernel_idx", "INTEGER", "position in kernels[] (0-based)"),
        ("kernel_id", "VARCHAR", "id: launch index as a string"),
        ("name", "VARCHAR", "demangled kernel name"),
        ("category", "VARCHAR", "kernel category"),
        ("duration_us", "DOUBLE", "kernel duration, microseconds"),
    ),
    ("run_id", "row_idx", "kernel_idx"),
    "one row per (run, signature, kernel launch)",
)
TABLES = (DOCUMENTS, ROWS, COMPONENTS, KERNELS)
TOP_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(Audit))


def detect(top_keys: frozenset[str]) -> bool:
    return {"rows", "audit_sha256"} <= top_keys


def _expected_keys(doc: Audit) -> int:
    n = 4 + len(doc.rows) * 8
    for r in doc.rows:
        n += len(r.components) * 3 + len(r.kernels) * 4
        n += jsonstrict.approx_key_count(bytes(r.scheduler_note))
    return n


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    gc_was = gc.isenabled()
    gc.disable()
    try:
        doc: Audit = jsonstrict.decode(data, Audit, path)
        for i, r in enumerate(doc.rows):
            raw = bytes(r.scheduler_note)
            if not raw.lstrip().startswith(b"["):
                raise FormatError(path, f"$.rows[{i}].scheduler_note", "an array")
            jsonstrict.find_duplicate_key(raw, path, f"$.rows[{i}].scheduler_note")
        jsonstrict.check_no_duplicate_keys(data, _expected_keys(doc), path)
        return _to_tables(doc, run_id)
    finally:
        if gc_was:
            gc.enable()


def _to_tables(doc: Audit, run_id: str) -> Parsed:
    rows = doc.rows
    docs = DOCUMENTS.arrow({
        "run_id": [run_id], "status": [doc.status], "audit_sha256": [doc.audit_sha256],
        "scope": [doc.scope], "row_count": [len(rows)],
    })
    rtab = ROWS.arrow({
        "run_id": [run_id] * len(rows),
        "row_idx": list(range(len(rows))),
        "input_sha256": [r.input_sha256 for r in rows],
        "input_shape": [r.input_shape for r in rows],
        "output_shape": [r.output_shape for r in rows],
        "ncu_output": [r.ncu_output for r in rows],
        "total_profiled_us": [r.total_profiled_us for r in rows],
        "scheduler_note": [bytes(r.scheduler_note).decode() for r in rows],
    })
    comps = [(i, j, c) for i, r in enumerate(rows) for j, c in enumerate(r.components)]
    ctab = COMPONENTS.arrow({
        "run_id": [run_id] * len(comps),
        "row_idx": [i for i, _, _ in comps],
        "component_idx": [j for _, j, _ in comps],
        "category": [c.category for _, _, c in comps],
        "us": [c.us for _, _, c in comps],
        "fraction_of_profiled_sum": [c.fraction_of_profiled_sum for _, _, c in comps],
    })
    kers = [(i, j, k) for i, r in enumerate(rows) for j, k in enumerate(r.kernels)]
    ktab = KERNELS.arrow({
        "run_id": [run_id] * len(kers),
        "row_idx": [i for i, _, _ in kers],
        "kernel_idx": [j for _, j, _ in kers],
        "kernel_id": [k.id for _, _, k in kers],
        "name": [k.name for _, _, k in kers],
        "category": [k.category for _, _, k in kers],
        "duration_us": [k.duration_us for _, _, k in kers],
    })
    return Parsed(
        NAME, PARSER_VERSION,
        {t.name: tab for t, tab in zip(TABLES, (docs, rtab, ctab, ktab), strict=True)},
        {"rows": len(rows), "components": len(comps), "kernels": len(kers)},
    )


def rebuild(con, run_id: str) -> dict:
    """Rebuild the source document of ``run_id`` from raw tables (the lossless round trip)."""
    status, audit_sha, scope = con.execute(
        "SELECT status, audit_sha256, scope FROM raw.audit_documents WHERE run_id = ?", [run_id]
    ).fetchone()
    comps: dict[int, list] = {}
    for ridx, cat, us, frac in con.execute(
        "SELECT row_idx, category, us, fraction_of_profiled_sum FROM raw.audit_components "
        "WHERE run_id = ? ORDER BY row_idx, component_idx", [run_id]
    ).fetchall():
        comps.setdefault(ridx, []).append(
            {"category": cat, "us": us, "fraction_of_profiled_sum": frac})
    kers: dict[int, list] = {}
    for ridx, kid, name, cat, dur in con.execute(
        "SELECT row_idx, kernel_id, name, category, duration_us FROM raw.audit_kernels "
        "WHERE run_id = ? ORDER BY row_idx, kernel_idx", [run_id]
    ).fetchall():
        kers.setdefault(ridx, []).append(
            {"id": kid, "name": name, "category": cat, "duration_us": dur})
    rows = []
    for ridx, ish, ishape, oshape, ncu, total, note in con.execute(
        "SELECT row_idx, input_sha256, input_shape, output_shape, ncu_output, total_profiled_us, "
        "scheduler_note FROM raw.audit_rows WHERE run_id = ? ORDER BY row_idx", [run_id]
    ).fetchall():
        rows.append({
            "scheduler_note": json.loads(note), "input_sha256": ish, "input_shape": list(ishape),
            "output_shape": list(oshape), "ncu_output": ncu, "total_profiled_us": total,
            "components": comps.get(ridx, []), "kernels": kers.get(ridx, []),
        })
    return {"status": status, "rows": rows, "audit_sha256": audit_sha, "scope": scope}
