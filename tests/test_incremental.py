"""Incremental model builds: after any sequence of changes, every model equals a full rebuild.

Runs arrive in several batches (new labels, repeats of old labels, runs captured out of
order, a run whose checks fail and are re-run, a run removed), the models are built after each
batch, and every model table is compared with what a full rebuild computes from the same data.
Also: only the changed runs (series, for trends) are rebuilt, and a changed definition rebuilds
in full.
"""

from __future__ import annotations

import math

import pytest

from warehouse import db, synth
from warehouse.config import settings
from warehouse.errors import ModelError
from warehouse.ingesting import loader
from warehouse.modelling import models


def _norm(v):
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9 - int(math.floor(math.log10(abs(v)))) if v
                                                 else 0)
    if isinstance(v, list | tuple):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    return v


def table_rows(con, name: str) -> list:
    """Every row of ``name`` as comparable values (floats to 10 significant digits: sums may
    add in another order), sorted."""
    cur = con.execute(f"select * from {name}")  # noqa: S608
    return sorted((tuple(_norm(v) for v in r) for r in cur.fetchall()), key=repr)


def snapshot_models(con, project) -> dict[str, list]:
    return {n: table_rows(con, n) for n in project.order}


def assert_equals_full_rebuild(con, project, context: str) -> None:
    incremental = snapshot_models(con, project)
    models.build(con, project, full_refresh=True)
    full = snapshot_models(con, project)
    for n in project.order:
        assert incremental[n] == full[n], f"{context}: {n} differs from a full rebuild"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("incr")
    spec = synth.HistorySpec(labels=8, repeats=2, single_repeat_every=0, plants=(
        synth.Plant("decoder-tile", 5, "attention_softmax_d72_p768_tail_f8_sm4", 1.3),))
    synth.generate(tmp / "history", spec)
    files = sorted(loader.expand([tmp / "history" / "runs"]))
    return tmp, files


def _ingest(s, con, paths):
    for p in paths:
        r = loader.ingest_file(s, p, con=con)
        assert r.status == "ingested", r.message


