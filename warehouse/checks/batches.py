"""Batches: the rows a suite validates, queried from DuckDB for the runs being validated only.

Every batch is scoped to a list of run ids through the bound parameter ``$run_ids`` (raw tables
lead their primary key with ``run_id``), so validating the newest run reads that run's rows and
not the history. Identifiers (table and column names) come only from the catalog (allow-list);
values are always bound.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.checks.suites import Suite, SuiteError

if TYPE_CHECKING:
    import pandas as pd


def existing_tables(con) -> set[str]:
    """``schema.table`` of every table and view in the warehouse."""
    rows = con.execute(
        "select schema_name || '.' || table_name from duckdb_tables() "
        "where database_name = current_database() "
        "union all select schema_name || '.' || view_name from duckdb_views() "
        "where database_name = current_database() and not internal").fetchall()
    return {r[0] for r in rows}


def _columns(con, table: str) -> list[str]:
    rows = con.execute(
        "select column_name from duckdb_columns() where database_name = current_database() "
        "and schema_name || '.' || table_name = ? order by column_index", [table]).fetchall()
    return [r[0] for r in rows]


def _primary_key(table: str) -> tuple[str, ...]:
    from warehouse.ingesting.formats import ALL_TABLES

    if table == "raw.files":
        return ("sha256",)
    for t in ALL_TABLES:
        if f"raw.{t.name}" == table:
            return t.primary_key
    return ()


def _quote(ident: str) -> str:
    return '"' + ident.replace('"', '""') + '"'


def table_query(con, suite: Suite) -> str:
    """``select *`` of the suite's table for the bound runs, identifiers checked against the
    catalog (the only place an identifier enters SQL here)."""
    table = suite.batch["table"]
    cols = _columns(con, table)
    if not cols:
        raise SuiteError(f"{suite.path}: table {table} does not exist in the warehouse")
    if suite.run_column not in cols:
        raise SuiteError(f"{suite.path}: table {table} has no run column {suite.run_column!r}")
    schema, name = table.split(".")
    order = [c for c in _primary_key(table) if c in cols] or [suite.run_column]
    return (f"select * from {_quote(schema)}.{_quote(name)} "  # noqa: S608 - catalog identifiers
            f"where {_quote(suite.run_column)} in (select unnest($run_ids)) "
            f"order by {', '.join(map(_quote, order))}")


def fetch(con, suite: Suite, run_ids: list[str]) -> pd.DataFrame:
    """The suite's batch for ``run_ids`` as a pandas frame (what GX validates)."""
    kind = suite.batch_kind
    if kind == "python":
        return PYTHON_BATCHES[suite.batch["python"]](con, run_ids)
    if kind == "table":
        sql, params = table_query(con, suite), {"run_ids": list(run_ids)}
    elif kind == "catalog":
        sql, params = suite.view_sql, {"table_name": suite.batch["catalog"]}
    else:
        sql = suite.view_sql
        params = {"run_ids": list(run_ids)} if "$run_ids" in sql else {}
    return con.execute(sql, params).df()


def manifest_checksum(con, run_ids: list[str]) -> pd.DataFrame:
    """One row per run: the manifest's SHA-256 next to the SHA-256 recomputed from the preserved
    raw bytes: the archive copy (``raw.files.archive_path``) when there is one, else the
    original path. ``bytes_found`` is false when that file is missing or unreadable."""
    import pandas as pd

    rows = con.execute(
        "select sha256 as run_id, sha256, byte_size, archive_path, original_path "
        "from raw.files where sha256 in (select unnest($run_ids)) order by sha256",
        {"run_ids": list(run_ids)}).fetchall()
    out = []
    for run_id, sha, size, archive_path, original_path in rows:
        path = archive_path or original_path
        rec = {"run_id": run_id, "sha256": sha, "verified_path": path, "byte_size": size,
               "bytes_found": False, "actual_byte_size": None, "recomputed_sha256": None,
               "read_error": None}
        try:
            with open(Path(path), "rb") as fh:
                digest = hashlib.file_digest(fh, "sha256")
                rec["actual_byte_size"] = fh.tell()
            rec["recomputed_sha256"] = digest.hexdigest()
            rec["bytes_found"] = True
        except OSError as exc:
            rec["read_error"] = f"{exc.strerror or exc}"
        out.append(rec)
    cols = ["run_id", "sha256", "verified_path", "byte_size", "bytes_found", "actual_byte_size",
            "recomputed_sha256", "read_error"]
    df = pd.DataFrame(out, columns=cols)
    df["actual_byte_size"] = df["actual_byte_size"].astype("Int64")
    df["bytes_found"] = df["bytes_found"].astype(bool)
    return df


PYTHON_BATCHES = {"manifest_checksum": manifest_checksum}
