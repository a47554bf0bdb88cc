"""Validation with Great Expectations on pandas batches queried from DuckDB.

GX is imported here, lazily, on first use (``import great_expectations`` costs seconds; the CLI's
fast paths never reach this module). One ephemeral GX context per process holds every suite;
each (suite, runs) batch is validated once and the outcome is split run by run through the
batch's run column, so a chunk of runs costs one GX call per suite.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from warehouse.checks import batches
from warehouse.checks.suites import Expectation, Suite, SuiteError, load_suites

SAMPLE_ROWS = 5  # failing rows kept per (run, expectation)
_lock = threading.Lock()
_state: dict[str, Any] = {}


@dataclass
class Result:
    """The outcome of one expectation for one run (one row of ``checks.results``).

    ``unexpected_count`` is the number of failing rows (entities) of that run, or for a
    table-level expectation the number of mismatches (e.g. missing columns). ``sample_failures``
    holds up to five failing rows (their identifying and checked columns) or the mismatch
    details. ``element_count`` (rows validated) is known only for fresh results.
    """

    run_id: str
    suite: str
    table: str
    expectation: str
    invariant_id: str
    critical: bool
    success: bool
    unexpected_count: int | None
    sample_failures: list[dict[str, Any]]
    validated_at: dt.datetime
    rule: str = ""
    element_count: int | None = None
    error: str | None = field(default=None)

    @property
    def failed_critical(self) -> bool:
        return self.critical and not self.success

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "suite": self.suite, "table": self.table,
            "expectation": self.expectation, "invariant_id": self.invariant_id,
            "critical": self.critical, "success": self.success,
            "unexpected_count": self.unexpected_count, "element_count": self.element_count,
            "rule": self.rule, "sample_failures": self.sample_failures,
            "validated_at": self.validated_at.isoformat(), "error": self.error,
        }


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _context():
    """The process-wide ephemeral GX context and its pandas batch definition."""
    with _lock:
        if not _state:
            try:
                gx, ProgressBarsConfig = _import_gx()
            except ImportError as exc:  # the core install: pip install . (no checks extra)
                from warehouse.errors import PwhError

                raise PwhError(
                    f"validation needs Great Expectations, which is not installed ({exc}): "
                    "install the checks extra, pip install '.[checks]' (make setup installs "
                    "everything)") from None

            logging.getLogger("great_expectations").setLevel(logging.ERROR)
            ctx = gx.get_context(mode="ephemeral")
            ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
            source = ctx.data_sources.add_pandas("pwh")
            asset = source.add_dataframe_asset("batch")
            _state.update(gx=gx, ctx=ctx, batch_definition=asset.add_batch_definition_whole_dataframe(
                "whole"), suites={})
        return _state


def _import_gx():
    """``great_expectations`` and its ``ProgressBarsConfig``, imported without Spark Connect.

    GX probes for pyspark, including ``pyspark.sql.connect``, whose import calls
    ``sys.exit(0)`` in a process whose ``__main__`` has no file (``python -c``, Dagster's run
    workers) when the Spark Connect client libraries are absent: with the lake extra installed
    that silently ended every ``pwh check`` run by such a process. GX validates pandas frames
    here and never needs Spark Connect, so that one module is hidden while GX is imported (and
    only if nothing imported it before)."""
    import sys

    hide = "pyspark.sql.connect" not in sys.modules
    if hide:
        sys.modules["pyspark.sql.connect"] = None  # "not importable" for the import below
    try:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig
    finally:
        if hide and sys.modules.get("pyspark.sql.connect", ...) is None:
            del sys.modules["pyspark.sql.connect"]
    return gx, ProgressBarsConfig


def warm_up() -> None:
    """Import Great Expectations and build the context now (seconds, once per process): call it
    before taking the warehouse's write lock, so the lock is not held during the import."""
    _context()


def _gx_suite(suite: Suite, source_format: str | None):
    """The GX suite for ``suite`` restricted to one format, built once per distinct content."""
    st = _context()
    configs = [e.gx_config() for e in suite.expectations_for(source_format)]
    key = json.dumps([suite.name, source_format, configs], sort_keys=True, default=str)
    with _lock:
        if key not in st["suites"]:
            gx = st["gx"]
            name = f"{suite.name}@{source_format or 'any'}#{len(st['suites'])}"
            st["suites"][key] = st["ctx"].suites.add(gx.ExpectationSuite(name=name,
                                                                         expectations=configs))
        return st["suites"][key]


