"""The atomic, idempotent loader: one raw file -> one transaction in the raw layer.

* identity: the SHA-256 of the file's bytes; loading the same bytes again (renamed or not) is a
  no-op reported as "already ingested";
* atomic: manifest row and every raw row are written in one explicit ``BEGIN … COMMIT``; an
  error or a kill before ``COMMIT`` leaves no trace;
* lossless: the raw bytes are archived content-addressed, and raw tables rebuild the document;
* bad files are copied to ``quarantine/`` with a ``.error.json`` sidecar and logged in
  ``raw.ingest_errors``; a batch keeps going past them.

One path for every file (:func:`ingest_file`): the file's snapshot is taken
(:mod:`.snapshot`), its run identity resolved once (:mod:`.runmeta`), a reader chosen
(:mod:`.readers`; what a reader is: :mod:`.reading`) and its tables sent to the one writer
(:mod:`.writer`); then the bytes are archived and the transaction committed, or the file is
quarantined. A rank file of a distributed job is checked against the job's other ranks and
recorded in ``raw.trace_jobs`` in the same transaction (:mod:`.jobs`). Layers, lowest first:
``forking``, ``snapshot``, ``runmeta`` and ``jobs``; ``reading`` and the readers; ``writer``;
this module. None imports a higher one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from warehouse import db, keep
from warehouse.config import Settings
from warehouse.errors import FormatError, PwhError, internal_error
from warehouse.ingesting import forking, jobs, readers, runmeta, snapshot
from warehouse.ingesting.forking import Ahead, after_forks, forks_done  # noqa: F401 - API
from warehouse.ingesting.reading import Declined, Reader
from warehouse.ingesting.snapshot import (  # noqa: F401 - archive_bytes, sha256_file: API
    Snapshot,
    archive_bytes,
    sha256_file,
    stat_key,
)
from warehouse.ingesting.writer import Stop, Writer, WriterAhead, known, writer_of

SKIP_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", runmeta.SIDECAR_SUFFIX, ".error.json")

@dataclass
class IngestResult:
    path: str
    status: str  # ingested | skipped | failed
    sha256: str | None = None
    source_format: str | None = None
    message: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    quarantine_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def is_candidate(path: Path) -> bool:
    """Files a folder scan picks up: not hidden, not partial downloads, not sidecars."""
    return not path.name.startswith(".") and not path.name.endswith(SKIP_SUFFIXES)


def expand(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Files named directly, and candidate files found recursively in folders, sorted."""
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.is_file() and is_candidate(f))
        else:
            yield p


