"""The warehouse sensor: work done with the CLI / Python API shows in Dagster within one tick."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg

from pipelines import observe
from pipelines.checks import check_name
from pipelines.definitions import build_definitions
from pipelines.raw import RAW_SPECS, partition_key
from pipelines.refresh import refresh_request
from warehouse import checks as wchecks
from warehouse import db
from warehouse.ingesting.loader import ingest_paths
from warehouse.modelling import models


@functools.cache
def _defs(warehouse: str):
    return build_definitions(warehouse)


def _apply(instance, result):
    """What the daemon does with a sensor result: the sensor wrote its events itself (in
    dependency order, with their provenance); the result carries only the cursor."""
    assert not result.asset_events and not result.dynamic_partitions_requests


def test_cli_work_is_reported_as_partitions_materialisations_and_check_results(wh, seeds):
    results = ingest_paths(wh, [seeds["profile"], seeds["audit"]])
    shas = {r.sha256 for r in results}
    # readable partition keys: the file's stem and the SHA-256 prefix (issue 12)
    keys = {partition_key(r.sha256, Path(r.path).name) for r in results}
    assert {k.rsplit("-", 1)[1] for k in keys} == {s[:12] for s in shas}
    with db.writer(wh.warehouse) as con:  # pwh build, then pwh check
        models.build(con, models.load_project())
        wchecks.record_results(con, wchecks.validate_runs(con, sorted(shas)))
    defs = _defs(str(wh.warehouse))
    sensor = defs.get_sensor_def("warehouse_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None)
        _apply(inst, res)
        # raw: one partition per run, materialised on every raw asset, named by its file
        assert set(inst.get_dynamic_partitions("run_files")) == keys
        assert set(inst.get_materialized_partitions(dg.AssetKey(["raw", "files"]))) == keys
        assert set(inst.get_materialized_partitions(dg.AssetKey(["raw", "audit_rows"]))) == keys
        recs = inst.fetch_materializations(dg.AssetKey(["raw", "files"]), limit=10).records
        # the identity stays the full SHA-256, in the metadata
        assert {r.asset_materialization.metadata["sha256"].value for r in recs} == shas
        assert {r.asset_materialization.metadata["file_name"].value for r in recs} == {
            seeds["profile"].name, seeds["audit"].name}
        # checks: the recorded validation, one evaluation per suite over both runs
        formats = {r.asset_materialization.metadata["source_format"].value for r in recs}
        for s in wchecks.load_suites():
            if not any(s.applies_to(f) for f in formats):
                continue  # another format's suites (traces, ncu): nothing validated
            key = dg.AssetCheckKey(dg.AssetKey(s.table.split(".")), check_name(s))
            (rec,) = inst.event_log_storage.get_asset_check_execution_history(key, limit=5)
            assert rec.status.value == "SUCCEEDED", key
            md = rec.event.dagster_event.event_specific_data.metadata
            assert md["runs_validated"].value == (2 if s.source_format is None else 1), key
        # models: every model built by `pwh build` is materialised
        for name in ("staging.runs", "marts.kernel_trends", "marts.run_summary"):
            evt = inst.get_latest_materialization_event(dg.AssetKey(name.split(".")))
            assert evt is not None, name
        # what the CLI ingested never makes Dagster rebuild the models
        assert isinstance(refresh_request(inst), dg.SkipReason)
        # nothing changed: nothing read, nothing reported
        again = observe.observe(inst, wh, res.cursor)
        assert isinstance(again, dg.SkipReason) and "not changed" in again.skip_message
        # a new file through the CLI: only it is reported
        seeds["profile"].write_bytes(seeds["profile"].read_bytes().replace(b"{", b"{ ", 1))
        (new,) = ingest_paths(wh, [seeds["profile"]])
        before = set(inst.get_materialized_partitions(dg.AssetKey(["raw", "files"])))
        observe.observe(inst, wh, res.cursor)
        assert set(inst.get_materialized_partitions(dg.AssetKey(["raw", "files"]))) - before == {
            partition_key(new.sha256, Path(new.path).name)}


def test_a_busy_warehouse_is_left_alone(wh, seeds):
    (r,) = ingest_paths(wh, [seeds["audit"]])
    sha = r.sha256
    holder = subprocess.Popen(  # another process writing the warehouse
        [sys.executable, "-c", "import sys, duckdb; c = duckdb.connect(sys.argv[1]); "
         "print('ready', flush=True); sys.stdin.read()", str(wh.warehouse)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with dg.instance_for_test() as inst:
            res = observe.observe(inst, wh, None)
            assert isinstance(res, dg.SkipReason) and "being written" in res.skip_message
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with dg.instance_for_test() as inst:  # once it is done, the next tick reports the run
        observe.observe(inst, wh, None)
        key = partition_key(sha, Path(r.path).name)
        for spec in RAW_SPECS:  # the run, on every raw asset
            assert set(inst.get_materialized_partitions(spec.key)) == {key}, spec.key


def _stale(inst, graph) -> dict[str, str]:
    """The stale status of every model and the snapshot, as the UI computes it."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._core.loader import LoadingContextForTest

    resolver = CachingStaleStatusResolver(inst, graph, LoadingContextForTest(inst))
    return {k.to_user_string(): resolver.get_status(k).value for k in graph.get_all_asset_keys()
            if k.path[0] in ("staging", "marts", "snapshot")}


