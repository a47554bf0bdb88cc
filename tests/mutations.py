"""Minimal mutations of seed copies, one per invariant, for tests that need a run that breaks
exactly one rule (the checks tests, the Dagster tests, the models tests).

Each :class:`Mutation` names the invariant it breaks and how:

* ``edit_document`` edits the parsed seed JSON; the copy is written next to the seeds (a new
  file, so a new run) and ingested with the ordinary loader;
* ``edit_warehouse`` changes the warehouse after ingestion, for rules the strict parser already
  guarantees on the way in (column types, not-null, the archived bytes) or that only the models
  can break (``SUM_TO_ONE``: a mart edited as a model bug would).

The edits are minimal: the smallest change that crosses the rule's tolerance (e.g. one
fraction off by 1e-6) while every other invariant still holds. Typical use::

    from tests.mutations import MUTATIONS, apply
    m = MUTATIONS["A3"]
    run_id = apply(m, wh, seeds)          # ingests the mutated copy, returns its run id

Floats are written with Python's shortest round-trip repr, so untouched values keep their exact
binary value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse import db
from warehouse.config import Settings
from warehouse.ingesting.loader import ingest_file

TOLERANCE = 1e-9  # the suites' scaled-error tolerance (docs/checks.md)


@dataclass(frozen=True)
class Mutation:
    name: str  # unique key, e.g. "A6_input_sha256_form"
    invariant_id: str  # the only invariant the mutated run breaks
    seed: str  # "profile" or "audit" (keys of the ``seeds`` fixture)
    description: str
    edit_document: Callable[[dict[str, Any]], None] | None = None
    edit_warehouse: Callable[[Any, Settings, str], None] | None = None
    needs_original: bool = False  # ingest the unmodified seed first (cross-run rules)
    needs_models: bool = False  # build the SQL models before edit_warehouse
    # True when the mutant affects other runs in its warehouse (cross-run rules, a changed
    # table): it needs a warehouse of its own
    isolated: bool = False

    @property
    def uses_seed_bytes(self) -> bool:
        """Ingests the seed file unchanged (only the warehouse is edited): two such mutations
        of one seed cannot share a warehouse (same bytes, same run)."""
        return self.edit_document is None

    @property
    def source_format(self) -> str:
        return {"profile": "tile_profile", "audit": "conv_audit"}[self.seed]


# --- tile profile -----------------------------------------------------------------------------

def _group(doc: dict, pred: Callable[[dict], bool]) -> dict:
    return next(g for g in doc["groups"] if pred(g))


def _useful_group(doc: dict) -> dict:
    """A group with every ratio defined and strictly inside (0, 1) (room to nudge them)."""
    return _group(doc, lambda g: all(
        g[k] is not None and 0 < g[k] < 1 - 1e-3
        for k in ("usefulUtilization", "deviceUsefulUtilization", "workLaneOccupancy")))


def _p1(doc):
    doc["profileSpanMs"] += 1e-6


def _p2(doc):
    doc["matchedSampleCount"] += 1  # still <= sampleCount; groups no longer sum to it


def _p3(doc):
    doc["groups"][0]["phaseMs"] += 1e-6


def _p4(doc):
    doc["groups"][0]["meanCycles"] *= 1 + 1e-6


def _p5(doc):
    doc["groups"][0]["averageActiveTiles"] *= 1 + 1e-6


def _p6(doc):
    _useful_group(doc)["usefulUtilization"] += 1e-6


def _p7(doc):
    _useful_group(doc)["deviceUsefulUtilization"] += 1e-6


def _p8(doc):
    g = _group(doc, lambda g: g["p95Cycles"] == g["maximumCycles"])
    g["p95Cycles"] += 1  # p95 > maximum; nothing else reads p95


def _p9(doc):
    # workLaneOccupancy appears in no equation: only the [0, 1] range (P9) can catch it
    _useful_group(doc)["workLaneOccupancy"] = 1 + 1e-6


def _p10(doc):
    doc["samples"][0]["physicalTile"] = doc["tileCount"]  # one past the last tile


def _schema_negative_duration(con, settings, run_id):
    # The parser refuses negative durations since tile_profile/1 constraints were tightened, so a
    # file can no longer carry one: this is what a row loaded by a laxer, older parser looks like.
    # Still within its group's span (P10), so only the range rule (SCHEMA) breaks.
    con.execute("update raw.profile_samples set duration_cycles = -1 "
                "where run_id = ? and sample_idx = 0", [run_id])


# --- conv audit -------------------------------------------------------------------------------

def _a1(doc):
    # every fraction drifts by 0.6e-9: each within A3's 1e-9, their sum 1.8e-9 off 1 (A1)
    row = next(r for r in doc["rows"] if len(r["components"]) >= 3)
    for c in row["components"]:
        c["fraction_of_profiled_sum"] += 0.6e-9


def _a2(doc):
    # total off by 1.5e-9 relative: A2 breaks; each fraction vs us/total moves by at most
    # max_fraction * 1.5e-9, kept below 1e-9 by picking the row with the smallest max fraction
    row = min(doc["rows"], key=lambda r: max(c["fraction_of_profiled_sum"]
                                             for c in r["components"]))
    eps = 1.5e-9
    assert max(c["fraction_of_profiled_sum"] for c in row["components"]) * eps < 0.8 * TOLERANCE
    row["total_profiled_us"] *= 1 + eps


def _a3(doc):
    # one fraction up by 1e-6, another down by 1e-6: the sum (A1) is unchanged
    comps = doc["rows"][0]["components"]
    comps[0]["fraction_of_profiled_sum"] += 1e-6
    comps[1]["fraction_of_profiled_sum"] -= 1e-6


def _a4(doc):
    doc["rows"][0]["kernels"][0]["duration_us"] += 1e-3  # its category's sum no longer matches


def _a5(doc):
    k = doc["rows"][0]["kernels"]
    k[1]["id"], k[2]["id"] = k[2]["id"], k[1]["id"]  # still 0..n-1 and unique, out of order


def _a6_form(doc):
    h = doc["rows"][0]["input_sha256"]
    i = next(i for i, ch in enumerate(h) if ch in "abcdef")
    doc["rows"][0]["input_sha256"] = h[:i] + h[i].upper() + h[i + 1:]


def _a6_unique(doc):
    # row 16 takes row 15's hash. Its shapes differ, but only *other* runs are compared for
    # INPUT_SHAPES; within a document the duplicate itself is the error (A6)
    doc["rows"][16]["input_sha256"] = doc["rows"][15]["input_sha256"]


def _a6_audit(doc):
    doc["audit_sha256"] = doc["audit_sha256"][:-1] + "g"


def _a7(doc):
    shape = doc["rows"][0]["output_shape"]
    shape[0] += 1  # batch differs from the input's


def _input_shapes(doc):
    # a valid shape (5 positive ints, batch preserved) that differs from what the original
    # seed, ingested first, recorded for the same input_sha256
    doc["rows"][0]["output_shape"][2] += 1


# --- warehouse edits --------------------------------------------------------------------------

def _archive_path(con, run_id: str) -> Path:
    return Path(con.execute("select archive_path from raw.files where sha256 = ?",
                            [run_id]).fetchone()[0])


def _checksum_flip_byte(con, settings, run_id):
    path = _archive_path(con, run_id)
    data = bytearray(path.read_bytes())
    i = next(i for i in range(len(data) // 2, len(data)) if chr(data[i]).isdigit())
    data[i] = ord("7") if data[i] != ord("7") else ord("3")  # same size, one digit changed
    path.write_bytes(bytes(data))


def _checksum_missing(con, settings, run_id):
    os.remove(_archive_path(con, run_id))


def _schema_retype(con, settings, run_id):
    # a schema migration gone wrong: one column of a raw table changes type (BIGINT -> INTEGER
    # keeps every value, so only the type itself is wrong)
    con.execute("alter table raw.audit_documents alter column row_count type integer")


def _schema_null(con, settings, run_id):
    con.execute("update raw.audit_kernels set name = null "
                "where run_id = ? and row_idx = 0 and kernel_idx = 0", [run_id])


def _sum_to_one(con, settings, run_id):
    # what a model bug would do: one kernel's share of the run off by 1e-6
    con.execute("update marts.kernel_run_rollup set share_of_run = share_of_run + 1e-6 "
                "where run_id = ? and rank_in_run = 1", [run_id])


MUTATIONS: dict[str, Mutation] = {m.name: m for m in (
    Mutation("P1", "P1", "profile", "profileSpanMs + 1e-6", _p1),
    Mutation("P2", "P2", "profile", "matchedSampleCount + 1", _p2),
    Mutation("P3", "P3", "profile", "one group's phaseMs + 1e-6", _p3),
    Mutation("P4", "P4", "profile", "one group's meanCycles x (1 + 1e-6)", _p4),
    Mutation("P5", "P5", "profile", "one group's averageActiveTiles x (1 + 1e-6)", _p5),
    Mutation("P6", "P6", "profile", "one group's usefulUtilization + 1e-6", _p6),
    Mutation("P7", "P7", "profile", "one group's deviceUsefulUtilization + 1e-6", _p7),
    Mutation("P8", "P8", "profile", "one group's p95Cycles one above maximumCycles", _p8),
    Mutation("P9", "P9", "profile", "one group's workLaneOccupancy = 1 + 1e-6", _p9),
    Mutation("P10", "P10", "profile", "one sample's physicalTile = tileCount", _p10),
    Mutation("SCHEMA_negative_duration", "SCHEMA", "profile", "one sample's duration = -1",
             edit_warehouse=_schema_negative_duration),
    Mutation("A1", "A1", "audit", "each fraction of one row + 0.6e-9 (sum off by 1.8e-9)", _a1),
    Mutation("A2", "A2", "audit", "one row's total_profiled_us x (1 + 1.5e-9)", _a2),
    Mutation("A3", "A3", "audit", "one fraction + 1e-6 and another - 1e-6", _a3),
    Mutation("A4", "A4", "audit", "one kernel's duration_us + 1e-3", _a4),
    Mutation("A5", "A5", "audit", "two kernel ids of one row swapped", _a5),
    Mutation("A6_input_sha256_form", "A6", "audit", "one hex digit of an input_sha256 upper-cased",
             _a6_form),
    Mutation("A6_input_sha256_unique", "A6", "audit", "two rows share one input_sha256",
             _a6_unique, isolated=True),
    Mutation("A6_audit_sha256_form", "A6", "audit", "audit_sha256 ends in 'g'", _a6_audit),
    Mutation("A7", "A7", "audit", "one output_shape's batch + 1", _a7, isolated=True),
    Mutation("INPUT_SHAPES", "INPUT_SHAPES", "audit",
             "one row's output frames + 1, next to the original seed", _input_shapes,
             needs_original=True, isolated=True),
    Mutation("CHECKSUM_flipped_byte", "CHECKSUM", "audit",
             "one digit of the archived raw bytes changed", edit_warehouse=_checksum_flip_byte),
    Mutation("CHECKSUM_missing_archive", "CHECKSUM", "profile", "the archived raw bytes deleted",
             edit_warehouse=_checksum_missing),
    Mutation("SCHEMA_column_type", "SCHEMA", "audit",
             "raw.audit_documents.row_count retyped BIGINT -> INTEGER", edit_warehouse=_schema_retype,
             isolated=True),
    Mutation("SCHEMA_not_null", "SCHEMA", "audit", "one kernel's name set to NULL",
             edit_warehouse=_schema_null),
    Mutation("SUM_TO_ONE", "SUM_TO_ONE", "profile",
             "the top kernel's share_of_run + 1e-6 in marts.kernel_run_rollup",
             edit_warehouse=_sum_to_one, needs_models=True),
)}


# A no-op "mutation": the seed re-serialised, so a passing run with bytes of its own.
CONTROL = Mutation("control", "", "profile", "the profile seed re-serialised, unchanged",
                   lambda doc: None)


def write_mutated(m: Mutation, seed: Path, dest_dir: Path) -> Path:
    """The seed with ``m.edit_document`` applied, as a new file in ``dest_dir``."""
    doc = json.loads(seed.read_bytes())
    if m.edit_document is not None:
        m.edit_document(doc)
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / f"mutated_{m.name}_{seed.name}"
    out.write_text(json.dumps(doc, indent=1))
    return out


def ingest(m: Mutation, settings: Settings, seeds: dict[str, Path],
           dest_dir: Path | None = None) -> str:
    """Ingest the mutant of ``m`` (after the original seed when the rule compares runs) and
    return its run id. The warehouse edit, if any, is :func:`edit`'s job."""
    seed = seeds[m.seed]
    if m.needs_original:
        r = ingest_file(settings, seed)
        assert r.status == "ingested", r.message
    path = (seed if m.uses_seed_bytes
            else write_mutated(m, seed, dest_dir or seed.parent.parent / "mutated"))
    r = ingest_file(settings, path)
    assert r.status == "ingested", f"{m.name}: {r.status}: {r.message}"
    return r.sha256