def still_being_written(path: Path) -> bool:
    """True while another process holds ``path`` open for writing.

    Probed with a Linux read lease, which the kernel refuses (EAGAIN) while any writer has the
    file open; the lease is released at once. Where leases are unsupported (other file systems,
    no permission), the before/after ``stat`` comparison in :func:`ingest_file` still applies.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False  # unreadable: ingest_file reports it
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)  # a lease break would be harmless
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            return exc.errno == errno.EAGAIN
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


STILL_WRITING = "still being written by another process: not ingested yet (retried next time)"


def remove_stale_temp_files(settings: Settings) -> int:
    """Delete temporary archive copies and half-created warehouse files left by killed
    processes (their writer pid is gone)."""
    removed = db.remove_stale_init_files(settings.warehouse.parent)
    for tmp in settings.archive_dir.glob(".*.tmp") if settings.archive_dir.is_dir() else ():
        parts = tmp.name.split(".")
        pid = parts[-2] if len(parts) >= 3 else ""
        if not pid.isdigit() or int(pid) == os.getpid() or db.pid_alive(int(pid)):
            continue  # ours, or its writer is alive
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed


# Kept names must fit NAME_MAX (255 bytes) with everything added to them: the sidecar's
# ".error.json" and keep's temporary ".<name>.<nonce>.<pid>.tmp" (pid up to 7 digits).
NAME_MAX = 255
_ADDED = len(".error.json") + len(".." + "0" * 8 + "." + "0" * 7 + keep.TMP_SUFFIX)


def quarantine_name(prefix: str, t: str, name: str) -> str:
    """``<prefix>_<tag>_<name>``, with ``name`` shortened when the result, its sidecar or their
    temporary names would pass 255 bytes: its beginning (cut on a character boundary), ``~``, 8
    hex digits of its SHA-256 (two long names never share a stem) and its suffixes
    (``.pt.trace.json.gz`` …) kept."""
    head = f"{prefix}_{t}_"
    room = NAME_MAX - _ADDED - len(head.encode())
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= room:
        return head + name
    suffix = "".join(Path(name).suffixes[-3:])
    if len(suffix.encode("utf-8", "surrogateescape")) > 24:
        suffix = ""
    digest = "~" + hashlib.sha256(raw).hexdigest()[:8]
    keep_bytes = room - len(digest) - len(suffix.encode("utf-8", "surrogateescape"))
    stem = raw[:len(raw) - len(suffix.encode("utf-8", "surrogateescape"))][:keep_bytes]
    stem_text = stem.decode("utf-8", "ignore")  # a cut multi-byte character is dropped
    return head + stem_text + digest + suffix


def quarantine(settings: Settings, path: Path, sha: str | None, err: dict,
               name: str | None = None) -> Path | None:
    """Copy a bad file into quarantine with a ``.error.json`` sidecar. Returns the copy's path.

    Each failure is kept under its own name, ``<sha256 prefix>_<UTC time, µs>-<random>_<name>``
    (sidecar: ``+ .error.json``; a name too long for the file system is shortened, see
    :func:`quarantine_name`), created complete and never over another file
    (``warehouse.keep``): the same bad file failing twice keeps both records. Only an
    unreadable *source* leaves the record alone; an error creating the quarantine files
    (a name too long, a full disk) raises."""
    qdir = settings.quarantine_dir
    qdir.mkdir(parents=True, exist_ok=True)
    keep.remove_stale_temps(qdir)
    record = (json.dumps(err, indent=2, default=str) + "\n").encode()
    copied: list[Path] = []

    def create(dest: Path) -> None:
        copied.clear()
        try:
            src = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            src = None  # unreadable source: only the error record is kept
        if src is not None:
            with src:
                keep.create_new(dest, lambda fh: shutil.copyfileobj(src, fh, 8 << 20))
            copied.append(dest)
        try:
            keep.create_new(dest.with_name(dest.name + ".error.json"), record)
        except BaseException:
            for f in copied:  # our own copy, made a moment ago: retried or not kept half
                with contextlib.suppress(OSError):
                    f.unlink()
            copied.clear()
            raise

    prefix = (sha or "unreadable")[:16]
    keep.keep_new(qdir, lambda t: quarantine_name(prefix, t, name or path.name), create)
    return copied[0] if copied else None


def _still_a_report(snap: Snapshot, shown: str) -> None:
    """This process runs without NumPy (:func:`forking.hide_numpy`: every file named was a
    ``.ncu-rep`` report when ``pwh ingest`` started), which the other formats need: a file that
    has become another one since is refused, to be ingested again."""
    if snap.data is not None:
        head = snap.data[:16]
    else:
        with open(snap.file, "rb") as fh:
            head = fh.read(16)
    if not any(head.startswith(s.magic) for s in forking.EARLY_SCRIPTS):
        raise FormatError(shown, "byte 0", "the Nsight Compute report this `pwh ingest` was "
                          "started on; the file has changed since (ingest it again)",
                          kind="unknown_format")


def ingest_file(
    settings: Settings,
    path: str | os.PathLike[str],
    *,
    series: str | None = None,
    label: str | None = None,
    captured_at: str | dt.datetime | None = None,
    job: str | None = None,
    job_default: str | None = None,
    original_path: str | None = None,
    meta: runmeta.RunMeta | None = None,
    con=None,
) -> IngestResult:
    """Ingest one file. Never raises for a bad file: the result says what happened.

    ``con``: the batch's writer (an open connection, or a :class:`WriterAhead` still opening
    it); without one, the file gets a writer of its own, opened while the file is parsed. A file
    whose writer is still opening is parsed while the warehouse is asked whether it knows the
    file (an "already ingested" file then costs a parse, once per batch).

    ``job``: the distributed job this file is a rank file of (``--job``); ``job_default``: the
    folder's job (:func:`jobs.folder_jobs`), below a sidecar's. A rank file breaking a job's
    rules (:mod:`.jobs`) is refused like any bad file."""
    t0 = time.perf_counter()
    path = Path(path)
    shown = original_path or str(path.resolve())
    snap: Snapshot | None = None
    try:
        if still_being_written(path):
            return _skipped(shown, None, STILL_WRITING, t0)
        before = stat_key(path)
        todo = readers.candidates(path, before[0])
        marks = [("start", time.perf_counter(), time.thread_time())]
        take = Snapshot.copy if todo[0].ON_DISK else Snapshot.read
        snap = take(settings, path, before)
        marks.append(("copy" if todo[0].ON_DISK else "read", time.perf_counter(),
                      time.thread_time()))
        if snap is None or still_being_written(path):
            return _skipped(shown, None, STILL_WRITING, t0)
        if forking.numpy_hidden():
            _still_a_report(snap, shown)
        identity = _Identity(path, meta, series=series, label=label, captured_at=captured_at,
                             job=job, job_default=job_default)
        own = WriterAhead(settings) if con is None else None
        result = None
        try:
            while True:
                reader = todo.pop(0)(snap, shown)
                try:
                    result = _load(snap, reader, shown, identity,
                                   con if con is not None else own, own, t0, marks)
                    return result
                except Declined as d:
                    if d.retry is not None:
                        todo.insert(0, d.retry)
                    if not todo:  # every reader declined (WholeDocument never does)
                        raise FormatError(shown, "$", f"a file one of the readers reads ({d})",
                                          kind="unknown_format") from None
        finally:
            if own is not None:  # our own writer: `pwh runs` current before letting go
                _close_own(settings, own, result is not None and result.status == "ingested")
    except (FormatError, OSError) as exc:
        sha = getattr(exc, "sha256", None) or (snap.sha if snap is not None else None)
        return record_failure(settings, path, shown, sha, exc, t0, con)
    except duckdb.Error as exc:  # e.g. the disk filled up while DuckDB wrote: nothing committed
        err = db.io_error(settings.warehouse, exc, f"write the run of {shown}")
        sha = snap.sha if snap is not None else None
        return record_failure(settings, path, shown, sha, OSError(errno.EIO, str(err)), t0, con,
                              keep_file=True)
    finally:
        if snap is not None:
            snap.discard()


class _Identity:
    """The run's identity (series, label, captured_at), resolved once per file, when the load
    is about to commit (a file already ingested is never refused for its sidecar)."""

    def __init__(self, path: Path, meta: runmeta.RunMeta | None, **given):
        self.path, self.meta, self.given = path, meta, given

    def resolve(self, file_clock: dt.datetime | None) -> runmeta.RunMeta:
        if self.meta is None:
            self.meta = runmeta.resolve(self.path, **self.given)
        return self.meta.with_file_clock(file_clock)


def _close_own(settings: Settings, own: WriterAhead, loaded: bool) -> None:
    if not own.used():
        return  # never begun: nothing was opened
    with contextlib.suppress(Exception):  # an opening that failed was reported already
        c = own.get()
        try:
            if loaded:
                _refresh_status(settings, c)
        finally:
            c.close()


def _load(snap: Snapshot, reader: Reader, shown: str, identity: _Identity, source,
          own: WriterAhead | None, t0: float, marks: list) -> IngestResult:
    """Read the file with ``reader`` and write it in one transaction; see :func:`ingest_file`.
    Raises :class:`Declined` (nothing written: the caller tries another reader),
    :class:`FormatError` (with ``sha256``) for a bad file."""
    w: Writer | None = None
    try:
        reader.start()  # parser processes are forked before any thread of ours exists
        if not reader.FORKS_AGAIN:
            forks_done()
            if own is not None:
                own.begin()  # the writer opens while the file is read
        if snap.on_disk:
            snap.hash_aside()
        asked = not isinstance(source, WriterAhead) and snap.sha is not None
        if asked:  # an open writer and the identity in hand: ask before reading
            db.ensure_schema(source)
            if known(source, snap.sha):
                return _skipped(shown, snap.sha, "already ingested", t0)
        w = Writer(source, snap.wait_sha, insert_bytes=reader.INSERT_BYTES,
                   queue_size=reader.QUEUE, threads=1 if reader.PARALLEL else None,
                   ask=not asked)
        w.start()
        try:
            for item in reader.tables():
                if w.known:
                    break
                w.send(item)
                del item
            else:
                w.end()
        except Stop:
            pass  # the writer ended early: known, or its error is raised below
        except (FormatError, Declined) as exc:
            w.halt()
            w.join()
            w.rollback()
            _raise_writer_error(w, snap)
            sha = snap.wait_sha()
            if isinstance(exc, Declined):
                raise
            if w.known or (sha is not None and known(w.con, sha)):
                return _skipped(shown, sha, "already ingested", t0)
            exc.sha256 = sha
            raise
        marks.append(("parsed", time.perf_counter(), time.thread_time()))
        w.join()
        marks.append(("loaded", time.perf_counter(), time.thread_time()))
        _raise_writer_error(w, snap)
        if w.known:
            return _skipped(shown, w.sha, "already ingested", t0)
        meta = identity.resolve(reader.captured_at)
        if meta.job is not None:  # a rank file of a job: its rules, in this transaction
            try:
                jobs.join(w.con, w.sha, meta, shown)
            except FormatError as exc:
                exc.sha256 = w.sha
                raise
        dest = _archive(snap)  # the bytes durable in the archive before COMMIT
        reader.finish(w.con, w.sha)
        w.commit([w.sha, shown, Path(shown).name, reader.source_format, reader.parser_version,
                  snap.size, utcnow(), meta.series, meta.label, meta.captured_at, meta.source,
                  str(dest)])
        marks.append(("commit", time.perf_counter(), time.thread_time()))
        reader.close()
        if os.environ.get("PWH_DEBUG_TIMING"):
            _print_timing(reader, w, marks)
        return _ingested(shown, w.sha, reader.source_format, reader.summary, t0)
    finally:
        reader.close()
        if w is not None:
            w.halt()
            if w.is_alive():
                w.join()
            w.rollback()


def _archive(snap: Snapshot) -> Path:
    """The snapshot's bytes in the content-addressed archive (durably); their path there."""
    if snapshot.in_archive(snap.settings, snap.path):
        return snap.path  # staged there (the Dagster path)
    sha = snap.wait_sha()
    if sha is None:
        raise snap.hash_error or RuntimeError("the file's bytes were not hashed")
    if snap.data is not None:
        return archive_bytes(snap.settings, sha, snap.data)
    return snap.keep_copy(snapshot.archive_path(snap.settings, sha))


