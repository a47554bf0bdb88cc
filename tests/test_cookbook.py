"""The analyst guide against the demo warehouse: every cookbook query runs and returns rows on an
analyst (read-only, snapshot) connection, the schema tables list exactly the marts' columns, and
`make demo` (scripts/demo.py) finds every planted change."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.conftest import ROOT

GUIDE = ROOT / "docs" / "analyst-guide.md"


def _demo_module():
    spec = importlib.util.spec_from_file_location("pwh_demo", ROOT / "scripts" / "demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo warehouse, built exactly as `make demo` builds it."""
    from warehouse.config import settings

    wh = tmp_path_factory.mktemp("demo") / "state" / "warehouse.duckdb"
    mod = _demo_module()
    truth = mod.build_demo(wh, quiet=True)
    return mod, settings(wh), truth


def cookbook() -> list[tuple[str, str]]:
    text = GUIDE.read_text()
    section = text.split("\n## Cookbook\n", 1)[1]
    out = []
    for block in re.split(r"\n### ", section)[1:]:
        title = block.splitlines()[0]
        sqls = re.findall(r"```sql\n(.*?)```", block, re.S)
        assert len(sqls) == 1, f"cookbook entry {title!r} must have exactly one sql block"
        out.append((title, sqls[0]))
    return out


def test_cookbook_has_at_least_ten_questions():
    entries = cookbook()
    assert len(entries) >= 10
    assert [t.split(". ", 1)[0] for t, _ in entries] == [str(i + 1) for i in range(len(entries))]
    assert all(t.endswith("?") for t, _ in entries), [t for t, _ in entries]
    assert len({sql for _, sql in entries}) == len(entries)


@pytest.mark.parametrize("title,sql", cookbook(), ids=[t.split(".")[0] for t, _ in cookbook()])
def test_cookbook_query_runs_on_the_demo_warehouse(demo, title, sql):
    from warehouse import connect

    _, s, _ = demo
    con = connect(s)
    try:
        cur = con.execute(sql)
        rows = cur.fetchall()
    finally:
        con.close()
    assert rows, f"{title}: no rows on the demo warehouse"


def test_the_headline_question_names_the_planted_latest_regression(demo):
    from warehouse import connect

    _, s, truth = demo
    sql = dict(cookbook())[next(t for t, _ in cookbook() if t.startswith("1."))]
    latest = [p for p in truth["plants"] if p["label_seq"] == len(truth["labels"]) - 1]
    assert latest, "the default history plants a change at its latest label"
    con = connect(s)
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    assert {(r["series"], r["kernel"]) for r in rows} >= {(p["series"], p["kernel"])
                                                          for p in latest}
    assert all("p=" in r["evidence"] or "%" in r["evidence"] for r in rows)


def test_schema_tables_list_exactly_the_mart_columns(demo):
    import duckdb

    _, s, _ = demo
    text = GUIDE.read_text()
    tables = re.findall(r"<!-- columns: (\S+) -->\n(.*?)\n\n", text, re.S)
    assert {t for t, _ in tables} == {"marts.kernel_run_rollup", "marts.audit_category_rollup",
                                      "marts.run_summary", "marts.kernel_trends"}
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        for table, body in tables:
            documented = []
            for line in body.splitlines()[2:]:
                first = line.split("|")[1]
                documented += re.findall(r"`([a-z0-9_]+)`", first)
            schema, name = table.split(".")
            actual = [r[0] for r in con.execute(
                "select column_name from information_schema.columns where table_schema = ? "
                "and table_name = ? order by ordinal_position", [schema, name]).fetchall()]
            assert documented == actual, table
    finally:
        con.close()


def test_demo_report_finds_every_planted_change(demo, capsys):
    mod, s, truth = demo
    assert mod.report(s.warehouse, truth) == 0
    out = capsys.readouterr().out
    assert "verdicts found:" in out and "MISSED" not in out
    assert out.count("found ") >= len(truth["plants"])
