"""Re-derive runs from their archived bytes after a parser changed (``pwh rederive``).

Every run records the ``parser_version`` that derived its raw rows (``raw.files``), and its bytes
are kept content-addressed in the archive (``<state>/archive/<sha256>.json``). When pwh's
parser of a format gets a higher version (e.g. ``kineto_trace/1`` -> ``kineto_trace/2``, which
keeps the CPU side of a trace), the runs of the older version are *stale*; :func:`rederive`
reads each one's archived bytes again through today's reader and replaces its rows:

* **atomic per run**: in one transaction, the run's rows are deleted from every raw table, the
  archived bytes read through the reader the loader would pick (:mod:`.readers`, whole or
  streamed) and inserted, and ``raw.files.source_format``/``parser_version`` updated; a kill at
  any point leaves each run wholly old or wholly new;
* **exactly once, resumable**: the run's version is read again inside its transaction, so a run
  another process re-derived meanwhile is left alone; a rerun after a kill picks up the runs
  still stale;
* **identity kept**: the run's ``raw.trace_jobs`` row (its job, rank and world size) stays, and
  the manifest row keeps its ``original_path``, ``file_name``, ``byte_size``,
  ``series``, ``label``, ``captured_at``, ``meta_source``, ``archive_path`` and ``ingested_at``
  (the time the run entered the warehouse, not the time it was re-read); but for one thing:
  a run whose capture time was the default (its identity all default, or that time the start
  of the file's own time base: :func:`_clock_was_default`) takes the capture time today's reader
  reads from the file's own clock, where it reads one, as a fresh ingest would (kineto_trace/3
  reads Kineto's clock right: the base alone, floored to 3 months by libkineto, had put every
  trace of a quarter at one instant);
* the archived bytes must hash to the run's id; a missing or altered archive file, or bytes
  today's parser refuses, leave the run as it was and are reported (the command exits 1).

* **recorded**: the run's transaction adds a row to ``meta.rederivations`` (run, parser
  versions before and after, ``rederived_at``, UTC; the table is created by the first
  re-derivation): the Dagster ``warehouse_sensor`` reports a re-derived run's raw partition
  again, once, with its new row counts and a new data version (``ingested_at`` alone would
  never show it);

Models are not built here: a re-derived run's manifest row changed, so its incremental stamps
changed, and the next ``pwh build`` rebuilds what depends on it (snapshot deltas likewise copy
the runs whose manifest row changed).

Runs derived by a *newer* parser than this pwh's, or of a format this pwh does not know, are
listed and left alone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse import db
from warehouse.config import Settings
from warehouse.errors import FormatError, internal_error
from warehouse.ingesting import formats, readers
from warehouse.ingesting.forking import forks_done
from warehouse.ingesting.reading import Declined
from warehouse.ingesting.snapshot import Snapshot, archive_path, stat_key
from warehouse.ingesting.writer import Writer, set_threads

# Raw tables of a run's identity, not of its bytes (a job is named by the user, the sidecar or the
# folder): kept, like the manifest row; no reader writes them.
IDENTITY_TABLES = frozenset({"trace_jobs"})

# A batch holds the writer for at most this long, then lets other writers in (as ingest does).
HOLD_WRITER_S = 2.0

# One row per re-derivation, in the run's transaction (what the warehouse sensor reports).
REDERIVATIONS_DDL = """
CREATE SCHEMA IF NOT EXISTS meta;
CREATE TABLE IF NOT EXISTS meta.rederivations (
    run_id          VARCHAR NOT NULL,    -- the run re-derived (raw.files.sha256)
    parser_before   VARCHAR NOT NULL,    -- the parser version that had derived its rows
    parser_version  VARCHAR NOT NULL,    -- the one that derived them again
    rederived_at    TIMESTAMP NOT NULL   -- UTC
)"""

_VERSION = re.compile(r"^(?P<name>.+)/(?P<n>\d+)$")


def _parse_version(v: str) -> tuple[str, int] | None:
    m = _VERSION.match(v or "")
    return (m["name"], int(m["n"])) if m else None


def compare_versions(recorded: str, current: str) -> int:
    """-1: ``recorded`` is older than ``current`` (re-derive), 0: the same, 1: newer (a newer
    pwh wrote it: leave it). Versions are ``<name>/<number>``; two that cannot be compared
    (another spelling, another name) count as older: today's parser is the one pwh trusts."""
    if recorded == current:
        return 0
    a, b = _parse_version(recorded), _parse_version(current)
    if a is not None and b is not None and a[0] == b[0] and a[1] > b[1]:
        return 1
    return -1