def _jsonable(v: Any) -> Any:
    """A value safe for JSON: numpy scalars/arrays to Python, non-finite floats to strings."""
    if v is None:
        return None
    if hasattr(v, "tolist") and not isinstance(v, str):
        v = v.tolist()
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, bool | int | str):
        return v
    try:
        import pandas as pd

        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    return str(v)


def _sample_columns(suite: Suite, exp: Expectation, df) -> list[str]:
    """Identifying columns, then the checked ones (the run id is on the result already)."""
    cols = [c for c in (*suite.sample_columns, *exp.columns) if c and c != suite.run_column]
    cols += [c for c in exp.meta.get("sample_columns", ()) if c not in cols]
    seen: list[str] = []
    for c in cols:
        if c in df.columns and c not in seen:
            seen.append(c)
    return seen


def _split(suite: Suite, exp: Expectation, er, df, run_ids: Sequence[str],
           when: dt.datetime) -> list[Result]:
    """One GX expectation result on a multi-run batch -> one Result per run."""
    base = dict(suite=suite.name, table=suite.table, expectation=exp.label,
                invariant_id=exp.invariant_id, critical=exp.critical, validated_at=when,
                rule=exp.rule)
    exc = er.exception_info or {}
    if exc.get("raised_exception"):
        msg = (exc.get("exception_message") or "GX raised an exception").strip()
        return [Result(run_id=r, success=False, unexpected_count=None,
                       sample_failures=[{"error": msg}], error=msg, **base) for r in run_ids]
    res = er.result or {}
    run_col = suite.run_column
    if run_col is not None and "unexpected_index_list" in res:
        idx = list(res.get("unexpected_index_list") or [])
        bad = df.loc[idx] if idx else df.iloc[0:0]
        cols = _sample_columns(suite, exp, df)
        out = []
        per_run_rows = df[run_col].value_counts().to_dict() if len(df) else {}
        for r in run_ids:
            mine = bad[bad[run_col] == r]
            n = int(len(mine))
            sample = [{c: _jsonable(row[c]) for c in cols}
                      for _, row in mine.head(SAMPLE_ROWS).iterrows()]
            out.append(Result(run_id=r, success=n == 0, unexpected_count=n,
                              sample_failures=sample,
                              element_count=int(per_run_rows.get(r, 0)), **base))
        return out
    if run_col is not None and not er.success:
        # a row-level failure GX did not attribute to rows: fail every run of the batch
        msg = "failure without failing rows (cannot attribute it to a run)"
        return [Result(run_id=r, success=False, unexpected_count=None,
                       sample_failures=[{"error": msg, "result": _jsonable(res)}], error=msg,
                       **base) for r in run_ids]
    # table-level expectation on a run-independent batch: the same outcome for every run
    detail = {k: _jsonable(v) for k, v in res.items()
              if k in ("observed_value", "details", "partial_missing_list", "missing_count",
                       "partial_unexpected_list", "unexpected_count")}
    count = res.get("unexpected_count", res.get("missing_count"))
    if count is None and isinstance(res.get("details"), dict):
        count = len(res["details"].get("mismatched") or [])
    if count is None:
        count = 0 if er.success else 1
    return [Result(run_id=r, success=bool(er.success), unexpected_count=int(count),
                   sample_failures=[] if er.success else [detail],
                   element_count=len(df), **base) for r in run_ids]


def run_formats(con, run_ids: Iterable[str]) -> dict[str, str]:
    """``run_id -> source_format`` for the given runs that exist in ``raw.files``."""
    ids = list(dict.fromkeys(run_ids))
    rows = con.execute("select sha256, source_format from raw.files "
                       "where sha256 in (select unnest($ids))", {"ids": ids}).fetchall()
    return dict(rows)


