"""Check results in the warehouse: ``checks.results`` rows and the run status derived from them.

``checks.results`` and the view ``checks.run_status`` are created by ``warehouse.db``: a run's
status is derived from its latest validation (the rows sharing its newest ``validated_at``):
``failed`` when one of them is a failing critical expectation, else ``passed``; a run without
results is *unchecked*. Nothing here deletes results: history stays queryable.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass

from warehouse.checks.runner import Result
from warehouse.checks.suites import load_suites

COLUMNS = ("run_id", "suite", "expectation", "invariant_id", "critical", "success",
           "unexpected_count", "sample_failures", "validated_at")


def record_results(con, results: Iterable[Result], *, carry_forward: bool = True) -> int:
    """Append ``results`` to ``checks.results`` in one transaction; returns the rows written.

    Each run's rows form one snapshot sharing one ``validated_at`` (the newest of its results),
    because ``checks.run_status`` derives a run's status from its newest snapshot only. When the
    results cover only some suites (a Dagster check on one asset, or the suites of a table built
    after the last validation), ``carry_forward`` copies into the new snapshot the previous
    snapshot's rows of the other suites that still exist, unchanged except for ``validated_at``:
    a partial validation never hides an earlier failure. Only ``pwh check --rerun`` (or any new
    result of that same suite) replaces a suite's outcome.
    """
    import pyarrow as pa

    rows = list(results)
    if not rows:
        return 0
    snapshot: dict[str, dt.datetime] = {}
    for r in rows:
        snapshot[r.run_id] = max(r.validated_at, snapshot.get(r.run_id, r.validated_at))
    table = pa.table({
        "run_id": [r.run_id for r in rows],
        "suite": [r.suite for r in rows],
        "expectation": [r.expectation for r in rows],
        "invariant_id": [r.invariant_id for r in rows],
        "critical": [r.critical for r in rows],
        "success": [r.success for r in rows],
        "unexpected_count": pa.array([r.unexpected_count for r in rows], pa.int64()),
        "sample_failures": [json.dumps(r.sample_failures, allow_nan=False) for r in rows],
        "validated_at": pa.array([snapshot[r.run_id] for r in rows], pa.timestamp("us")),
    })
    pairs = list(dict.fromkeys((r.run_id, r.suite) for r in rows))
    covered = pa.table({"run_id": [p[0] for p in pairs], "suite": [p[1] for p in pairs]})
    snaps = pa.table({"run_id": list(snapshot),
                      "snapshot_at": pa.array(list(snapshot.values()), pa.timestamp("us"))})
    written = len(rows)
    con.execute("BEGIN TRANSACTION")
    try:
        con.register("_pwh_check_results", table)
        con.register("_pwh_check_covered", covered)
        con.register("_pwh_check_snapshots", snaps)
        try:
            if carry_forward:
                written += con.execute(CARRY_FORWARD_SQL, {
                    "suites": [s.name for s in load_suites()]}).fetchone()[0]
            con.execute("insert into checks.results by name "
                        "select * replace (sample_failures::json as sample_failures) "
                        "from _pwh_check_results")
        finally:
            for name in ("_pwh_check_results", "_pwh_check_covered", "_pwh_check_snapshots"):
                con.unregister(name)
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(Exception):  # a failed COMMIT has rolled back already
            con.execute("ROLLBACK")
        raise
    return written


# The previous snapshot of each run in _pwh_check_snapshots, minus the suites the new results
# cover and the suites that no longer exist, copied with the new snapshot time. Reads
# checks.results for these runs only.
CARRY_FORWARD_SQL = """
insert into checks.results by name
with previous as (
    select results.*
    from checks.results as results
    where results.run_id in (select run_id from _pwh_check_snapshots)
),

latest as (
    select run_id, max(validated_at) as validated_at from previous group by run_id
)

select
    previous.run_id,
    previous.suite,
    previous.expectation,
    previous.invariant_id,
    previous.critical,
    previous.success,
    previous.unexpected_count,
    previous.sample_failures,
    snapshots.snapshot_at as validated_at
from previous
inner join latest using (run_id, validated_at)
inner join _pwh_check_snapshots as snapshots using (run_id)
anti join _pwh_check_covered as covered using (run_id, suite)
where previous.suite in (select unnest($suites))
"""


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


def pending_suites(con, run_ids: Iterable[str]) -> dict[str, list]:
    """Per run: the suites that apply to it now (``applicable_suites``: its format, tables that
    exist, the last build for staging/marts suites) but are absent from its latest snapshot:
    every applicable suite for an unchecked run, the staging and marts suites once a build has
    included a run validated before. Runs with nothing pending are left out."""
    from warehouse.checks.runner import applicable_suites

    ids = list(dict.fromkeys(run_ids))
    done: dict[str, set[str]] = {}
    for run_id, suite in con.execute("""
        with results as (
            select run_id, suite, validated_at from checks.results
            where run_id in (select unnest($ids))
        ),
        latest as (
            select run_id, max(validated_at) as validated_at from results group by run_id
        )
        select distinct run_id, suite from results inner join latest using (run_id, validated_at)
    """, {"ids": ids}).fetchall():
        done.setdefault(run_id, set()).add(suite)
    out = {}
    for run_id, suites in applicable_suites(con, ids).items():
        todo = [s for s in suites if s.name not in done.get(run_id, set())]
        if todo:
            out[run_id] = todo
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
