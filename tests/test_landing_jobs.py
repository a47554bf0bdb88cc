"""Jobs of many ranks on the Dagster path (issue 20, items 2 and 7): the Kineto rank files of a
job dropped into a folder of the landing folder form the job ``pwh ingest`` of that folder
forms (the same ``raw.trace_jobs`` rows, series and labels), whether they settle in one sensor
tick or over several; a duplicated or foreign rank is refused naming the file and the rule.

The sensor ticks and the runs it requests execute in process (``Daemon`` of
test_sensor_e2e.py), as the daemon would launch them."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from pipelines import sensors
from pipelines.definitions import build_definitions
from pipelines.resources import WarehouseResource
from tests.conftest import ro
from tests.test_sensor_e2e import Daemon
from tests.test_trace_jobs import trace, write
from warehouse.cli import main
from warehouse.config import settings
from warehouse.ingesting import jobs
from warehouse.ingesting.landing import stage, staged_identity
from warehouse.ingesting.loader import sha256_file

HOUR_AGO = time.time() - 3600


@pytest.fixture(autouse=True)
def _slow_machine(monkeypatch):
    """A fresh file is being written for 10 minutes here, however slow the machine."""
    monkeypatch.setattr(sensors, "SETTLE_SECONDS", 600)


def _old(*paths: Path) -> None:
    for p in paths:
        os.utime(p, (HOUR_AGO, HOUR_AGO))


def runs(s):
    """Each run's identity and its job row (None for a run that is its own job)."""
    with ro(s) as con:
        return con.execute(
            "SELECT f.sha256, f.file_name, f.series, f.label, f.captured_at, j.job, j.rank, "
            "j.world_size, j.job_source FROM raw.files f "
            "LEFT JOIN raw.trace_jobs j ON j.run_id = f.sha256 ORDER BY f.file_name").fetchall()


def pwh_ingest(tmp_path: Path, folder: Path):
    """``pwh ingest FOLDER`` into a warehouse of its own: what the landing path must equal."""
    s = settings(tmp_path / "cli" / "warehouse.duckdb")
    assert main(["--warehouse", str(s.warehouse), "ingest", str(folder)]) == 0
    return runs(s)


