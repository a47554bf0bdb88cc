"""Jobs of many ranks in the lake (issue 20, item 2): ``pwh lake ingest`` records the same
``raw.trace_jobs`` rows as ``pwh ingest`` (the folder's job, ``--job``, a sidecar's job, and the
Dagster lake path's staged identity), refuses a duplicated or foreign rank against the ranks
the lake already holds (from an earlier ingest, or committed by another writer between this
writer's check and its commit), and the models built over the lake see the job."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.lake.conftest import lake_args
from tests.test_trace_jobs import trace, write
from warehouse import db
from warehouse.cli import main
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.lake.catalog import LakeConfig, open_catalog
from warehouse.lake.ingest import ingest_paths
from warehouse.modelling import models

JOB = "resnet-job7"  # the folder's name: the job's name, series and label by default


def job_rows_lake(cfg: LakeConfig) -> list[tuple]:
    """``raw.trace_jobs`` with its runs' file name, series and label, as a DuckDB query sees
    them (read from the lake with pyiceberg alone)."""
    from tests.lake.test_lake_ingest import plain_catalog

    cat = plain_catalog(cfg)
    con = duckdb.connect()
    try:
        con.register("j", cat.load_table(("raw", "trace_jobs")).scan().to_arrow())
        con.register("f", cat.load_table(("raw", "files")).scan().to_arrow())
        return con.execute(JOB_ROWS.format(j="j", f="f")).fetchall()
    finally:
        con.close()


def job_rows_duckdb(wh) -> list[tuple]:
    con = duckdb.connect(str(wh.warehouse), read_only=True)
    try:
        return con.execute(JOB_ROWS.format(j="raw.trace_jobs", f="raw.files")).fetchall()
    finally:
        con.close()


JOB_ROWS = ("SELECT j.run_id, f.file_name, j.job, j.rank, j.world_size, j.job_source, f.series, "
            "f.label FROM {j} AS j JOIN {f} AS f ON f.sha256 = j.run_id "
            "ORDER BY f.series, f.label, j.job, j.rank, j.run_id")


def lake_run_rows(cfg: LakeConfig, sha: str) -> dict[str, int]:
    """Rows of run ``sha`` in each raw table of the lake that has any."""
    from tests.lake.test_lake_ingest import lake_rows

    return {n: c for n, rows in lake_rows(cfg).items()
            if (c := sum(r.get("run_id", r.get("sha256")) == sha for r in rows))}


@pytest.fixture(scope="module")
def job_lake(tmp_path_factory):
    """A lake and a DuckDB warehouse holding the same folder of rank files (ranks 0, 1 gzip and
    3 of an 8-rank job; rank 3 the straggler), each ingested without a job name."""
    tmp = tmp_path_factory.mktemp("job-lake")
    d = tmp / "src" / JOB
    for r in (0, 1, 3):
        write(d / (f"rank{r}.pt.trace.json" + (".gz" if r == 1 else "")),
              trace(r, 8, step_us=150 if r == 3 else 100), gz=r == 1)
    cfg = LakeConfig(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "lake"))
    res = ingest_paths(settings(tmp / "lake-state" / "wh.duckdb"), cfg, [d])
    assert [r.status for r in res] == ["ingested"] * 3, [r.message for r in res]
    wh = settings(tmp / "duck" / "warehouse.duckdb")
    assert all(r.ok for r in loader.ingest_paths(wh, [d]))
    return cfg, wh, tmp


def test_folder_job_in_the_lake_equals_pwh_ingest(job_lake):
    cfg, wh, _ = job_lake
    got = job_rows_lake(cfg)
    assert got == job_rows_duckdb(wh)
    assert [row[1:] for row in got] == [
        (f"rank{r}.pt.trace.json" + (".gz" if r == 1 else ""), JOB, r, 8, "folder", JOB, JOB)
        for r in (0, 1, 3)]


def test_models_on_the_lake_see_the_job(job_lake):
    """marts.step_times built over the lake (DuckDB engine) equals the DuckDB warehouse's: the
    job, its ranks and per step the slowest rank."""
    from warehouse.lake import duck

    cfg, wh, _ = job_lake
    cols = ("run_id, job, rank, world_size, step, start_ns, duration_ns, slowest_rank, "
            "slowest_duration_ns, job_ranks")
    con, _ = duck.run_models(open_catalog(cfg), select=["marts.step_times"])
    try:
        lake = con.execute(f"SELECT {cols} FROM marts.step_times ORDER BY ALL").fetchall()
    finally:
        con.close()
    with db.writer(wh.warehouse) as w:
        models.build(w, select=["marts.step_times"])
        want = w.execute(f"SELECT {cols} FROM marts.step_times ORDER BY ALL").fetchall()
    assert lake == want
    assert {(r[1], r[3], r[7], r[9]) for r in lake} == {(JOB, 8, "3", 3)}


def assert_refused(cfg: LakeConfig, result, path: Path, rule: str) -> None:
    """Refused naming the file and the rule; quarantined with its record; nothing of the run in
    the lake (no row, not in the ledger)."""
    from warehouse.lake import ledger

    assert result.status == "failed", result
    assert str(path.resolve()) in result.message and rule in result.message, result.message
    q = Path(result.quarantine_path)
    assert q.read_bytes() == path.read_bytes()
    record = json.loads(q.with_name(q.name + ".error.json").read_text())
    assert rule in record["message"] and record["error_kind"] == "job"
    cat = open_catalog(cfg)
    assert ledger.committed(cat.engine, cat.name, [result.sha256]) == set()
    assert lake_run_rows(cfg, result.sha256) == {}


@pytest.mark.parametrize("doc,rule", [
    (trace(1, 8, steps=4), f"one file per rank of job '{JOB}' (series '{JOB}', label '{JOB}'): "
                           "rank 1 is rank1.pt.trace.json.gz"),
    (trace(5, 16), "whose world_size is 8"),
    (trace(5, 8, backend="gloo"), "backend is \"nccl\" in its rank 0"),
])
def test_duplicated_or_foreign_rank_across_lake_ingests_is_refused(job_lake, doc, rule):
    """A second ingest naming the job (``--job``, same series and label) with a rank the lake
    holds already, or another job's file, is refused as ``pwh ingest`` refuses it."""
    cfg, _, tmp = job_lake
    before = job_rows_lake(cfg)
    bad = write(tmp / "later" / f"bad-{len(rule)}.json", doc)
    (r,) = ingest_paths(settings(tmp / "later-state" / "wh.duckdb"), cfg, [bad], job=JOB,
                        series=JOB)
    assert_refused(cfg, r, bad, rule)
    assert job_rows_lake(cfg) == before


