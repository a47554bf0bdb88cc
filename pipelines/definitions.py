"""Dagster definitions of Profile Warehouse (``dagster dev -m pipelines.definitions``)."""

from __future__ import annotations

import dagster as dg

from .raw import raw_files
from .resources import WarehouseResource

defs = dg.Definitions(
    assets=[raw_files],
    resources={"warehouse": WarehouseResource()},
)