@pytest.fixture
def landed(wh, tmp_path):
    """(landing folder, a function running one sensor tick and the ingest runs it requests,
    returning those runs' results)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    defs = build_definitions(str(wh.warehouse), str(landing))
    resources = {"warehouse": WarehouseResource(path=str(wh.warehouse), landing=str(landing))}
    with dg.instance_for_test() as instance:
        daemon = Daemon(defs, instance, resources)

        def tick():
            res, new = daemon.tick()
            # every ingest run the sensor asked for, launched or not (a run key seen before)
            tick.requested = [r for r in res.run_requests if r.job_name == "ingest_file"]
            ingest = [r for r in new if r.job_name == "ingest_file"]
            daemon.run(ingest)
            return [daemon.launched[r.run_key] for r in ingest]

        yield landing, tick


def test_a_folder_dropped_into_landing_is_the_job_pwh_ingest_makes(wh, tmp_path, landed):
    landing, tick = landed
    d = landing / "resnet-job7"
    files = [write(d / (f"rank{r}.pt.trace.json" + (".gz" if r == 1 else "")),
                   trace(r, 8, step_us=150 if r == 3 else 100), gz=r == 1) for r in (0, 1, 3)]
    _old(*files)
    (run,) = tick()
    assert run.success
    got = runs(wh)
    assert [(name, job, rank, world, src, series, label)
            for _, name, series, label, _, job, rank, world, src in got] == [
        (f.name, "resnet-job7", r, 8, "folder", "resnet-job7", "resnet-job7")
        for f, r in zip(files, (0, 1, 3), strict=True)]
    assert got == pwh_ingest(tmp_path, d)  # run ids, names, series, labels, times, job rows
    mats = [e.materialization for e in run.all_events
            if e.event_type_value == "ASSET_MATERIALIZATION"
            and e.materialization.asset_key.path == ["raw", "files"]]
    assert {(m.metadata["job"].value, m.metadata["job_source"].value) for m in mats} == {
        ("resnet-job7", "folder")}


BAD = {  # file (sorted after the job's ranks) -> its distributedInfo's fault, the rule named
    "zz-dup.json": (trace(2, 4, steps=5), "one file per rank of job 'bert-job' (series "
                    "'bert-job', label 'bert-job'): rank 2 is rank2.json (run"),  # other bytes
    "zz-world.json": (trace(3, 8), "whose world_size is 4"),
    "zz-gloo.json": (trace(3, 4, backend="gloo"), 'backend is "nccl" in its rank 0'),
    "zz-past.json": (trace(6, 4), "0 <= rank < world_size, got rank 6 of world_size 4"),
}


def test_rank_files_settling_over_ticks_form_one_job_and_foreign_ranks_are_refused(
        wh, tmp_path, landed):
    landing, tick = landed
    d = landing / "bert-job"
    first = write(d / "rank0.json", trace(0, 4))
    _old(first)
    write(d / "rank2.json", trace(2, 4, step_us=120))  # just written: not settled yet
    (run,) = tick()  # rank 0 alone (pwh ingest of a lone rank file would make no job)
    assert run.success
    assert [(n, job, rank) for _, n, _, _, _, job, rank, *_ in runs(wh)] == [
        ("rank0.json", "bert-job", 0)]
    assert staged_identity(wh, sha256_file(first.read_bytes()))["job"] == "bert-job"
    (run,) = tick()  # rank 2 unchanged since the last tick: settled, it joins rank 0's job
    assert run.success
    joined = runs(wh)
    assert joined == pwh_ingest(tmp_path, d)
    assert [(n, job, rank, src) for _, n, _, _, _, job, rank, _, src in joined] == [
        ("rank0.json", "bert-job", 0, "folder"), ("rank2.json", "bert-job", 2, "folder")]

    # later: a second file of rank 2, and files of other jobs, in the job's folder
    bad = {name: write(d / name, doc) for name, (doc, _) in BAD.items()}
    _old(*bad.values())
    (run,) = tick()
    assert not run.success
    error = next(e for e in run.all_events
                 if e.event_type_value == "STEP_FAILURE").step_failure_data.error.message
    assert error.splitlines()[0] == "; ".join(f"{n} rejected" for n in sorted(BAD))
    with ro(wh) as con:
        errors = dict(con.execute("SELECT original_path, message FROM raw.ingest_errors "
                                  "WHERE error_kind = 'job'").fetchall())
    assert set(errors) == {str(p.resolve()) for p in bad.values()}
    for name, (_, rule) in BAD.items():
        path = str(bad[name].resolve())
        assert path in errors[path] and rule in errors[path], errors[path]
        assert path in error  # the run's failure names each file too
    assert "give each job's rank files a folder of their own" in errors[str(bad["zz-dup.json"]
                                                                             .resolve())]
    assert len(list(wh.quarantine_dir.glob("*.error.json"))) == len(BAD)
    assert runs(wh) == joined  # nothing of the refused files


def test_the_per_file_default_job(tmp_path, seeds):
    d = tmp_path / "jobX"
    plain = write(d / "r1.json", trace(1, 2))
    packed = write(d / "r0.json.gz", trace(0, 2), gz=True)
    for f in (plain, packed):
        info = jobs.head_info(f)
        assert info == {"backend": "nccl", "rank": int(f.name[1]), "world_size": 2}
        raw = f.read_bytes()
        assert jobs.head_info(raw) == info  # the bytes the landing path holds: the same
        assert jobs.folder_job(f, info) == "jobX"
    assert jobs.folder_jobs([plain, packed]) == {plain: "jobX", packed: "jobX"}  # pwh ingest's
    assert jobs.folder_job(plain, trace(0, 1)["distributedInfo"]) is None  # single process
    assert jobs.folder_job(plain, trace(0, None)["distributedInfo"]) is None
    assert jobs.folder_job(plain, None) is None
    assert jobs.head_info(seeds["profile"].read_bytes()) is None
    assert jobs.head_info(gzip.compress(b"\x00" * 100)) is None
    # staged: the folder's job; a sidecar's job comes first
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    assert staged_identity(s, stage(s, packed))["job"] == "jobX"
    (d / "r1.json.meta.json").write_text(json.dumps({"job": "named"}))
    assert staged_identity(s, stage(s, plain))["job"] == "named"
    # a rank file in the landing folder itself: the job named after that folder, as pwh ingest
    # of it would name it
    f = write(tmp_path / "landing" / "r0.json", trace(0, 2, steps=2))
    assert staged_identity(s, stage(s, f))["job"] == "landing"
    # ... but not when that folder is the sensor's landing folder: no job's folder
    f = write(tmp_path / "landing" / "r1.json", trace(1, 2, steps=2))
    got = staged_identity(s, stage(s, f, landing=tmp_path / "landing"))
    assert (got["job"], got["label"]) == (None, "r1")


def test_rank_files_of_unrelated_jobs_in_the_landing_folder_itself_are_each_their_own_run(
        wh, tmp_path, landed):
    """The landing folder itself is no job's folder: rank files dropped there over time (rank 34
    of a 300-rank job, then rank 3 of an 8-rank job and rank 3 of its next build) are each their
    own run, as ``pwh ingest`` of that folder makes them, never refused as foreign or duplicated
    ranks of a job named after the landing folder (the real samples
    hta__cpu_only__rank-34 and hta__trace_diff__control are such a pair)."""
    landing, tick = landed
    _old(write(landing / "rank-34.pt.trace.json", trace(34, 300)))
    (run,) = tick()
    assert run.success
    _old(write(landing / "control.json.gz", trace(3, 8), gz=True),
         write(landing / "control-next.json", trace(3, 8, steps=5)))
    (run,) = tick()
    assert run.success
    got = runs(wh)
    assert [(n, label, job) for _, n, _, label, _, job, *_ in got] == [
        ("control-next.json", "control-next", None), ("control.json.gz", "control.json", None),
        ("rank-34.pt.trace.json", "rank-34.pt.trace", None)]
    assert got == pwh_ingest(tmp_path, landing)


def test_partitions_materialised_one_by_one_in_any_order_form_the_job(wh, tmp_path):
    """A backfill or a launch from the UI (one partition per run, the raw_files op without the
    sensor's batch): each staged rank file carries its job, whichever rank comes first."""
    from tests.test_dagster_raw import _materialize

    d = tmp_path / "drop" / "gpt-job"
    files = [write(d / f"rank{r}.json", trace(r, 2)) for r in (0, 1)]
    keys = [stage(wh, f) for f in files]
    for key in reversed(keys):  # rank 1 first
        _, r = _materialize(wh, keys, key)
        assert r.success
    assert runs(wh) == pwh_ingest(tmp_path, d)
    assert [(n, job, rank) for _, n, _, _, _, job, rank, *_ in runs(wh)] == [
        ("rank0.json", "gpt-job", 0), ("rank1.json", "gpt-job", 1)]


def test_a_refused_rank_dropped_again_as_another_job_is_ingested_as_that_job(wh, landed):
    """The refusal's advice works on the landing path: a refused duplicate rank moved into a
    folder of its own, or given a sidecar's job, is staged again with that identity and
    ingested as the new job. Dropped again unchanged it is not requested again (no run every
    tick); a file the warehouse holds is never ingested again, whatever its new path."""
    landing, tick = landed
    d = landing / "bert-job"
    ranks = [write(d / f"rank{r}.json", trace(r, 2)) for r in (0, 1)]
    dup = write(d / "zz-dup.json", trace(1, 2, steps=5))  # a second rank 1: another build's
    dup2 = write(d / "zz-dup2.json", trace(0, 2, steps=4))  # a second rank 0
    _old(*ranks, dup, dup2)
    (run,) = tick()
    assert not run.success
    with ro(wh) as con:
        refused = dict(con.execute("SELECT original_path, message FROM raw.ingest_errors "
                                   "WHERE error_kind = 'job'").fetchall())
    assert set(refused) == {str(dup.resolve()), str(dup2.resolve())}
    for message in refused.values():  # the advice given is the one followed below
        assert "give each job's rank files a folder of their own" in message, message
        assert "dropped again so, a refused landing file is ingested anew" in message, message
    joined = runs(wh)
    assert [(n, job, rank) for _, n, _, _, _, job, rank, *_ in joined] == [
        ("rank0.json", "bert-job", 0), ("rank1.json", "bert-job", 1)]

    # dropped again unchanged (touched, written again with the same bytes): not requested
    # again, on this tick or the next
    _old(dup)
    dup2.write_bytes(dup2.read_bytes())
    _old(dup2)
    assert tick() == [] and tick.requested == []
    assert tick() == [] and tick.requested == []
    assert runs(wh) == joined

    # moved into a folder of its own: staged again as that folder's job, ingested as it
    moved = landing / "bert-job-rerun" / dup.name
    moved.parent.mkdir()
    dup.rename(moved)
    # given a sidecar's job: the same
    (d / "zz-dup2.json.meta.json").write_text(json.dumps({"job": "bert-rerun0"}))
    _old(d / "zz-dup2.json.meta.json")
    (run,) = tick()
    assert run.success
    got = runs(wh)
    assert [(n, series, label, job, rank, src) for _, n, series, label, _, job, rank, _, src
            in got] == [
        ("rank0.json", "bert-job", "bert-job", "bert-job", 0, "folder"),
        ("rank1.json", "bert-job", "bert-job", "bert-job", 1, "folder"),
        ("zz-dup.json", "bert-job-rerun", "bert-job-rerun", "bert-job-rerun", 1, "folder"),
        ("zz-dup2.json", "bert-job", "bert-rerun0", "bert-rerun0", 0, "sidecar")]
    assert {r[0] for r in got} == {sha256_file(f.read_bytes()) for f in (*ranks, moved, dup2)}

    # an ingested file dropped again under another path, with another identity: skipped, and
    # its staged identity stays the one it was ingested with
    again = write(landing / "elsewhere" / "rank0.json", trace(0, 2))
    moved_again = landing / "third" / moved.name
    moved_again.parent.mkdir()
    moved.rename(moved_again)
    _old(again, moved_again)
    assert tick() == [] and tick.requested == []
    assert tick() == [] and tick.requested == []
    assert runs(wh) == got
    assert staged_identity(wh, sha256_file(again.read_bytes()))["job"] == "bert-job"
    assert staged_identity(wh, sha256_file(moved_again.read_bytes()))["job"] == "bert-job-rerun"