def test_cli_work_reported_is_not_stale_and_has_the_build_numbers(wh, seeds):
    """Issue 25: `pwh ingest` + `pwh build` reported by the sensor is FRESH (events in dependency
    order, with data versions and code versions), and a reported build carries the numbers a
    Dagster build plots (verdict counts)."""
    from warehouse.serving import snapshot

    ingest_paths(wh, [seeds["profile"], seeds["audit"]])
    with db.writer(wh.warehouse) as con:  # pwh build (which publishes the snapshot)
        models.build(con, models.load_project())
        snapshot.publish(wh, con)
    defs = _defs(str(wh.warehouse))
    graph = defs.resolve_asset_graph()
    with dg.instance_for_test() as inst:
        observe.observe(inst, wh, None, graph)
        status = _stale(inst, graph)
        assert status and set(status.values()) == {"FRESH"}, {k: v for k, v in status.items() if v != "FRESH"}
        snap = inst.get_latest_materialization_event(dg.AssetKey(["snapshot", "current"]))
        assert snap is not None and snap.asset_materialization.metadata["version"].value
        trends = inst.get_latest_materialization_event(dg.AssetKey(["marts", "kernel_trends"]))
        md = trends.asset_materialization.metadata
        assert {"regressions", "improvements", "inconclusive", "dagster/row_count"} <= set(md)
        assert trends.asset_materialization.tags["dagster/code_version"] == graph.get(
            dg.AssetKey(["marts", "kernel_trends"])).code_version
        # events in dependency order: every model after the models it reads
        stored = {}
        for key in graph.get_all_asset_keys():
            rec = inst.fetch_materializations(key, limit=1).records
            if rec and key.path[0] in ("staging", "marts", "snapshot"):
                stored[key] = rec[0].storage_id
        assert len(stored) == len(status)
        for key, sid in stored.items():
            for parent in graph.get(key).parent_keys:
                if parent in stored:
                    assert stored[parent] < sid, (parent, key)
        # a new run ingested outside Dagster, not built yet: the models are stale, truthfully
        seeds["profile"].write_bytes(seeds["profile"].read_bytes().replace(b"{", b"{ ", 1))
        ingest_paths(wh, [seeds["profile"]])
        observe.observe(inst, wh, None, graph)
        assert _stale(inst, graph)["staging/runs"] == "STALE"


