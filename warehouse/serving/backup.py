"""Backup and restore: the whole warehouse as Parquet files plus a manifest, and back.

``export`` writes, into a new folder::

    pwh-export.json          format, source, DuckDB version, every schema, table (DDL, row
                             count, content fingerprint), view and index, in creation order
    data/<schema>.<table>.parquet
    archive/                 the content-addressed raw files (unless archive=False)

The folder appears under its final name only when complete (it is written as a hidden
``.<name>.partial-<nonce>-<pid>`` folder and renamed without replacing anything), so a killed
export never looks like a backup and an export never replaces another. The work folder's first
file is a marker (``.pwh-export-partial``), removed only after the manifest is written and just
before the rename; a later export to the same name (any export, in pwh's own backups folder)
removes a killed export's work folder only if it holds that marker or pwh's manifest and its
pid is gone, so nothing pwh did not create is ever removed (the removal deletes the marker
last). Without a destination it
goes to ``<state>/backups/export-<tag>`` (``warehouse.keep.tag``: UTC time to the microsecond
plus a random suffix).

``restore`` rebuilds a warehouse from such a folder into a new file beside the target, checks
every table's row count and fingerprint against the manifest, and only then moves it into place.
The previous file, if any and ``replace`` is given, is kept as
``warehouse.duckdb.before-import-<tag>``: that name is linked to it first (never replacing a
file), then the new file is renamed over the warehouse's name, all while holding the previous
file's writer lock. Killed at any point, the warehouse is the old file or the new one; killed
between those two steps, the kept name is a second name of the (old, live) warehouse file,
which the next import removes. Archive files are verified against their SHA-256 names and only
added, never replaced (except a file that does not match its SHA-256 name). Then a snapshot is
published so that analysts see the restored state.

The fingerprint of a table is its row count and the sum of the hashes of its rows (see
:func:`fingerprint`), so it does not depend on row order.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb

from warehouse import db, keep
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


def default_destination(settings: Settings) -> Path:
    """``<state>/backups/export-<tag>``: a new name for every export."""
    return settings.state_dir / "backups" / f"export-{keep.tag()}"


def export(settings: Settings, dest: str | os.PathLike[str] | None = None, *,
           from_snapshot: bool = False, archive: bool = True,
           log: Callable[[str], None] = lambda m: None) -> dict:
    """Write the whole warehouse to ``dest`` (a new folder; default
    :func:`default_destination`) as Parquet; return the manifest (``manifest["path"]``: the
    folder written).

    From the live file by default, holding the writer lock so that the export is one consistent
    state (ingestion waits, with "busy, retrying"); ``from_snapshot`` exports the current
    snapshot instead and never makes anything wait.
    """
    dest = Path(dest if dest is not None else default_destination(settings)).resolve()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest}: already exists and is not an empty folder; choose a new one")
    if not settings.warehouse.exists():
        raise BackupError(f"{settings.warehouse}: no warehouse here yet, nothing to export")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackupError(f"{dest.parent}: cannot create the folder: {exc.strerror or exc}"
                          ) from None
    work = dest.parent / f".{dest.name}.partial-{secrets.token_hex(4)}-{os.getpid()}"
    # in pwh's own backups folder every killed export's work folder goes; beside a folder the
    # user named, only those of an export to that same name
    own = dest.parent == default_destination(settings).parent.resolve()
    _remove_stale_partials(dest.parent, None if own else dest.name)
    try:
        work.mkdir()
        (work / PARTIAL_MARKER).write_bytes(b"")  # first: marks the folder as pwh's own
        (work / "data").mkdir()
    except OSError as exc:
        _remove_work(work)
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
        # from here to the rename the manifest marks the folder as pwh's: the marker goes last
        (work / PARTIAL_MARKER).unlink()
        _claim_destination(work, dest)
    except BaseException as exc:
        _remove_work(work)
        if isinstance(exc, OSError):
            raise BackupError(f"export to {dest} failed: {exc.filename or ''}: "
                              f"{exc.strerror or exc}; nothing was written under {dest.name}"
                              ) from None
        if isinstance(exc, duckdb.Error):
            raise BackupError(f"export to {dest} failed: {exc}") from None
        raise
    manifest["path"] = str(dest)
    return manifest


def _claim_destination(work: Path, dest: Path) -> None:
    """Rename the finished export to ``dest``, replacing nothing but an empty folder."""
    try:
        keep.rename_noreplace(work, dest)
    except FileExistsError:
        try:
            os.rename(work, dest)  # replaces an empty folder only (ENOTEMPTY otherwise)
        except OSError:
            raise BackupError(f"{dest}: appeared while exporting and is not an empty folder "
                              "(another export?); nothing was replaced") from None
    keep.fsync(dest.parent)


# Written first into an export's work folder, removed just before it is renamed into place:
# only a folder holding it is pwh's own, and only such a folder is ever removed as stale.
PARTIAL_MARKER = ".pwh-export-partial"
_PARTIAL = re.compile(r"\.partial-([0-9a-f]+)-(\d+)")


def _remove_stale_partials(folder: Path, name: str | None) -> None:
    """Remove the hidden work folders of killed exports (their pid is gone) in ``folder``: of
    exports to ``folder / name``, or of any export when ``name`` is None (pwh's own backups
    folder). Only folders named ``.<name>.partial-<nonce>-<pid>`` *and* holding pwh's marker
    file or pwh's manifest (killed between removing the marker and the rename) are removed with
    their contents, never anything else that happens to look alike; such a folder still empty
    (the export was killed between creating it and writing the marker) is removed too: it holds
    nothing."""
    prefix = "." if name is None else f".{glob.escape(name)}."
    for stale in folder.glob(f"{prefix}*partial-*" if name is None else f"{prefix}partial-*"):
        m = _PARTIAL.fullmatch(stale.name[stale.name.rfind(".partial-"):])
        if not (m and stale.is_dir() and not stale.is_symlink()
                and (name is None or stale.name.startswith(f".{name}.partial-"))
                and not keep.pid_alive(int(m.group(2)))):
            continue
        if (stale / PARTIAL_MARKER).is_file() or _holds_own_manifest(stale):
            _remove_work(stale)
        else:
            with contextlib.suppress(OSError):  # only if empty: never anyone else's files
                stale.rmdir()


def _holds_own_manifest(folder: Path) -> bool:
    try:
        read_manifest(folder)
    except BackupError:
        return False
    return True


def _remove_work(work: Path) -> None:
    """Remove an export's work folder so that a kill at any point leaves it recognisably pwh's:
    the marker is (re)written first and removed last, after everything else, the manifest
    included."""
    with contextlib.suppress(OSError):
        if not work.is_dir() or work.is_symlink():
            return
        (work / PARTIAL_MARKER).touch()
        last = (MANIFEST, PARTIAL_MARKER)
        for entry in os.scandir(work):
            if entry.name in last:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        for name in last:
            with contextlib.suppress(FileNotFoundError):
                (work / name).unlink()
        work.rmdir()


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
    _remove_stale_work(target)
    work = target.with_name(f".{target.name}{IMPORT_WORK}{secrets.token_hex(4)}-{os.getpid()}")
    try:
        _import_tables(work, src, manifest, log)
        archived = _restore_archive(src / "archive", settings.archive_dir, log)
        kept = _move_into_place(work, target, replace, log)
    except BaseException as exc:
        _remove_db(work)
        if isinstance(exc, OSError):
            raise db.io_error(work, exc, "restore the warehouse") from None
        if isinstance(exc, duckdb.Error):
            raise BackupError(f"restore from {src} failed: {exc}") from None
        raise
    summary = {"tables": len(manifest["tables"]),
               "rows": sum(t["rows"] for t in manifest["tables"]),
               "archive_files": archived, "previous": str(kept) if kept else None}
    if publish:
        from warehouse.serving import snapshot

        try:
            summary["snapshot"] = snapshot.publish(settings).version
        except snapshot.SnapshotError as exc:
            raise BackupError(f"restored into {target}"
                              + (f" (previous warehouse kept as {kept})" if kept else "")
                              + f", but {exc}; run `pwh snapshot` to publish it") from None
    return summary


IMPORT_WORK = ".import-"  # .<warehouse>.import-<nonce>-<pid>: a restore in progress
KEPT_INFIX = ".before-import-"  # <warehouse>.before-import-<tag>: a replaced warehouse


def kept_warehouses(target: Path) -> list[Path]:
    """The warehouses ``pwh import --replace`` kept beside ``target``, oldest first."""
    return sorted(p for p in target.parent.glob(f"{target.name}{KEPT_INFIX}*")
                  if not p.name.endswith(".wal"))


def _move_into_place(work: Path, target: Path, replace: bool, log) -> Path | None:
    """Give ``work`` the warehouse's name; return where the previous warehouse is kept."""
    while not target.exists():
        try:
            keep.rename_noreplace(work, target)  # never over a warehouse created meanwhile
        except FileExistsError:
            if not replace:
                raise BackupError(f"{target}: a warehouse appeared while restoring; pass "
                                  "--replace to restore over it") from None
            continue
        keep.fsync(target.parent)
        return None
    old = db.connect_rw(target)  # waits for any writer (another import included)
    try:
        old.execute("CHECKPOINT")
        wal = target.with_name(target.name + ".wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise BackupError(f"{wal}: the write-ahead log is not empty after CHECKPOINT; "
                              "nothing was replaced")
        # We hold the old file's lock: no other import is between its two steps below, so a
        # kept name that is still the live file is a leftover of one that was killed there.
        live = target.stat()
        for p in kept_warehouses(target):
            st = p.stat()
            if (st.st_dev, st.st_ino) == (live.st_dev, live.st_ino):
                p.unlink()
                log(f"removed {p.name}: a second name of the live warehouse left by an "
                    "interrupted import")
        kept = keep.keep_new(target.parent, lambda t: f"{target.name}{KEPT_INFIX}{t}",
                             lambda p: keep.link_new(target, p))
        os.replace(work, target)  # atomic: the warehouse's name is the old file or the new one
        keep.fsync(target.parent)
    finally:
        old.close()
    return kept


