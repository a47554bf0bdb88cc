"""Validation of runs against the expectation suites (``expectations/``), results in the warehouse.

Importing this package is cheap: Great Expectations and pandas are imported on the first
validation only, never by ``pwh ingest``, ``pwh sql`` or ``pwh runs``.

Public API (the CLI's ``pwh check`` and the Dagster asset checks both use it)::

    from warehouse import checks

    checks.load_suites()                      # every Suite, from expectations/suites/*.json
    checks.suites_for_table("raw.audit_rows") # the suites that check one table
    checks.suites_for_asset(("raw", "audit_rows"))  # the suites of one Dagster asset
    checks.warm_up()                          # import GX now (before taking the write lock)
    results = checks.validate_run(con, run_id)            # list[Result], nothing written
    results = checks.validate_runs(con, run_ids, suites)  # many runs, one GX call per suite
    checks.record_results(con, results)       # append to checks.results (one transaction;
                                              # other suites' latest outcome is carried forward)
    checks.applicable_suites(con, run_ids)    # {run_id: suites that apply to it now}
    checks.pending_suites(con, run_ids)       # {run_id: applicable suites not validated yet}
    checks.latest_results(con, run_ids)       # the results checks.run_status is derived from
    checks.run_status(con, run_ids)           # {run_id: RunStatus(status, failed_invariants…)}
    checks.summarize(results)                 # per-run dict for Dagster metadata / reports

A ``Result`` is one expectation for one run: ``run_id, suite, table, expectation,
invariant_id, critical, success, unexpected_count, sample_failures, validated_at, rule``.
A run whose latest validation has a failing *critical* expectation is ``failed``: the models
exclude it from trends and baselines and ``marts.run_summary`` / ``pwh runs`` show it. Nothing is
deleted; ``pwh check --rerun`` validates again after a fix. What each invariant means and what to
do when it fails: ``docs/checks.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from warehouse.checks.runner import (
    Result,
    applicable_suites,
    built_runs,
    validate_run,
    validate_runs,
    warm_up,
)
from warehouse.checks.store import (
    RunStatus,
    latest_results,
    pending_suites,
    record_results,
    run_status,
)
from warehouse.checks.suites import (
    EXPECTATIONS_DIR,
    INVARIANT_IDS,
    Expectation,
    Suite,
    SuiteError,
    get_suite,
    load_suites,
    suites_for_asset,
    suites_for_table,
)

__all__ = [
    "EXPECTATIONS_DIR", "INVARIANT_IDS", "Expectation", "Result", "RunStatus", "Suite",
    "SuiteError", "applicable_suites", "built_runs", "get_suite", "latest_results", "load_suites", "pending_suites", "record_results",
    "run_status",
    "suites_for_asset", "suites_for_table", "summarize", "validate_run", "validate_runs",
    "warm_up",
]


def summarize(results: Iterable[Result]) -> dict[str, dict[str, Any]]:
    """Per run: ``passed`` (no failing critical expectation), ``failed_invariants`` (critical,
    sorted), ``warnings`` (failing non-critical invariants), ``expectations`` (count),
    ``failures`` (one dict per failing expectation: invariant_id, table, suite, expectation,
    critical, unexpected_count, rule, sample_failures). Suitable as Dagster check metadata."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        s = out.setdefault(r.run_id, {"passed": True, "failed_invariants": set(),
                                      "warnings": set(), "expectations": 0, "failures": []})
        s["expectations"] += 1
        if r.success:
            continue
        if r.critical:
            s["passed"] = False
            s["failed_invariants"].add(r.invariant_id)
        else:
            s["warnings"].add(r.invariant_id)
        s["failures"].append({
            "invariant_id": r.invariant_id, "table": r.table, "suite": r.suite,
            "expectation": r.expectation, "critical": r.critical,
            "unexpected_count": r.unexpected_count, "rule": r.rule,
            "sample_failures": r.sample_failures,
        })
    for s in out.values():
        s["failed_invariants"] = sorted(s["failed_invariants"], key=_inv_order)
        s["warnings"] = sorted(s["warnings"], key=_inv_order)
    return out


def _inv_order(inv: str) -> tuple[int, str]:
    return (INVARIANT_IDS.index(inv) if inv in INVARIANT_IDS else len(INVARIANT_IDS), inv)
