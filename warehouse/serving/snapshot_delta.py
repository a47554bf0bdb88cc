"""The delta publish of a snapshot: what differs between the live warehouse and an attached
spare snapshot, table by table, and rewriting only that (see :mod:`warehouse.serving.snapshot`).

Raw tables are compared by their manifest (``raw.files`` rows added, removed or changed),
incrementally built models by their build stamps (``meta.model_runs``), every other table by
content hashes (per run where it has ``run_id``). :func:`plan` raises :class:`CopyInstead` before
hashing anything when a full copy of the file would be cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass


def q(*parts: str) -> str:
    """A qualified identifier from catalog names (never from user input)."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


_STRUCTURE = {
    "schemas": "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ? "
               "AND schema_name <> ?",
    "tables": "SELECT schema_name, table_name, sql, comment::VARCHAR FROM duckdb_tables() "
              "WHERE database_name = ? AND schema_name <> ? AND NOT temporary",
    "columns": "SELECT schema_name, table_name, column_index, column_name, data_type, "
               "column_default, is_nullable, comment::VARCHAR FROM duckdb_columns() "
               "WHERE database_name = ? AND schema_name <> ?",
    "views": "SELECT schema_name, view_name, sql, comment::VARCHAR FROM duckdb_views() "
             "WHERE database_name = ? AND schema_name <> ? AND NOT internal AND NOT temporary",
    "indexes": "SELECT schema_name, table_name, index_name, sql FROM duckdb_indexes() "
               "WHERE database_name = ? AND schema_name <> ?",
    "sequences": "SELECT schema_name, sequence_name FROM duckdb_sequences() "
                 "WHERE database_name = ? AND schema_name <> ?",
    "macros": "SELECT schema_name, function_name, function_type, macro_definition "
              "FROM duckdb_functions() WHERE database_name = ? AND schema_name <> ? "
              "AND NOT internal",
    "types": "SELECT schema_name, type_name, logical_type FROM duckdb_types() "
             "WHERE database_name = ? AND schema_name <> ? AND NOT internal",
}


def structure(con, catalog: str, skip_schema: str) -> dict[str, list[tuple]]:
    """The catalog's schemas, tables, columns, views, … (``skip_schema`` left out), comparable."""
    return {k: sorted(con.execute(sql, [catalog, skip_schema]).fetchall(), key=repr)
            for k, sql in _STRUCTURE.items()}


def structure_diff(a: dict, b: dict) -> str:
    """What differs first between two :func:`structure` results (empty: nothing)."""
    for k in _STRUCTURE:
        if a[k] != b[k]:
            extra = [r for r in a[k] if r not in b[k]][:1] or [r for r in b[k] if r not in a[k]][:1]
            return f"{k} changed (e.g. {extra[0][:2] if extra else '?'})"
    return ""


# A delta rewrites rows; a full copy moves bytes. Measured here (2 cores, ext4, no reflink):
# inserting 2.55 M raw rows with their primary-key index costs ~2.5 s, copying a 640 MB file
# ~1.4-2.6 s. So a delta is chosen only while the rows it may write are fewer than
# (file bytes / this). The estimate is an upper bound known before anything is hashed: the rows
# of the runs whose manifest changed, plus every row of the other (model, check) tables, which
# the build rebuilds wholesale. So a warehouse whose model tables are small next to its raw
# layer publishes by delta, at a cost that follows what changed; one with big materialised
# model tables publishes by copy, at disk speed.
COPY_BYTES_PER_DELTA_ROW = 400


class CopyInstead(Exception):
    """The delta would cost more than a full copy (the message says why)."""


@dataclass
class TablePlan:
    name: str
    live_t: str
    snap_t: str
    key: str | None  # sha256/run_id, or None: the whole table
    keys: list  # key values whose rows are replaced (ignored when key is None)
    rows: int  # rows this plan inserts (estimate for the cost decision)
    manifest: bool = False  # raw table synced by the manifest: verify counts afterwards