def _raise_writer_error(w: Writer, snap: Snapshot) -> None:
    if w.error is not None and not isinstance(w.error, Stop):
        raise w.error
    if w.error is not None and snap.hash_error is not None:
        raise snap.hash_error


def _print_timing(reader: Reader, w: Writer, marks: list) -> None:
    t0, cpu0 = marks[0][1], marks[0][2]
    extra = reader.timing()
    opened = ""
    if isinstance(w.source, WriterAhead) and w.source.opening is not None:
        began, ready = w.source.opening
        opened = (f"; warehouse {'created' if w.source.created else 'opened'} in "
                  f"{ready - began:.2f}s (ready at {ready - t0:.2f}s)")
    print("pwh timing: " + ", ".join(
        f"{n} {t - t0:.2f}s wall/{cpu - cpu0:.2f}s cpu" for n, t, cpu in marks[1:])
        + f" (main thread); {type(reader).__name__} ({reader.source_format}), "
        f"writer cpu {w.cpu:.2f}s, {w.inserts} inserts" + opened + (f"; {extra}" if extra else ""),
        file=sys.stderr)


def _skipped(shown: str, sha: str | None, message: str, t0: float) -> IngestResult:
    return IngestResult(shown, "skipped", sha, message=message, seconds=time.perf_counter() - t0)


