"""Expectation suites and the validation core: suite files, seeds passing every suite, results in
the warehouse, status carried across partial validations, run scoping, `pwh check` output."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED, ROOT, ro
from tests.mutations import MUTATIONS, apply
from warehouse import checks, db
from warehouse.checks import batches
from warehouse.checks.suites import SuiteError, load_suite
from warehouse.cli import main
from warehouse.config import settings
from warehouse.ingesting.formats import ALL_TABLES
from warehouse.ingesting.loader import ingest_file
from warehouse.modelling import models


def pwh(*argv: str) -> tuple[int, str, str]:
    """``pwh`` in this process (GX is imported once per test session)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _seed_copies(root: Path) -> dict[str, Path]:
    d = root / "seeds"
    d.mkdir(parents=True)
    return {"profile": Path(shutil.copy(PROFILE_SEED, d / PROFILE_SEED.name)),
            "audit": Path(shutil.copy(AUDIT_SEED, d / AUDIT_SEED.name))}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """Both seeds ingested, every model built, every run validated (`pwh check`)."""
    root = tmp_path_factory.mktemp("seeded")
    s = settings(root / "state" / "warehouse.duckdb")
    paths = _seed_copies(root)
    ids = {k: ingest_file(s, p).sha256 for k, p in paths.items()}
    with db.writer(s.warehouse) as con:
        models.build(con)
    rc, out, err = pwh("--warehouse", str(s.warehouse), "check")
    return {"settings": s, "ids": ids, "rc": rc, "out": out, "err": err}


# --- suite files ------------------------------------------------------------------------------

def test_every_invariant_has_expectations_and_every_view_is_used():
    suites = checks.load_suites()
    seen = {e.invariant_id for s in suites for e in s.expectations}
    assert seen == set(checks.INVARIANT_IDS)
    for s in suites:
        for e in s.expectations:
            assert e.rule and isinstance(e.critical, bool)
    used = {s.batch.get("view") for s in suites} | {"table_columns"}
    views = {p.stem for p in (checks.EXPECTATIONS_DIR / "views").glob("*.sql")}
    assert views == used - {None}
    for s in suites:  # every run-dependent view is scoped by the bound parameter
        if s.batch_kind == "view":
            assert "$run_ids" in s.view_sql, s.name


def test_every_raw_and_staging_table_has_a_column_suite_matching_the_code():
    project = models.load_project()
    tables = {"raw.files"} | {f"raw.{t.name}" for t in ALL_TABLES} | {
        n for n in project.models if n.startswith("staging.")}
    for t in tables:
        names = [s.name for s in checks.suites_for_table(t)]
        assert f"{t}.columns" in names, f"no column/type suite for {t}"
        assert t in names, f"no data suite (not-null, ranges) for {t}"
    for t in ALL_TABLES:  # the declared raw types are exactly those of warehouse.ingesting.formats
        suite = checks.get_suite(f"raw.{t.name}.columns")
        declared = {f"{c} {ty}" for c, ty, _ in t.columns}
        for e in suite.expectations:
            assert set(e.kwargs["value_set"]) == declared


def test_suite_assets_and_tables():
    files = {s.name for s in checks.suites_for_asset(("raw", "files"))}
    assert files == {"raw.files", "raw.files.columns", "manifest_checksum"}
    marts = {s.name for s in checks.suites_for_asset(["marts", "kernel_run_rollup"])}
    assert marts == {"marts.kernel_run_rollup", "kernel_run_rollup_shares",
                     "ncu_rollup_invariants"}
    assert {s.name for s in checks.suites_for_table("raw.audit_components")} == {
        "raw.audit_components", "raw.audit_components.columns", "audit_component_invariants"}


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["expectations"][0]["meta"].update(invariant_id="A99"), "meta.invariant_id"),
    (lambda d: d["expectations"][0]["meta"].pop("critical"), "meta.critical"),
    (lambda d: d["expectations"][0]["kwargs"].update(mostly=0.9), "'mostly' is not allowed"),
    (lambda d: d["expectations"].append({
        "type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1},
        "meta": {"invariant_id": "SCHEMA", "critical": True, "rule": "x"}}),
     "not a row-level expectation"),
    (lambda d: d["meta"].update(batch={"view": "no_such_view"}), "no check view"),
    (lambda d: d["meta"].update(batch={"table": "raw.x; drop table raw.files"}),
     "must name a schema-qualified table"),
    (lambda d: d.update(name="other"), "must equal the file name"),
])
def test_bad_suite_files_name_the_file_and_the_rule(tmp_path, edit, message):
    src = checks.get_suite("audit_row_invariants").path
    doc = json.loads(src.read_text())
    edit(doc)
    bad = tmp_path / src.name
    bad.write_text(json.dumps(doc))
    with pytest.raises(SuiteError) as e:
        load_suite(bad)
    assert str(bad) in str(e.value) and message in str(e.value)


