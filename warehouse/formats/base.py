"""What every source format module provides, and the raw-table description they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

# DuckDB type -> Arrow type, for the few types raw tables use.
_ARROW = {
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "BIGINT[]": pa.list_(pa.int64()),
}


@dataclass(frozen=True)
class Table:
    """One raw table: its name in schema ``raw``, columns in order, and a one-line purpose."""

    name: str
    columns: tuple[tuple[str, str, str], ...]  # (name, duckdb type, description)
    primary_key: tuple[str, ...]
    doc: str
    # False for the big per-sample tables: the key is unique by construction (the loader writes
    # a run once, positions are generated), and an index on millions of rows per run would cost
    # more than the whole load and grow with history.
    indexed: bool = True

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([(c, _ARROW[t]) for c, t, _ in self.columns])

    def ddl(self) -> str:
        cols = ",\n    ".join(
            f"{c} {t}{' NOT NULL' if c in self.primary_key else ''}" for c, t, _ in self.columns
        )
        if not self.indexed:
            return f"CREATE TABLE IF NOT EXISTS raw.{self.name} (\n    {cols}\n)"
        return (
            f"CREATE TABLE IF NOT EXISTS raw.{self.name} (\n    {cols},\n"
            f"    PRIMARY KEY ({', '.join(self.primary_key)})\n)"
        )

    def arrow(self, data: dict[str, Any]) -> pa.Table:
        return pa.table(data, schema=self.arrow_schema)

    @property
    def arrow_schema_without_run_id(self) -> pa.Schema:
        """The Arrow schema of a streamed batch: ``run_id`` is bound by the loader in SQL."""
        return pa.schema([(c, _ARROW[t]) for c, t, _ in self.columns if c != "run_id"])

    def batch(self, data: dict[str, Any]) -> pa.Table:
        """A streamed batch of this table: every column but ``run_id``."""
        return pa.table(data, schema=self.arrow_schema_without_run_id)


@dataclass
class Parsed:
    """A parsed document: one Arrow table per raw table, plus facts for the manifest."""

    source_format: str
    parser_version: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    summary: dict[str, int] = field(default_factory=dict)
