"""The warehouse sensor after a catch-up: a run that appears with an ingestion time older than
the last look's watermark (committed late, the clock stepped back, a backup restored) and a run
`pwh rederive` re-derived (its `ingested_at` kept) are reported, once each."""

from __future__ import annotations

import datetime as dt
import functools
import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from pipelines import observe
from pipelines.definitions import build_definitions
from pipelines.raw import RAW_SPECS, partition_key
from tests.test_rederive import kineto_traces, make_kineto_old
from warehouse import checks as wchecks
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting import rederive
from warehouse.ingesting.loader import ingest_paths

FILES = dg.AssetKey(["raw", "files"])
EVENTS = dg.AssetKey(["raw", "trace_events"])


@functools.cache
def _graph(warehouse: str):
    return build_definitions(warehouse).resolve_asset_graph()


def _copy(seeds, tag: str) -> Path:
    f = seeds["profile"]
    out = f.with_name(f"{f.stem}-{tag}{f.suffix}")
    out.write_bytes(f.read_bytes().replace(b"{", b"{" + b" " * 7, 1))  # other bytes
    return out


def _said(res) -> str:
    return res.skip_message if isinstance(res, dg.SkipReason) else res.skip_reason.skip_message


def _forced(cursor: str) -> str:
    """The cursor as after a change of the file that added no run (a check, a build)."""
    return json.dumps({**json.loads(cursor), "sig": None})


def _partition_events(inst, key: dg.AssetKey, partition: str) -> list:
    recs = inst.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=100).records
    return [r.asset_materialization for r in recs]


@pytest.mark.parametrize("offset_s", [-3600, 0])
def test_a_run_committed_late_with_an_older_ingestion_time_is_reported(wh, seeds, offset_s):
    """A run committed after the last look but stamped at or before its watermark (its
    process's clock or transaction started earlier): the watermark alone skipped it forever."""
    (first,) = ingest_paths(wh, [seeds["audit"]])
    graph = _graph(str(wh.warehouse))
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        cursor = res.cursor
        (late,) = ingest_paths(wh, [seeds["profile"]])
        with db.writer(wh.warehouse) as con:  # stamped before the watermark
            con.execute("UPDATE raw.files SET ingested_at = (SELECT ingested_at FROM raw.files "
                        "WHERE sha256 = ?) + to_seconds(?) WHERE sha256 = ?",
                        [first.sha256, offset_s, late.sha256])
        res = observe.observe(inst, wh, cursor, graph)
        said = _said(res)
        key = partition_key(late.sha256, Path(late.path).name)
        for spec in RAW_SPECS:  # on every raw asset
            assert key in set(inst.get_materialized_partitions(spec.key)), (spec.key, said)
        assert "the raw partitions of 1 run(s)" in said and "every run looked at" in said, said
        # the run of the last look is not reported again
        old = partition_key(first.sha256, Path(first.path).name)
        assert len(_partition_events(inst, FILES, old)) == 1
        # the next look sees what this one saw: no second look at every run
        again = observe.observe(inst, wh, _forced(res.cursor), graph)
        said = _said(again)
        assert "nothing done outside Dagster" in said and "every run" not in said, said
        assert len(_partition_events(inst, FILES, key)) == 1


def test_a_warehouse_restored_after_a_catch_up_loses_no_run(wh, seeds, tmp_path):
    """A backup restored (or another machine's warehouse) after the sensor caught up: its runs
    ingested before the watermark were never reported."""
    other = settings(tmp_path / "other" / "warehouse.duckdb")
    (early,) = ingest_paths(other, [_copy(seeds, "b")])  # ingested first, elsewhere
    ingest_paths(wh, [seeds["audit"]])
    graph = _graph(str(wh.warehouse))
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        wh.warehouse.with_name(wh.warehouse.name + ".wal").unlink(missing_ok=True)
        shutil.copy(other.warehouse, wh.warehouse)
        res = observe.observe(inst, wh, res.cursor, graph)
        assert partition_key(early.sha256, Path(early.path).name) in set(
            inst.get_materialized_partitions(FILES)), _said(res)