# --- seeds pass every suite -------------------------------------------------------------------

def test_seeds_pass_every_suite(seeded):
    assert seeded["rc"] == 0, seeded["out"]
    con = ro(seeded["settings"])
    try:
        results = checks.latest_results(con)
        status = checks.run_status(con, seeded["ids"].values())
        assert checks.pending_suites(con, seeded["ids"].values()) == {}
    finally:
        con.close()
    assert results and all(r.success for r in results), [r for r in results if not r.success]
    assert {s.status for s in status.values()} == {"passed"}
    # every suite that applies to a format was validated for the seed of that format
    for kind, fmt in (("profile", "tile_profile"), ("audit", "conv_audit")):
        got = {r.suite for r in results if r.run_id == seeded["ids"][kind]}
        want = {s.name for s in checks.load_suites() if s.applies_to(fmt)}
        assert got == want
    assert "passed" in seeded["out"] and "FAIL" not in seeded["out"]


def test_results_table_rows(seeded):
    con = ro(seeded["settings"])
    try:
        rows = con.execute(
            "select suite, expectation, invariant_id, critical, success, unexpected_count, "
            "sample_failures, validated_at from checks.results "
            "where run_id = ? and suite = 'audit_component_invariants'",
            [seeded["ids"]["audit"]]).fetchall()
    finally:
        con.close()
    assert len(rows) == 1
    suite, exp, inv, critical, ok, n, sample, when = rows[0]
    assert (suite, inv, critical, ok, n) == ("audit_component_invariants", "A3", True, True, 0)
    assert exp == "expect_column_values_to_be_between(a3_fraction_error)"
    assert json.loads(sample) == [] and when is not None


def test_batches_are_scoped_to_the_validated_runs(seeded):
    con = ro(seeded["settings"])
    try:
        for run_id in seeded["ids"].values():
            for suite in checks.load_suites():
                if suite.run_column is None:
                    continue
                df = batches.fetch(con, suite, [run_id])
                assert set(df[suite.run_column]) <= {run_id}, suite.name
        # a run's own rows are all there
        df = batches.fetch(con, checks.get_suite("audit_component_invariants"),
                           [seeded["ids"]["audit"]])
        assert len(df) == 52
    finally:
        con.close()


