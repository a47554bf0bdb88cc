"""The landing sensor, tick by tick (no run executed here; see test_sensor_e2e.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time

import dagster as dg
import pytest

from pipelines import sensors
from pipelines.definitions import build_definitions
from pipelines.resources import WarehouseResource
from warehouse.ingesting.landing import staged_meta_path, staged_path

LOG = logging.getLogger("test_sensor")
HOUR_AGO = time.time() - 3600


def _old(path, t=HOUR_AGO):
    os.utime(path, (t, t))
    return path


def _drop(landing, src, name=None, *, age=True):
    landing.mkdir(parents=True, exist_ok=True)
    dest = landing / (name or src.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    return _old(dest) if age else dest


def _tick(wh, landing, cursor=None):
    reqs, keys, cur, pending = sensors.evaluate(landing, wh, cursor, LOG)
    return reqs, keys, cur, pending


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_new_stable_files_become_partitions_and_runs_keyed_by_sha256(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    a = _drop(landing / "vae", seeds["audit"])
    p = _drop(landing, seeds["profile"])
    reqs, keys, cursor, pending = _tick(wh, landing)
    assert sorted(keys) == sorted([_sha(a), _sha(p)]) and not pending
    for r in reqs:
        assert r.run_key == r.partition_key  # one run per file, ever
        assert staged_path(wh, r.partition_key).read_bytes() in (a.read_bytes(), p.read_bytes())
    by_file = {r.tags["pwh/landing_file"]: r for r in reqs}
    assert set(by_file) == {"vae/" + a.name, p.name}
    meta = json.loads(staged_meta_path(wh, _sha(a)).read_text())
    assert meta["series"] == "vae"  # a sub-folder names the series by default
    # a second tick requests nothing new, and does not hash the files again
    reqs2, keys2, cursor2, _ = _tick(wh, landing, cursor)
    assert (reqs2, keys2) == ([], [])
    assert json.loads(cursor2) == json.loads(cursor)


def test_partial_and_hidden_files_are_never_picked(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    for name in ("run.json.tmp", "run.json.part", "run.partial", ".hidden.json",
                 "x.json.meta.json", "old.json.error.json"):
        _drop(landing, seeds["profile"], name)
    _drop(landing / ".staging", seeds["audit"])  # hidden folder: not entered
    reqs, keys, _, pending = _tick(wh, landing)
    assert (reqs, keys, pending) == ([], [], [])


def test_files_still_being_written_wait_until_stable(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    data = seeds["profile"].read_bytes()
    f = landing / "growing.json"
    landing.mkdir()
    f.write_bytes(data[: len(data) // 2])  # fresh mtime: a writer is still at it
    reqs, _, cursor, pending = _tick(wh, landing)
    assert reqs == [] and pending == ["growing.json"]
    with open(f, "ab") as fh:
        fh.write(data[len(data) // 2: len(data) * 3 // 4])
    reqs, _, cursor, pending = _tick(wh, landing, cursor)
    assert reqs == [] and pending == ["growing.json"]  # size changed since the last tick
    with open(f, "ab") as fh:
        fh.write(data[len(data) * 3 // 4:])
    reqs, _, cursor, pending = _tick(wh, landing, cursor)
    assert reqs == []  # changed again
    reqs, keys, cursor, pending = _tick(wh, landing, cursor)
    assert keys == [hashlib.sha256(data).hexdigest()] and pending == []  # unchanged: stable
    assert not list(wh.archive_dir.glob(".*.tmp"))


def test_a_sidecar_written_after_its_file_is_waited_for(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    f = _drop(landing, seeds["audit"])
    side = landing / (f.name + ".meta.json")
    side.write_text('{"series": "vae-decoder", "label": "abc123"}')  # fresh
    reqs, _, cursor, pending = _tick(wh, landing)
    assert reqs == [] and pending == [f.name]
    reqs, keys, _, _ = _tick(wh, landing, cursor)
    assert len(reqs) == 1
    meta = json.loads(staged_meta_path(wh, keys[0]).read_text())
    assert (meta["series"], meta["label"], meta["source"]) == ("vae-decoder", "abc123", "sidecar")


def test_same_bytes_twice_is_one_run(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    _drop(landing, seeds["profile"], "a.json")
    _drop(landing, seeds["profile"], "copy/b.json")
    reqs, keys, cursor, _ = _tick(wh, landing)
    assert len(reqs) == len(keys) == 1
    # the same bytes dropped again later: the run key is requested again and Dagster, which
    # never launches two runs with one run key for a sensor, skips it
    _drop(landing, seeds["profile"], "again.json")
    reqs2, _, _, _ = _tick(wh, landing, cursor)
    assert [r.run_key for r in reqs2] == [reqs[0].run_key]


def test_a_file_rewritten_in_place_is_a_new_run(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    f = _drop(landing, seeds["profile"], "run.json")
    _, keys, cursor, _ = _tick(wh, landing)
    f.write_bytes(seeds["audit"].read_bytes())
    _old(f, HOUR_AGO + 60)
    reqs, _, cursor, pending = _tick(wh, landing, cursor)
    assert reqs == [] and pending == ["run.json"]  # changed since the last tick: wait
    reqs, keys2, _, _ = _tick(wh, landing, cursor)
    assert keys2 == [_sha(f)] and keys2 != keys


def test_sensor_definition_reports_partitions_and_skip_reasons(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    defs = build_definitions(str(wh.warehouse), str(landing))
    sensor = defs.get_sensor_def("landing_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # tests never see it run
    with dg.instance_for_test() as inst:
        ctx = dg.build_sensor_context(instance=inst, resources={
            "warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))})
        res = sensor(ctx)
        assert res.skip_reason and str(landing) in res.skip_reason.skip_message
        _drop(landing, seeds["audit"])
        (landing / "half.json").write_text('{"rows": [')
        ctx = dg.build_sensor_context(instance=inst, cursor=res.cursor, resources={
            "warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))})
        res = sensor(ctx)
        assert [r.partition_key for r in res.run_requests] == [_sha(seeds["audit"])]
        (req,) = res.dynamic_partitions_requests
        assert (req.partitions_def_name, list(req.partition_keys)) == \
            ("run_files", [_sha(seeds["audit"])])
        # unchanged for a whole tick: a file is taken as complete (bad ones fail their run)
        ctx = dg.build_sensor_context(instance=inst, cursor=res.cursor, resources={
            "warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))})
        res = sensor(ctx)
        assert [r.tags["pwh/landing_file"] for r in res.run_requests] == ["half.json"]
        ctx = dg.build_sensor_context(instance=inst, cursor=res.cursor, resources={
            "warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))})
        res = sensor(ctx)
        assert not res.run_requests and res.skip_reason


@pytest.mark.parametrize("value,expected", [(None, "STOPPED"), ("on", "RUNNING"),
                                            ("off", "STOPPED")])
def test_automation_is_off_unless_asked(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("PWH_AUTOMATION", raising=False)
    else:
        monkeypatch.setenv("PWH_AUTOMATION", value)
    assert sensors.automation_status(dg.DefaultScheduleStatus).name == expected
