"""Dagster resources: where the warehouse lives."""

from __future__ import annotations

import os

import dagster as dg

from warehouse.config import Settings, settings


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file. Default: ``$PWH_WAREHOUSE`` or ``./.pwh/warehouse.duckdb``."""

    path: str = ""

    @property
    def settings(self) -> Settings:
        return settings(self.path or os.environ.get("PWH_WAREHOUSE") or None)