def _remove_stale_work(target: Path) -> None:
    """Remove the work files of restores that were killed (their pid is gone)."""
    for p in target.parent.glob(f".{target.name}{IMPORT_WORK}*"):
        pid = p.name.removesuffix(".wal").rpartition("-")[2]
        if pid.isdigit() and not keep.pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                p.unlink()


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
    """Add the export's archived raw files to the archive. An existing file is never replaced,
    unless it is a raw file that no longer matches its SHA-256 name (damaged: repaired)."""
    if not src.is_dir():
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        data = f.read_bytes()
        stem = f.name.removesuffix(".json")
        content_addressed = (len(stem) == 64 and f.name.endswith(".json")
                             and not f.name.endswith(".meta.json"))
        if content_addressed and hashlib.sha256(data).hexdigest() != stem:
            raise BackupError(f"{f}: archived raw file does not match its SHA-256 name; the "
                              "export is damaged")
        out = dest / f.name
        if out.exists():
            if out.read_bytes() == data or not content_addressed or \
                    hashlib.sha256(out.read_bytes()).hexdigest() == stem:
                continue  # the same bytes, or a file of this warehouse's own: kept
            tmp = keep.temp_name(out)  # a damaged raw file: repaired from the export
            tmp.write_bytes(data)
            os.replace(tmp, out)
        else:
            try:
                keep.create_new(out, data, sync_dir=False)
            except FileExistsError:
                continue  # written meanwhile (an ingest of the same bytes)
        n += 1
    keep.fsync(dest)
    log(f"restored {n} archived raw file(s)")
    return n
