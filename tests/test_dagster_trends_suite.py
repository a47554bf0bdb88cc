"""The verdict mart's suite (marts.kernel_trends): invariants that hold for any verdict method,
each shown to fail on a mart broken in one way, and the suite is a check on the mart's asset."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.definitions import defs
from warehouse import checks as wchecks
from warehouse import db, synth
from warehouse.ingesting.loader import ingest_paths
from warehouse.modelling import models

SUITE = "marts.kernel_trends"


def _row(n: int, where: str = "true") -> str:
    return (f"rowid = (select rowid from marts.kernel_trends where {where} "
            f"order by rowid limit 1 offset {n})")


# what breaks each invariant (on its own row) -> the expectation that must then fail
BREAKS = {
    f"update marts.kernel_trends set verdict = 'maybe' where {_row(0)}":
        "expect_column_values_to_be_in_set(verdict)",
    f"update marts.kernel_trends set q_value = 1.5 where {_row(1)}":
        "expect_column_values_to_be_between(q_value)",
    f"update marts.kernel_trends set p_value = -0.1 where {_row(2)}":
        "expect_column_values_to_be_between(p_value)",
    f"update marts.kernel_trends set median_us = 'nan'::double where {_row(3)}":
        "expect_column_values_to_be_between(nan_values)",
    f"insert into marts.kernel_trends select * from marts.kernel_trends where {_row(4)}":
        "expect_column_values_to_be_between(rows_per_key)",
    "update marts.kernel_trends set delta_pct = delta_pct + 1 "
    f"where {_row(5, 'delta_pct is not null and median_us is not null')}":
        "expect_column_values_to_be_between(delta_error)",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from warehouse.config import settings

    tmp = tmp_path_factory.mktemp("trends")
    spec = synth.HistorySpec(labels=4, repeats=2, single_repeat_every=0, plants=(),
                             series=(synth.SeriesSpec("decoder-tile", "tile_profile"),))
    synth.generate(tmp / "hist", spec)
    s = settings(tmp / "state" / "warehouse.duckdb")
    files = sorted(p for p in (tmp / "hist" / "runs").rglob("*.json")
                   if not p.name.endswith(".meta.json"))
    assert all(r.ok for r in ingest_paths(s, files))
    with db.writer(s.warehouse) as con:
        models.build(con, models.load_project())
    return s


def test_the_suite_is_a_check_on_the_verdict_mart():
    keys = {(k.asset_key.to_user_string(), k.name)
            for k in defs.resolve_asset_graph().asset_check_keys}
    assert ("marts/kernel_trends", "marts_kernel_trends") in keys


def test_each_invariant_fails_on_a_mart_broken_that_way(built):
    suite = wchecks.get_suite(SUITE)
    with db.writer(built.warehouse) as con:
        runs = [r[0] for r in con.execute("select run_id from staging.runs").fetchall()]
        assert con.execute("select count(*) filter (where delta_pct is not null) "
                           "from marts.kernel_trends").fetchone()[0] > 6
        ok = wchecks.validate_runs(con, runs, [suite])
        assert ok and all(r.success for r in ok), [r for r in ok if not r.success]
        con.execute("begin transaction")
        try:
            for sql in BREAKS:
                con.execute(sql)
            bad = [r for r in wchecks.validate_runs(con, runs, [suite]) if not r.success]
        finally:
            con.execute("rollback")
    assert {r.expectation for r in bad} == set(BREAKS.values())
    assert all(r.critical and r.invariant_id == "SCHEMA" for r in bad)


def test_a_failing_verdict_check_is_reported_with_its_rows(built):
    from pipelines.checks import check_result

    suite = wchecks.get_suite(SUITE)
    with db.writer(built.warehouse) as con:
        runs = [r[0] for r in con.execute("select run_id from staging.runs").fetchall()]
        con.execute("begin transaction")
        try:
            con.execute(next(iter(BREAKS)))
            results = wchecks.validate_runs(con, runs, [suite])
        finally:
            con.execute("rollback")
    res = check_result(suite, results, runs_validated=len(runs))
    assert isinstance(res, dg.AssetCheckResult) and not res.passed
    assert res.metadata["failures"].value[0]["sample_failures"]
