"""Jobs of many ranks (issue 20, item 2): the Kineto rank files of one distributed job ingested
together form one job (raw.trace_jobs), each file its own run; a duplicated or foreign rank is
refused naming the file and the rule, quarantined, nothing of it written, the rest of the batch
ingested; the marts carry the job and, per job and step, the slowest rank."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import counts, ro
from warehouse import db
from warehouse.cli import main
from warehouse.ingesting import jobs, loader, rederive
from warehouse.modelling import models

BASE_NS = 1_700_000_000_000_000_000


def trace(rank: int, world: int | None, *, steps: int = 3, step_us: int = 100,
          backend: str = "nccl", info: dict | None = None) -> dict:
    """A small rank file: ProfilerStep#N annotations, an operator launching one kernel a step."""
    ev, t = [], 1000
    for s in range(steps):
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1,
             "tid": 1, "ts": t, "dur": step_us},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1,
             "dur": 10},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 2, "dur": 5, "args": {"correlation": s + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 20,
             "dur": 30, "args": {"correlation": s + 1, "device": 0, "stream": 7}},
        ]
        t += step_us + 10
    dist = {"backend": backend, "rank": rank}
    if world is not None:
        dist["world_size"] = world
    if info is not None:
        dist = info
    return {"schemaVersion": 1, "distributedInfo": dist, "traceEvents": ev,
            "baseTimeNanoseconds": BASE_NS}


