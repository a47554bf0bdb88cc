"""The run bookkeeping ``pwh runs`` reads: current after every ingest, check and build.

The analysts' snapshot is published after builds; the runs list and its errors must be current
right after *any* ingest or check, and reading the live file would make writers wait. So whoever
writes publishes a small *status file* before letting the writer go, one per warehouse file
(a state folder can hold several: ``warehouse.duckdb``, a kept
``warehouse.duckdb.before-import-<tag>`` …)::

    <state>/status/<warehouse file name>.duckdb
                            tables runs (raw.files + check status), errors (raw.ingest_errors +
                            runs that failed their blocking checks), checks (the status
                            of every validated run, as checks.run_status) and about (the
                            warehouse file it describes: checked on open, a mismatch, e.g.
                            a copied state folder, is republished)
    <state>/status/<warehouse file name>.key
                            fingerprints of the runs and of the check results it shows

Publishing is skipped when neither fingerprint changed (a few aggregate queries), and
otherwise writes a fresh file beside the old one and renames it into place: a reader sees the
old file or the new one, a kill leaves the old one, and a reader holding the old file never
blocks the writer. The check status is the costly part (an aggregate over every check result):
when only runs or failed files changed (an ingest), it is copied from the previous status file
instead of recomputed. Writers call :func:`refresh` while they still hold the live file:
``db.writer`` on leaving (``pwh build``, ``pwh check``, the Dagster ops, snapshot publishing) and
the loader at the end of a batch or a single-file ingest. A failed refresh never fails the write
that triggered it: it warns, and the next writer tries again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from pathlib import Path

import duckdb

from warehouse import db
from warehouse.config import Settings

STATUS_DIR = "status"
ALIAS = "pwh_status_new"
OLD = "pwh_status_old"

# checks.run_status, computed the cheap way (only failing rows are aggregated into lists): the
# same rows as the view, in about half the time.
CHECKS_SQL = """
with latest as (
    select run_id, max(validated_at) as validated_at from checks.results group by run_id
), failed as (
    select r.run_id, list(distinct r.invariant_id order by r.invariant_id) as failed_invariants
    from checks.results r
    join latest l using (run_id, validated_at)
    where not r.success and r.critical
    group by r.run_id
)
select l.run_id, case when f.run_id is null then 'passed' else 'failed' end as status,
       f.failed_invariants, l.validated_at
from latest l
left join failed f using (run_id)
"""

# {checks}: a table or view with the columns of checks.run_status
RUNS_SQL = """
select f.sha256 as run_id, f.source_format, f.series, f.label, f.captured_at, f.ingested_at,
       f.byte_size, coalesce(s.status, 'unchecked') as checks, s.failed_invariants,
       s.validated_at, f.file_name, f.original_path, f.meta_source
from raw.files f
left join {checks} s on s.run_id = f.sha256
"""

ERRORS_SQL = """
select occurred_at, 'ingest' as stage, error_kind, original_path, json_path, message,
       quarantine_path, sha256
from raw.ingest_errors
union all
select s.validated_at, 'checks', 'check_failed', f.original_path, null,
       'run ' || left(f.sha256, 12) || ' (series ' || f.series || ', label ' || f.label
       || ') failed its blocking checks: invariant(s) '
       || array_to_string(s.failed_invariants, ', ')
       || '; it is kept but left out of trends. Details: pwh check ' || left(f.sha256, 12)
       || ' --samples; what each invariant means: docs/checks.md',
       null, f.sha256
from {checks} s
join raw.files f on f.sha256 = s.run_id
where s.status = 'failed'
"""

FILES_KEY_SQL = """
select (select count(*) from raw.files),
       (select max(ingested_at) from raw.files),
       (select bit_xor(hash(sha256, series, label, captured_at, original_path)) from raw.files),
       (select count(*) from raw.ingest_errors),
       (select max(occurred_at) from raw.ingest_errors)
