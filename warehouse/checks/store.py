"""Check results in the warehouse: ``checks.results`` rows and the run status derived from them.

``checks.results`` and the view ``checks.run_status`` are created by ``warehouse.db``: a run's
status is derived from its latest validation (the rows sharing its newest ``validated_at``):
``failed`` when one of them is a failing critical expectation, else ``passed``; a run without
results is *unchecked*. Nothing here deletes results: history stays queryable.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass

from .runner import Result
from .suites import load_suites

COLUMNS = ("run_id", "suite", "expectation", "invariant_id", "critical", "success",
           "unexpected_count", "sample_failures", "validated_at")


def record_results(con, results: Iterable[Result]) -> int:
    """Append ``results`` to ``checks.results`` in one transaction; returns the row count.

    Record a run's whole validation at once: ``checks.run_status`` reads only the rows of a
    run's newest ``validated_at``, so a later partial validation (a subset of the suites)
    becomes the run's status on its own.
    """
    import pyarrow as pa

    rows = list(results)
    if not rows:
        return 0
    table = pa.table({
        "run_id": [r.run_id for r in rows],
        "suite": [r.suite for r in rows],
        "expectation": [r.expectation for r in rows],
        "invariant_id": [r.invariant_id for r in rows],
        "critical": [r.critical for r in rows],
        "success": [r.success for r in rows],
        "unexpected_count": pa.array([r.unexpected_count for r in rows], pa.int64()),
        "sample_failures": [json.dumps(r.sample_failures, allow_nan=False) for r in rows],
        "validated_at": pa.array([r.validated_at for r in rows], pa.timestamp("us")),
    })
    con.execute("BEGIN TRANSACTION")
    try:
        con.register("_pwh_check_results", table)
        try:
            con.execute("insert into checks.results by name "
                        "select * replace (sample_failures::json as sample_failures) "
                        "from _pwh_check_results")
        finally:
            con.unregister("_pwh_check_results")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(rows)


def _suite_info() -> dict[tuple[str, str], tuple[str, str]]:
    """(suite, expectation label) -> (table, rule), for results read back from the warehouse."""
    out = {}
    for s in load_suites():
        for e in s.expectations:
            out[(s.name, e.label)] = (s.table, e.rule)
    return out


def latest_results(con, run_ids: Iterable[str] | None = None) -> list[Result]:
    """The results of each run's latest validation (what ``checks.run_status`` reads), for
    ``run_ids`` or every validated run, ordered by run, then failures first."""
    params: dict = {}
    where = ""
    if run_ids is not None:
        where = "where run_id in (select unnest($run_ids))"
        params["run_ids"] = list(run_ids)
    rows = con.execute(f"""
        with results as (
            select * from checks.results {where}
        ),
        latest as (
            select run_id, max(validated_at) as validated_at from results group by run_id
        )
        select results.run_id, suite, expectation, invariant_id, critical, success,
               unexpected_count, sample_failures, results.validated_at
        from results inner join latest using (run_id, validated_at)
        order by results.run_id, success, not critical, suite, expectation
    """, params).fetchall()  # noqa: S608 - constant SQL, values bound
    info = _suite_info()
    out = []
    for run_id, suite, exp, inv, crit, ok, n, sample, when in rows:
        table, rule = info.get((suite, exp), (suite, ""))
        out.append(Result(run_id, suite, table, exp, inv, bool(crit), bool(ok), n,
                          json.loads(sample) if sample else [], when, rule))
    return out


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    status: str  # passed | failed | unchecked
    failed_invariants: tuple[str, ...]
    validated_at: dt.datetime | None


def run_status(con, run_ids: Iterable[str]) -> dict[str, RunStatus]:
    """``checks.run_status`` for ``run_ids`` (``unchecked`` when a run has no results)."""
    ids = list(dict.fromkeys(run_ids))
    rows = con.execute(
        "select run_id, status, failed_invariants, validated_at from checks.run_status "
        "where run_id in (select unnest($ids))", {"ids": ids}).fetchall()
    got = {r[0]: RunStatus(r[0], r[1], tuple(r[2] or ()), r[3]) for r in rows}
    return {i: got.get(i, RunStatus(i, "unchecked", (), None)) for i in ids}
