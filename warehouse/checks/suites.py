"""Expectation suites: GX 1.x suite JSON under ``expectations/suites/``, loaded without GX.

A suite file is a GX 1.x ``ExpectationSuite`` serialised as JSON (``name``, ``meta``,
``expectations`` of ``{"type", "kwargs", "meta"}``), plus what this project needs in ``meta``:

suite ``meta``
    ``table``          the table the suite checks (``raw.audit_components``); ``pwh check`` names it
    ``batch``          where the rows come from, exactly one of
                       ``{"table": "raw.x"}`` – the run's rows of that table,
                       ``{"view": "name"}`` – the check view ``expectations/views/name.sql``,
                       ``{"catalog": "raw.x"}`` – the table's columns and types from the catalog
                       (check view ``table_columns.sql``),
                       ``{"python": "manifest_checksum"}`` – rows computed in Python
    ``run_column``     the batch column holding the run id (``run_id``; ``sha256`` for raw.files;
                       ``null`` when the batch does not depend on runs, e.g. the catalog)
    ``source_format``  only runs of this format are validated (``null``: every run; ``trace``:
                       every kernel-trace format)
    ``sample_columns`` columns that identify a failing row in the recorded samples
    ``description``    one line

expectation ``meta``
    ``invariant_id``   the rule the data broke: P1..P10, A1..A7, SCHEMA, CHECKSUM, INPUT_SHAPES,
                       SUM_TO_ONE (see ``docs/checks.md``)
    ``critical``       true: a failure marks the run failed (excluded from trends and baselines)
    ``rule``           the rule in words, printed by ``pwh check``
    ``source_format``  optional: only runs of this format get this expectation

Everything is validated at load time; an error names the file and the broken rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from warehouse.errors import PwhError
from warehouse.ingesting import formats as _formats
from warehouse.shipped import data_path

EXPECTATIONS_DIR = data_path("expectations")  # the checkout's, or an installed wheel's copy
SUITES_DIR = EXPECTATIONS_DIR / "suites"
VIEWS_DIR = EXPECTATIONS_DIR / "views"

# The source formats a suite may name, from the format registry; ``trace`` names every
# kernel-trace format at once (they share the raw.trace_* tables), ``ncu`` both Nsight Compute
# formats (raw.ncu_*).
FORMATS = tuple(_formats.BY_NAME)
FORMAT_GROUPS = {"trace": tuple(f.NAME for f in _formats.TRACE_FORMATS),
                 "ncu": tuple(f.NAME for f in _formats.NCU_FORMATS)}
# Every invariant a suite may name. P*/A* are the format invariants of docs/formats.md; the
# kernel-trace rules (durations >= 0, end >= start, integer ns, run rows agreeing with their
# events and summaries) are SCHEMA rules of the shared raw.trace_* layer.
INVARIANT_IDS = (
    tuple(f"P{i}" for i in range(1, 11)) + tuple(f"A{i}" for i in range(1, 8))
    + ("SCHEMA", "CHECKSUM", "INPUT_SHAPES", "SUM_TO_ONE")
)


def format_matches(declared: str | None, source_format: str | None) -> bool:
    """Does a suite/expectation declared for ``declared`` (a format, a group or None) apply to
    a run of ``source_format``?"""
    return declared is None or declared == source_format or (
        source_format in FORMAT_GROUPS.get(declared, ()))
PYTHON_BATCHES = ("manifest_checksum",)
BATCH_KINDS = ("table", "view", "catalog", "python")
CATALOG_VIEW = "table_columns"
_TABLE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")
_SUITE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
# Expectations whose result lists the failing rows (GX "map" expectations): their outcome can be
# split run by run when several runs are validated in one batch.
ROW_LEVEL_PREFIXES = ("expect_column_values_to_", "expect_column_pair_values_",
                      "expect_compound_columns_to_be_unique", "expect_multicolumn_values_to_")
# Table-level expectations allowed only on batches that do not depend on runs (run_column null).
TABLE_LEVEL_TYPES = ("expect_column_distinct_values_to_contain_set",
                     "expect_column_distinct_values_to_equal_set",
                     "expect_table_columns_to_match_ordered_list",
                     "expect_table_columns_to_match_set", "expect_column_to_exist")


class SuiteError(PwhError):
    """A suite file breaks the suite format (names the file and the rule)."""


@dataclass(frozen=True)
class Expectation:
    """One expectation of a suite: the GX configuration plus this project's meta."""

    type: str
    kwargs: dict[str, Any]
    meta: dict[str, Any]

    @property
    def invariant_id(self) -> str:
        return self.meta["invariant_id"]

    @property
    def critical(self) -> bool:
        return bool(self.meta["critical"])

    @property
    def rule(self) -> str:
        return self.meta["rule"]

    @property
    def columns(self) -> list[str]:
        """Batch columns the expectation reads (shown with failing rows)."""
        k = self.kwargs
        out = [k[c] for c in ("column", "column_A", "column_B") if c in k]
        out += list(k.get("column_list") or [])
        return out

    @property
    def label(self) -> str:
        """Stable name of the expectation within its suite (``checks.results.expectation``)."""
        s = f"{self.type}({', '.join(self.columns)})"
        if self.kwargs.get("row_condition"):
            s += f" where {self.kwargs['row_condition']}"
        return s

    def gx_config(self) -> dict[str, Any]:
        """The dict GX's ``ExpectationSuite`` accepts; severity mirrors ``meta.critical`` and
        ``meta.expectation`` carries :attr:`label` so results map back to this object."""
        return {"type": self.type, "kwargs": dict(self.kwargs),
                "meta": {**self.meta, "expectation": self.label},
                "severity": "critical" if self.critical else "warning"}