"""
CHECKS_KEY_SQL = "select count(*), max(validated_at) from checks.results"


def path(settings: Settings) -> Path:
    """The status file of ``settings.warehouse`` (named after the warehouse file)."""
    return settings.state_dir / STATUS_DIR / f"{settings.warehouse.name}.duckdb"


def key_path(settings: Settings) -> Path:
    return settings.state_dir / STATUS_DIR / f"{settings.warehouse.name}.key"


def refresh(settings: Settings | Path, con, *, force: bool = False, quiet: bool = False) -> bool:
    """Bring the status file up to date from ``con`` (a read-write connection to the live
    warehouse, outside any transaction). Returns whether a new file was written. Never raises:
    a failure is reported on stderr (unless ``quiet``: the caller is failing anyway) and left
    to the next writer."""
    if isinstance(settings, Path):
        from warehouse.config import settings as resolve

        settings = resolve(settings)
    try:
        return _refresh(settings, con, force)
    except Exception as exc:  # noqa: BLE001 - the write that called us succeeded: keep it so
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not quiet:
            print(f"warning: {path(settings)}: could not update the runs status ({msg}); "
                  "`pwh runs` may be behind until the next ingest, check or build",
                  file=sys.stderr)
        with contextlib.suppress(OSError):
            key_path(settings).unlink()
        return False


def _refresh(settings: Settings, con, force: bool) -> bool:
    files_key = repr(con.execute(FILES_KEY_SQL).fetchall()[0])
    checks_key = repr(con.execute(CHECKS_KEY_SQL).fetchall()[0])
    key_file = key_path(settings)
    target = path(settings)
    target.parent.mkdir(exist_ok=True)
    old = ["", ""]
    if target.exists():
        with contextlib.suppress(OSError):
            old = (key_file.read_text().split("\n") + ["", ""])[:2]
    if not force and old == [files_key, checks_key]:
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    attached = False
    try:
        # a private file, renamed into place only when complete: written in one transaction
        # without DuckDB's own syncs, then synced once, whole (a few ms per sync on a busy
        # disk: 8 of them before)
        with db.unsynced(con):
            con.execute(f"ATTACH '{_quote(tmp)}' AS {ALIAS}")
            attached = True
            copied = not force and old[1] == checks_key and _copy_checks(con, target)
            con.execute("BEGIN")
            try:
                if not copied:
                    con.execute(f"CREATE TABLE {ALIAS}.checks AS {CHECKS_SQL}")
                con.execute(
                    f"CREATE TABLE {ALIAS}.runs AS {RUNS_SQL.format(checks=ALIAS + '.checks')}")
                con.execute(f"CREATE TABLE {ALIAS}.errors AS "
                            f"{ERRORS_SQL.format(checks=ALIAS + '.checks')}")
                con.execute(f"CREATE TABLE {ALIAS}.about AS SELECT ?::varchar AS warehouse",
                            [str(settings.warehouse)])
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
            con.execute(f"DETACH {ALIAS}")  # checkpoints and closes the new file
            attached = False
        db.fsync_file(tmp)
        os.replace(tmp, target)
        key_file.write_text(f"{files_key}\n{checks_key}")
    finally:
        if attached:
            with contextlib.suppress(duckdb.Error):
                con.execute(f"DETACH {ALIAS}")
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return True


def _copy_checks(con, target: Path) -> bool:
    """Copy the check status of the previous status file (check results unchanged)."""
    try:
        con.execute(f"ATTACH '{_quote(target)}' AS {OLD} (READ_ONLY)")
    except duckdb.Error:
        return False
    try:
        con.execute(f"CREATE TABLE {ALIAS}.checks AS SELECT * FROM {OLD}.checks")  # noqa: S608
        return True
    except duckdb.Error:
        return False
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"DETACH {OLD}")


def _quote(p: Path) -> str:
    return str(p).replace("'", "''")


def open_status(settings: Settings):
    """A read-only connection to the status file of ``settings.warehouse``, publishing it
    first (takes the writer once) if there is none yet, or if it describes another file (a
    copied or moved state folder, a status file from before ``about`` existed)."""
    target = path(settings)
    if target.exists():
        con = _connect(target)
        if _describes(con, settings):
            return con
        con.close()
    with db.writer(settings.warehouse) as con:
        _refresh(settings, con, force=True)
    return _connect(target)


def _describes(con, settings: Settings) -> bool:
    try:
        rows = con.execute("SELECT warehouse FROM about").fetchall()
    except duckdb.Error:
        return False
    return rows == [(str(settings.warehouse),)]


def _connect(target: Path):
    for _attempt in range(5):
        try:
            return duckdb.connect(str(target), read_only=True,
                                  config={"autoinstall_known_extensions": False})
        except duckdb.IOException as exc:  # replaced between exists() and open: try again
            if target.exists() and "lock" not in str(exc).lower():
                raise
    return duckdb.connect(str(target), read_only=True,
                          config={"autoinstall_known_extensions": False})