def plan(con, live_db: str, snap_db: str, columns: list[tuple], size: int) -> list[TablePlan]:
    """What differs between the live warehouse and the attached snapshot, table by table.
    Raises :class:`CopyInstead` before any hashing when a full copy is cheaper."""
    views = {(s, v) for s, v in con.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ?",
        [live_db]).fetchall()}
    tables: dict[tuple[str, str], list[str]] = {}
    for schema, table, _idx, col, *_ in columns:
        if (schema, table) not in views:
            tables.setdefault((schema, table), []).append(col)
    changed_runs = (_changed_manifest_rows(con, live_db, snap_db) if ("raw", "files") in tables
                    else None)
    live_builds, snap_builds = _model_builds(con, live_db), _model_builds(con, snap_db)
    plans, hashed = [], []
    bound = 0  # upper bound of the rows the delta writes
    for (schema, table), cols in sorted(tables.items()):
        live_t, snap_t = q(live_db, schema, table), q(snap_db, schema, table)
        key = "sha256" if (schema, table) == ("raw", "files") else (
            "run_id" if "run_id" in cols else None)
        p = TablePlan(f"{schema}.{table}", live_t, snap_t, key, [], 0)
        build = live_builds.get(f"{schema}.{table}")
        if build and build[2] in cols and build == snap_builds.get(f"{schema}.{table}"):
            # An incremental model built by the same full build as the snapshot's copy: the
            # keys whose rows changed since are those whose build stamps differ.
            p.key = build[2]
            p.keys = _changed_model_keys(con, live_db, snap_db, p.name, p.key)
            if p.keys:
                p.rows = _count_keys(con, live_t, p.key, p.keys)
                plans.append(p)
        elif schema == "raw" and key and changed_runs is not None:
            # Raw rows are written in the same transaction as their manifest row: the runs whose
            # raw.files row differs are the runs to copy (counts are verified after applying).
            p.manifest = True
            p.keys = changed_runs
            if changed_runs:
                p.rows = _count_keys(con, live_t, key, changed_runs)
            plans.append(p)
        else:
            p.rows = count(con, live_t)
            hashed.append(p)
        bound += p.rows
    if bound * COPY_BYTES_PER_DELTA_ROW > size:
        raise CopyInstead(f"a delta could write up to {bound} rows, more than copying "
                           f"{size / 1e6:.0f} MB costs")
    for p in hashed:
        if p.key:
            a, b = _key_hashes(con, p.live_t, p.key), _key_hashes(con, p.snap_t, p.key)
            p.keys = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
            p.rows = sum(a[k][0] for k in p.keys if k in a)
        else:
            sql = "SELECT count(*), sum(hash({r})::HUGEINT) FROM {t} AS {r}"
            a = con.execute(sql.format(t=p.live_t, r=_ROW)).fetchone()
            if a != con.execute(sql.format(t=p.snap_t, r=_ROW)).fetchone():
                p.keys = [None]
        if p.keys:
            plans.append(p)
    return plans


def apply(con, p: TablePlan) -> int:
    """Apply one table's plan inside the publish transaction; return rows deleted + inserted."""
    n = 0
    if p.key is None:
        n = con.execute(f"DELETE FROM {p.snap_t}").fetchone()[0]  # noqa: S608
        return n + con.execute(
            f"INSERT INTO {p.snap_t} SELECT * FROM {p.live_t}").fetchone()[0]  # noqa: S608
    if p.keys:
        n = _replace_keys(con, p.live_t, p.snap_t, p.key, p.keys)
    if p.manifest and count(con, p.live_t) != count(con, p.snap_t):
        # raw rows changed without their manifest row: fall back to comparing every run
        a, b = _key_hashes(con, p.live_t, p.key), _key_hashes(con, p.snap_t, p.key)
        redo = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
        n += _replace_keys(con, p.live_t, p.snap_t, p.key, redo) if redo else 0
    return n


