"""``pwh lake build``: the SQL models over the lake, on DuckDB or on Spark."""

from __future__ import annotations

from collections.abc import Callable

from warehouse.lake.catalog import LakeConfig, LakeError, open_catalog


def build(cfg: LakeConfig, *, engine: str = "duckdb", master: str | None = None,
          select: list[str] | None = None, progress: Callable | None = None) -> list:
    cat = open_catalog(cfg)
    from warehouse.lake.ingest import prepare

    prepare(cat)
    if engine == "duckdb":
        from warehouse.lake import duck

        return duck.build(cat, select, progress)
    if engine == "spark":
        from warehouse.lake import spark

        with spark.session(master) as sp:
            return spark.build(sp, cat, select, progress)
    raise LakeError(f"unknown engine {engine!r}: duckdb or spark")