def _ingested(shown: str, sha: str, source_format: str, summary: dict[str, int],
              t0: float) -> IngestResult:
    return IngestResult(shown, "ingested", sha, source_format,
                        f"{source_format}: " + ", ".join(f"{v} {k}" for k, v in summary.items()),
                        summary, time.perf_counter() - t0)


def record_failure(settings, path: Path, shown: str, sha, exc: Exception, t0: float, con, *,
          keep_file: bool = False) -> IngestResult:
    """Record a failed file. ``keep_file``: the warehouse, not the file, failed: no quarantine.
    ``con``: the batch's writer (a :class:`WriterAhead` is joined), else one of its own."""
    con = writer_of(con)
    if isinstance(exc, FormatError):
        kind, jpath, msg = exc.kind, exc.json_path, str(exc)
    else:
        kind, jpath, msg = "io", None, f"{shown}: {exc.strerror or exc}"
    record = {"path": shown, "sha256": sha, "error_kind": kind, "json_path": jpath,
              "message": msg, "occurred_at": utcnow().isoformat() + "Z"}
    qpath = None
    if not keep_file and (kind != "io" or path.exists()):
        try:
            qpath = quarantine(settings, path, sha, record, name=Path(shown).name)
        except OSError as qexc:
            msg += f" (could not quarantine: {qexc})"
    try:
        own = con is None
        c = con or db.connect_rw(settings.warehouse, quiet=True)
        try:
            db.ensure_schema(c)
            c.execute("INSERT INTO raw.ingest_errors VALUES (?, ?, ?, ?, ?, ?, ?)",
                      [sha, shown, kind, jpath, msg, str(qpath) if qpath else None, utcnow()])
        finally:
            if own:  # our own writer (the Dagster path, a single file): `pwh runs --errors`
                try:
                    _refresh_status(settings, c)
                finally:
                    c.close()
    except Exception as dbexc:  # noqa: BLE001 - the file's own error is what the user needs
        msg += f" (error not recorded in the warehouse: {dbexc})"
    return IngestResult(shown, "failed", sha, message=msg, seconds=time.perf_counter() - t0,
                        quarantine_path=str(qpath) if qpath else None)


