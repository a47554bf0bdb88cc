"""The SQL-model runner (headers, derived dependencies, order, atomic builds) and run identity."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from tests.conftest import ro
from warehouse import db
from warehouse.cli import main
from warehouse.errors import ModelError
from warehouse.ingesting import loader
from warehouse.modelling import models

MARTS = {"marts.kernel_run_rollup", "marts.audit_category_rollup", "marts.run_summary",
         "marts.kernel_trends"}


def write_model(root: Path, name: str, body: str, header: dict | None = None) -> Path:
    schema, table = name.split(".")
    h = {"name": name, "grain": "one row per thing", "purpose": "testing"}
    h.update(header or {})
    text = "".join(f"-- {k}: {v}\n" for k, v in h.items() if v is not None) + textwrap.dedent(body)
    p = root / schema / f"{table}.sql"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


# ------------------------------------------------------------------ the project under sql/
def test_project_headers_deps_and_order():
    project = models.load_project()
    assert MARTS <= set(project.models)
    for name, m in project.models.items():
        assert m.header["name"] == name and m.grain and m.purpose, name
        for d in m.deps:  # every dependency is built before the model
            if d in project.models:
                assert project.order.index(d) < project.order.index(name), (name, d)
    assert "marts.kernel_run_rollup" in project.models["marts.run_summary"].deps
    assert "checks.run_status" in project.models["staging.runs"].deps
    assert "staging.trend_points" in project.upstream(["marts.kernel_trends"])
    assert "marts.kernel_trends" in project.downstream(["staging.runs"])
    assert "marts.audit_category_rollup" not in project.upstream(["marts.kernel_trends"])


def test_models_are_one_row_per_run_expressible():
    """Per-run models never compare runs: they could be built for one run_id at a time."""
    project = models.load_project()
    for name in ("staging.profile_kernels", "staging.audit_kernels", "staging.profile_samples",
                 "marts.kernel_run_rollup", "marts.audit_category_rollup"):
        sql = project.models[name].sql.lower()
        assert "partition by" not in sql or "partition by unioned.run_id" in sql or \
            "partition by grouped.run_id" in sql, name


# ------------------------------------------------------------------ loading errors
def test_unknown_table_fails_naming_table_and_file(tmp_path):
    p = write_model(tmp_path, "staging.a", "select * from raw.files join raw.nope using (sha256)")
    with pytest.raises(ModelError) as e:
        models.load_project(tmp_path)
    assert "raw.nope" in str(e.value) and str(p) in str(e.value)
    write_model(tmp_path, "staging.a", "select * from unqualified_table")
    with pytest.raises(ModelError, match="unqualified_table"):
        models.load_project(tmp_path)


def test_ctes_and_other_models_are_known(tmp_path):
    write_model(tmp_path, "staging.a", "with x as (select sha256 from raw.files) select * from x")
    write_model(tmp_path, "marts.b", "select count(*) as n from staging.a")
    project = models.load_project(tmp_path)
    assert project.models["staging.a"].deps == ("raw.files",)
    assert project.models["marts.b"].deps == ("staging.a",)
    assert project.order == ["staging.a", "marts.b"]


@pytest.mark.parametrize("header,body,match", [
    ({"grain": None}, "select 1 as x", "grain"),
    ({"name": "staging.other"}, "select 1 as x", "header names 'staging.other'"),
    ({}, "select 1 as x; select 2 as y", "exactly one SELECT"),
    ({}, "create table staging.z as select 1", "exactly one SELECT"),
    ({}, "select from where (", "cannot parse"),
])
def test_bad_model_files(tmp_path, header, body, match):
    p = write_model(tmp_path, "staging.a", body, header)
    with pytest.raises(ModelError, match=match) as e:
        models.load_project(tmp_path)
    assert str(p) in str(e.value)


def test_a_folder_without_models_fails_naming_it(tmp_path):
    """Review finding 4: an empty or missing sql/ folder is an error, not a build of 0 models."""
    with pytest.raises(ModelError, match="no SQL models found") as e:
        models.load_project(tmp_path / "sql")
    assert f"{tmp_path / 'sql'}/<staging|marts>/*.sql" in str(e.value)
    assert "it does not exist" in str(e.value) and "pip install -e" in str(e.value)
    (tmp_path / "sql" / "staging").mkdir(parents=True)
    (tmp_path / "sql" / "staging" / "notes.txt").write_text("not a model")
    with pytest.raises(ModelError, match="it has none"):
        models.load_project(tmp_path / "sql")


def test_build_from_a_non_editable_install_fails_naming_the_folder(tmp_path, seeds):
    """A `warehouse` package without the models (copied by hand, not from a wheel, which
    carries them under warehouse/_data/): `pwh build` there must fail (exit 1) naming the
    folder it looked in, and publish nothing."""
    site = tmp_path / "site-packages"
    shutil.copytree(Path(models.__file__).resolve().parents[1], site / "warehouse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    wh = tmp_path / "state" / "warehouse.duckdb"
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = [sys.executable, "-m", "warehouse.cli", "--warehouse", str(wh)]
    ing = subprocess.run([*run, "ingest", str(seeds["profile"]), "-q"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert ing.returncode == 0, ing.stderr
    got = subprocess.run([*run, "build"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 1, got.stdout + got.stderr
    # outside a checkout: the package's shipped copy (warehouse/shipped.py)
    assert got.stderr.startswith(
        f"pwh build: no SQL models found: looked for {site / 'warehouse' / '_data' / 'sql'}/")
    assert "model(s) built" not in got.stdout and "published" not in got.stdout
    assert sorted(p.name for p in wh.parent.iterdir() if "snapshot" in p.name) == []


def test_cycles_and_misplaced_files(tmp_path):
    write_model(tmp_path, "staging.a", "select * from staging.b")
    write_model(tmp_path, "staging.b", "select * from staging.a")
    with pytest.raises(ModelError, match="cycle"):
        models.load_project(tmp_path)
    other = tmp_path / "elsewhere"
    write_model(other, "staging.a", "select 1 as x")
    (other / "staging" / "a.sql").rename(other / "loose.sql")
    (other / "staging").rmdir()
    with pytest.raises(ModelError, match="models live in sql/"):
        models.load_model(other / "loose.sql", other)


# ------------------------------------------------------------------ building
def test_build_is_verbatim_atomic_and_selective(tmp_path):
    root = tmp_path / "sql"
    write_model(root, "staging.a", "select [10, 20, 30][1] as first, 'x' as y;\n-- trailing\n")
    write_model(root, "marts.b", "select first * 2 as doubled from staging.a")
    write_model(root, "marts.c", "select 1 as one", {"materialized": "view"})
    project = models.load_project(root)
    assert models.body_sql(project.models["staging.a"]).rstrip().endswith("as y")
    con = duckdb.connect()
    done = models.build(con, project, ["marts.b"])
    assert [r.model for r in done] == ["staging.a", "marts.b"]  # upstream included, c not
    assert con.execute("select doubled from marts.b").fetchone() == (20,)  # 1-based lists
    models.build(con, project)
    assert con.execute("select table_type from information_schema.tables "
                       "where table_name = 'c'").fetchone() == ("VIEW",)
    # a failing model names its file and leaves the previous table in place
    write_model(root, "marts.b", "select cast(y as integer) as doubled from staging.a")
    project = models.load_project(root)
    with pytest.raises(ModelError, match="marts.b failed") as e:
        models.build(con, project, ["marts.b"])
    assert "b.sql" in str(e.value)
    assert con.execute("select doubled from marts.b").fetchone() == (20,)


def test_build_cli(wh, seeds, capsys):
    w = ["--warehouse", str(wh.warehouse)]
    assert main([*w, "ingest", str(seeds["profile"].parent), "-q"]) == 0
    assert main([*w, "build", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "marts.kernel_trends\n    grain: one row per (series, kernel, label)" in listing
    assert main([*w, "build", "marts.nope"]) == 2
    assert "unknown model(s): marts.nope" in capsys.readouterr().err
    assert main([*w, "build", "--floor-pct", "-3"]) == 2
    assert "floor_pct" in capsys.readouterr().err
    assert main([*w, "build", "--floor-pct", "7.5"]) == 0
    out = capsys.readouterr().out
    assert "built marts.kernel_trends:" in out
    assert f"{len(models.load_project().order)} model(s) built" in out
    con = ro(wh)
    try:
        assert con.execute("select distinct floor_pct from marts.kernel_trends").fetchall() == [
            (7.5,)]
        assert con.execute("select count(*) from marts.run_summary").fetchone() == (2,)
    finally:
        con.close()


def test_build_on_an_empty_warehouse(wh):
    with db.writer(wh.warehouse) as con:
        results = models.build(con)
        assert {r.model for r in results} >= MARTS
        assert all(r.rows == 0 for r in results)


# ------------------------------------------------------------------ run identity
def test_run_identity_defaults_are_folder_stem_and_mtime(wh, seeds):
    t = dt.datetime(2026, 2, 3, 4, 5, 6, tzinfo=dt.UTC).timestamp()
    os.utime(seeds["audit"], (t, t))
    r = loader.ingest_file(wh, seeds["audit"])
    con = ro(wh)
    row = con.execute("select series, label, captured_at, meta_source from raw.files "
                      "where sha256 = ?", [r.sha256]).fetchone()
    con.close()
    assert row == ("seeds", "004_fe0a1716faf88a59", dt.datetime(2026, 2, 3, 4, 5, 6), "default")


def test_run_identity_precedence_is_field_by_field(wh, seeds):
    side = seeds["profile"].with_name(seeds["profile"].name + ".meta.json")
    side.write_text(json.dumps({"series": "decoder", "label": "from-sidecar"}))
    t = dt.datetime(2026, 5, 1, tzinfo=dt.UTC).timestamp()
    os.utime(seeds["profile"], (t, t))
    assert main(["--warehouse", str(wh.warehouse), "ingest", str(seeds["profile"]),
                 "--label", "from-cli", "-q"]) == 0
    con = ro(wh)
    row = con.execute("select series, label, captured_at, meta_source from raw.files").fetchone()
    con.close()
    # label from the command line, series from the sidecar, captured_at from the mtime
    assert row == ("decoder", "from-cli", dt.datetime(2026, 5, 1), "cli")


def test_run_identity_reaches_the_marts(wh, seeds):
    for k, label in (("profile", "abc123"), ("audit", "def456")):
        side = seeds[k].with_name(seeds[k].name + ".meta.json")
        side.write_text(json.dumps({"series": "vae", "label": label,
                                    "captured_at": "2026-03-01T10:00:00+02:00"}))
    loader.ingest_paths(wh, [seeds["profile"].parent])
    with db.writer(wh.warehouse) as con:
        models.build(con)
        got = con.execute("select source_format, series, label, captured_at from "
                          "marts.run_summary order by label").fetchall()
        trend = con.execute("select distinct series, label from marts.kernel_trends "
                            "order by label").fetchall()
    when = dt.datetime(2026, 3, 1, 8, 0)
    assert got == [("tile_profile", "vae", "abc123", when), ("conv_audit", "vae", "def456", when)]
    assert trend == [("vae", "abc123"), ("vae", "def456")]