@dataclass(frozen=True)
class Run:
    """One manifest row to re-derive."""

    run_id: str
    file_name: str
    original_path: str
    source_format: str
    parser_version: str
    current_version: str
    archive_path: str | None
    meta_source: str = "default"  # cli | sidecar | default: where the run's identity came from

    @property
    def short(self) -> str:
        return self.run_id[:12]


@dataclass
class Plan:
    """What :func:`plan` found: the stale runs (oldest ingest first) and the runs left alone."""

    stale: list[Run] = field(default_factory=list)
    newer: list[tuple[str, str, str]] = field(default_factory=list)  # run_id, format, version
    unknown: list[tuple[str, str, str]] = field(default_factory=list)


def plan(con, only_formats: Iterable[str] | None = None) -> Plan:
    """The runs whose parser version is older than today's parser of their format."""
    wanted = set(only_formats) if only_formats else None
    out = Plan()
    for run_id, name, path, fmt, version, arch, source in con.execute(
            "SELECT sha256, file_name, original_path, source_format, parser_version, "
            "archive_path, meta_source FROM raw.files ORDER BY ingested_at, sha256").fetchall():
        if wanted is not None and fmt not in wanted:
            continue
        mod = formats.BY_NAME.get(fmt)
        if mod is None:
            out.unknown.append((run_id, fmt, version))
            continue
        order = compare_versions(version, mod.PARSER_VERSION)
        if order < 0:
            out.stale.append(Run(run_id, name, path, fmt, version, mod.PARSER_VERSION, arch,
                                 source))
        elif order > 0:
            out.newer.append((run_id, fmt, version))
    return out


@dataclass
class Outcome:
    run: Run
    status: str  # rederived | skipped | failed
    message: str = ""
    new_version: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failed"


class Skip(Exception):
    """The run needs nothing from us (another process re-derived it, or it is gone)."""


class Stale(Exception):
    """Today's reader did not make the run any newer (it would be picked again and again)."""


def locate(settings: Settings, run: Run) -> Path | None:
    """The run's archived bytes: in this warehouse's archive, else where the manifest says."""
    here = archive_path(settings, run.run_id)
    if here.is_file():
        return here
    if run.archive_path and Path(run.archive_path).is_file():
        return Path(run.archive_path)
    return None


def tables_with_rows(con) -> set[str]:
    """The raw tables holding any row: the only ones a run's old rows can be in."""
    return {t.name for t in formats.ALL_TABLES if con.execute(
        f"SELECT EXISTS (SELECT 1 FROM raw.{t.name})").fetchone()[0]}  # noqa: S608 - known names


