"""What an analyst hits (issue 12): notebook results on DuckDB 2.0, `pwh runs` current right after
an ingest or a check, every statement's result in `pwh sql`, relative paths in the export folder,
and `warehouse.connect()` from outside the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def pwh(*argv, cwd=ROOT, env=None, input=None):
    """`pwh` in a real process."""
    return subprocess.run([sys.executable, "-m", "warehouse.cli", *argv], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(env or {})}, input=input,
                          timeout=600)


@pytest.fixture
def cli(capsys):
    """`pwh` in this process (the same code path, without a second of start-up per call):
    returns (exit code, stdout, stderr)."""
    from warehouse.cli import main

    def run(*argv):
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """Both seeds ingested and a snapshot published (as after `pwh ingest` + `pwh snapshot`),
    shared by the tests of this module that only read (and write into the export folder)."""
    from tests.conftest import AUDIT_SEED, PROFILE_SEED
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.serving import snapshot

    s = settings(tmp_path_factory.mktemp("analyst") / "state" / "warehouse.duckdb")
    ingest_paths(s, [PROFILE_SEED, AUDIT_SEED])
    snapshot.publish(s)
    return s


# ----------------------------------------------------------------- notebook results (DuckDB 2.0)


def test_execute_then_pl_arrow_and_partial_fetches(filled):
    import polars as pl
    import pyarrow as pa

    import warehouse

    with warehouse.connect(filled.warehouse) as con:
        df = con.execute("select sha256, byte_size from raw.files order by 1").pl()
        assert isinstance(df, pl.DataFrame) and df.height == 2
        reader = con.execute("select * from range(5)").arrow()
        assert isinstance(reader, pa.RecordBatchReader) and reader.read_all().num_rows == 5
        assert con.execute("select 1 as x").fetch_arrow_table().num_rows == 1
        # a partial fetch used to poison the connection ("Resource In Use … complete()")
        assert con.execute("select * from range(10)").fetchone() == (0,)
        assert con.sql("select count(*) from raw.files").fetchall() == [(2,)]
        assert con.execute("select * from range(10)").fetchmany(2) == [(0,), (1,)]
        assert con.execute("select 42").fetchall() == [(42,)]
        con.execute("select * from range(10)").fetchone()
        con.abort()  # allowed, and the connection goes on
        assert con.table("raw.files").count("*").fetchall() == [(2,)]


# ----------------------------------------------------------------- pwh runs / --errors, current


def test_runs_and_errors_are_current_after_ingest_and_check(wh, seeds, tmp_path, cli):
    from warehouse import db
    from warehouse.checks import record_results
    from warehouse.checks.runner import Result, utcnow

    w = str(wh.warehouse)

    def runs(*extra):
        rc, out, err = cli("--warehouse", w, "runs", "--format", "json", *extra)
        assert rc == 0, err
        return json.loads(out)

    # only bad files arrive: listed at once, no build, no snapshot
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "broken.json"
    deep.parent.mkdir(parents=True)
    deep.write_text('{"rows": [}')
    assert cli("--warehouse", w, "ingest", str(deep))[0] == 1
    errors = runs("--errors")
    assert [e["original_path"] for e in errors] == [str(deep)]
    assert errors[0]["stage"] == "ingest" and errors[0]["quarantine_path"]
    # the table format shows the full path and message, nothing cut
    out = cli("--warehouse", w, "runs", "--errors")[1]
    assert str(deep) in out and errors[0]["message"].removeprefix(f"{deep}: ") in out
    assert out.count(str(deep)) == 1  # named once: the message does not repeat it
    assert errors[0]["quarantine_path"] in out

    # newest ingest first, whatever the capture time
    assert cli("--warehouse", w, "ingest", str(seeds["profile"]),
               "--captured-at", "2026-06-01T00:00Z")[0] == 0
    assert cli("--warehouse", w, "ingest", str(seeds["audit"]),
               "--captured-at", "2020-01-01T00:00Z")[0] == 0
    listed = runs()
    assert [x["format"] for x in listed] == ["conv_audit", "tile_profile"]
    assert all(x["checks"] == "unchecked" for x in listed)
    assert not (wh.snapshot_dir / "current.duckdb").exists()  # not read from a snapshot

    # a run fails its checks (recorded the way `pwh check` records them)
    audit = next(x for x in listed if x["format"] == "conv_audit")
    with db.writer(wh.warehouse) as con:
        sha = con.execute("select sha256 from raw.files where source_format = 'conv_audit'"
                          ).fetchone()[0]
        record_results(con, [Result(sha, "audit_rows", "raw.audit_rows", "expect_x", "A1", True,
                                    False, 3, [], utcnow())])
    listed = runs()
    assert [(x["run"], x["checks"], x["failed"]) for x in listed if x["checks"] != "unchecked"] \
        == [(audit["run"], "failed", "A1")]
    errors = runs("--errors")
    assert [e["stage"] for e in errors] == ["checks", "ingest"]
    assert "A1" in errors[0]["message"] and sha[:12] in errors[0]["message"]

    # a later ingest keeps the check status (copied, not recomputed, when no check changed)
    third = tmp_path / "third.json"
    third.write_bytes(seeds["audit"].read_bytes() + b"\n")
    assert cli("--warehouse", w, "ingest", str(third))[0] == 0
    listed = runs()
    assert listed[0]["file_name"] == "third.json" and listed[0]["checks"] == "unchecked"
    assert [(x["run"], x["checks"]) for x in listed if x["checks"] == "failed"] \
        == [(audit["run"], "failed")]
    assert [e["stage"] for e in runs("--errors")] == ["checks", "ingest"]


def test_runs_never_waits_for_the_writer(filled):
    """`pwh runs` reads the status file: it answers while another process holds the live
    file (a live read-only open would fail at once, a writer would wait)."""
    from warehouse import db

    with db.writer(filled.warehouse, quiet=True):  # this process holds the writer
        r = pwh("--warehouse", str(filled.warehouse), "runs", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 2


# ----------------------------------------------------------------- pwh sql: every statement


def test_sql_prints_the_result_of_every_statement(filled, cli):
    w = str(filled.warehouse)
    rc, out, err = cli("--warehouse", w, "sql", "select 1 as first; select 2 as second")
    assert rc == 0, err
    assert "first" in out and "second" in out and out.index("first") < out.index("second")
    assert "-- select 1 as first" in out
    rc, out, err = cli("--warehouse", w, "sql",
                       "set search_path = 'raw'; select count(*) as n from files", "--format",
                       "json")
    assert rc == 0 and json.loads(out) == [{"n": 2}], err
    rc, out, err = cli("--warehouse", w, "sql", "select 1; select 2", "--format", "csv")
    assert rc == 2 and "2 statements" in err and out == ""


# ----------------------------------------------------------------- relative paths -> exports


def test_relative_paths_land_in_the_export_folder(filled, tmp_path, cli, monkeypatch):
    w = str(filled.warehouse)
    elsewhere = tmp_path / "somewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # DuckDB resolves relative paths against the process's cwd
    rc, out, err = cli("--warehouse", w, "sql", "copy (select sha256 from raw.files) to 'runs.csv'")
    assert rc == 0, err
    assert (filled.export_dir / "runs.csv").read_text().count("\n") == 3
    assert not (elsewhere / "runs.csv").exists()
    for sql in ("select count(*) as n from read_csv('runs.csv')",
                "select count(*) as n from 'runs.csv'"):
        rc, out, err = cli("--warehouse", w, "sql", sql, "--format", "csv")
        assert out.split() == ["n", "2"], err
    rc, out, err = cli("--warehouse", w, "sql", "copy (select 1) to '../escape.csv'")
    assert rc == 1 and "only in the export folder" in err
    assert not (filled.state_dir / "escape.csv").exists()
    import warehouse

    with warehouse.connect(filled.warehouse) as con:
        assert con.export_dir == filled.export_dir
        con.sql("select 1 as x").write_parquet("one.parquet")
        assert con.read_parquet("one.parquet").fetchall() == [(1,)]
        # a literal that is not a path is never touched
        assert con.execute("select 'to.csv' as s, 'x' as t").fetchall() == [("to.csv", "x")]


def test_exports_rewrite_touches_only_file_positions(tmp_path):
    from warehouse.serving.exports import rewrite

    e = tmp_path / "exports"
    assert rewrite("COPY t TO 'a.csv' (HEADER)", e) == f"COPY t TO '{e}/a.csv' (HEADER)"
    assert rewrite("copy (select 'to' as x) to 'sub/b.parquet'", e) == \
        f"copy (select 'to' as x) to '{e}/sub/b.parquet'"
    assert rewrite("EXPORT DATABASE 'dump'", e) == f"EXPORT DATABASE '{e}/dump'"
    assert rewrite("select * from read_parquet('p.parquet') join 'q.csv' using (k)", e) == \
        f"select * from read_parquet('{e}/p.parquet') join '{e}/q.csv' using (k)"
    for unchanged in ("copy t to '/abs/a.csv'", "select * from read_csv('s3://b/k.csv')",
                      "select 'a.csv' from t", "select * from t where name = 'x.parquet'",
                      "copy t to '~/a.csv'"):
        assert rewrite(unchanged, e) == unchanged


# ----------------------------------------------------------------- connect() from a notebook


def test_connect_outside_the_repository_names_pwh_warehouse_and_connect_path(tmp_path):
    nb = tmp_path / "notebooks"
    nb.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PWH_WAREHOUSE"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", "import warehouse; warehouse.connect()"],
                       capture_output=True, text=True, cwd=nb, env=env, timeout=600)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert "no warehouse here yet" in last and str(nb) in last
    assert "PWH_WAREHOUSE" in last and "warehouse.connect('" in last
    assert "--warehouse" not in last