def test_job_option_and_sidecar_as_pwh_ingest(sqlite_lake, tmp_path):
    """``pwh lake ingest --job`` and a sidecar's job give ``pwh ingest``'s rows; a later
    ingest adds a rank to the job (same series and label) and the batch of a duplicated
    rank goes on past it."""
    d = tmp_path / "x"
    a = write(d / "a.json", trace(0, 4))
    b = write(d / "b.json", trace(2, 4))
    (d / "b.json.meta.json").write_text(json.dumps({"job": "sc-job", "label": "v2"}))
    c = write(tmp_path / "y" / "c.json", trace(1, 4))
    dup = write(tmp_path / "y" / "d-dup.json", trace(0, 4, steps=5))
    wh, lake_wh = settings(tmp_path / "duck" / "wh.duckdb"), tmp_path / "lake-state" / "w.duckdb"
    for argv in (["ingest", "--job", "cli-job", "--label", "v1", str(a)], ["ingest", str(b)],
                 ["ingest", "--job", "cli-job", "--label", "v1", "--series", "x", str(c)]):
        assert main(["--warehouse", str(wh.warehouse), *argv]) == 0
        assert main(["--warehouse", str(lake_wh), "lake", *argv, *lake_args(sqlite_lake)]) == 0
    got = job_rows_lake(sqlite_lake)
    assert got == job_rows_duckdb(wh)
    assert [row[1:] for row in got] == [
        ("a.json", "cli-job", 0, 4, "cli", "x", "v1"), ("c.json", "cli-job", 1, 4, "cli", "x",
                                                        "v1"),
        ("b.json", "sc-job", 2, 4, "sidecar", "x", "v2")]
    argv = ["ingest", "--job", "cli-job", "--label", "v1", "--series", "x", str(dup), str(b)]
    assert main(["--warehouse", str(lake_wh), "lake", *argv, *lake_args(sqlite_lake)]) == 1
    (r,) = ingest_paths(settings(lake_wh), sqlite_lake, [dup], job="cli-job", label="v1",
                        series="x")
    assert_refused(sqlite_lake, r, dup, "rank 0 is a.json")
    assert job_rows_lake(sqlite_lake) == got