# Suites on these layers block by default (pipelines/checks.py); a suite may say otherwise.
BLOCKING_LAYERS = ("raw", "staging")


@dataclass(frozen=True)
class Suite:
    """A loaded suite. ``expectations_for(fmt)`` applies the per-expectation format filter."""

    name: str
    path: Path
    table: str
    batch: dict[str, str]
    run_column: str | None
    source_format: str | None
    sample_columns: tuple[str, ...]
    description: str
    expectations: tuple[Expectation, ...] = field(repr=False)
    blocking_declared: bool | None = None  # meta.blocking of the suite file, when given

    @property
    def layer(self) -> str:
        """``raw``, ``staging`` or ``marts``: the schema of the checked table."""
        return self.table.split(".")[0]

    @property
    def blocking(self) -> bool:
        """A failing critical expectation stops the models below in Dagster: every raw and
        staging suite, and a marts suite that says so (``meta.blocking: true``: invariants
        other models build on, e.g. busy + idle = span of ``marts.gpu_timeline``)."""
        if self.blocking_declared is not None:
            return self.blocking_declared
        return self.layer in BLOCKING_LAYERS

    @property
    def asset_key(self) -> tuple[str, ...]:
        """The Dagster asset key path of the checked table: ``("raw", "audit_rows")``,
        ``("marts", "kernel_run_rollup")``."""
        return tuple(self.table.split("."))

    @property
    def batch_kind(self) -> str:
        return next(iter(self.batch))

    @property
    def view_sql(self) -> str | None:
        """The SQL of the suite's check view (the catalog view for ``catalog`` batches)."""
        view = {"view": self.batch.get("view"), "catalog": CATALOG_VIEW}.get(self.batch_kind)
        return (VIEWS_DIR / f"{view}.sql").read_text() if view else None

    def tables_read(self) -> set[str]:
        """Warehouse tables the batch reads: a suite is skipped while one of them is missing
        (e.g. staging before the first ``pwh build``; raw tables always exist)."""
        kind = self.batch_kind
        if kind in ("table", "catalog"):
            return {self.batch[kind]}
        if kind == "python":
            return {"raw.files"}
        return {m.lower() for m in re.findall(r"\b(?:raw|staging|marts|checks)\.[a-z_0-9]+",
                                              self.view_sql or "")}

    def expectations_for(self, source_format: str | None) -> tuple[Expectation, ...]:
        return tuple(e for e in self.expectations
                     if format_matches(e.meta.get("source_format"), source_format))

    def applies_to(self, source_format: str) -> bool:
        return format_matches(self.source_format, source_format)


