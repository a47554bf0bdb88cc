"""Model assets generated from sql/: one per model, dependencies from the runner, descriptions
from the headers, column schemas and column lineage derived from the SQL, plotted numbers."""

from __future__ import annotations

import textwrap

import dagster as dg
import pytest

from pipelines import lineage
from pipelines.definitions import defs
from pipelines.models import build_model_assets, table_key
from pipelines.raw import RAW_TABLES
from tests.conftest import ro
from warehouse.modelling import models


def _write(root, rel, sql):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(sql).lstrip())


@pytest.fixture
def tiny_project(tmp_path):
    """Two models exercising CTEs, joins, star expansion, union, aggregates and windows."""
    root = tmp_path / "sql"
    _write(root, "staging/kernels.sql", """
        -- name: staging.kernels
        -- grain: one row per (run, kernel group)
        -- purpose: kernel time in microseconds
        with groups as (
            select * from raw.profile_groups
        ),
        runs as (
            select run_id, clock_hz from raw.profile_runs
        )
        select
            g.run_id,
            f.series,
            g.name as kernel,
            g.phase_cycles / r.clock_hz * 1e6 as total_us
        from groups g
        join runs r using (run_id)
        join raw.files f on f.sha256 = g.run_id
        """)
    _write(root, "marts/shares.sql", """
        -- name: marts.shares
        -- grain: one row per (run, kernel)
        -- purpose: share of the run per kernel, both formats
        with unioned as (
            select run_id, kernel, total_us from staging.kernels
            union all
            select run_id, name as kernel, sum(duration_us) as total_us
            from raw.audit_kernels group by all
        )
        select
            run_id,
            kernel,
            total_us / sum(total_us) over (partition by run_id) as share,
            count(*) over () as n_rows
        from unioned
        """)
    return root


def test_lineage_traces_columns_through_ctes_joins_unions_and_windows(tiny_project):
    project = models.load_project(tiny_project)
    schemas = lineage.model_schemas(project)
    assert [c.name for c in schemas["marts.shares"]] == ["run_id", "kernel", "share", "n_rows"]
    assert lineage.column_lineage(project.models["staging.kernels"], schemas) == {
        "run_id": [("raw.profile_groups", "run_id")],
        "series": [("raw.files", "series")],
        "kernel": [("raw.profile_groups", "name")],
        "total_us": [("raw.profile_groups", "phase_cycles"), ("raw.profile_runs", "clock_hz")],
    }
    assert lineage.column_lineage(project.models["marts.shares"], schemas) == {
        "run_id": [("raw.audit_kernels", "run_id"), ("staging.kernels", "run_id")],
        "kernel": [("raw.audit_kernels", "name"), ("staging.kernels", "kernel")],
        "share": [("raw.audit_kernels", "duration_us"), ("raw.audit_kernels", "run_id"),
                  ("staging.kernels", "run_id"), ("staging.kernels", "total_us")],
        "n_rows": [],
    }


def test_assets_are_generated_from_the_runner(tiny_project):
    assets, external = build_model_assets(tiny_project)
    assert external == []
    by_key = {a.key: a for a in assets}
    mart = by_key[dg.AssetKey(["marts", "shares"])]
    spec = mart.specs_by_key[mart.key]
    assert {d.asset_key for d in spec.deps} == {dg.AssetKey(["staging", "kernels"]),
                                                 dg.AssetKey(["raw", "audit_kernels"])}
    assert spec.group_name == "marts" and {"duckdb", "sql"} <= set(spec.kinds)
    assert "share of the run per kernel" in spec.description.lower()
    assert "one row per (run, kernel)" in spec.description
    lin = spec.metadata["dagster/column_lineage"].deps_by_column
    assert [(d.asset_key, d.column_name) for d in lin["kernel"]] == [
        (dg.AssetKey(["raw", "audit_kernels"]), "name"),
        (dg.AssetKey(["staging", "kernels"]), "kernel")]
    assert "n_rows" not in lin  # computed from no column
    cols = {c.name: c for c in spec.metadata["dagster/column_schema"].columns}
    assert cols["share"].type == "DOUBLE" and "`staging.kernels.total_us`" in cols["share"].description
    assert "| `share` |" in spec.metadata["column_lineage"].value