MODEL_LAYERS = ("staging", "marts")
# One row per run present in the last build (the analyst contract of marts.run_summary), with
# staging.runs as the fallback while the marts are not built.
BUILD_MANIFESTS = ("marts.run_summary", "staging.runs")


def built_runs(con, run_ids: Iterable[str], have: set[str] | None = None) -> set[str]:
    """The runs the last ``pwh build`` included (their rows are in staging and marts)."""
    have = batches.existing_tables(con) if have is None else have
    for table in BUILD_MANIFESTS:
        if table in have:
            schema, name = table.split(".")
            rows = con.execute(
                f'select distinct run_id from "{schema}"."{name}" '  # noqa: S608 - constant
                "where run_id in (select unnest($ids))", {"ids": list(run_ids)}).fetchall()
            return {r[0] for r in rows}
    return set()


def applicable_suites(con, run_ids: Iterable[str], suites: Sequence[Suite] | None = None
                      ) -> dict[str, list[Suite]]:
    """Per run, the suites that apply to it now: its format; every table the suite reads
    exists; and for staging/marts suites, the run is part of the last build (a run ingested
    after it has no model rows yet: its model suites wait for the next build instead of
    passing on no rows). Raises ``SuiteError`` for a run id not in ``raw.files``."""
    ids = list(dict.fromkeys(run_ids))
    fmts = run_formats(con, ids)
    missing = [r for r in ids if r not in fmts]
    if missing:
        raise SuiteError(f"not in raw.files: run(s) {', '.join(m[:12] for m in missing)}")
    suites = list(load_suites() if suites is None else suites)
    have = batches.existing_tables(con)
    built = built_runs(con, ids, have) if any(s.layer in MODEL_LAYERS for s in suites) else set()
    out: dict[str, list[Suite]] = {}
    for r in ids:
        out[r] = [s for s in suites
                  if s.applies_to(fmts[r]) and s.expectations_for(fmts[r])
                  and s.tables_read() <= have
                  and (s.layer not in MODEL_LAYERS or r in built)]
    return out


def validate_runs(con, run_ids: Iterable[str], suites: Sequence[Suite] | None = None, *,
                  chunk_size: int = 200) -> list[Result]:
    """Validate ``run_ids`` against ``suites`` (default: every suite) and return the results.

    Only the suites that apply to a run are validated (:func:`applicable_suites`): suites of
    the other format, of tables that do not exist yet, and staging/marts suites for a run the
    last build did not include are skipped. Runs are grouped by format and validated
    ``chunk_size`` at a time: one batch and one GX call per (suite, chunk), then the outcome is
    split per run. Results of one call share one ``validated_at``. Nothing is written: pass the
    results to :func:`warehouse.checks.record_results`.

    Raises ``SuiteError`` for an unknown run id.
    """
    ids = list(dict.fromkeys(run_ids))
    suites = list(load_suites() if suites is None else suites)
    app = applicable_suites(con, ids, suites)
    fmts = run_formats(con, ids)
    when = utcnow()
    st = _context()
    results: list[Result] = []
    by_format: dict[str, list[str]] = {}
    for r in ids:
        by_format.setdefault(fmts[r], []).append(r)
    for fmt, fmt_runs in sorted(by_format.items()):
        for suite in suites:
            runs = [r for r in fmt_runs if suite in app[r]]
            if not runs:
                continue
            gx_suite = _gx_suite(suite, fmt)
            exps = {e.label: e for e in suite.expectations_for(fmt)}
            for i in range(0, len(runs), chunk_size):
                part = runs[i:i + chunk_size]
                df = batches.fetch(con, suite, part)
                batch = st["batch_definition"].get_batch(batch_parameters={"dataframe": df})
                vr = batch.validate(gx_suite, result_format={"result_format": "COMPLETE"})
                for er in vr.results:
                    exp = exps[er.expectation_config.meta["expectation"]]
                    results.extend(_split(suite, exp, er, df, part, when))
    return results


def validate_run(con, run_id: str, suites: Sequence[Suite] | None = None) -> list[Result]:
    """Validate one run (see :func:`validate_runs`)."""
    return validate_runs(con, [run_id], suites)


def results_to_json(results: Iterable[Result]) -> str:
    return json.dumps([r.to_dict() for r in results], indent=2)
