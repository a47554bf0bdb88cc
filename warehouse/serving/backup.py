"""Backup and restore: the whole warehouse as Parquet files plus a manifest, and back.

``export`` writes, into a new folder::

    pwh-export.json          format, source, DuckDB version, every schema, table (DDL, row
                             count, content fingerprint), view and index, in creation order
    data/<schema>.<table>.parquet
    archive/                 the content-addressed raw files (unless archive=False)

The folder appears under its final name only when complete (it is written as a hidden
``.<name>.partial-<pid>`` folder and renamed), so a killed export never looks like a backup.

``restore`` rebuilds a warehouse from such a folder into a new file beside the target, checks
every table's row count and fingerprint against the manifest, and only then moves it into place
(the previous file, if any and ``replace`` is given, is kept as
``warehouse.duckdb.before-import-<time>``). Archive files are verified against their SHA-256
names. Then a snapshot is published so that analysts see the restored state.

The fingerprint of a table is its row count and the sum of the hashes of its rows (see
:func:`fingerprint`), so it does not depend on row order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb

from warehouse import db
from warehouse.config import Settings
from warehouse.errors import PwhError

FORMAT = "pwh-export/1"
_LOSSY_IN_PARQUET = re.compile(r"\bU?HUGEINT\b|TIME WITH TIME ZONE|\bTIMETZ\b", re.I)
MANIFEST = "pwh-export.json"
SKIP_SCHEMAS = ("information_schema", "pg_catalog", "pwh_snapshot")


class BackupError(PwhError):
    """An export or a restore failed; nothing was left half-written under the final name."""


def _q(*parts: str) -> str:
    """A qualified identifier from catalog names (the warehouse's own catalog is the allow-list)."""
    return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


def fingerprint(con, table: str) -> list[int]:
    """[row count, sum of DuckDB's hash of every row] of ``table``: independent of row order.

    DuckDB's ``hash`` is fast (tens of millions of rows per second) but not promised to be
    stable across DuckDB versions, so the manifest records the version and a restore under a
    different version compares row counts only (and says so).
    """
    sql = f"SELECT count(*), coalesce(sum(hash(_r)::HUGEINT), 0) FROM {table} AS _r"  # noqa: S608
    return [int(x) for x in con.execute(sql).fetchone()]


def _objects(con, catalog: str) -> dict:
    skip = list(SKIP_SCHEMAS)
    for kind, q in (
        ("sequences", "SELECT sequence_name FROM duckdb_sequences() WHERE database_name = ?"),
        ("macros", "SELECT function_name FROM duckdb_functions() WHERE database_name = ? "
                   "AND NOT internal"),
        ("types", "SELECT type_name FROM duckdb_types() WHERE database_name = ? AND NOT internal"),
    ):
        found = [r[0] for r in con.execute(q, [catalog]).fetchall()]
        if found:
            raise BackupError(f"export does not support {kind} yet (found {', '.join(found)})")
    schemas = [r[0] for r in con.execute(
        "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ? AND NOT internal "
        "AND schema_name <> 'main' AND NOT list_contains(?, schema_name) ORDER BY oid",
        [catalog, skip]).fetchall()]
    tables = con.execute(
        "SELECT schema_name, table_name, sql FROM duckdb_tables() WHERE database_name = ? "
        "AND NOT temporary AND NOT list_contains(?, schema_name) ORDER BY table_oid",
        [catalog, skip]).fetchall()
    views = con.execute(
        "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE database_name = ? "
        "AND NOT internal AND NOT temporary AND NOT list_contains(?, schema_name) "
        "ORDER BY view_oid", [catalog, skip]).fetchall()
    indexes = [r[0] for r in con.execute(
        "SELECT sql FROM duckdb_indexes() WHERE database_name = ? AND sql IS NOT NULL "
        "AND NOT list_contains(?, schema_name)", [catalog, skip]).fetchall()]
    return {"schemas": schemas, "tables": tables, "views": views, "indexes": indexes}


def export(settings: Settings, dest: str | os.PathLike[str], *, from_snapshot: bool = False,
           archive: bool = True, log: Callable[[str], None] = lambda m: None) -> dict:
    """Write the whole warehouse to ``dest`` (a new folder) as Parquet; return the manifest.

    From the live file by default, holding the writer lock so that the export is one consistent
    state (ingestion waits, with "busy, retrying"); ``from_snapshot`` exports the current
    snapshot instead and never makes anything wait.
    """
    dest = Path(dest).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest}: already exists and is not an empty folder; choose a new one")
    if not settings.warehouse.exists():
        raise BackupError(f"{settings.warehouse}: no warehouse here yet, nothing to export")
    work = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    for stale in dest.parent.glob(f".{dest.name}.partial-*"):  # left by a killed export
        if not _alive(stale.name.rpartition("-")[2]):
            shutil.rmtree(stale, ignore_errors=True)
    try:
        shutil.rmtree(work, ignore_errors=True)
        (work / "data").mkdir(parents=True)
    except OSError as exc:
        raise BackupError(f"{work}: cannot create the export folder: {exc.strerror or exc}"
                          ) from None
    try:
        if from_snapshot:
            from warehouse.serving import snapshot

            src = snapshot.current(settings)
            if src is None:
                raise BackupError(f"{settings.snapshot_dir}: no snapshot published yet "
                                  "(run `pwh snapshot`, or export the live warehouse)")
            con = duckdb.connect(str(src), read_only=True,
                                 config={"autoinstall_known_extensions": False})
            source = {"kind": "snapshot", "path": str(src), "version": snapshot.version_of(src)}
        else:
            con = db.connect_rw(settings.warehouse)
            source = {"kind": "live", "path": str(settings.warehouse)}
        try:
            manifest = _export_tables(con, work, source, log)
        finally:
            con.close()
        if archive:
            manifest["archive"] = _copy_archive(settings.archive_dir, work / "archive", log)
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _fsync_tree(work)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        os.replace(work, dest)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, OSError):
            raise BackupError(f"export to {dest} failed: {exc.filename or ''}: "
                              f"{exc.strerror or exc}; nothing was written under {dest.name}"
                              ) from None
        if isinstance(exc, duckdb.Error):
            raise BackupError(f"export to {dest} failed: {exc}") from None
        raise
    return manifest


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _export_tables(con, work: Path, source: dict, log) -> dict:
    catalog = con.execute("SELECT current_database()").fetchone()[0]
    objs = _objects(con, catalog)
    tables = []
    for schema, table, ddl in objs["tables"]:
        name = f"{schema}.{table}"
        rel = f"data/{schema}.{table}.parquet"
        q = _q(catalog, schema, table)
        cols = con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = ? "
            "AND schema_name = ? AND table_name = ? ORDER BY column_index",
            [catalog, schema, table]).fetchall()
        # Parquet has no 128-bit integers (DuckDB writes them as DOUBLE, losing digits) and no
        # TIME WITH TIME ZONE: such columns travel as text; the restore casts them back exactly.
        as_text = [c for c, t in cols if _LOSSY_IN_PARQUET.search(t)]
        select = ", ".join(f"CAST({_q(c)} AS VARCHAR) AS {_q(c)}" if c in as_text else _q(c)
                           for c, _ in cols)
        con.execute(f"COPY (SELECT {select} FROM {q}) TO ? "  # noqa: S608
                    "(FORMAT parquet, COMPRESSION zstd)", [str(work / rel)])
        fp = fingerprint(con, q)
        tables.append({"name": name, "file": rel, "rows": fp[0], "fingerprint": fp, "ddl": ddl,
                       "as_text": as_text})
        log(f"exported {name}: {fp[0]} rows")
    return {
        "format": FORMAT,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "source": source,
        "duckdb_version": duckdb.__version__,
        "schemas": objs["schemas"],
        "tables": tables,
        "views": [{"name": f"{s}.{v}", "ddl": ddl} for s, v, ddl in objs["views"]],
        "indexes": objs["indexes"],
    }