def test_every_model_of_sql_is_one_asset_with_the_runners_dependencies():
    project = models.load_project()
    graph = defs.resolve_asset_graph()
    model_keys = {k for k in graph.get_all_asset_keys() if k.path[0] in models.LAYERS}
    assert model_keys == {table_key(n) for n in project.models}
    for name, m in project.models.items():
        node = graph.get(table_key(name))
        assert node.parent_keys == {table_key(d) for d in m.deps}, name
        assert node.group_name == m.schema
        spec_md = node.metadata
        schema_cols = [c.name for c in spec_md["dagster/column_schema"].columns]
        assert schema_cols, name
        # every lineage edge points at a real column of a real upstream asset
        for col, deps in spec_md["dagster/column_lineage"].deps_by_column.items():
            assert col in schema_cols
            for dep in deps:
                assert dep.asset_key in node.parent_keys
                up = graph.get(dep.asset_key).metadata.get("dagster/column_schema")
                if up is not None:
                    assert dep.column_name in [c.name for c in up.columns], (name, col, dep)
    assert set(RAW_TABLES) == {k.path[1] for k in graph.get_all_asset_keys()
                               if k.path[0] == "raw"}


def test_the_verdict_knobs_of_kernel_trends_have_no_upstream():
    """``floor_pct`` and ``alpha`` are the verdict method's knobs, the same on every row: no
    upstream column (sqlglot alone traces them to every input of pwh_judge_series); the
    measured columns keep theirs (issue 12)."""
    m = models.load_project().models["marts.kernel_trends"]
    assert lineage.constant_columns(m) == {"floor_pct", "alpha"}
    node = defs.resolve_asset_graph().get(table_key("marts.kernel_trends"))
    deps = node.metadata["dagster/column_lineage"].deps_by_column
    assert "floor_pct" not in deps and "alpha" not in deps
    assert (dg.AssetKey(["staging", "trend_points"]), "value_us") in {
        (d.asset_key, d.column_name) for d in deps["median_us"]}
    table = node.metadata["column_lineage"].value
    assert "| `alpha` | no column (a count or constant) |" in table


def check_model_numbers(refresh: dg.ExecuteInProcessResult, wh) -> None:
    """Every model of a ``refresh_models`` run reported the numbers Dagster plots, and they are
    the warehouse's (used by the end-to-end test, which builds a realistic warehouse)."""
    mats = {e.asset_key: e.materialization.metadata
            for e in refresh.get_asset_materialization_events()
            if e.asset_key.path[0] in ("staging", "marts")}  # the snapshot asset follows them
    assert any(e.asset_key.path == ["snapshot", "current"]
               for e in refresh.get_asset_materialization_events())
    project = models.load_project()
    assert set(mats) == {table_key(n) for n in project.models}
    with ro(wh) as con:
        for name in project.models:
            md = mats[table_key(name)]
            assert md["dagster/row_count"].value == \
                con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            cols = [r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()]
            # the definition-time schema is exactly what the build produced
            assert [c.name for c in md["dagster/column_schema"].schema.columns] == cols
            if "run_id" in cols:
                assert md["runs"].value == con.execute(
                    f"SELECT count(DISTINCT run_id) FROM {name}").fetchone()[0]
        trends = mats[dg.AssetKey(["marts", "kernel_trends"])]
        for key, verdict in (("regressions", "regressed"), ("improvements", "improved")):
            assert trends[key].value == con.execute(
                "SELECT count(*) FROM marts.kernel_trends WHERE verdict = ?", [verdict]
            ).fetchone()[0]


def test_kernel_trends_lineage_through_the_verdict_function_says_what_each_column_reads():
    """Issue 25: a field of pwh_judge_series' result lists the inputs it is computed from (its
    kernel's identity, its label, the measured values and runs), not all trend_points columns."""
    project = models.load_project()
    deps = lineage.column_lineage(project.models["marts.kernel_trends"],
                                  lineage.model_schemas(project))
    cols = {c: {col for t, col in d if t == "staging.trend_points"} for c, d in deps.items()}
    assert cols["kernel_kind"] == {"kernel_kind"}
    assert cols["kernel"] == {"kernel"}
    assert cols["label"] == {"label"}
    assert cols["label_seq"] == {"series", "captured_at", "label"}  # row_number over the series
    assert cols["median_us"] == {"value_us", "run_id"}  # the values (ordered with their runs)
    assert {"value_us", "run_id", "captured_at"} <= cols["verdict"]
    assert "kernel_kind" not in cols["verdict"] and "kernel" not in cols["verdict"]
    # every field of the function's result is declared (a new field must say what it reads)
    from warehouse.modelling.udfs import TREND_FIELDS

    knobs = lineage._knob_fields()["pwh_judge_series"]
    assert {n for n, _, _ in TREND_FIELDS} - knobs == set(lineage.FUNCTION_FIELDS[
        "pwh_judge_series"])
