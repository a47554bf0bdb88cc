"""Dagster resources: where the warehouse and its landing folder live.

Nothing here holds a DuckDB connection: every op opens the file, does its work and closes it
(DuckDB allows one read-write process per file, and runs in other processes need it next).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from warehouse.config import Settings, settings


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file and the landing folder the sensor watches.

    ``path``: the warehouse file; default ``$PWH_WAREHOUSE``, else ``./.pwh/warehouse.duckdb``.
    ``landing``: the landing folder; default ``$PWH_LANDING``, else ``landing/`` beside the
    warehouse file (inside the git-ignored state folder).
    """

    path: str = ""
    landing: str = ""

    @property
    def settings(self) -> Settings:
        return settings(self.path or os.environ.get("PWH_WAREHOUSE") or None)

    @property
    def landing_dir(self) -> Path:
        if self.landing:
            return Path(self.landing).expanduser().resolve()
        return self.settings.landing_dir


class ValidationResource(dg.ConfigurableResource):
    """Great Expectations for the asset checks, loaded when a run starts.

    Importing GX costs seconds. Doing it while the run initialises its resources, before any
    step queues for the ``duckdb_writer`` pool, means the pool is held for validating only, and
    runs waiting for the writer import in parallel. Only runs with check steps load it.
    """

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from warehouse import checks

        checks.warm_up()  # GX imported and its context built, before any pooled step