def _rows(wh, table: str) -> dict[str, int]:
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        return dict(con.execute(f"SELECT run_id, count(*) FROM raw.{table} GROUP BY 1"  # noqa: S608
                                ).fetchall())
    finally:
        con.close()


def _latest(inst, key: dg.AssetKey, partition: str):
    return _partition_events(inst, key, partition)[0]


def test_rederived_runs_are_reported_once_with_their_new_rows(wh, tmp_path):
    """`pwh rederive` keeps each run's ingested_at: the sensor never reported the new rows of
    the re-derived runs. It reports them once, with the new row counts and a new data version;
    a lost tick's cursor reports nothing twice."""
    files = kineto_traces(tmp_path, 2)
    results = ingest_paths(wh, files)
    make_kineto_old(wh)
    old_rows = _rows(wh, "trace_events")
    graph = _graph(str(wh.warehouse))
    keys = {r.sha256: partition_key(r.sha256, Path(r.path).name) for r in results}
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        for sha, key in keys.items():
            evt = _latest(inst, EVENTS, key)
            assert evt.metadata["dagster/row_count"].value == old_rows[sha]
            assert evt.tags[observe.DATA_VERSION_TAG] == sha[:16]
        before = res.cursor
        rep = rederive.rederive(wh)
        assert [o.status for o in rep.outcomes] == ["rederived"] * 2
        new_rows = _rows(wh, "trace_events")
        assert all(new_rows[s] > old_rows[s] for s in keys)  # the CPU side is back
        res = observe.observe(inst, wh, before, graph)
        said = _said(res)
        for sha, key in keys.items():
            evt = _latest(inst, EVENTS, key)
            assert evt.metadata["dagster/row_count"].value == new_rows[sha], said
        assert "the raw partitions of 2 run(s) (of which 2 re-derived)" in said, said
        assert "every run" not in said, said  # found by its re-derivation, not a rewind
        versions = set()
        for sha, key in keys.items():
            evt = _latest(inst, EVENTS, key)
            files_evt = _latest(inst, FILES, key)
            assert files_evt.metadata["parser_version"].value == rep.outcomes[0].new_version
            assert "rederived_at" in files_evt.metadata
            version = evt.tags[observe.DATA_VERSION_TAG]
            assert version != sha[:16] and files_evt.tags[observe.DATA_VERSION_TAG] == version
            versions.add(version)
            for spec in RAW_SPECS:  # every raw asset reported again, once
                assert len(_partition_events(inst, spec.key, key)) == 2, spec.key
        assert len(versions) == 2
        # once: the next look after a change, and a tick whose cursor was lost, report nothing
        again = observe.observe(inst, wh, _forced(res.cursor), graph)
        assert "nothing done outside Dagster" in _said(again), _said(again)
        lost = observe.observe(inst, wh, before, graph)
        assert "nothing done outside Dagster" in _said(lost), _said(lost)
        for key in keys.values():
            assert len(_partition_events(inst, FILES, key)) == 2


def test_a_rederivation_committed_late_is_reported(wh, tmp_path):
    """A re-derivation stamped before the last look's re-derivation watermark (the clock
    stepped back) is found by the digest, as a late run is."""
    files = kineto_traces(tmp_path, 2)
    results = ingest_paths(wh, files)
    make_kineto_old(wh)
    graph = _graph(str(wh.warehouse))
    with dg.instance_for_test() as inst:
        con = duckdb.connect(str(wh.warehouse), read_only=True)
        stale = rederive.plan(con).stale
        con.close()
        with db.writer(wh.warehouse) as con:  # the first run re-derived
            assert rederive.rederive_run(wh, con, stale[0]).status == "rederived"
        res = observe.observe(inst, wh, None, graph)
        with db.writer(wh.warehouse) as con:  # the second, stamped an hour before the first
            assert rederive.rederive_run(wh, con, stale[1]).status == "rederived"
            con.execute("UPDATE meta.rederivations SET rederived_at = rederived_at - "
                        "INTERVAL 1 HOUR WHERE run_id = ?", [stale[1].run_id])
        res = observe.observe(inst, wh, res.cursor, graph)
        said = _said(res)
        key = {r.sha256: partition_key(r.sha256, Path(r.path).name) for r in results}[
            stale[1].run_id]
        assert _latest(inst, FILES, key).tags[observe.DATA_VERSION_TAG] != stale[1].run_id[:16]
        assert "(of which 1 re-derived)" in said and "every run looked at" in said, said