def rederive_run(settings: Settings, con, run: Run, filled: set[str] | None = None) -> Outcome:
    """Re-derive one run in one transaction on the writer connection ``con``. Never raises for
    a run that cannot be re-derived (missing or altered archive file, bytes the parser refuses):
    the outcome says why, and the run is left as it was. ``filled``: the raw tables holding
    rows (:func:`tables_with_rows`, kept current by the caller's re-derivations; computed when
    not given): DELETEs are issued there only (~1-10 ms saved per empty table and run)."""
    t0 = time.perf_counter()
    if filled is None:
        filled = tables_with_rows(con)
    path = locate(settings, run)
    if path is None:
        where = run.archive_path or archive_path(settings, run.run_id)
        return Outcome(run, "failed", f"archived copy missing ({where}): the run is left as "
                       f"{run.parser_version}; restore the file (e.g. from a `pwh export`) "
                       "and run this again", seconds=time.perf_counter() - t0)
    shown = run.original_path
    try:
        todo = readers.candidates(path, path.stat().st_size)
        while True:
            cls = todo.pop(0)
            try:
                version, counts = _replace(settings, con, run, path, cls, shown, filled)
                return Outcome(run, "rederived", ", ".join(f"{v} {k}" for k, v in counts.items()),
                               version, counts, time.perf_counter() - t0)
            except Declined as d:
                if d.retry is not None:
                    todo.insert(0, d.retry)
    except Skip as s:
        return Outcome(run, "skipped", str(s), seconds=time.perf_counter() - t0)
    except duckdb.Error:
        raise  # the warehouse failed, not the run: stop (the transaction was rolled back)
    except Exception as exc:  # noqa: BLE001 - one run must not stop the others
        if isinstance(exc, (FormatError, Stale)) or (isinstance(exc, OSError)
                                                     and not exc.strerror):
            msg = str(exc)
        elif isinstance(exc, OSError):
            msg = f"{path}: {exc.strerror}"
        else:
            msg = f"{shown}: {internal_error(exc)}"
        return Outcome(run, "failed", f"not re-derived, left as {run.parser_version}: {msg}",
                       seconds=time.perf_counter() - t0)


def _replace(settings: Settings, con, run: Run, path: Path, cls, shown: str, filled: set[str]
             ) -> tuple[str, dict[str, int]]:
    """One attempt with one reader class: the run's transaction. Raises :class:`Declined`,
    :class:`Skip`, :class:`Stale`, :class:`FormatError`, ``OSError`` (nothing committed in
    every case)."""
    before = stat_key(path)
    take = Snapshot.copy if cls.ON_DISK else Snapshot.read
    snap = take(settings, path, before)
    if snap is None:
        raise OSError(f"{path}: the archived copy changed while it was read")
    if snap.sha is not None and snap.sha != run.run_id:  # read whole: hashed already
        snap.discard()
        raise OSError(_not_the_runs_bytes(path, snap.sha))
    reader = cls(snap, shown)
    began = False
    threads_was = None
    try:
        reader.start()  # parser processes forked before any thread of ours exists
        forks_done()
        if snap.on_disk:
            snap.hash_aside()
        con.execute("BEGIN TRANSACTION")
        began = True
        row = con.execute("SELECT parser_version FROM raw.files WHERE sha256 = ?",
                          [run.run_id]).fetchone()
        if row is None:
            raise Skip("no longer in the warehouse")
        if row[0] != run.parser_version:
            raise Skip(f"already re-derived ({row[0]})")
        for t in formats.ALL_TABLES:
            if t.name in filled and t.name not in IDENTITY_TABLES:
                con.execute(f"DELETE FROM raw.{t.name} WHERE run_id = ?",  # noqa: S608
                            [run.run_id])
        if reader.PARALLEL:  # the parser has a core of its own
            threads_was = set_threads(con, 1)
        inserted = _insert_all(con, reader, run.run_id)
        sha = snap.wait_sha()
        if sha is None:
            raise snap.hash_error or OSError(f"{path}: could not be hashed")
        if sha != run.run_id:
            raise OSError(_not_the_runs_bytes(path, sha))
        if compare_versions(reader.parser_version, run.parser_version) <= 0:
            raise Stale(f"{shown}: today's reader still reports {reader.parser_version}, not "
                        f"newer than {run.parser_version}")
        reader.finish(con, run.run_id)
        if threads_was is not None:
            set_threads(con, threads_was)
            threads_was = None
        con.execute("UPDATE raw.files SET source_format = ?, parser_version = ? "
                    "WHERE sha256 = ?", [reader.source_format, reader.parser_version, run.run_id])
        if reader.captured_at is not None and _clock_was_default(con, run, inserted):
            # the file's own clock, read by today's reader, as a fresh ingest would take it
            con.execute("UPDATE raw.files SET captured_at = ? WHERE sha256 = ?",
                        [reader.captured_at, run.run_id])
        con.execute(REDERIVATIONS_DDL)
        con.execute("INSERT INTO meta.rederivations VALUES (?, ?, ?, ?)",
                    [run.run_id, run.parser_version, reader.parser_version,
                     dt.datetime.now(dt.UTC).replace(tzinfo=None)])
        con.execute("COMMIT")
        began = False
        filled |= inserted
        return reader.parser_version, dict(reader.summary)
    finally:
        if began:
            with contextlib.suppress(Exception):
                con.execute("ROLLBACK")
        if threads_was is not None:
            with contextlib.suppress(Exception):
                set_threads(con, threads_was)
        reader.close()
        snap.discard()