@pytest.mark.parametrize("theirs,rule", [
    (trace(1, 2, steps=5), "one file per rank of job 'j' (series 'j', label 'v1'): rank 1 is "
                           "r1-theirs.json"),
    (trace(0, 4), "a rank of job 'j' (series 'j', label 'v1'), whose world_size is 4"),
], ids=["duplicated", "foreign"])
def test_a_rank_committed_meanwhile_is_refused_in_the_commit(lake, tmp_path, theirs, rule):
    """Two writers ingest ranks of one job at once: the second commits between the first one's
    check and its commit (a duplicated rank, or the first rank of a job of another world size).
    The first one's commit fails once (rank index key or compare-and-swap), and the check run
    again in its commit turn refuses its rank; only the other writer's rank is in the lake."""
    from warehouse.lake.ingest import ingest_file, prepare

    d = tmp_path / "j"
    mine = write(d / "r1-mine.json", trace(1, 2, steps=4))
    theirs = write(d / "r1-theirs.json", theirs)
    st = settings(tmp_path / "state" / "wh.duckdb")
    ident = {"job": "j", "label": "v1"}
    cat, other = open_catalog(lake), open_catalog(lake)
    prepare(cat)
    retries, fired, out = [], [], {}

    def hook(at):
        if at == "staged" and not fired:
            fired.append(1)
            out["theirs"] = ingest_file(st, other, lake, theirs, **ident)

    r = ingest_file(st, cat, lake, mine, hook=hook, on_retry=lambda n, why: retries.append(why),
                    **ident)
    assert out["theirs"].ok, out["theirs"].message
    assert retries, "the first writer's commit must have failed once (rank index or pointer)"
    assert_refused(lake, r, mine, rule)
    assert [row[1] for row in job_rows_lake(lake)] == ["r1-theirs.json"]


def test_staged_file_keeps_its_sidecar_job(sqlite_lake, tmp_path):
    """The Dagster lake path (a file staged by the landing sensor) records the sidecar's job."""
    from warehouse.ingesting import landing
    from warehouse.lake.ingest import ingest_staged, prepare

    f = write(tmp_path / "in" / "r2.json", trace(2, 4))
    (f.parent / "r2.json.meta.json").write_text(json.dumps({"job": "sj"}))
    st = settings(tmp_path / "state" / "wh.duckdb")
    sha = landing.stage(st, f)
    cat = open_catalog(sqlite_lake)
    prepare(cat)
    assert ingest_staged(st, cat, sqlite_lake, sha).ok
    assert [row[1:] for row in job_rows_lake(sqlite_lake)] == [
        ("r2.json", "sj", 2, 4, "sidecar", "in", "sj")]


def test_sync_does_not_mix_a_duplicated_rank_into_the_lake(sqlite_lake, tmp_path, capsys):
    """``pwh lake sync`` of a warehouse whose job has a rank the lake already holds from
    another file: that run is reported and left out (exit 1), the job's other rank is synced."""
    d = tmp_path / "jobx"
    write(d / "r0.json", trace(0, 2))
    write(d / "r1.json", trace(1, 2))
    wh = settings(tmp_path / "duck" / "wh.duckdb")
    assert all(r.ok for r in loader.ingest_paths(wh, [d]))  # the folder's job 'jobx'
    other = write(tmp_path / "elsewhere" / "r1-other.json", trace(1, 2, steps=5))
    (r,) = ingest_paths(wh, sqlite_lake, [other], job="jobx", series="jobx")
    assert r.ok, r.message
    capsys.readouterr()
    assert main(["--warehouse", str(wh.warehouse), "lake", "sync",
                 *lake_args(sqlite_lake)]) == 1
    out = capsys.readouterr()
    assert "1 run(s) not synced" in out.err
    assert f"{(d / 'r1.json').resolve()}: at $.distributedInfo.rank: one file per rank of job " \
           "'jobx' (series 'jobx', label 'jobx'): rank 1 is r1-other.json" in out.out, out.out
    assert [(row[1], row[3], row[5]) for row in job_rows_lake(sqlite_lake)] == [
        ("r0.json", 0, "folder"), ("r1-other.json", 1, "cli")]


def test_a_lake_from_before_the_rank_index_is_indexed(sqlite_lake, tmp_path):
    """A lake whose jobs' ranks are not in the catalog's rank index (written before it
    existed) gets them indexed when a command opens it: a duplicated rank is then refused."""
    from sqlalchemy import delete, func, select

    from warehouse.lake import ledger
    from warehouse.lake.ingest import prepare

    d = tmp_path / "jobz"
    write(d / "r0.json", trace(0, 2))
    write(d / "r1.json", trace(1, 2))
    st = settings(tmp_path / "state" / "wh.duckdb")
    assert all(r.ok for r in ingest_paths(st, sqlite_lake, [d]))
    cat = open_catalog(sqlite_lake)
    count = select(func.count()).select_from(ledger.RANKS)
    with cat.engine.begin() as c:
        assert c.execute(count).scalar_one() == 2
        c.execute(delete(ledger.RANKS))
    prepare(cat)
    with cat.engine.connect() as c:
        assert c.execute(count).scalar_one() == 2
    dup = write(tmp_path / "later" / "r0-dup.json", trace(0, 2, steps=5))
    (r,) = ingest_paths(st, sqlite_lake, [dup], job="jobz", series="jobz")
    assert_refused(sqlite_lake, r, dup, "rank 0 is r0.json")