def _refresh_status(settings: Settings, con) -> None:
    """Bring the status ``pwh runs`` reads up to date (never raises: it warns)."""
    from warehouse.serving import status

    status.refresh(settings, con)


# A batch keeps one writer connection for at most this long, then lets other writers in.
HOLD_WRITER_S = float(os.environ.get("PWH_HOLD_WRITER_S", "2.0"))


def ingest_paths(settings: Settings, paths: Iterable[str | os.PathLike[str]], *,
                 progress: Callable[[IngestResult], None] | None = None, **meta_kw
                 ) -> list[IngestResult]:
    """Ingest files and folders; keep going past bad files.

    Small files share one writer connection (opening and checkpointing per file dominates their
    cost); it is closed, which checkpoints, at the latest every ``HOLD_WRITER_S`` seconds so that
    another ingest process or a build waiting for the file gets its turn. The writer is opened
    while the first file after each opening is parsed (:class:`WriterAhead`).

    Without ``job``, the Kineto rank files of one job in one folder form a job named after
    the folder (:func:`jobs.folder_jobs`).
    """
    remove_stale_temp_files(settings)
    results = []
    con, opened = None, 0.0
    files = list(expand(paths))
    defaults = {} if meta_kw.get("job") else jobs.folder_jobs(files)
    try:
        for p in files:
            if con is not None and time.monotonic() - opened > HOLD_WRITER_S:
                con.close()
                con = None
            if con is None:
                con = WriterAhead(settings)
                after_forks(con.begin)  # once this file's parser process (if any) is forked
                opened = time.monotonic()
            try:
                r = ingest_file(settings, p, con=con, job_default=defaults.get(p), **meta_kw)
            except PwhError:
                raise  # e.g. the warehouse stayed busy: stop the batch, nothing half-written
            except Exception as exc:  # noqa: BLE001 - one broken file must not stop the batch
                r = IngestResult(str(p), "failed", message=f"{p}: {internal_error(exc)}")
            con = writer_of(con)  # opened by now (raises what opening it raised)
            results.append(r)
            if progress:
                progress(r)
    finally:
        if isinstance(con, WriterAhead):  # left early (an error, Ctrl-C)
            con = con.abandon()
        if con is not None:
            from warehouse.serving import status

            t = time.perf_counter()
            status.refresh(settings, con)  # `pwh runs` (and --errors) current right away
            t1 = time.perf_counter()
            con.close()  # closing the last writer checkpoints
            if os.environ.get("PWH_DEBUG_TIMING"):
                print(f"pwh timing: runs status {t1 - t:.2f}s, closing the warehouse "
                      f"{time.perf_counter() - t1:.2f}s", file=sys.stderr)
    return results
