"""The physical layout of ``marts.metric_trends`` that the analysts' one-kernel query relies on.

``bench/metric_query.py`` measures the query for one kernel at issue 21's target size (20 M
rows) on a generated table of the mart's shape and layout. Here, on a mart built by the model
from ``ncu --csv`` exports (two series, long demangled kernel names sharing a long prefix), both
after a full build and after an incremental one (a series rebuilt is deleted and appended), and
in the published snapshot analysts read:

* ``kernel_key`` is the documented function of the kernel name (the first 60 bits of its MD5,
  checked against Python's ``hashlib``), so an analyst computes it from the name;
* each series' rows, in physical order, are ordered by (kernel_key, metric, label_seq): one
  kernel's rows are contiguous, which is what lets DuckDB's zonemaps skip the other kernels'
  row groups for the guide's filter, and the guide's query (no ORDER BY) returns them in
  (metric, label) order;
* the bench's table has exactly the model's columns and types.
"""

from __future__ import annotations

import hashlib

import pytest

import warehouse
from bench import metric_query
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.ingesting.formats import ncu_gen
from warehouse.modelling import models
from warehouse.serving import snapshot

KERNELS = tuple(metric_query.kernel_names(4))
MODELS = ("marts.metric_trends",)


def _export(folder, i: int, series: str, label: int):
    return ncu_gen.write_export(
        folder, f"r{i:03d}", seed=i, series=series, label=f"L{label:03d}",
        captured_at=f"2026-03-{1 + label:02d}T00:00:{i % 60:02d}Z", kernels=KERNELS,
        per_kernel=1, metrics=12)


def _key(kernel: str) -> int:
    return int(hashlib.md5(kernel.encode()).hexdigest()[:15], 16)


def _assert_layout(con, context: str) -> None:
    got = con.execute("""
        select series, kernel, kernel_key, metric, label_seq, source_format, unit
        from marts.metric_trends
        order by rowid
    """).fetchall()
    assert len(got) > 100, context
    assert {r[1] for r in got} == set(KERNELS), context
    for series, kernel, key, *_ in got:
        assert key == _key(kernel), f"{context}: kernel_key of {kernel[:60]}… ({series})"
    by_series: dict[str, list] = {}
    for r in got:
        by_series.setdefault(r[0], []).append(r)
    assert len(by_series) == 2, context
    for series, rows in by_series.items():
        want = sorted(rows, key=lambda r: (r[2], r[3].encode(), r[4], r[5], r[6], r[1]))
        assert rows == want, f"{context}: {series}'s rows are not in (kernel_key, metric, " \
                             "label_seq) order"
        runs = [r[2] for i, r in enumerate(rows) if i == 0 or rows[i - 1][2] != r[2]]
        assert len(runs) == len(set(runs)) == len(KERNELS), \
            f"{context}: a kernel's rows of {series} are not contiguous"


@pytest.fixture
def built(tmp_path):
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    src = tmp_path / "exports"
    i = 0
    for series in ("layout-a", "layout-b"):
        for label in range(4):
            _export(src, i, series, label)
            i += 1
    assert {r.status for r in loader.ingest_paths(s, [src])} == {"ingested"}
    project = models.load_project()
    with db.writer(s.warehouse) as con:
        models.build(con, project, select=MODELS)
        snapshot.publish(s, con)
    return s, project, tmp_path, i


def test_kernel_names_share_a_prefix_longer_than_duckdbs_string_zonemaps():
    # the point of kernel_key: a zonemap of these names cannot tell the kernels apart
    common = KERNELS[0]
    for k in KERNELS[1:]:
        n = 0
        while n < min(len(common), len(k)) and common[n] == k[n]:
            n += 1
        common = common[:n]
    assert len(common) >= 64
    assert len({_key(k) for k in KERNELS}) == len(KERNELS)


def test_mart_is_ordered_by_kernel_key_after_full_and_incremental_builds(built):
    s, project, tmp_path, i = built
    con = db.connect_rw(s.warehouse)
    try:
        _assert_layout(con, "full build")
    finally:
        con.close()
    r = loader.ingest_file(s, _export(tmp_path / "more", i, "layout-a", 4))
    assert r.status == "ingested", r.message
    with db.writer(s.warehouse) as con:
        got = {b.model: b.mode for b in models.build(con, project, select=MODELS)}
        assert got["marts.metric_trends"] == "incremental"
        _assert_layout(con, "incremental build")
        snapshot.publish(s, con)
    with warehouse.connect(s.warehouse) as ac:  # the analysts' snapshot keeps the layout
        _assert_layout(ac, "published snapshot")
        # the guide's filter: the documented expression equals the column
        where = metric_query.FILTER
        n = ac.execute(f"select count(*) from marts.metric_trends where {where}",  # noqa: S608
                       {"series": "layout-a", "kernel": KERNELS[2]}).fetchall()[0][0]
        assert n == ac.execute("select count(*) from marts.metric_trends where series = ? "
                               "and kernel = ?", ["layout-a", KERNELS[2]]).fetchall()[0][0] > 0
        # the guide's query has no ORDER BY: its rows come in the stored (metric, label) order
        got = ac.sql(metric_query.queries()["trend"],
                     params={"series": "layout-a", "kernel": KERNELS[2]}).fetchall()
        keys = [(r[0].encode(), r[3]) for r in got]
        assert len(got) == n and keys == sorted(keys)


def test_bench_table_has_the_models_columns_and_types(built, tmp_path):
    s, *_ = built
    con = db.connect_rw(s.warehouse)
    try:
        model = [tuple(r[:2]) for r in con.execute("describe marts.metric_trends").fetchall()]
    finally:
        con.close()
    assert model == list(metric_query.COLUMNS)
    import duckdb

    mem = duckdb.connect()
    try:
        n = metric_query.make_mart(mem, kernels=3, metrics=4, labels=5)
        assert n == 3 * 4 * 5
        assert [tuple(r[:2]) for r in mem.execute("describe marts.metric_trends").fetchall()] \
            == model
        rows = mem.execute("select kernel, kernel_key, metric, label_seq from "
                           "marts.metric_trends order by rowid").fetchall()
        assert all(k == _key(kernel) for kernel, k, *_ in rows)
        assert rows == sorted(rows, key=lambda r: (r[1], r[2].encode(), r[3]))
    finally:
        mem.close()