def test_a_warehouse_without_rederivations_reads_as_before(wh, seeds):
    """An older warehouse (no meta.rederivations) is observed as it was; its digest is of its
    runs alone."""
    ingest_paths(wh, [seeds["audit"]])
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, _graph(str(wh.warehouse)))
        cur = json.loads(res.cursor)
        assert cur["seen"][0] == 1 and cur["derived"] == dt.datetime(1970, 1, 1).isoformat()


def test_a_late_run_during_a_catch_up_is_reported_once_with_the_others(wh, seeds):
    """A run stamped before the last caught-up look's watermark arrives while the ticks after
    it catch up (a tick's budget: two runs): every run is reported, each once, and the look
    that catches up keeps a digest the next look agrees with."""
    from pipelines.raw import RAW_TABLES

    graph = _graph(str(wh.warehouse))
    per_run = len(RAW_TABLES)
    (first,) = ingest_paths(wh, [seeds["audit"]])
    with dg.instance_for_test() as inst:
        cursor = observe.observe(inst, wh, None, graph).cursor
        more = []
        for i in range(4):  # other bytes, other names
            f = seeds["profile"].with_name(f"more-{i}.json")
            f.write_bytes(seeds["profile"].read_bytes().replace(b"{", b"{" + b" " * (i + 1), 1))
            more.append(f)
        results = ingest_paths(wh, more)
        res = observe.observe(inst, wh, cursor, graph, max_events=2 * per_run, budget_s=10**6)
        assert "(2 of 4 caught up)" in _said(res), _said(res)
        late = seeds["profile"].with_name("late.json")
        late.write_bytes(seeds["profile"].read_bytes().replace(b"{", b"{" + b" " * 9, 1))
        (lr,) = ingest_paths(wh, [late])
        with db.writer(wh.warehouse) as con:  # stamped before the first run's
            con.execute("UPDATE raw.files SET ingested_at = ? WHERE sha256 = ?",
                        [dt.datetime(2000, 1, 1), lr.sha256])
        cursor, said = res.cursor, []
        for _ in range(6):
            res = observe.observe(inst, wh, cursor, graph, max_events=2 * per_run,
                                  budget_s=10**6)
            said.append(_said(res))
            if isinstance(res, dg.SkipReason):
                break
            cursor = res.cursor
        for r in [first, lr, *results]:
            key = partition_key(r.sha256, Path(r.path).name)
            assert len(_partition_events(inst, FILES, key)) == 1, (r.path, said)
        assert "every run looked at" in said[0], said
        assert "caught up" in said[-2] and "not changed" in said[-1], said
        again = observe.observe(inst, wh, _forced(cursor), graph)
        assert "nothing done outside Dagster" in _said(again) and "every run" not in \
            _said(again), _said(again)


def _check_evaluations(inst, name: str) -> list:
    from pipelines.checks import check_name

    (suite,) = [s for s in wchecks.load_suites() if s.name == name]
    key = dg.AssetCheckKey(dg.AssetKey(suite.table.split(".")), check_name(suite))
    recs = inst.event_log_storage.get_asset_check_execution_history(key, limit=50)
    return [r.event.dagster_event.event_specific_data for r in recs if r.event]