def edit(m: Mutation, con, settings: Settings, run_id: str) -> None:
    """Apply ``m``'s warehouse edit (if any) on a read-write connection."""
    if m.edit_warehouse is not None:
        m.edit_warehouse(con, settings, run_id)


def apply(m: Mutation, settings: Settings, seeds: dict[str, Path],
          dest_dir: Path | None = None) -> str:
    """:func:`ingest` then :func:`edit` (building the models first when the edit needs them);
    returns the mutated run's id."""
    run_id = ingest(m, settings, seeds, dest_dir)
    if m.edit_warehouse is not None:
        with db.writer(settings.warehouse) as con:
            if m.needs_models:
                from warehouse.modelling import models

                models.build(con)
            edit(m, con, settings, run_id)
    return run_id


def plan_warehouses(mutations: list[Mutation]) -> list[list[Mutation]]:
    """Group mutations that can share one warehouse without touching each other's outcome:
    isolated ones alone, and at most one seed-bytes mutation per seed per warehouse."""
    groups: list[list[Mutation]] = []
    for m in mutations:
        if m.isolated:
            groups.append([m])
            continue
        for g in groups:
            if g[0].isolated:
                continue
            if m.uses_seed_bytes and any(o.uses_seed_bytes and o.seed == m.seed for o in g):
                continue
            g.append(m)
            break
        else:
            groups.append([m])
    return groups