def test_one_look_at_a_time(wh, seeds):
    """The daemon gives up on a tick after 60 s while the code server goes on with it: a tick
    that comes while a look is still being reported skips (nothing read, nothing reported twice,
    the cursor kept by the sensor) instead of starting the same look beside it."""
    (r,) = ingest_paths(wh, [seeds["audit"]])
    key = partition_key(r.sha256, Path(r.path).name)
    with dg.instance_for_test() as inst:
        assert observe._LOOKING.acquire(blocking=False)  # a look in progress
        try:
            res = observe.observe(inst, wh, None)
        finally:
            observe._LOOKING.release()
        assert isinstance(res, dg.SkipReason) and "still reporting" in res.skip_message
        assert " s ago" in res.skip_message  # how long: a stuck look shows as one
        assert inst.get_dynamic_partitions("run_files") == []
        observe.observe(inst, wh, None)  # the look done: the next tick reports the run, once
        recs = inst.fetch_materializations(dg.AssetKey(["raw", "files"]), limit=10).records
        assert [rec.partition_key for rec in recs] == [key]


def test_one_look_at_a_time_across_processes(wh, seeds):
    """A code server restarted while the old one still reports a look: the new process skips
    (its per-process lock knows nothing of the old one) while the lock beside the instance is
    held, and reports once it is released."""
    import fcntl
    import os

    (r,) = ingest_paths(wh, [seeds["audit"]])
    key = partition_key(r.sha256, Path(r.path).name)
    with dg.instance_for_test() as inst:
        # another open file description: flock conflicts with it as with another process
        fd = os.open(os.path.join(inst.root_directory, observe._LOCK_NAME),
                     os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            res = observe.observe(inst, wh, None)
        finally:
            os.close(fd)
        assert isinstance(res, dg.SkipReason) and "another process" in res.skip_message
        assert inst.get_dynamic_partitions("run_files") == []
        assert observe._LOOKING.acquire(blocking=False)  # the per-process lock was released
        observe._LOOKING.release()
        observe.observe(inst, wh, None)
        recs = inst.fetch_materializations(dg.AssetKey(["raw", "files"]), limit=10).records
        assert [rec.partition_key for rec in recs] == [key]


def _runless(inst) -> list[tuple]:
    """Every event the sensor wrote, in storage order, without its wall-clock time."""
    out = []
    for e in inst.all_logs(""):  # runless events
        de = e.dagster_event
        data = de.event_specific_data
        evt = getattr(data, "materialization", data)
        md = {k: repr(getattr(v, "value", v)) for k, v in (evt.metadata or {}).items()}
        out.append((de.event_type_value, de.asset_key.to_user_string() if de.asset_key else "",
                    getattr(evt, "partition", None), getattr(evt, "check_name", ""),
                    getattr(evt, "description", ""), sorted((getattr(evt, "tags", None) or {}
                                                             ).items()), sorted(md.items())))
    return out


def test_a_history_longer_than_a_tick_is_reported_over_ticks_as_one_look(wh, seeds):
    """The first look at a long history (make demo: ~5,000 events) outlasted the daemon's 60 s
    tick: its cursor was lost. A tick now reports whole runs up to its budget and the next one
    goes on after them; the checks, models and snapshot come once the raw partitions are caught
    up. Over several ticks the events are those of one unbounded look, event for event, and a
    tick whose cursor is lost (the daemon gave up on it) is not reported again."""
    from pipelines.raw import RAW_TABLES
    from warehouse.serving import snapshot

    files = [seeds["profile"], seeds["audit"]]
    for i in (1, 2):  # two more runs: other bytes, other names
        for f in (seeds["profile"], seeds["audit"]):
            copy = f.with_name(f"{f.stem}-{i}{f.suffix}")
            copy.write_bytes(f.read_bytes().replace(b"{", b"{" + b" " * i, 1))
            files.append(copy)
    results = ingest_paths(wh, files)
    assert len({r.sha256 for r in results}) == 6
    with db.writer(wh.warehouse) as con:  # pwh build (and its snapshot), then pwh check
        models.build(con, models.load_project())
        snapshot.publish(wh, con)
        wchecks.record_results(con, wchecks.validate_runs(con, sorted(r.sha256 for r in results)))
    graph = _defs(str(wh.warehouse)).resolve_asset_graph()
    per_run = len(RAW_TABLES)
    with dg.instance_for_test() as one, dg.instance_for_test() as ticks:
        res = observe.observe(one, wh, None, graph, max_events=10**6, budget_s=10**6)
        assert "caught up" in res.skip_reason.skip_message
        whole = _runless(one)
        assert len(whole) > 6 * per_run  # raw partitions, then checks, models, snapshot
        # two runs a tick
        cursor, said, sizes = None, [], []
        for tick in range(10):
            before = len(_runless(ticks))
            res = observe.observe(ticks, wh, cursor, graph, max_events=2 * per_run,
                                  budget_s=10**6)
            if tick == 1:  # the daemon gave up on this tick: its cursor is lost, and the
                # next tick starts from the last one committed: no run is reported twice
                assert len(_runless(ticks)) - before == 2 * per_run
                res = observe.observe(ticks, wh, cursor, graph, max_events=2 * per_run,
                                      budget_s=10**6)
            if isinstance(res, dg.SkipReason):
                said.append(res.skip_message)
                break
            said.append(res.skip_reason.skip_message)
            sizes.append(len(_runless(ticks)) - before)
            cursor, last = res.cursor, cursor
        assert sizes[:2] == [2 * per_run, 4 * per_run] and len(sizes) == 3, (sizes, said)
        assert "(2 of 6 caught up); 4 run(s) left" in said[0]
        assert "partitions of 2 run(s) (6 of 6 caught up); any new check results, models and " \
            "snapshot next" in said[1]
        assert "check result(s)" in said[2] and "model(s), the snapshot; caught up" in said[2]
        assert "not changed" in said[3]
        assert _runless(ticks) == whole
        # the tick that caught up lost its cursor too: its check results, models and snapshot
        # are not reported again either
        again = observe.observe(ticks, wh, last, graph, max_events=2 * per_run, budget_s=10**6)
        assert "caught up: no new check results" in again.skip_reason.skip_message
        assert _runless(ticks) == whole
        assert set(ticks.get_dynamic_partitions("run_files")) == set(
            one.get_dynamic_partitions("run_files"))
        # a caught-up cursor: no mark of a catch-up; the watermarks and the digest of the runs
        # up to them
        done = json.loads(cursor)
        assert set(done) == {"v", "sig", "ingested", "validated", "built", "derived", "seen"}
        assert done["seen"][0] == 6
        # the cursor of an earlier version (no digest: what it saw is unknown) looks at every
        # run once, and reports nothing again
        old = {k: done[k] for k in ("v", "ingested", "validated", "built")}
        res = observe.observe(ticks, wh, json.dumps(old), graph)
        said = res.skip_reason.skip_message
        assert "every run looked at" in said and "nothing done outside Dagster" in said, said
        assert _runless(ticks) == whole
        assert json.loads(res.cursor)["seen"] == done["seen"]


def _evaluations(inst, key) -> list:
    recs = inst.event_log_storage.get_asset_check_execution_history(key, limit=50)
    return [r.event.dagster_event.event_specific_data for r in recs if r.event]


def test_a_lost_tick_is_not_reported_again_when_a_run_came_since(wh, seeds):
    """The tick that caught up reported the check results, then lost its cursor (the daemon
    gave up on it, the process died); a run ingested before the next tick made that tick's
    look other watermarks, and every check result was reported a second time."""
    first = ingest_paths(wh, [seeds["profile"], seeds["audit"]])
    with db.writer(wh.warehouse) as con:  # pwh check
        wchecks.record_results(con, wchecks.validate_runs(con, sorted(r.sha256 for r in first)))
    graph = _defs(str(wh.warehouse)).resolve_asset_graph()
    keys = [dg.AssetCheckKey(dg.AssetKey(s.table.split(".")), check_name(s))
            for s in wchecks.load_suites()]
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph)
        assert "check result(s)" in res.skip_reason.skip_message
        validated = {k: len([e for e in _evaluations(inst, k)
                             if e.metadata["runs_validated"].value]) for k in keys}
        assert any(validated.values())
        # its cursor is lost; a run is ingested (not validated yet) before the next tick
        seeds["profile"].write_bytes(seeds["profile"].read_bytes().replace(b"{", b"{ ", 1))
        (new,) = ingest_paths(wh, [seeds["profile"]])
        again = observe.observe(inst, wh, None, graph)
        said = again.skip_reason.skip_message
        assert "the raw partitions of 1 run(s)" in said, said
        assert partition_key(new.sha256, Path(new.path).name) in set(
            inst.get_materialized_partitions(dg.AssetKey(["raw", "files"])))
        # the validations reported already are not reported again
        assert {k: len([e for e in _evaluations(inst, k) if e.metadata["runs_validated"].value])
                for k in keys} == validated, said