@pytest.mark.parametrize("how", ["late", "rederived"])
def test_a_failing_check_still_says_so_after_a_late_or_rederived_run(wh, seeds, tmp_path, how):
    """A raw check still failing for an earlier run is evaluated again after new raw partitions
    ("the new runs were not validated yet"), so that its latest evaluation does not predate
    them. A run committed late or re-derived leaves the ingestion watermark where it was: the
    look it is reported by is another look all the same, and that evaluation was dropped as
    one reported already."""
    (bad,) = ingest_paths(wh, [seeds["audit"]])
    if how == "rederived":
        ingest_paths(wh, kineto_traces(tmp_path, 1))
        make_kineto_old(wh)
    with db.writer(wh.warehouse) as con:  # pwh check: the audit run fails audit_row_invariants
        wchecks.record_results(con, wchecks.validate_runs(con, [bad.sha256]))
        con.execute("UPDATE checks.results SET success = false, unexpected_count = 1 "
                    "WHERE run_id = ? AND suite = 'audit_row_invariants'", [bad.sha256])
    graph = _graph(str(wh.warehouse))
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        first = res.cursor
        before = _check_evaluations(inst, "audit_row_invariants")
        assert before and before[0].metadata["runs_validated"].value == 1
        if how == "late":
            (late,) = ingest_paths(wh, [seeds["profile"]])
            with db.writer(wh.warehouse) as con:  # stamped before the watermark
                con.execute("UPDATE raw.files SET ingested_at = ? WHERE sha256 = ?",
                            [dt.datetime(2000, 1, 1), late.sha256])
        else:
            assert [o.status for o in rederive.rederive(wh).outcomes] == ["rederived"]
        res = observe.observe(inst, wh, res.cursor, graph)
        said = _said(res)
        assert "the raw partitions of 1 run(s)" in said, said
        after = _check_evaluations(inst, "audit_row_invariants")
        assert len(after) == len(before) + 1, said
        latest = after[0]
        assert not latest.passed and latest.metadata["runs_validated"].value == 0
        assert latest.metadata["failing_from_earlier"].value == 1
        # once: neither the next look after a change nor a tick whose cursor was lost (it
        # looks from the first look's cursor again) says it again
        again = observe.observe(inst, wh, _forced(res.cursor), graph)
        assert "nothing done outside Dagster" in _said(again), _said(again)
        lost = observe.observe(inst, wh, first, graph)
        assert "the raw partitions" not in _said(lost), _said(lost)
        assert len(_check_evaluations(inst, "audit_row_invariants")) == len(after), _said(lost)


def test_a_backup_from_before_a_rederivation_restored_reports_the_first_derivation(wh, tmp_path):
    """The sensor reported the re-derived rows (a new data version); then a backup taken before
    `pwh rederive` is restored: the warehouse holds the first derivation's rows again, while
    Dagster still showed the re-derivation's row counts and data version. The look at every
    run (the runs' digest changed) reports those partitions again with the first derivation's
    rows and data version (the file's SHA-256), once."""
    files = kineto_traces(tmp_path, 2)
    results = ingest_paths(wh, files)
    make_kineto_old(wh)
    old_rows = _rows(wh, "trace_events")
    backup = tmp_path / "before-rederive.duckdb"
    shutil.copy(wh.warehouse, backup)
    graph = _graph(str(wh.warehouse))
    keys = {r.sha256: partition_key(r.sha256, Path(r.path).name) for r in results}
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        assert [o.status for o in rederive.rederive(wh).outcomes] == ["rederived"] * 2
        res = observe.observe(inst, wh, _forced(res.cursor), graph)
        for sha, key in keys.items():
            evt = _latest(inst, EVENTS, key)
            assert evt.tags[observe.DATA_VERSION_TAG] != sha[:16], _said(res)
        wh.warehouse.with_name(wh.warehouse.name + ".wal").unlink(missing_ok=True)
        shutil.copy(backup, wh.warehouse)
        res = observe.observe(inst, wh, res.cursor, graph)
        said = _said(res)
        assert "every run looked at" in said and "the raw partitions of 2 run(s)" in said, said
        for sha, key in keys.items():
            for spec in RAW_SPECS:
                evt = _latest(inst, spec.key, key)
                assert evt.tags[observe.DATA_VERSION_TAG] == sha[:16], (spec.key, said)
                assert len(_partition_events(inst, spec.key, key)) == 3, spec.key
            evt = _latest(inst, EVENTS, key)
            assert evt.metadata["dagster/row_count"].value == old_rows[sha]
            assert "as first derived" in evt.description
        # once: the next looks report nothing more
        again = observe.observe(inst, wh, _forced(res.cursor), graph)
        assert "nothing done outside Dagster" in _said(again), _said(again)
        for key in keys.values():
            assert len(_partition_events(inst, FILES, key)) == 3