def test_fast_cli_paths_do_not_import_great_expectations(seeded):
    w = str(seeded["settings"].warehouse)
    code = (
        "import sys\n"
        "from warehouse.cli import main\n"
        f"main(['--warehouse', {w!r}, 'runs'])\n"
        f"main(['--warehouse', {w!r}, 'sql', 'select 1'])\n"
        f"main(['--warehouse', {w!r}, 'ingest', {str(PROFILE_SEED)!r}])\n"
        "main(['check', '--list'])\n"
        "bad = [m for m in ('great_expectations',) if m in sys.modules]\n"
        "sys.exit(f'imported: {bad}' if bad else 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr


# --- pwh check --------------------------------------------------------------------------------

def test_check_shows_stored_results_and_resolves_prefixes(seeded):
    w = str(seeded["settings"].warehouse)
    rc, out, err = pwh("--warehouse", w, "check", seeded["ids"]["audit"][:10])
    assert rc == 0 and "validating" not in err
    assert out.count("\n") == 1 and "conv_audit" in out and "passed" in out
    rc, out, err = pwh("--warehouse", w, "check", "004_fe0a1716faf88a59.json", "--format", "json")
    data = json.loads(out)
    assert rc == 0 and {d["run_id"] for d in data} == {seeded["ids"]["audit"]}
    assert all(d["success"] for d in data)


def test_check_unknown_run_is_a_usage_error(seeded, capsys):
    rc = main(["--warehouse", str(seeded["settings"].warehouse), "check", "ffffffffffzz"])
    assert rc == 2 and "no run matches 'ffffffffffzz'" in capsys.readouterr().err


def test_check_list_needs_no_warehouse(capsys):
    assert main(["check", "--list"]) == 0
    out = capsys.readouterr().out
    assert "manifest_checksum" in out and "invariants: CHECKSUM" in out


def test_check_on_missing_warehouse_is_a_clear_error(tmp_path, capsys):
    rc = main(["--warehouse", str(tmp_path / "none.duckdb"), "check"])
    assert rc == 1 and "no warehouse here yet" in capsys.readouterr().err


def test_failing_run_lines_samples_and_runs_listing(wh, seeds):
    run_id = apply(MUTATIONS["A3"], wh, seeds)
    rc, out, _ = pwh("--warehouse", str(wh.warehouse), "check", "--samples")
    assert rc == 1
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    assert len(fails) == 1
    assert fails[0].split()[:4] == ["FAIL", "A3", "raw.audit_components", "2"]
    assert run_id[:12] in fails[0] and "fraction_of_profiled_sum == us / total_profiled_us" in fails[0]
    samples = [json.loads(ln) for ln in out.splitlines() if ln.startswith("      {")]
    assert [(s["row_idx"], s["component_idx"]) for s in samples] == [(0, 0), (0, 1)]
    assert all(s["a3_fraction_error"] > 1e-7 for s in samples)
    assert f"run {run_id[:12]} conv_audit" in out and "FAILED (A3)" in out
    rc, out, _ = pwh("--warehouse", str(wh.warehouse), "runs", "--format", "json")
    listed = {r["run"]: r for r in json.loads(out)}
    assert listed[run_id[:12]]["checks"] == "failed" and listed[run_id[:12]]["failed"] == "A3"


def test_non_critical_failure_is_recorded_without_failing_the_run(wh, seeds, tmp_path):
    run_id = apply(MUTATIONS["A3"], wh, seeds)
    src = checks.get_suite("audit_component_invariants").path
    doc = json.loads(src.read_text())
    doc["expectations"][0]["meta"]["critical"] = False
    lenient = tmp_path / src.name
    lenient.write_text(json.dumps(doc))
    with db.writer(wh.warehouse) as con:
        results = checks.validate_run(con, run_id, [load_suite(lenient)])
        checks.record_results(con, results, carry_forward=False)
        st = checks.run_status(con, [run_id])[run_id]
    assert [(r.invariant_id, r.critical, r.success, r.unexpected_count) for r in results] == [
        ("A3", False, False, 2)]
    assert st.status == "passed" and st.failed_invariants == ()
    assert checks.summarize(results)[run_id]["warnings"] == ["A3"]


# --- results: partial validations, reruns, chunks ---------------------------------------------

def test_partial_validation_never_hides_an_earlier_failure(wh, seeds):
    run_id = apply(MUTATIONS["A1"], wh, seeds)
    with db.writer(wh.warehouse) as con:
        checks.record_results(con, checks.validate_run(con, run_id))
        assert checks.run_status(con, [run_id])[run_id].failed_invariants == ("A1",)
        before = {(r.suite, r.expectation, r.success) for r in checks.latest_results(con)}
        # a Dagster check on one asset validates only that asset's suites
        only = [checks.get_suite("manifest_checksum")]
        partial = checks.validate_run(con, run_id, only)
        assert {r.suite for r in partial} == {"manifest_checksum"}
        assert all(r.success for r in partial)
        checks.record_results(con, partial)
        st = checks.run_status(con, [run_id])[run_id]
        after = checks.latest_results(con)
    assert st.status == "failed" and st.failed_invariants == ("A1",)
    assert {(r.suite, r.expectation, r.success) for r in after} == before
    assert len({r.validated_at for r in after}) == 1  # one snapshot


def test_pending_suites_after_build_and_rerun_clears_a_fixed_failure(wh, seeds):
    run_id = apply(MUTATIONS["SUM_TO_ONE"], wh, seeds)
    w = str(wh.warehouse)
    rc, out, _ = pwh("--warehouse", w, "check")
    assert rc == 1 and "FAILED (SUM_TO_ONE)" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("FAIL"))
    assert line.split()[:4] == ["FAIL", "SUM_TO_ONE", "marts.kernel_run_rollup", "1"]
    # the fix: rebuilding the mart recomputes the shares; stored results still say failed …
    assert pwh("--warehouse", w, "build")[0] == 0
    rc, out, _ = pwh("--warehouse", w, "check")
    assert rc == 1 and "FAILED (SUM_TO_ONE)" in out
    # … until the run is validated again
    rc, out, _ = pwh("--warehouse", w, "check", "--rerun", run_id[:8])
    assert rc == 0 and "passed" in out and "validated now" in out
    con = ro(wh)
    try:
        assert checks.run_status(con, [run_id])[run_id].status == "passed"
        history = con.execute("select count(distinct validated_at) from checks.results "
                              "where run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()
    assert history == 2  # nothing deleted: both validations stay queryable


def test_pending_suites_lists_models_built_after_validation(wh, seeds):
    r = ingest_file(wh, seeds["audit"])
    with db.writer(wh.warehouse) as con:
        checks.record_results(con, checks.validate_run(con, r.sha256))
        assert checks.pending_suites(con, [r.sha256]) == {}
        models.build(con)
        pending = {s.name for s in checks.pending_suites(con, [r.sha256])[r.sha256]}
    assert "audit_category_rollup_shares" in pending and "staging.audit_kernels" in pending
    assert not any(n.startswith(("raw.", "audit_row")) for n in pending)
    assert "kernel_run_rollup_shares" in pending  # applies to every format
    # a run ingested after the build has no model rows yet: its model suites wait for a build
    p = ingest_file(wh, seeds["profile"])
    with db.writer(wh.warehouse) as con:
        results = checks.validate_run(con, p.sha256)
        checks.record_results(con, results)
        assert results and all(r.suite.startswith(("raw.", "profile_", "manifest"))
                               for r in results)
        assert checks.pending_suites(con, [p.sha256]) == {}
        models.build(con)
        later = {s.name for s in checks.pending_suites(con, [p.sha256])[p.sha256]}
    assert {"staging.profile_kernels", "kernel_run_rollup_shares"} <= later


def test_validating_many_runs_in_one_batch_equals_one_by_one(wh, seeds, tmp_path):
    ids = [ingest_file(wh, seeds["profile"]).sha256]
    for name in ("P3", "P8", "P10", "P9"):
        ids.append(apply(MUTATIONS[name], wh, seeds, tmp_path / name))

    def key(results):
        return sorted((r.run_id, r.suite, r.expectation, r.success, r.unexpected_count,
                       json.dumps(r.sample_failures, sort_keys=True)) for r in results)

    with db.writer(wh.warehouse) as con:
        together = checks.validate_runs(con, ids, chunk_size=50)
        apart = [r for i in ids for r in checks.validate_run(con, i)]
    assert key(together) == key(apart)
    failed = checks.summarize(together)
    assert [failed[i]["failed_invariants"] for i in ids] == [[], ["P3"], ["P8"], ["P10"],
                                                              ["P9"]]


def test_gx_exception_is_a_failure_not_a_pass(wh, seeds, tmp_path):
    r = ingest_file(wh, seeds["audit"])
    src = checks.get_suite("audit_row_invariants").path
    doc = json.loads(src.read_text())
    doc["expectations"][0]["kwargs"]["column"] = "no_such_column"
    bad = tmp_path / src.name
    bad.write_text(json.dumps(doc))
    with db.writer(wh.warehouse) as con:
        results = checks.validate_run(con, r.sha256, [load_suite(bad)])
    broken = [x for x in results if "no_such_column" in x.expectation]
    assert len(broken) == 1 and not broken[0].success and broken[0].error


def test_unknown_run_id_is_refused(wh, seeds):
    ingest_file(wh, seeds["audit"])
    with db.writer(wh.warehouse) as con, pytest.raises(SuiteError, match="not in raw.files"):
        checks.validate_run(con, "0" * 64)


def test_record_results_is_atomic(wh, seeds):
    r = ingest_file(wh, seeds["audit"])
    with db.writer(wh.warehouse) as con:
        results = checks.validate_run(con, r.sha256)
        results[-1].sample_failures = [{"x": float("nan")}]  # not JSON: the insert must fail
        with pytest.raises(ValueError):
            checks.record_results(con, results)
        assert con.execute("select count(*) from checks.results").fetchone()[0] == 0


def test_checksum_reads_the_archive_not_the_original(wh, seeds):
    r = ingest_file(wh, seeds["audit"])
    seeds["audit"].write_text("changed after ingestion")  # the source may change or vanish
    with db.writer(wh.warehouse) as con:
        res = checks.validate_run(con, r.sha256, [checks.get_suite("manifest_checksum")])
        path = con.execute("select archive_path from raw.files").fetchone()[0]
    assert all(x.success for x in res)
    assert Path(path).parent == wh.archive_dir


def test_view_sql_binds_values_only():
    """Check views take run ids as a bound list, never formatted text."""
    from warehouse.modelling import models

    con = duckdb.connect()  # every table a view may read: the raw layer and every model, empty
    db.ensure_schema(con)
    models.build(con, models.load_project())
    for p in (checks.EXPECTATIONS_DIR / "views").glob("*.sql"):
        sql = p.read_text()
        assert "{" not in sql.replace("{'", "") and "%s" not in sql, p.name
        params = {"run_ids": ["'); drop table raw.files; --"]} if "$run_ids" in sql else {
            "table_name": "raw.files"}
        con.execute(sql, params).fetchall()
        assert con.execute("select count(*) from raw.files").fetchone()[0] == 0


def test_great_expectations_loads_in_a_process_without_a_main_file():
    """With the lake extra, GX's pyspark probe imports pyspark.sql.connect, which calls
    sys.exit(0) in a process whose __main__ has no file (python -c, Dagster's run workers)
    when the Spark Connect client is absent: every Dagster run then ended at its resources."""
    pytest.importorskip("pyspark")
    code = "from warehouse import checks; checks.warm_up(); print('ready', flush=True)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ready"), (r.stdout, r.stderr[-2000:])