def _copies(seeds, tag: str, n: int, first: int = 1) -> list[Path]:
    """``n`` more runs of the profile seed: other bytes (``first``...), other names."""
    out = []
    for i in range(first, first + n):
        f = seeds["profile"]
        copy = f.with_name(f"{f.stem}-{tag}{i}{f.suffix}")
        copy.write_bytes(f.read_bytes().replace(b"{", b"{" + b" " * i, 1))
        out.append(copy)
    return out


def test_a_warehouse_replaced_while_catching_up_loses_no_run(wh, seeds, tmp_path):
    """The ticks catching up skipped every run ingested before the last run they reported; a
    warehouse replaced meanwhile (a backup restored, another machine's warehouse) holds runs
    of that period they never reported: they were never reported at all (one unbounded look
    reports them). (A run whose ingestion time is before that mark, the clock stepped back,
    was lost the same way.)"""
    import shutil

    from pipelines.raw import RAW_TABLES
    from warehouse.config import settings

    other = settings(tmp_path / "other" / "warehouse.duckdb")
    (early,) = ingest_paths(other, _copies(seeds, "b", 1, first=10))  # the other one's: ingested first
    ingest_paths(wh, _copies(seeds, "a", 4))
    graph = _defs(str(wh.warehouse)).resolve_asset_graph()
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph, max_events=2 * len(RAW_TABLES),
                              budget_s=10**6)
        assert "(2 of 4 caught up)" in res.skip_reason.skip_message
        wal = wh.warehouse.with_name(wh.warehouse.name + ".wal")
        wal.unlink(missing_ok=True)
        shutil.copy(other.warehouse, wh.warehouse)  # replaced mid catch-up
        cursor = res.cursor
        for _ in range(5):
            res = observe.observe(inst, wh, cursor, graph, max_events=2 * len(RAW_TABLES),
                                  budget_s=10**6)
            if isinstance(res, dg.SkipReason):
                break
            cursor = res.cursor
        assert partition_key(early.sha256, Path(early.path).name) in set(
            inst.get_materialized_partitions(dg.AssetKey(["raw", "files"])))


def test_a_catch_up_with_nothing_else_to_report_says_it_caught_up(wh, seeds):
    """The tick that spent its budget on the last run says the check results, models and
    snapshot come next; with none of them, the next tick said "nothing done outside Dagster"
    after the ticks before had reported runs done outside Dagster."""
    from pipelines.raw import RAW_TABLES

    ingest_paths(wh, [seeds["profile"], seeds["audit"]])  # no check, no build
    graph = _defs(str(wh.warehouse)).resolve_asset_graph()
    with dg.instance_for_test() as inst:
        res = observe.observe(inst, wh, None, graph, max_events=2 * len(RAW_TABLES),
                              budget_s=10**6)
        said = res.skip_reason.skip_message
        assert "(2 of 2 caught up); any new check results, models and snapshot next" in said
        res = observe.observe(inst, wh, res.cursor, graph, max_events=2 * len(RAW_TABLES),
                              budget_s=10**6)
        said = res.skip_reason.skip_message
        assert said.startswith("caught up: no new check results"), said
        assert "raw" not in json.loads(res.cursor)