def test_every_sequence_of_changes_gives_what_a_full_rebuild_gives(history, tmp_path):
    _, files = history
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    project = models.load_project()
    # out of capture order: the later half first, then the earlier runs (baselines move)
    batches = [files[len(files) // 2:], files[: len(files) // 4],
               files[len(files) // 4: len(files) // 2]]
    with db.writer(s.warehouse) as con:
        _ingest(s, con, batches[0])
        first = {r.model: r.mode for r in models.build(con, project)}
        assert set(first.values()) == {"full"}
        for i, batch in enumerate(batches[1:], 1):
            _ingest(s, con, batch)
            res = {r.model: r for r in models.build(con, project)}
            assert_equals_full_rebuild(con, project, f"after batch {i}")
        # nothing changed: nothing rebuilt
        assert {r.mode for r in models.build(con, project)} == {"unchanged"}

        # one run's checks fail: it leaves the trends of its series (only that series rebuilt)
        run_id, series = con.execute(
            "select sha256, series from raw.files order by captured_at desc limit 1").fetchone()
        con.execute("insert into checks.results values (?, 'suite', 'e', 'P1', true, false, 1, "
                    "null, now())", [run_id])
        res = {r.model: r for r in models.build(con, project)}
        assert res["staging.runs"].mode == "incremental" and res["staging.runs"].keys == 1
        assert res["marts.kernel_trends"].mode == "incremental"
        assert res["marts.kernel_trends"].keys == 1
        assert not con.execute("select count(*) from marts.kernel_trends where ? in "
                               "(select unnest(run_ids) from (select list(run_id) as run_ids "
                               "from staging.trend_points))", [run_id]).fetchone()[0]
        assert con.execute("select check_status from marts.run_summary where run_id = ?",
                           [run_id]).fetchone()[0] == "failed"
        assert_equals_full_rebuild(con, project, "after a failed check")
        # the check is re-run and passes: the run is back
        con.execute("insert into checks.results values (?, 'suite', 'e', 'P1', true, true, 0, "
                    "null, now() + interval 1 second)", [run_id])
        models.build(con, project)
        assert con.execute("select check_status from marts.run_summary where run_id = ?",
                           [run_id]).fetchone()[0] == "passed"
        assert_equals_full_rebuild(con, project, "after the re-run")

        # a run disappears from the raw layer (e.g. a restore of an older export)
        gone = con.execute("select sha256 from raw.files where source_format = 'conv_audit' "
                           "order by sha256 limit 1").fetchone()[0]
        for (t,) in con.execute("select table_name from duckdb_tables() where schema_name = "
                                "'raw' and table_name not in ('files', 'ingest_errors')"
                                ).fetchall():
            con.execute(f"delete from raw.{t} where run_id = ?", [gone])  # noqa: S608
        con.execute("delete from raw.files where sha256 = ?", [gone])
        models.build(con, project)
        for n in project.order:
            if "run_id" in [c[0] for c in con.execute(f"describe {n}").fetchall()]:
                assert not con.execute(f"select count(*) from {n} where run_id = ?",  # noqa: S608
                                       [gone]).fetchone()[0], n
        assert_equals_full_rebuild(con, project, "after a run was removed")


def test_a_new_run_rebuilds_only_its_run_and_its_series(history, tmp_path):
    _, files = history
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    project = models.load_project()
    with db.writer(s.warehouse) as con:
        _ingest(s, con, files[:-1])
        models.build(con, project)
        last = files[-1]
        _ingest(s, con, [last])
        res = {r.model: r for r in models.build(con, project)}
        for n, r in res.items():
            assert r.mode == "incremental" and r.keys == 1, (n, r)
        per_model = dict(con.execute("select model, count(*) from meta.model_runs group by all"
                                     ).fetchall())
        n_runs = len(files)
        assert per_model == {n: n_runs for n in project.order}
        assert_equals_full_rebuild(con, project, "after one new run")


def test_a_changed_definition_or_verdict_knob_rebuilds_in_full(history, tmp_path):
    from warehouse.modelling import stats

    _, files = history
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    with db.writer(s.warehouse) as con:
        _ingest(s, con, files[:6])
        models.build(con)
        res = {r.model: r.mode for r in models.build(
            con, config=stats.VerdictConfig(floor_pct=3.0))}
        # only the trends call the verdict functions, but every definition includes the knobs
        assert set(res.values()) == {"full"}
        assert con.execute("select distinct floor_pct from marts.kernel_trends").fetchall() == [
            (3.0,)]
        root = tmp_path / "sql"
        for p in models.SQL_DIR.glob("*/*.sql"):
            (root / p.parent.name).mkdir(parents=True, exist_ok=True)
            text = p.read_text()
            if p.name == "run_summary.sql":
                assert text.count("\nfrom runs\n") == 1  # the final select's FROM
                text = text.replace("\nfrom runs\n", ",\n    1 as extra\nfrom runs\n")
            (root / p.parent.name / p.name).write_text(text)
        edited = models.load_project(root)
        res = {r.model: r.mode for r in models.build(
            con, edited, config=stats.VerdictConfig(floor_pct=3.0))}
        assert res["marts.run_summary"] == "full"
        assert {m for m, mode in res.items() if mode != "unchanged"} == {"marts.run_summary"}
        assert "extra" in [c[0] for c in con.execute("describe marts.run_summary").fetchall()]


def test_an_incremental_model_cannot_read_a_fully_rebuilt_one(tmp_path):
    for layer, name, body in (
        ("staging", "a", "-- name: staging.a\n-- grain: g\n-- purpose: p\n"
         "select run_id from raw.profile_runs"),
        ("marts", "b", "-- name: marts.b\n-- grain: g\n-- purpose: p\n-- incremental: run_id\n"
         "select run_id from staging.a"),
    ):
        (tmp_path / layer).mkdir(exist_ok=True)
        (tmp_path / layer / f"{name}.sql").write_text(body)
    with pytest.raises(ModelError, match=r"b\.sql: an incremental model can only read .*staging\.a"):
        models.load_project(tmp_path)
    (tmp_path / "marts" / "b.sql").write_text(
        "-- name: marts.b\n-- grain: g\n-- purpose: p\n-- incremental: label\nselect 1")
    with pytest.raises(ModelError, match=r"'-- incremental: label' is not one of run_id, series"):
        models.load_project(tmp_path)
    (tmp_path / "marts" / "b.sql").write_text(
        "-- name: marts.b\n-- grain: g\n-- purpose: p\n-- incremental: run_id\n"
        "select raw.files.sha256 as run_id from raw.files")
    with pytest.raises(ModelError, match=r"b\.sql: incremental models refer to columns by table "
                       r"alias, not raw\.files\.sha256"):
        models.load_project(tmp_path)


def test_scoped_sql_narrows_every_table_it_reads():
    m = models.load_project().models["staging.runs"]
    sql = models.scoped_sql(m)
    assert "(select * from raw.files where sha256 in (select run_id from pwh_scope_runs)) " \
           "as files" in sql
    assert "(select * from checks.run_status where run_id in (select run_id from " \
           "pwh_scope_runs)) as run_status" in sql
    trends = models.load_project().models["marts.kernel_trends"]
    assert "staging.trend_points where series in (select series from pwh_scope_series)" in \
        models.scoped_sql(trends)


# ------------------------------------------------------------- definitions, toggles, races
def _project(root, files: dict):
    for name, body in files.items():
        layer, stem = name.split(".")
        (root / layer).mkdir(parents=True, exist_ok=True)
        (root / layer / f"{stem}.sql").write_text(
            f"-- name: {name}\n-- grain: g\n-- purpose: p\n{body}")
    return models.load_project(root)


def _add_run(con, sha, size=10):
    con.execute("insert into raw.files values (?, '/x', 'x', 'tile_profile', 'tp/1', ?, now(), "
                "'s1', 'l1', now(), 'cli', null)", [sha, size])


def _rows(con, name):
    return sorted(con.execute(f"select * from {name}").fetchall())  # noqa: S608


def _types(con, name):
    return [(r[0], r[1]) for r in con.execute(f"describe {name}").fetchall()]


def test_a_changed_upstream_model_rebuilds_its_readers_in_full(tmp_path):
    """A downstream model never receives rows of a new shape into its old table (few runs:
    below the share that forces a full rebuild anyway)."""
    s = settings(tmp_path / "w" / "warehouse.duckdb")
    down = "-- incremental: run_id\nselect * from staging.u\n"
    old = _project(tmp_path / "a", {
        "staging.u": "-- incremental: run_id\nselect sha256 as run_id, byte_size::integer as v "
                     "from raw.files\n", "marts.d": down})
    new = _project(tmp_path / "b", {
        "staging.u": "-- incremental: run_id\nselect sha256 as run_id, byte_size / 4 as v, "
                     "label from raw.files\n", "marts.d": down})
    with db.writer(s.warehouse) as con:
        for i in range(3):
            _add_run(con, f"r{i}", 10 + i)
        models.build(con, old)
        res = {r.model: r.mode for r in models.build(con, new)}
        assert res == {"staging.u": "full", "marts.d": "full"}
        assert _types(con, "marts.d") == [("run_id", "VARCHAR"), ("v", "DOUBLE"),
                                          ("label", "VARCHAR")]
        assert _rows(con, "marts.d")[0] == ("r0", 2.5, "l1")


def test_a_model_that_stops_being_incremental_forgets_its_stamps(tmp_path):
    """Stale stamps would make the snapshot delta skip the table and a later incremental
    build keep the other definition's rows (and duplicate runs)."""
    import duckdb

    from warehouse.serving import snapshot

    s = settings(tmp_path / "w" / "warehouse.duckdb")
    inc = _project(tmp_path / "a", {"staging.u": "-- incremental: run_id\n"
                                    "select sha256 as run_id, byte_size as v from raw.files\n"})
    full = _project(tmp_path / "b", {"staging.u": "select sha256 as run_id, byte_size * 100 "
                                     "as v from raw.files\n"})
    with db.writer(s.warehouse) as con:
        for i in range(3):
            _add_run(con, f"r{i}", 10 + i)
        models.build(con, inc)
        snapshot.publish(s, con)
        snapshot.publish(s, con)
        _add_run(con, "r9", 99)
        models.build(con, full)
        live = _rows(con, "staging.u")
        snapshot.publish(s, con)
        snap = duckdb.connect(str(snapshot.current(s)), read_only=True)
        try:
            assert sorted(snap.execute("select * from staging.u").fetchall()) == live
        finally:
            snap.close()
        assert [r.mode for r in models.build(con, inc)] == ["full"]
        assert _rows(con, "staging.u") == [("r0", 10), ("r1", 11), ("r2", 12), ("r9", 99)]


def test_runs_added_during_a_build_are_stamped_by_the_model_that_read_them(tmp_path):
    """Source stamps are re-read inside each model's transaction when sources moved: a run
    written between two models is recorded by the model that built it (never built twice)."""
    s = settings(tmp_path / "w" / "warehouse.duckdb")
    p = _project(tmp_path / "a", {
        "staging.a": "-- incremental: run_id\nselect sha256 as run_id from raw.files\n",
        "staging.b": "-- incremental: run_id\nselect sha256 as run_id, byte_size from raw.files\n"})
    with db.writer(s.warehouse) as con:
        for i in range(3):
            _add_run(con, f"r{i}")
        other = con.cursor()

        def progress(r):
            if r.model == "staging.a":
                _add_run(other, "r9")

        models.build(con, p, progress=progress)
        models.build(con, p)
        assert _rows(con, "staging.b") == [(f"r{i}", 10) for i in (0, 1, 2, 9)]
        assert _rows(con, "staging.a") == [(f"r{i}",) for i in (0, 1, 2, 9)]
