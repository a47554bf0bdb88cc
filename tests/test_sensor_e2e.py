"""End to end on a throw-away instance: files dropped into a landing folder -> sensor ticks ->
one ingestion run per tick (raw checks included) -> the refresh the sensor requests -> marts.

The landing folder gets the two seeds, a generated history (``warehouse.synth``, sidecars
included), one broken file and one file still being written. Runs execute in process, tagged
like the daemon tags them (``dagster/run_key``), so run-key de-duplication can be checked.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines import sensors
from pipelines.definitions import build_definitions
from pipelines.resources import WarehouseResource
from tests.conftest import ro
from tests.test_dagster_models import check_model_numbers
from warehouse import synth
from warehouse.ingesting.loader import sha256_file

HOUR_AGO = time.time() - 3600


def _age(path: Path) -> None:
    os.utime(path, (HOUR_AGO, HOUR_AGO))


class Daemon:
    """The parts of the sensor daemon this test needs: ticks with a persisted cursor, run-key
    de-duplication, partitions added before runs, runs executed (in process)."""

    def __init__(self, defs, instance, resources):
        self.defs, self.instance, self.resources = defs, instance, resources
        self.sensor = defs.get_sensor_def("landing_sensor")
        self.cursor = None
        self.launched: dict[str, dg.ExecuteInProcessResult] = {}
        self.requested: set[str] = set()

    def tick(self):
        ctx = dg.build_sensor_context(instance=self.instance, cursor=self.cursor,
                                      resources=self.resources)
        res = self.sensor(ctx)
        self.cursor = res.cursor
        for req in res.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(req.partitions_def_name, req.partition_keys)
        # the daemon launches a request at once and never twice for one run key
        new = [r for r in res.run_requests if r.run_key not in self.requested]
        self.requested.update(r.run_key for r in new)
        return res, new

    def run(self, requests):
        for req in requests:
            job = self.defs.resolve_job_def(req.job_name)
            self.launched[req.run_key] = job.execute_in_process(
                instance=self.instance, raise_on_error=False, run_config=req.run_config,
                tags={**req.tags, "dagster/run_key": req.run_key,
                      "dagster/sensor_name": "landing_sensor"})


def _failed_partitions(instance, key):
    from dagster._core.storage.partition_status_cache import (
        get_and_update_asset_status_cache_value,
    )

    from pipelines.raw import run_files

    v = get_and_update_asset_status_cache_value(instance, dg.AssetKey(["raw", key]), run_files)
    if v is None or not v.serialized_failed_partition_subset:
        return set()
    return set(v.deserialize_failed_partition_subsets(run_files).get_partition_keys())


def _partitions(instance, key):
    """Partitions of ``raw/<key>`` materialised."""
    return set(instance.get_materialized_partitions(dg.AssetKey(["raw", key])))


@pytest.mark.slow
def test_landing_folder_to_marts(wh, seeds, tmp_path, monkeypatch):
    # a fresh file counts as being written for 10 minutes here, however slow the machine is
    monkeypatch.setattr(sensors, "SETTLE_SECONDS", 600)
    landing = tmp_path / "landing"
    # the seeds, and a generated history of both formats (with sidecars), all complete
    shutil.copytree(seeds["profile"].parent, landing / "seeds")
    spec = synth.HistorySpec(labels=2, repeats=2, single_repeat_every=0, plants=(),
                             series=(synth.SeriesSpec("decoder-tile", "tile_profile"),
                                     synth.SeriesSpec("vae-conv-audit", "conv_audit")))
    synth.generate(tmp_path / "hist", spec)
    shutil.copytree(tmp_path / "hist" / "runs", landing, dirs_exist_ok=True)
    good = sorted(p for p in landing.rglob("*.json") if not p.name.endswith(".meta.json"))
    assert len(good) == 2 + 8
    # one broken file, and one still being written (the first half of a new run)
    broken = landing / "broken" / "truncated.json"
    broken.parent.mkdir()
    broken.write_bytes(seeds["audit"].read_bytes()[:500])
    for p in landing.rglob("*"):
        if p.is_file():
            _age(p)
    late_src = next(p for p in good if p.parent.name == "decoder-tile")
    full = late_src.read_bytes().replace(b"{", b"{ ", 1)  # new bytes: a run not seen yet
    late = landing / "incoming" / "late.json"
    late.parent.mkdir()
    side = late.with_name("late.json.meta.json")  # its run identity: one more repeat
    shutil.copy(late_src.with_name(late_src.name + ".meta.json"), side)
    _age(side)
    late.write_bytes(full[: len(full) // 2])  # fresh mtime: its writer is still at work

    defs = build_definitions(str(wh.warehouse), str(landing))
    resources = {"warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))}
    with dg.instance_for_test() as instance:
        daemon = Daemon(defs, instance, resources)

        # tick 1: every complete file, in ONE run over their partitions; the half-written one
        # is left alone
        res, new = daemon.tick()
        (batch,) = new
        assert batch.job_name == "ingest_file" and batch.tags["pwh/files"] == str(len(good) + 1)
        keys = instance.get_dynamic_partitions("run_files")
        good_keys = {sha256_file(p.read_bytes()) for p in good}
        bad_key = sha256_file(broken.read_bytes())
        # readable partition keys (stem-<SHA-256 prefix>); the identity is the SHA-256
        part = {k.rsplit("-", 1)[1]: k for k in keys}
        assert set(part) == {s[:12] for s in good_keys | {bad_key}}
        assert len(keys) == len(good) + 1 and part[bad_key[:12]] == f"truncated-{bad_key[:12]}"
        cfg = batch.run_config["ops"]["raw_files"]["config"]
        assert cfg["keys"] == keys and set(cfg["files"]) == good_keys | {bad_key}
        good_parts = {part[s[:12]] for s in good_keys}
        daemon.run(new)
        run = daemon.launched[batch.run_key]
        # the bad file fails the run, with the loader's message first; every good file is in
        assert not run.success
        failure = next(e for e in run.all_events if e.event_type_value == "STEP_FAILURE")
        error = failure.step_failure_data.error.message
        assert str(broken.resolve()) in error and "truncated.json" in error
        assert error.index("truncated.json") < 400
        # one failed step, no cascade of "Dependencies for step … failed" lines below it
        assert not any("Dependencies for step" in (e.message or "") for e in run.all_events)
        assert [e.step_key for e in run.all_events
                if e.event_type_value == "STEP_FAILURE"] == ["raw_files"]
        quarantined = list(wh.quarantine_dir.glob("*.error.json"))
        assert len(quarantined) == 1 and str(broken.resolve()) in quarantined[0].read_text()
        for table in ("files", "audit_rows", "profile_samples"):
            assert _partitions(instance, table) == good_parts  # the bad one is not materialised
        # ...but counts as failed on raw/files, the files' asset (issue 25), linked to this
        # run; the good ones do not, and the tables' assets are not drawn red for it
        assert _failed_partitions(instance, "files") == {part[bad_key[:12]]}
        assert not _failed_partitions(instance, "audit_rows")
        assert not _failed_partitions(instance, "profile_samples")
        assert error.splitlines()[0] == "truncated.json rejected"  # the headline, no class name
        assert "Stack Trace" not in str(failure.step_failure_data.error)  # no Dagster frames
        # one evaluation per raw check for the batch (GX once), all passed; each partition's
        # own outcome is on its raw/files materialisation
        check_keys = [k for k in defs.resolve_asset_graph().asset_check_keys
                      if k.asset_key.path[0] == "raw"]
        evals = [e.asset_check_evaluation_data for e in run.all_events
                 if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert sorted(e.asset_check_key for e in evals) == sorted(check_keys)
        assert all(e.passed for e in evals)
        assert {e.metadata["runs_validated"].value for e in evals} == {len(good_keys)}
        mats = instance.fetch_materializations(dg.AssetKey(["raw", "files"]), limit=100).records
        by_key = {m.partition_key: m.asset_materialization.metadata for m in mats}
        assert {by_key[k]["raw_checks"].value for k in good_parts} == {"passed"}
        assert {by_key[k]["sha256"].value for k in good_parts} == good_keys
        seed = part[sha256_file(seeds["audit"].read_bytes())[:12]]
        assert by_key[seed]["file_name"].value == seeds["audit"].name  # never the archive name

        # tick 2: nothing new; the half-written file grew, so it is still being written. The
        # good partitions passed their checks: the sensor asks for a refresh of the models
        with open(late, "ab") as fh:
            fh.write(full[len(full) // 2: len(full) * 3 // 4])
        res, new = daemon.tick()
        (refresh_req,) = new
        assert refresh_req.job_name == "refresh_models"
        assert refresh_req.tags["pwh/new_partitions"] == str(len(good_keys))
        assert len(json.loads(res.cursor)["pending"]) == 1  # the cursor: pending files only
        with open(late, "ab") as fh:
            fh.write(full[len(full) * 3 // 4:])
        res, new = daemon.tick()
        assert [r.run_key for r in new] == []  # complete now, but changed since the last tick
        assert list(json.loads(res.cursor)["pending"]) == ["incoming/late.json"]
        res, new = daemon.tick()
        (late_req,) = new
        assert late_req.tags["pwh/landing_file"] == "incoming/late.json"
        daemon.run(new)
        assert daemon.launched[late_req.run_key].success

        # a later tick requests nothing but the refresh (once); a restarted daemon (cursor lost,
        # files now old) stages every file again but requests no run: every file ran once
        res, new = daemon.tick()
        (refresh_req,) = new  # a new refresh covers the late file too
        assert refresh_req.job_name == "refresh_models"
        assert refresh_req.tags["pwh/new_partitions"] == str(len(good_keys) + 1)
        assert daemon.tick()[1] == []
        _age(late)
        daemon.cursor = None
        res, new = daemon.tick()
        assert new == [] and [r.job_name for r in res.run_requests] == ["refresh_models"]
        ingested = good_keys | {sha256_file(full)}
        with ro(wh) as con:
            rows = con.execute("SELECT sha256, count(*) FROM raw.files GROUP BY 1").fetchall()
            names = {r[0] for r in con.execute("SELECT file_name FROM raw.files").fetchall()}
        assert {k for k, _ in rows} == ingested and {n for _, n in rows} == {1}
        assert "late.json" in names and not any(n.startswith(tuple("0123456789abcdef")) and
                                                len(n) == 69 for n in names)

        # the refresh request: one run of staging + marts
        daemon.run([refresh_req])
        refresh = daemon.launched[refresh_req.run_key]
        assert refresh.success
        check_model_numbers(refresh, wh)
        sched = next(s for s in defs.schedules if s.name == "refresh_models_schedule")
        again = sched.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert not again.run_requests and "no raw partition" in again.skip_message

    # the marts reflect the new runs
    with ro(wh) as con:
        summary = dict(con.execute("SELECT run_id, series FROM marts.run_summary").fetchall())
        rollup_runs = {r[0] for r in con.execute(
            "SELECT DISTINCT run_id FROM marts.kernel_run_rollup").fetchall()}
        trend_series = {r[0] for r in con.execute(
            "SELECT DISTINCT series FROM marts.kernel_trends").fetchall()}
    assert set(summary) == ingested == rollup_runs
    assert summary[sha256_file(full)] == "decoder-tile"  # run identity from its sidecar
    assert {"decoder-tile", "vae-conv-audit"} <= trend_series