def _model_builds(con, catalog: str) -> dict[str, tuple]:
    """model -> (definition, build_id, key) from ``meta.model_builds`` (see warehouse.modelling.models)."""
    from warehouse import db

    if not db.has_table(con, "meta", "model_builds", catalog):
        return {}
    return {r[0]: tuple(r[1:]) for r in con.execute(
        f"SELECT model, definition, build_id, key FROM {q(catalog, 'meta', 'model_builds')}"  # noqa: S608
    ).fetchall()}


def _changed_model_keys(con, live_db: str, snap_db: str, model: str, key: str) -> list:
    """Run ids (or series) whose build stamps differ between the live warehouse and the
    snapshot: exactly the keys an incremental build replaced since the snapshot's version."""
    col = {"run_id": "run_id", "series": "series"}[key]
    live_r, snap_r = q(live_db, "meta", "model_runs"), q(snap_db, "meta", "model_runs")
    return [r[0] for r in con.execute(
        f"WITH a AS (SELECT run_id, series, stamp FROM {live_r} WHERE model = $m), "  # noqa: S608
        f"b AS (SELECT run_id, series, stamp FROM {snap_r} WHERE model = $m), "
        "d AS ((SELECT * FROM a EXCEPT SELECT * FROM b) UNION ALL "
        "(SELECT * FROM b EXCEPT SELECT * FROM a)) "
        f"SELECT DISTINCT {col} FROM d WHERE {col} IS NOT NULL ORDER BY 1",
        {"m": model}).fetchall()]


def _count_keys(con, t: str, key: str, keys: list) -> int:
    """Rows of table ``t`` whose ``key`` is one of ``keys`` (NULL keys ignored)."""
    return con.execute(f"SELECT count(*) FROM {t} WHERE {q(key)} IN (SELECT unnest(?))",  # noqa: S608
                       [[k for k in keys if k is not None]]).fetchone()[0]


def count(con, t: str) -> int:
    return con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608


def _changed_manifest_rows(con, live_db: str, snap_db: str) -> list[str]:
    """sha256 of every manifest row added, removed or changed since the snapshot (row hashes
    compared by key: a few milliseconds for thousands of runs)."""
    live_f, snap_f = q(live_db, "raw", "files"), q(snap_db, "raw", "files")
    return [r[0] for r in con.execute(
        f"SELECT coalesce(a.sha256, b.sha256) FROM (SELECT sha256, hash(f) AS h FROM {live_f} AS f) "  # noqa: S608
        f"AS a FULL JOIN (SELECT sha256, hash(f) AS h FROM {snap_f} AS f) AS b "
        "ON a.sha256 = b.sha256 WHERE a.h IS DISTINCT FROM b.h").fetchall()]


def _replace_keys(con, live_t: str, snap_t: str, key: str, keys: list) -> int:
    """Replace the rows of ``keys`` in the snapshot by the live ones; rows deleted + inserted."""
    k = q(key)
    nonnull = [x for x in keys if x is not None]
    n = con.execute(f"DELETE FROM {snap_t} WHERE {k} IN (SELECT unnest(?))",  # noqa: S608
                    [nonnull]).fetchone()[0]
    n += con.execute(f"INSERT INTO {snap_t} SELECT * FROM {live_t} "  # noqa: S608
                     f"WHERE {k} IN (SELECT unnest(?))", [nonnull]).fetchone()[0]
    if None in keys:
        n += con.execute(f"DELETE FROM {snap_t} WHERE {k} IS NULL").fetchone()[0]  # noqa: S608
        n += con.execute(f"INSERT INTO {snap_t} SELECT * FROM {live_t} "  # noqa: S608
                         f"WHERE {k} IS NULL").fetchone()[0]
    return n


_ROW = "_pwh_row"


def _key_hashes(con, t: str, key: str) -> dict:
    return {r[0]: (r[1], r[2]) for r in con.execute(
        f"SELECT {q(key)}, count(*), sum(hash({_ROW})::HUGEINT) FROM {t} AS {_ROW} "  # noqa: S608
        "GROUP BY ALL").fetchall()}