def _copy_archive(src: Path, dest: Path, log) -> dict:
    n = size = 0
    if src.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            if f.is_file() and not f.name.startswith("."):
                shutil.copy2(f, dest / f.name)
                n += 1
                size += f.stat().st_size
    log(f"copied {n} archived raw file(s), {size / 1e6:.1f} MB")
    return {"files": n, "bytes": size}


def _fsync_tree(root: Path) -> None:
    for p in [*root.rglob("*"), root]:
        with contextlib.suppress(OSError):
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def read_manifest(src: Path) -> dict:
    path = src / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BackupError(f"{src}: not a pwh export ({MANIFEST} is missing)") from None
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: format {manifest.get('format') if isinstance(manifest, dict) else '?'!r}"
                          f" is not {FORMAT!r}")
    return manifest


def restore(settings: Settings, src: str | os.PathLike[str], *, replace: bool = False,
            publish: bool = True, log: Callable[[str], None] = lambda m: None) -> dict:
    """Rebuild the warehouse from an export folder; return a summary. See the module doc."""
    src = Path(src).resolve()
    manifest = read_manifest(src)
    target = settings.warehouse
    if target.exists() and not replace:
        raise BackupError(f"{target}: a warehouse already exists; pass --replace to restore over "
                          "it (it is kept as a .before-import-<time> file)")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise db.io_error(target.parent, exc, "create the warehouse folder") from None
    work = target.with_name(f".{target.name}.import-{os.getpid()}")
    _remove_db(work)
    try:
        _import_tables(work, src, manifest, log)
        archived = _restore_archive(src / "archive", settings.archive_dir, log)
    except BaseException as exc:
        _remove_db(work)
        if isinstance(exc, OSError):
            raise db.io_error(work, exc, "restore the warehouse") from None
        if isinstance(exc, duckdb.Error):
            raise BackupError(f"restore from {src} failed: {exc}") from None
        raise
    kept = None
    if target.exists():
        kept = target.with_name(
            f"{target.name}.before-import-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}")
        old = db.connect_rw(target)  # waits for any writer; no one can open it meanwhile
        try:
            old.execute("CHECKPOINT")
            os.replace(target, kept)
            os.replace(work, target)
        finally:
            old.close()
    else:
        os.replace(work, target)
    summary = {"tables": len(manifest["tables"]),
               "rows": sum(t["rows"] for t in manifest["tables"]),
               "archive_files": archived, "previous": str(kept) if kept else None}
    if publish:
        from warehouse.serving import snapshot

        summary["snapshot"] = snapshot.publish(settings).version
    return summary


