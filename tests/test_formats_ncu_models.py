"""Nsight Compute runs through ingest, the SQL models and the checks: per-kernel calls and
total_ns in ``marts.kernel_run_rollup`` equal the samples' ground truth (NULL when no launch is
timed), ``marts.kernel_metrics`` holds every metric in its base unit, durations trend in
``marts.kernel_trends``, ``marts.metric_trends`` judges every metric with the verdict engine
(the generated history's planted changes found, in the metric's own direction), the suites
pass, and no host or executable reaches an analyst-readable table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warehouse import checks, db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.ingesting.formats import ncu_gen, ncu_rep
from warehouse.modelling import models

SAMPLES = Path(__file__).resolve().parent.parent.parent / "shared" / "samples" / "ncu_rep"
REPORTS = sorted(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() and ncu_rep.available() else []
HISTORY = 8
CHANGE_AT = 5
GEMM = ncu_gen.KERNELS[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("ncu-models")
    hist = root / "gemm_history"
    hist.mkdir()
    for i, text in enumerate(ncu_gen.history(HISTORY, change_at=CHANGE_AT)):
        (hist / f"build{i:02d}.csv").write_text(text)
        (hist / f"build{i:02d}.csv.meta.json").write_text(
            json.dumps({"captured_at": f"2026-03-{i + 1:02d}T00:00:00"}))
    s = settings(root / "state" / "warehouse.duckdb")
    files = [hist, *REPORTS]
    results = loader.ingest_paths(s, files)
    assert {r.status for r in results} == {"ingested"}, [r.message for r in results]
    with db.writer(s.warehouse) as con:
        models.build(con)
    con = db.connect_rw(s.warehouse)
    yield s, con, {Path(r.path).name: r.sha256 for r in results}
    con.close()


def _q(con, sql, params=()):
    return con.execute(sql, list(params)).fetchall()


@pytest.mark.skipif(not REPORTS, reason="no .ncu-rep samples or no ncu_report")
def test_rollup_equals_ground_truth_to_the_ns(built):
    _, con, ids = built
    for rep in REPORTS:
        exp = json.loads(Path(str(rep) + ".expected.json").read_text())
        want: dict = {}
        for k in exp["per_kernel"]:
            calls, total = want.get(k["demangled"], (0, None))
            t = k["total_ns"] if total is None else total + (k["total_ns"] or 0)
            want[k["demangled"]] = (calls + k["calls"], t)
        got = {k: (c, t) for k, c, t in _q(con, "select kernel, sum(calls), sum(total_ns) "
                                               "from marts.kernel_run_rollup where run_id = ? "
                                               "group by kernel", [ids[rep.name]])}
        assert got == want, rep.name
        untimed = sum(k["calls"] - k["calls_timed"] for k in exp["per_kernel"])
        assert _q(con, "select untimed_launches from marts.run_summary where run_id = ?",
                  [ids[rep.name]]) == [(untimed,)]
        n = _q(con, "select count(*) from marts.kernel_metrics where run_id = ?",
               [ids[rep.name]])[0][0]
        assert n == sum(exp["n_metrics_per_action"])


def test_metrics_in_base_units(built):
    _, con, ids = built
    rid = ids["build00.csv"]
    rows = _q(con, """
        select d.value, g.value, d.unit, d.unit_as_written, g.unit_as_written
        from marts.kernel_metrics as d
        inner join marts.kernel_metrics as g
            on g.run_id = d.run_id and g.launch_idx = d.launch_idx
        where d.run_id = ? and d.metric = 'Duration' and g.metric = 'gpu__time_duration.sum'
        """, [rid])
    assert rows and all(d == g and u == "ns" and (wd, wg) == ("usecond", "nsecond")
                        for d, g, u, wd, wg in rows)
    launches = _q(con, "select count(*) from staging.ncu_launches where run_id = ?", [rid])
    assert launches == [(len(ncu_gen.KERNELS) * 2,)]


def test_planted_duration_change_is_a_kernel_trends_regression(built):
    _, con, _ = built
    got = dict(_q(con, "select label, verdict from marts.kernel_trends "
                       "where series = 'gemm_history' and kernel = ? "
                       "and kernel_kind = 'ncu_kernel/ncu_csv'", [GEMM]))
    assert got[f"build{CHANGE_AT:02d}"] == "regressed"
    assert all(v != "regressed" for lab, v in got.items() if lab != f"build{CHANGE_AT:02d}")


def test_metric_trends_verdicts_follow_the_metric_direction(built):
    _, con, _ = built
    label = f"build{CHANGE_AT:02d}"
    got = {m: (v, lib) for m, v, lib in _q(con, """
        select metric, verdict, lower_is_better from marts.metric_trends
        where series = 'gemm_history' and kernel = ? and label = ?""", [GEMM, label])}
    assert got["gpu__time_duration.sum"] == ("regressed", True)
    assert got["sm__cycles_elapsed.avg"] == ("regressed", True)
    assert got["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == ("decreased", False)
    verdicts = {v for v, in _q(con, "select distinct verdict from marts.metric_trends "
                                    "where not lower_is_better")}
    assert verdicts <= {"increased", "decreased", "unchanged", "inconclusive"}
    other = _q(con, """select count(*) from marts.metric_trends
        where series = 'gemm_history' and kernel <> ? and verdict not in
        ('unchanged', 'inconclusive')""", [GEMM])
    assert other == [(0,)]


def test_no_host_or_executable_in_analyst_tables(built):
    _, con, _ = built
    tables = _q(con, "select table_schema, table_name from information_schema.tables "
                     "where table_schema in ('raw', 'staging', 'marts')")
    for schema, table in tables:
        cols = [c for c, in _q(con, "select column_name from information_schema.columns where "
                                    "table_schema = ? and table_name = ?", [schema, table])]
        if not cols:
            continue
        hits = _q(con, f"select count(*) from {schema}.{table} as t where "  # noqa: S608
                       "contains(t::varchar, ?) or contains(t::varchar, ?)",
                  [ncu_gen.HOST, "alice"])
        assert hits == [(0,)], f"{schema}.{table}"


def test_every_suite_passes(built):
    _, con, ids = built
    results = checks.validate_runs(con, list(ids.values()))
    suites = {r.suite for r in results}
    assert {"ncu_run_invariants", "ncu_rollup_invariants", "raw.ncu_metrics"} <= suites
    failed = [(r.suite, r.expectation) for r in results if not r.success]
    assert not failed, failed[:5]


def test_the_ncu_suites_catch_broken_rows(wh, tmp_path):
    f = tmp_path / "one.csv"
    f.write_text(ncu_gen.details(ncu_gen.launches(9)))
    (r,) = loader.ingest_paths(wh, [f])
    with db.writer(wh.warehouse) as con:
        models.build(con)
        con.execute("delete from raw.ncu_metrics where run_id = ? and launch_idx = 1 "
                    "and metric_idx = 0", [r.sha256])
        con.execute("update raw.ncu_launches set dur_ns = -1 where run_id = ? "
                    "and launch_idx = 2", [r.sha256])
        con.execute("update marts.kernel_run_rollup set total_ns = total_ns + 1 "
                    "where run_id = ? and kernel = ?", [r.sha256, GEMM])
        failed = {(x.suite, x.expectation) for x in checks.validate_runs(con, [r.sha256])
                  if not x.success}
    names = {e for _, e in failed}
    assert "expect_column_values_to_be_in_set(n1_every_metric_has_a_row)" in names
    assert "expect_column_values_to_be_in_set(n1_metric_rows_match)" in names
    assert "expect_column_values_to_be_in_set(n2_total_ns_matches)" in names
    assert ("raw.ncu_launches", "expect_column_values_to_be_between(dur_ns)") in failed


def test_units_convert_to_their_base(wh, tmp_path):
    cases = [("Kbyte", "1.5", "byte", 1500.0), ("Gbyte/second", "2", "byte/s", 2e9),
             ("cycle/nsecond", "1.41", "cycle/s", 1.41e9), ("Mhz", "1,215", "hz", 1.215e9),
             ("msecond", "0.25", "ns", 250000.0), ("byte/usecond", "3", "byte/s", 3e6),
             ("%", "50", "%", 50.0), ("", "7", "", 7.0)]
    lines = ['"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"']
    lines += [f'"0","k","s","m{i}","{u}","{v}"' for i, (u, v, _, _) in enumerate(cases)]
    f = tmp_path / "units.csv"
    f.write_text("\n".join(lines) + "\n")
    (r,) = loader.ingest_paths(wh, [f])
    with db.writer(wh.warehouse) as con:
        models.build(con, select=["marts.kernel_metrics"])
        got = dict((m, (u, v)) for m, u, v in _q(
            con, "select metric, unit, value from marts.kernel_metrics where run_id = ?",
            [r.sha256]))
    for i, (_, _, unit, value) in enumerate(cases):
        assert got[f"m{i}"][0] == unit
        assert got[f"m{i}"][1] == pytest.approx(value, rel=1e-12)
