"""End to end on a throw-away instance: files dropped into a landing folder -> sensor ticks ->
ingestion runs (raw checks included) -> the refresh schedule -> marts.

The landing folder gets the two seeds, a generated history (``warehouse.synth``, sidecars
included), one broken file and one file still being written. Runs execute in process, tagged
like the daemon tags them (``dagster/run_key``), so run-key de-duplication can be checked.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

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

    def tick(self):
        ctx = dg.build_sensor_context(instance=self.instance, cursor=self.cursor,
                                      resources=self.resources)
        res = self.sensor(ctx)
        self.cursor = res.cursor
        for req in res.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(req.partitions_def_name, req.partition_keys)
        new = [r for r in res.run_requests if r.run_key not in self.launched]
        return res, new

    def run(self, requests):
        job = self.defs.resolve_job_def("ingest_file")
        for req in requests:
            self.launched[req.run_key] = job.execute_in_process(
                instance=self.instance, partition_key=req.partition_key, raise_on_error=False,
                tags={**req.tags, "dagster/run_key": req.run_key,
                      "dagster/sensor_name": "landing_sensor"})


@pytest.mark.slow
def test_landing_folder_to_marts(wh, seeds, tmp_path):
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

        # tick 1: every complete file, once; the half-written one is left alone
        res, new = daemon.tick()
        by_file = {r.tags["pwh/landing_file"]: r for r in new}
        assert set(by_file) == {p.relative_to(landing).as_posix() for p in [*good, broken]}
        assert all(r.run_key == r.partition_key == sha256_file(
            (landing / f).read_bytes()) for f, r in by_file.items())
        daemon.run(new)

        good_keys = {sha256_file(p.read_bytes()) for p in good}
        bad_key = sha256_file(broken.read_bytes())
        for key in good_keys:
            assert daemon.launched[key].success, key
        bad_run = daemon.launched[bad_key]
        assert not bad_run.success
        failure = next(e for e in bad_run.all_events if e.event_type_value == "STEP_FAILURE")
        error = failure.step_failure_data.error.message
        assert str(broken.resolve()) in error and "truncated.json" in error
        quarantined = list(wh.quarantine_dir.glob("*.error.json"))
        assert len(quarantined) == 1 and str(broken.resolve()) in quarantined[0].read_text()

        # tick 2: nothing new; the half-written file grew, so it is still being written
        with open(late, "ab") as fh:
            fh.write(full[len(full) // 2: len(full) * 3 // 4])
        res, new = daemon.tick()
        assert new == [] and not res.run_requests
        assert "incoming/late.json" in res.skip_reason.skip_message
        with open(late, "ab") as fh:
            fh.write(full[len(full) * 3 // 4:])
        res, new = daemon.tick()
        assert new == []  # complete now, but changed since the last tick
        res, new = daemon.tick()
        assert [r.tags["pwh/landing_file"] for r in new] == ["incoming/late.json"]
        daemon.run(new)
        assert daemon.launched[sha256_file(full)].success

        # a later tick requests nothing; a restarted daemon (cursor lost, files now old)
        # re-requests only run keys that already ran, which the daemon skips: every file ran
        # exactly once
        res, new = daemon.tick()
        assert new == [] and not res.run_requests
        _age(late)
        daemon.cursor = None
        res, new = daemon.tick()
        assert new == [] and len(res.run_requests) == len(daemon.launched)
        ingested = good_keys | {sha256_file(full)}
        with ro(wh) as con:
            rows = con.execute("SELECT sha256, count(*) FROM raw.files GROUP BY 1").fetchall()
        assert {k for k, _ in rows} == ingested and {n for _, n in rows} == {1}

        # the refresh schedule: new good partitions -> one run of staging + marts
        sched = next(s for s in defs.schedules if s.name == "refresh_models_schedule")
        data = sched.evaluate_tick(dg.build_schedule_context(instance=instance))
        (req,) = data.run_requests
        refresh = defs.resolve_job_def("refresh_models").execute_in_process(
            instance=instance, tags=req.tags, raise_on_error=False)
        assert refresh.success
        check_model_numbers(refresh, wh)
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