def _remove_db(path: Path) -> None:
    for f in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


def _import_tables(work: Path, src: Path, manifest: dict, log) -> None:
    # The work file is private until it is moved into place, so no transaction is needed; each
    # statement commits on its own (a failed CREATE VIEW must not abort the others).
    con = duckdb.connect(str(work), config=dict(db.BASE_CONFIG))
    try:
        for schema in manifest["schemas"]:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {_q(schema)}")
        for t in manifest["tables"]:
            con.execute(t["ddl"])
            path = src / t["file"]
            if not path.is_file():
                raise BackupError(f"{path}: missing from the export (table {t['name']})")
            schema, _, table = t["name"].partition(".")
            con.execute(f"INSERT INTO {_q(schema, table)} SELECT * FROM read_parquet(?)",  # noqa: S608
                        [str(path)])
        pending = list(manifest["views"])
        while pending:  # a view may read another view: create in dependency order
            failed = []
            for v in pending:
                try:
                    con.execute(v["ddl"])
                except duckdb.CatalogException:
                    failed.append(v)
            if len(failed) == len(pending):
                raise BackupError(f"cannot recreate view(s) {', '.join(v['name'] for v in failed)}"
                                  " (they read objects that are not in the export)")
            pending = failed
        for ddl in manifest["indexes"]:
            con.execute(ddl)
        same_version = manifest.get("duckdb_version") == duckdb.__version__
        if not same_version:
            log(f"note: exported with DuckDB {manifest.get('duckdb_version')}, restoring with "
                f"{duckdb.__version__}: verifying row counts only")
        for t in manifest["tables"]:
            schema, _, table = t["name"].partition(".")
            got = fingerprint(con, _q(schema, table))
            if got[0] != t["rows"] or (same_version and got != t["fingerprint"]):
                raise BackupError(
                    f"{src / t['file']}: restored {t['name']} differs from the export "
                    f"({got[0]} rows vs {t['rows']}, or a different content fingerprint); the "
                    "export is damaged or was changed")
            log(f"restored {t['name']}: {t['rows']} rows"
                + (" (fingerprint verified)" if same_version else ""))
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _restore_archive(src: Path, dest: Path, log) -> int:
    if not src.is_dir():
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        data = f.read_bytes()
        stem = f.name.removesuffix(".json")
        if len(stem) == 64 and f.name.endswith(".json") and not f.name.endswith(".meta.json"):
            if hashlib.sha256(data).hexdigest() != stem:
                raise BackupError(f"{f}: archived raw file does not match its SHA-256 name; the "
                                  "export is damaged")
        out = dest / f.name
        if out.exists() and out.read_bytes() == data:
            continue
        tmp = dest / f".{f.name}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, out)
        n += 1
    log(f"restored {n} archived raw file(s)")
    return n