def write(path: Path, doc: dict, *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def job_rows(wh):
    with ro(wh) as con:
        return con.execute(
            "SELECT f.file_name, j.job, j.rank, j.world_size, j.job_source, f.series, f.label "
            "FROM raw.trace_jobs j JOIN raw.files f ON f.sha256 = j.run_id "
            "ORDER BY j.job, j.rank").fetchall()


def build(wh):
    with db.writer(wh.warehouse) as con:
        models.build(con)


def test_folder_of_rank_files_is_one_job_with_its_label_and_slowest_rank(wh, tmp_path):
    d = tmp_path / "resnet-job7"
    for r in (0, 1, 3):  # a sample of the job's 8 ranks; rank 3 the straggler
        name = f"rank{r}.pt.trace.json" + (".gz" if r == 1 else "")
        write(d / name, trace(r, 8, step_us=150 if r == 3 else 100), gz=r == 1)
    results = loader.ingest_paths(wh, [d])
    assert [r.status for r in results] == ["ingested"] * 3
    assert job_rows(wh) == [
        (f"rank{r}.pt.trace.json" + (".gz" if r == 1 else ""), "resnet-job7", r, 8, "folder",
         "resnet-job7", "resnet-job7") for r in (0, 1, 3)]
    build(wh)
    with ro(wh) as con:
        rows = con.execute(
            "SELECT job, rank, world_size, step, duration_ns, slowest_rank, slowest_duration_ns,"
            " job_ranks FROM marts.step_times ORDER BY step, rank").fetchall()
        assert len(rows) == 9
        for job, rank, world, _step, dur, slow_rank, slow_dur, n in rows:
            assert (job, world, n) == ("resnet-job7", 8, 3)
            assert dur == (150_000 if rank == "3" else 100_000)
            assert (slow_rank, slow_dur) == ("3", 150_000)
        runs = con.execute("SELECT job, rank, world_size, job_source FROM staging.runs "
                           "ORDER BY rank").fetchall()
        assert runs == [("resnet-job7", str(r), 8, "folder") for r in (0, 1, 3)]
        for mart in ("gpu_timeline", "op_rollup"):
            got = con.execute(f"SELECT DISTINCT job, rank FROM marts.{mart} ORDER BY rank"
                              ).fetchall()
            assert got == [("resnet-job7", str(r)) for r in (0, 1, 3)], mart


def test_runs_ingested_alone_are_their_own_job(wh, tmp_path):
    a = write(tmp_path / "a" / "t.json", trace(0, 8, step_us=100))
    b = write(tmp_path / "b" / "t.json", trace(1, 8, step_us=300))
    assert all(r.status == "ingested" for r in loader.ingest_paths(wh, [a, b]))
    assert job_rows(wh) == []
    build(wh)
    with ro(wh) as con:
        rows = con.execute("SELECT DISTINCT job, rank, slowest_rank, slowest_duration_ns "
                           "FROM marts.step_times ORDER BY rank").fetchall()
    assert rows == [(None, "0", "0", 100_000), (None, "1", "1", 300_000)]


@pytest.mark.parametrize("ranks,world", [
    ([(0, 8), (1, 4)], "mixed world sizes"),
    ([(0, 8), (0, 8)], "two files of one rank"),
    ([(0, 1), (0, 1)], "single-process traces"),
    ([(0, 8)], "one file"),
])
def test_no_default_job_where_the_folder_is_ambiguous(wh, tmp_path, ranks, world):
    d = tmp_path / "mixed"
    files = [write(d / f"f{i}.json", trace(r, w)) for i, (r, w) in enumerate(ranks)]
    assert jobs.folder_jobs(files) == {}
    loader.ingest_paths(wh, [d])
    assert job_rows(wh) == []


def test_single_process_traces_share_a_rank_folder_without_joining_its_job(wh, tmp_path):
    # as the Dagster landing path decides file by file (jobs.folder_job): only rank files of a
    # job of 2 or more ranks decide the folder's job; a one-process trace beside them (PyTorch
    # writes world_size 1) or one without distributedInfo stays its own run
    d = tmp_path / "jobA"
    files = [write(d / "r0.json", trace(0, 2)), write(d / "r1.json", trace(1, 2)),
             write(d / "solo.json", trace(0, 1)), write(d / "plain.json", {"traceEvents": []})]
    assert jobs.folder_jobs(files) == {files[0]: "jobA", files[1]: "jobA"}
    assert [jobs.folder_job(f, jobs.head_info(f)) for f in files] == ["jobA", "jobA", None, None]
    loader.ingest_paths(wh, files[:3])
    assert [(r[0], r[1], r[2]) for r in job_rows(wh)] == [("r0.json", "jobA", 0),
                                                          ("r1.json", "jobA", 1)]


def test_explicit_job_sidecar_and_labels(wh, tmp_path):
    d = tmp_path / "x"
    a = write(d / "a.json", trace(0, 4))
    b = write(d / "b.json", trace(2, 4))
    (d / "b.json.meta.json").write_text(json.dumps({"job": "sc-job", "label": "v2"}))
    assert main(["--warehouse", str(wh.warehouse), "ingest", "--job", "cli-job",
                 "--label", "v1", str(a)]) == 0
    assert main(["--warehouse", str(wh.warehouse), "ingest", str(b)]) == 0
    assert job_rows(wh) == [("a.json", "cli-job", 0, 4, "cli", "x", "v1"),
                            ("b.json", "sc-job", 2, 4, "sidecar", "x", "v2")]


def refused(wh, result, path: Path, rule: str):
    """Refused naming the file and the rule; quarantined with its record; nothing written."""
    assert result.status == "failed", result
    assert str(path.resolve()) in result.message and rule in result.message, result.message
    q = Path(result.quarantine_path)
    assert q.read_bytes() == path.read_bytes()
    assert rule in json.loads(q.with_name(q.name + ".error.json").read_text())["message"]
    with ro(wh) as con:
        assert con.execute("SELECT error_kind FROM raw.ingest_errors WHERE sha256 = ?",
                           [result.sha256]).fetchall() == [("job",)]
        for t in ("files", "trace_runs", "trace_events", "trace_jobs"):
            col = "sha256" if t == "files" else "run_id"
            n = con.execute(f"SELECT count(*) FROM raw.{t} WHERE {col} = ?",  # noqa: S608
                            [result.sha256]).fetchone()[0]
            assert n == 0, t


@pytest.mark.parametrize("doc,rule", [
    (trace(1, 8, steps=4), "a duplicated rank is not mixed in"),  # rank 1 again, other bytes
    (trace(5, 4), "0 <= rank < world_size, got rank 5 of world_size 4"),
    (trace(5, 16), "whose world_size is 8"),
    (trace(5, 8, backend="gloo"), "backend is \"nccl\" in its rank 0"),
    (trace(5, None), "distributedInfo with integer rank and world_size"),
    ({"traceEvents": []}, "distributedInfo with integer rank and world_size"),
])
def test_duplicated_or_foreign_rank_is_refused_and_the_batch_goes_on(wh, tmp_path, doc, rule):
    d = tmp_path / "job"
    write(d / "r0.json", trace(0, 8))
    write(d / "r1.json", trace(1, 8))
    bad = write(d / "r9-bad.json", doc)  # sorted last: the job exists when it comes
    write(d / "zz-r2.json", trace(2, 8))
    results = {Path(r.path).name: r for r in loader.ingest_paths(wh, [d], job="j")}
    refused(wh, results["r9-bad.json"], bad, rule)
    assert [r.status for n, r in sorted(results.items()) if n != "r9-bad.json"] == [
        "ingested"] * 3
    assert [(f, r) for f, _, r, *_ in job_rows(wh)] == [
        ("r0.json", 0), ("r1.json", 1), ("zz-r2.json", 2)]


def test_a_job_is_named_within_its_series_and_label(wh, tmp_path):
    """A later ingest adds ranks to the job of its series and label, never a duplicate; the
    same job name under another label (the next build) or series is another job."""
    write(tmp_path / "one" / "r0.json", trace(0, 2))
    assert loader.ingest_paths(wh, [tmp_path / "one"], job="j", label="v1")[0].ok
    dup = write(tmp_path / "two" / "r0.json", trace(0, 2, steps=5))
    refused(wh, loader.ingest_paths(wh, [dup], job="j", label="v1", series="one")[0], dup,
            "one file per rank of job 'j' (series 'one', label 'v1'): rank 0 is r0.json")
    r1 = write(tmp_path / "two" / "r1.json", trace(1, 2))
    assert loader.ingest_paths(wh, [r1], job="j", label="v1", series="one")[0].ok
    assert loader.ingest_paths(wh, [dup], job="j", label="v2", series="one")[0].ok
    other = write(tmp_path / "other" / "r0.json", trace(0, 2, steps=6))
    assert loader.ingest_paths(wh, [other], job="j", label="v1")[0].ok  # series 'other'
    assert sorted((f, r, s, lab) for f, _, r, _, _, s, lab in job_rows(wh)) == [
        ("r0.json", 0, "one", "v1"), ("r0.json", 0, "one", "v2"), ("r0.json", 0, "other", "v1"),
        ("r1.json", 1, "one", "v1")]
    build(wh)
    with ro(wh) as con:
        jobs_seen = con.execute("SELECT series, label, job, max(job_ranks) FROM marts.step_times"
                                " GROUP BY ALL ORDER BY ALL").fetchall()
    assert jobs_seen == [("one", "v1", "j", 2), ("one", "v2", "j", 1), ("other", "v1", "j", 1)]


def test_a_job_file_that_is_not_a_kineto_trace_is_refused(wh, tmp_path, seeds):
    r = loader.ingest_paths(wh, [seeds["profile"]], job="j")[0]
    refused(wh, r, seeds["profile"], "only Kineto traces carry their rank")


def test_cli_refuses_a_bad_job_name(wh, tmp_path, capsys):
    f = write(tmp_path / "r0.json", trace(0, 2))
    assert main(["--warehouse", str(wh.warehouse), "ingest", "--job", "../x", str(f)]) == 2
    assert "--job" in capsys.readouterr().err
    assert counts(wh)["files"] == 0


def test_rederive_keeps_the_job(wh, tmp_path):
    d = tmp_path / "jobR"
    for r in (0, 1):
        write(d / f"r{r}.json", trace(r, 2))
    loader.ingest_paths(wh, [d])
    before = job_rows(wh)
    assert len(before) == 2
    with db.writer(wh.warehouse) as con:
        con.execute("UPDATE raw.files SET parser_version = 'kineto_trace/1'")
    report = rederive.rederive(wh)
    assert [o.status for o in report.outcomes] == ["rederived"] * 2
    assert job_rows(wh) == before


def test_the_landing_path_keeps_the_sidecars_job(wh, tmp_path):
    from warehouse.ingesting import landing

    f = write(tmp_path / "l" / "r1.json", trace(1, 2))
    (tmp_path / "l" / "r1.json.meta.json").write_text(json.dumps({"job": "landed"}))
    r = landing.ingest_staged(wh, landing.stage(wh, f))
    assert r.status == "ingested", r.message
    assert job_rows(wh) == [("r1.json", "landed", 1, 2, "sidecar", "l", "landed")]