def _fail(path: Path, msg: str) -> SuiteError:
    return SuiteError(f"{path}: {msg}")


def _expectation(path: Path, i: int, e: Any, run_column: str | None) -> Expectation:
    where = f"expectations[{i}]"
    if not isinstance(e, dict) or not isinstance(e.get("type"), str) or not isinstance(
            e.get("kwargs"), dict):
        raise _fail(path, f"{where}: an object with 'type' (string) and 'kwargs' (object)")
    unknown = set(e) - {"type", "kwargs", "meta", "id", "notes", "description", "severity"}
    if unknown:
        raise _fail(path, f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    meta = e.get("meta")
    if not isinstance(meta, dict):
        raise _fail(path, f"{where}: 'meta' with invariant_id, critical and rule is required")
    if meta.get("invariant_id") not in INVARIANT_IDS:
        raise _fail(path, f"{where} ({e['type']}): meta.invariant_id must be one of "
                          f"{', '.join(INVARIANT_IDS)}, found {meta.get('invariant_id')!r}")
    if not isinstance(meta.get("critical"), bool):
        raise _fail(path, f"{where} ({e['type']}): meta.critical must be true or false")
    if not isinstance(meta.get("rule"), str) or not meta["rule"].strip():
        raise _fail(path, f"{where} ({e['type']}): meta.rule (the rule in words) is required")
    if meta.get("source_format") not in (None, *FORMATS, *FORMAT_GROUPS):
        raise _fail(path, f"{where}: meta.source_format must be one of "
                          f"{', '.join((*FORMATS, *FORMAT_GROUPS))}")
    if "severity" in e and e["severity"] != ("critical" if meta["critical"] else "warning"):
        raise _fail(path, f"{where}: severity contradicts meta.critical")
    row_level = e["type"].startswith(ROW_LEVEL_PREFIXES)
    if not row_level and (run_column is not None or e["type"] not in TABLE_LEVEL_TYPES):
        raise _fail(path, f"{where}: {e['type']} is not a row-level expectation; only "
                          "row-level ones can be attributed to a run (table-level ones are "
                          f"allowed on run-independent batches: {', '.join(TABLE_LEVEL_TYPES)})")
    if e["kwargs"].get("mostly", 1) != 1:
        raise _fail(path, f"{where}: 'mostly' is not allowed: an invariant holds for every row")
    return Expectation(e["type"], e["kwargs"], meta)


def load_suite(path: Path) -> Suite:
    """Load and validate one suite file."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise _fail(path, f"cannot read suite JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict):
        raise _fail(path, "a suite is an object with 'name', 'meta' and 'expectations'")
    name, meta = doc.get("name"), doc["meta"]
    if name != path.stem or not isinstance(name, str) or not _SUITE_NAME.match(name):
        raise _fail(path, f"suite name {name!r} must equal the file name {path.stem!r} "
                          "(lower-case words separated by dots)")
    table = meta.get("table")
    if not isinstance(table, str) or not _TABLE.match(table):
        raise _fail(path, "meta.table must name a schema-qualified table, e.g. raw.audit_rows")
    batch = meta.get("batch")
    if not isinstance(batch, dict) or len(batch) != 1 or next(iter(batch)) not in BATCH_KINDS:
        raise _fail(path, "meta.batch must be exactly one of {table: …}, {view: …}, "
                          "{catalog: …}, {python: …}")
    kind, ref = next(iter(batch.items()))
    if kind == "view" and not (isinstance(ref, str) and (VIEWS_DIR / f"{ref}.sql").is_file()):
        raise _fail(path, f"meta.batch.view: no check view {VIEWS_DIR / f'{ref}.sql'}")
    if kind == "python" and ref not in PYTHON_BATCHES:
        raise _fail(path, f"meta.batch.python must be one of {', '.join(PYTHON_BATCHES)}")
    if kind in ("table", "catalog") and not (isinstance(ref, str) and _TABLE.match(ref)):
        raise _fail(path, f"meta.batch.{kind} must name a schema-qualified table")
    run_column = meta.get("run_column", None if kind == "catalog" else "run_id")
    if run_column is not None and not isinstance(run_column, str):
        raise _fail(path, "meta.run_column must be a column name or null")
    if kind == "catalog" and run_column is not None:
        raise _fail(path, "a catalog batch does not depend on runs: meta.run_column must be null")
    if kind == "view" and run_column is not None and "$run_ids" not in (
            VIEWS_DIR / f"{ref}.sql").read_text():
        raise _fail(path, f"check view {ref}.sql must be scoped to the validated runs with "
                          "the bound parameter $run_ids")
    fmt = meta.get("source_format")
    if fmt not in (None, *FORMATS, *FORMAT_GROUPS):
        raise _fail(path, "meta.source_format must be null or one of "
                          f"{', '.join((*FORMATS, *FORMAT_GROUPS))}")
    exps = doc.get("expectations")
    if not isinstance(exps, list) or not exps:
        raise _fail(path, "'expectations' must be a non-empty list")
    expectations = tuple(_expectation(path, i, e, run_column) for i, e in enumerate(exps))
    labels = [e.label for e in expectations]
    dup = {x for x in labels if labels.count(x) > 1}
    if dup:
        raise _fail(path, f"expectation(s) {', '.join(sorted(dup))} appear twice")
    blocking = meta.get("blocking")
    if blocking is not None and not isinstance(blocking, bool):
        raise _fail(path, "meta.blocking must be true, false or absent (raw and staging "
                          "suites block by default, marts suites do not)")
    return Suite(name, path, table, dict(batch), run_column, fmt,
                 tuple(meta.get("sample_columns") or ()), str(meta.get("description", "")),
                 expectations, blocking)


@lru_cache(maxsize=4)
def _load_all(directory: Path) -> tuple[Suite, ...]:
    suites = tuple(load_suite(p) for p in sorted(directory.glob("*.json")))
    if not suites:
        raise SuiteError(f"{directory}: no expectation suites (*.json) found")
    return suites


def load_suites(directory: Path | None = None) -> list[Suite]:
    """Every suite under ``expectations/suites`` (cached per process), sorted by name."""
    return list(_load_all(directory or SUITES_DIR))


def get_suite(name: str, directory: Path | None = None) -> Suite:
    for s in load_suites(directory):
        if s.name == name:
            return s
    raise SuiteError(f"no expectation suite named {name!r} under {directory or SUITES_DIR}")


def suites_for_table(table: str, directory: Path | None = None) -> list[Suite]:
    """Suites whose checked table is ``table`` (e.g. ``"raw.audit_rows"``,
    ``"marts.kernel_run_rollup"``): its data suite, its column/type suite and the check views
    that validate it."""
    return [s for s in load_suites(directory) if s.table == table]


def suites_for_asset(asset_key: tuple[str, ...] | list[str],
                     directory: Path | None = None) -> list[Suite]:
    """Suites that belong to one Dagster asset (the asset of their table), e.g.
    ``("raw", "files")`` or ``("marts", "kernel_run_rollup")``."""
    key = tuple(asset_key)
    return [s for s in load_suites(directory) if s.asset_key == key]