def _clock_was_default(con, run: Run, inserted: set[str]) -> bool:
    """Was the run's capture time the default (the file's own clock or its mtime), so that
    today's reader may read it again? Yes when its whole identity was default; else when it
    equals the start of the file's own time base (``trace_runs.origin_ns``: Kineto's
    ``baseTimeNanoseconds``, nsys's session start), which is what the clock of older readers
    was (a run given only ``--series``, say, kept the file's clock for its capture time)."""
    if run.meta_source == "default":
        return True
    if "trace_runs" not in inserted:
        return False
    row = con.execute("SELECT f.captured_at = make_timestamp(t.origin_ns // 1000) "
                      "FROM raw.files AS f JOIN raw.trace_runs AS t ON t.run_id = f.sha256 "
                      "WHERE f.sha256 = ?", [run.run_id]).fetchone()
    return bool(row and row[0])


def _not_the_runs_bytes(path: Path, sha: str) -> str:
    return (f"{path}: the archived copy is not the run's bytes (its SHA-256 is {sha}): "
            "restore the original file")


def _insert_all(con, reader, run_id: str) -> set[str]:
    """The reader's tables into the open transaction, gathered into few INSERTs (the writer's
    insert: a table without ``run_id`` gets the run's bound). Returns the tables written."""
    known = {t.name for t in formats.ALL_TABLES}
    ins = Writer(con, lambda stop=None: run_id, ask=False)  # its insert(); the thread never runs
    ins.con = con
    pending: dict[str, list[pa.Table]] = {}
    size = 0
    written: set[str] = set()

    def flush():
        nonlocal pending, size
        for tname, tables in pending.items():
            written.add(tname)
            ins.insert(tname, tables[0] if len(tables) == 1 else pa.concat_tables(tables),
                       run_id)
        pending, size = {}, 0

    for tname, table in reader.tables():
        if tname not in known:
            raise ValueError(f"a reader sent rows for raw.{tname}, which is no raw table")
        if table.num_rows:
            pending.setdefault(tname, []).append(table)
            size += table.nbytes
        del table
        if size >= reader.INSERT_BYTES:
            flush()
    flush()
    return written


@dataclass
class Report:
    plan: Plan
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def rederive(settings: Settings, *, only_formats: Iterable[str] | None = None,
             progress: Callable[[int, int, Outcome], None] | None = None,
             starting: Callable[[int, int, Run], None] | None = None) -> Report:
    """Re-derive every stale run (see the module's docstring), oldest ingest first, one
    transaction each. The writer is held at most ``HOLD_WRITER_S`` at a time (closing it
    checkpoints), so that an ingest or a build waiting for the warehouse gets its turn; the
    runs still stale are planned again each time. ``starting(n, N, run)`` is called before a
    run, ``progress(n, N, outcome)`` after it."""
    report: Report | None = None
    done: set[str] = set()  # tried in this call (a failed run is not retried in a loop)
    n = 0
    total = 0
    while True:
        with db.writer(settings.warehouse) as con:
            p = plan(con, only_formats)
            if report is None:
                report, total = Report(p), len(p.stale)
            todo = [r for r in p.stale if r.run_id not in done]
            if not todo:
                return report
            opened = time.monotonic()
            filled = tables_with_rows(con)
            for run in todo:
                if time.monotonic() - opened > HOLD_WRITER_S:
                    break  # let others in; plan again
                n += 1
                if starting:
                    starting(n, total, run)
                out = rederive_run(settings, con, run, filled)
                done.add(run.run_id)
                report.outcomes.append(out)
                if progress:
                    progress(n, total, out)
