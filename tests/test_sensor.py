"""The landing sensor, tick by tick (no run executed here; see test_sensor_e2e.py)."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines import sensors
from pipelines.definitions import build_definitions
from pipelines.raw import partition_key
from pipelines.resources import WarehouseResource
from warehouse.ingesting.landing import staged_identity, staged_meta_path, staged_path

LOG = logging.getLogger("test_sensor")
HOUR_AGO = time.time() - 3600


@pytest.fixture(autouse=True)
def _slow_machine(monkeypatch):
    """A fresh file counts as being written for 10 minutes here (default 10 s), however slow the
    machine is between writing it and the tick; the files meant to be settled are an hour old."""
    monkeypatch.setattr(sensors, "SETTLE_SECONDS", 600)


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
    """(files staged this tick {landing file: sha}, new cursor, pending files)."""
    t = sensors.evaluate(landing, wh, cursor, LOG)
    return t.staged, t.cursor, t.pending


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_new_stable_files_are_staged_under_their_sha256(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    a = _drop(landing / "vae", seeds["audit"])
    p = _drop(landing, seeds["profile"])
    staged, cursor, pending = _tick(wh, landing)
    assert staged == {"vae/" + a.name: _sha(a), p.name: _sha(p)} and not pending
    for rel, sha in staged.items():
        assert staged_path(wh, sha).read_bytes() == (landing / rel).read_bytes()
    meta = json.loads(staged_meta_path(wh, _sha(a)).read_text())
    assert meta["series"] == "vae"  # a sub-folder names the series by default
    assert meta["original_path"] == str((landing / "vae" / a.name).resolve())
    # a second tick stages nothing, and does not hash the files again
    staged2, cursor2, _ = _tick(wh, landing, cursor)
    assert staged2 == {}


def test_the_cursor_stays_small_whatever_the_landing_folder_holds(wh, seeds, tmp_path,
                                                                 monkeypatch):
    landing = tmp_path / "landing"
    # every file inside the margin whatever the load (dropping 40 files may take seconds on a
    # busy machine; the default margin is 2 s)
    monkeypatch.setattr(sensors, "WATERMARK_MARGIN_NS", 3600 * 10**9)
    for i in range(40):
        _drop(landing, seeds["profile"], f"run_{i:03}.json")
    staged, cursor, _ = _tick(wh, landing)
    assert len(staged) == 40
    assert json.loads(cursor)["pending"] == {}
    cur = json.loads(cursor)
    assert len(cur["recent"]) == 40  # staged within the watermark's margin: not hashed again
    staged, cursor, _ = _tick(wh, landing, cursor)
    assert staged == {}
    monkeypatch.setattr(sensors, "WATERMARK_MARGIN_NS", 0)  # a tick once the margin is past
    staged, cursor, _ = _tick(wh, landing, cursor)
    assert staged == {} and len(cursor) < 200
    # a file moved in later keeps its old mtime, but its inode change time is new: seen
    src = tmp_path / "elsewhere.json"
    shutil.copy(seeds["audit"], src)
    _old(src)
    old_cursor = json.loads(cursor)
    old_cursor["since"] = time.time_ns()  # as if the tick ran just before the move
    time.sleep(0.05)  # past the file system's coarse clock
    src.rename(landing / "moved.json")
    staged, cursor, _ = _tick(wh, landing, json.dumps(old_cursor))
    assert staged == {"moved.json": _sha(seeds["audit"])}


def test_partial_and_hidden_files_are_never_picked(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    for name in ("run.json.tmp", "run.json.part", "run.partial", ".hidden.json",
                 "x.json.meta.json", "old.json.error.json"):
        _drop(landing, seeds["profile"], name)
    _drop(landing / ".staging", seeds["audit"])  # hidden folder: not entered
    staged, _, pending = _tick(wh, landing)
    assert (staged, pending) == ({}, [])


def test_files_still_being_written_wait_until_stable(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    data = seeds["profile"].read_bytes()
    f = landing / "growing.json"
    landing.mkdir()
    f.write_bytes(data[: len(data) // 2])  # fresh mtime: a writer is still at it
    staged, cursor, pending = _tick(wh, landing)
    assert staged == {} and pending == ["growing.json"]
    with open(f, "ab") as fh:
        fh.write(data[len(data) // 2: len(data) * 3 // 4])
    staged, cursor, pending = _tick(wh, landing, cursor)
    assert staged == {} and pending == ["growing.json"]  # size changed since the last tick
    with open(f, "ab") as fh:
        fh.write(data[len(data) * 3 // 4:])
    staged, cursor, pending = _tick(wh, landing, cursor)
    assert staged == {}  # changed again
    staged, cursor, pending = _tick(wh, landing, cursor)
    assert staged == {"growing.json": hashlib.sha256(data).hexdigest()} and pending == []
    assert not list(wh.archive_dir.glob(".*.tmp"))


def test_a_sidecar_written_after_its_file_is_waited_for(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    f = _drop(landing, seeds["audit"])
    side = landing / (f.name + ".meta.json")
    side.write_text('{"series": "vae-decoder", "label": "abc123"}')  # fresh
    staged, cursor, pending = _tick(wh, landing)
    assert staged == {} and pending == [f.name]
    staged, _, _ = _tick(wh, landing, cursor)
    (sha,) = staged.values()
    meta = json.loads(staged_meta_path(wh, sha).read_text())
    assert (meta["series"], meta["label"], meta["source"]) == ("vae-decoder", "abc123", "sidecar")


def test_a_file_rewritten_in_place_is_staged_again(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    f = _drop(landing, seeds["profile"], "run.json")
    staged, cursor, _ = _tick(wh, landing)
    time.sleep(0.05)  # past the file system's coarse clock
    f.write_bytes(seeds["audit"].read_bytes())  # fresh mtime: being written
    staged2, cursor, pending = _tick(wh, landing, cursor)
    assert staged2 == {} and pending == ["run.json"]  # wait until it stops changing
    staged3, _, _ = _tick(wh, landing, cursor)
    assert staged3 == {"run.json": _sha(f)} != staged


@functools.cache
def _defs(warehouse: str, landing: str):
    return build_definitions(warehouse, landing)


def _sensor(inst, wh, landing, cursor=None):
    defs = _defs(str(wh.warehouse), str(landing))
    ctx = dg.build_sensor_context(instance=inst, cursor=cursor, resources={
        "warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))})
    return defs.get_sensor_def("landing_sensor")(ctx)


def _add(inst, res):
    for req in res.dynamic_partitions_requests:
        inst.add_dynamic_partitions(req.partitions_def_name, req.partition_keys)


def test_one_run_per_tick_over_the_new_partitions_and_exactly_once(wh, seeds, tmp_path):
    landing = tmp_path / "landing"
    with dg.instance_for_test() as inst:
        res = _sensor(inst, wh, landing)
        assert res.skip_reason and str(landing) in res.skip_reason.skip_message
        _drop(landing, seeds["audit"])
        _drop(landing, seeds["profile"], "copy/a.json")
        _drop(landing, seeds["profile"], "copy/b.json")  # the same bytes: one partition
        (landing / "half.json").write_text('{"rows": [')  # fresh: waits for a tick
        res = _sensor(inst, wh, landing, res.cursor)
        (req,) = res.run_requests
        (add,) = res.dynamic_partitions_requests
        keys = list(add.partition_keys)
        assert add.partitions_def_name == "run_files"
        shas = {_sha(seeds["audit"]): seeds["audit"], _sha(seeds["profile"]): "a.json"}
        # readable keys: the file's stem and the SHA-256's first 12 digits (issue 12)
        assert f"a-{_sha(seeds['profile'])[:12]}" in keys
        assert sorted(keys) == sorted(partition_key(sha, Path(name).name)
                                      for sha, name in shas.items())
        assert req.job_name == "ingest_file" and req.tags["pwh/files"] == "2"
        cfg = req.run_config["ops"]["raw_files"]["config"]
        assert cfg["keys"] == keys and sorted(cfg["files"]) == sorted(shas)
        assert [k[-12:] for k in keys] == [s[:12] for s in cfg["files"]]
        _add(inst, res)
        # unchanged for a whole tick: a file is taken as complete (bad ones fail their run)
        res = _sensor(inst, wh, landing, res.cursor)
        (req2,) = res.run_requests
        assert req2.tags["pwh/landing_file"] == "half.json" and req2.run_key != req.run_key
        _add(inst, res)
        # the same bytes copied again to the same place (the same identity), a tick later or a
        # restarted daemon (cursor lost): already partitions, never requested again
        _drop(landing, seeds["audit"])
        res = _sensor(inst, wh, landing, res.cursor)
        assert not res.run_requests and not res.dynamic_partitions_requests
        res = _sensor(inst, wh, landing, None)
        assert not res.run_requests and res.skip_reason
        # under a new name: a new identity; a partition the warehouse holds no run of (its run
        # was never launched here; refused, in the warehouse of test_landing_jobs) is staged
        # again with it and requested again, once, under a run key of that identity
        _drop(landing, seeds["audit"], "again.json")
        res = _sensor(inst, wh, landing, res.cursor)
        (req3,) = res.run_requests
        assert not res.dynamic_partitions_requests
        assert req3.run_config["ops"]["raw_files"]["config"]["files"] == [_sha(seeds["audit"])]
        assert req3.run_key not in (req.run_key, req2.run_key)
        assert staged_identity(wh, _sha(seeds["audit"]))["label"] == "again"
        res = _sensor(inst, wh, landing, res.cursor)
        assert not res.run_requests
        res = _sensor(inst, wh, landing, None)  # the first copy's identity was staged before
        assert not res.run_requests and res.skip_reason


@pytest.mark.parametrize("value,expected", [(None, "STOPPED"), ("on", "RUNNING"),
                                            ("off", "STOPPED")])
def test_automation_is_off_unless_asked(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("PWH_AUTOMATION", raising=False)
    else:
        monkeypatch.setenv("PWH_AUTOMATION", value)
    assert sensors.automation_status(dg.DefaultScheduleStatus).name == expected


def _ingests(res):
    return [r for r in res.run_requests or [] if r.job_name == "ingest_file"]


def test_files_a_replaced_warehouse_lacks_are_ingested_again(wh, seeds, tmp_path):
    """`make demo` re-run or a backup restored while the Dagster instance and the landing
    folder persist: the landing files the new warehouse does not hold are ingested again
    (issue 12); those it holds are not."""
    landing = tmp_path / "landing"
    defs = _defs(str(wh.warehouse), str(landing))
    ingest = defs.resolve_job_def("ingest_file")
    with dg.instance_for_test() as inst:
        _drop(landing, seeds["audit"])
        res = _sensor(inst, wh, landing)
        _add(inst, res)
        (req,) = res.run_requests
        assert ingest.execute_in_process(instance=inst, run_config=req.run_config).success
        res = _sensor(inst, wh, landing, res.cursor)
        assert not _ingests(res)  # the warehouse holds it
        # the warehouse is replaced by another one (demo re-run): a different file in it
        for p in wh.warehouse.parent.glob(wh.warehouse.name + "*"):
            p.unlink()
        other = tmp_path / "other" / "p.json"
        other.parent.mkdir()
        shutil.copy(seeds["profile"], other)
        from warehouse.ingesting.landing import ingest_staged_batch, stage

        ingest_staged_batch(wh, [stage(wh, other)])
        res = _sensor(inst, wh, landing, res.cursor)
        (again,) = _ingests(res)
        assert again.job_name == "ingest_file" and again.run_key != req.run_key
        assert again.run_config["ops"]["raw_files"]["config"]["files"] == [_sha(seeds["audit"])]
        assert not res.dynamic_partitions_requests  # the partition exists already
        assert ingest.execute_in_process(instance=inst, run_config=again.run_config).success
        res = _sensor(inst, wh, landing, res.cursor)
        assert not _ingests(res)
        res = _sensor(inst, wh, landing, None)  # a lost cursor: it is held now, not again
        assert not _ingests(res)


def test_partitions_keyed_by_the_whole_sha256_still_count(wh, seeds, tmp_path):
    """An instance from before readable keys (partition = the 64-digit SHA-256): its files are
    partitions already, never requested again; a new file gets a readable key."""
    landing = tmp_path / "landing"
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("run_files", [_sha(seeds["audit"])])  # the old key
        _drop(landing, seeds["audit"])
        _drop(landing, seeds["profile"])
        res = _sensor(inst, wh, landing)
        (req,) = _ingests(res)
        (add,) = res.dynamic_partitions_requests
        assert add.partition_keys == [partition_key(_sha(seeds["profile"]),
                                                    seeds["profile"].name)]
        assert req.run_config["ops"]["raw_files"]["config"]["files"] == [_sha(seeds["profile"])]
