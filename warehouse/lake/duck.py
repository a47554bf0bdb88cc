"""The SQL models on DuckDB over the lake (``pwh lake build --engine duckdb``).

The lake's raw and checks tables are read as of one instant into an in-memory DuckDB with the
DuckDB warehouse's own DDL, the models are built by the same runner as ``pwh build`` (same SQL,
same Python functions), and each model's table replaces its lake table. DuckDB 2.0 has no
Iceberg extension offline: pyiceberg does the reading and the writing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import duckdb

from warehouse.modelling import models


def connect():
    from warehouse import db

    return duckdb.connect(":memory:", config=dict(db.BASE_CONFIG))


def run_models(cat, select=None, project=None):
    """Build the models on DuckDB from the lake's sources; returns (connection, results)."""
    from warehouse.lake.tables import source_duckdb

    con = connect()
    source_duckdb(cat, con)
    results = models.build(con, project, select, full_refresh=True)
    return con, results


def build(cat, select=None, progress: Callable | None = None) -> list[models.BuildResult]:
    from warehouse.lake.tables import replace_table

    project = models.load_project()
    con, results = run_models(cat, select, project)
    try:
        out = []
        for r in results:
            t0 = time.perf_counter()
            data = con.sql(f"SELECT * FROM {r.model}").arrow().read_all()  # noqa: S608
            replace_table(cat, r.model, data, {"pwh.engine": "duckdb"})
            r = models.BuildResult(r.model, r.rows, r.seconds + time.perf_counter() - t0)
            out.append(r)
            if progress:
                progress(r)
        return out
    finally:
        con.close()
