"""The atomic, idempotent loader: one raw file -> one transaction in the raw layer.

* identity: the SHA-256 of the file's bytes; loading the same bytes again (renamed or not) is a
  no-op reported as "already ingested";
* atomic: manifest row and every raw row are written in one explicit ``BEGIN … COMMIT``; an
  error or a kill before ``COMMIT`` leaves no trace;
* lossless: the raw bytes are archived content-addressed, and raw tables rebuild the document;
* bad files are copied to ``quarantine/`` with a ``.error.json`` sidecar and logged in
  ``raw.ingest_errors``; a batch keeps going past them.
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
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from warehouse import db, keep
from warehouse.config import Settings
from warehouse.errors import FormatError, PwhError, internal_error
from warehouse.ingesting import formats, runmeta

SKIP_SUFFIXES = (".tmp", ".part", ".partial", ".crdownload", runmeta.SIDECAR_SUFFIX, ".error.json")

# Files at least this big (``$PWH_STREAM_MIN_BYTES``, default 32 MiB), laid out as profilers
# write them (samples last), are streamed: parsed a chunk at a time while DuckDB loads the
# previous chunk, so memory stays bounded. Smaller files are parsed whole.
STREAM_MIN_BYTES = int(os.environ.get("PWH_STREAM_MIN_BYTES", 32 << 20))


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


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


_after_forks: list[Callable[[], None]] = []


def after_forks(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the next ingest has forked its parser process, or is past the point
    where it could: a caller may then start threads (e.g. ``pwh lake ingest`` opening its
    catalog while the parse runs) without any of them existing at a fork."""
    _after_forks.append(fn)


def forks_done() -> None:
    """Called by the loaders where no more parser process will be forked for this file (and by
    whoever registered :func:`after_forks` work, in case the loader returned before)."""
    while _after_forks:
        _after_forks.pop(0)()


class Ahead:
    """Work done in a thread while a file is parsed: begun (:meth:`begin`, e.g. through
    :func:`after_forks`) only where no parser process will be forked any more, since a thread
    must never exist at a fork. :meth:`get` joins it, or does the work here if it never began,
    and raises what the work raised. Subclasses define :meth:`work`, ``NAME`` and, if its thread
    needs the GIL handed over sooner than every 5 ms while it runs, ``SWITCH_S``."""

    NAME = "pwh-ahead"
    SWITCH_S: float | None = None

    def __init__(self):
        self.value = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._done = False
        self._interval: float | None = None  # the switch interval to restore

    def work(self):
        raise NotImplementedError

    def begin(self) -> None:
        if self._thread is None and not self._done:
            self._thread = threading.Thread(target=self._run, name=self.NAME, daemon=True)
            if self.SWITCH_S is not None:
                self._interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._interval, self.SWITCH_S))
            self._thread.start()

    def _restore(self) -> None:
        if self._interval is not None:
            sys.setswitchinterval(self._interval)
            self._interval = None

    def _run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # noqa: BLE001 - raised by get(), in the caller's thread
            self.error = exc

    def get(self):
        if not self._done:
            with contextlib.suppress(ValueError):
                _after_forks.remove(self.begin)
            if self._thread is None:
                self._run()
            else:
                try:
                    self._thread.join()
                finally:
                    self._restore()
            self._done = True
        if self.error is not None:
            raise self.error
        return self.value

    def abandon(self):
        """The result if it is ready by now, else ``None`` (e.g. on Ctrl-C: the thread, a
        daemon, is not waited for)."""
        if self._thread is not None and self._thread.is_alive():
            self._restore()
            return None
        try:
            return self.get()
        except BaseException:  # noqa: BLE001 - the caller is leaving already
            return None


class WriterAhead(Ahead):
    """The warehouse's writer connection, opened (the warehouse created if new) while a file is
    read, hashed and parsed: DuckDB's start-up (~25 ms per database instance, two for a new
    warehouse) overlaps the parse.

    DuckDB's client takes the GIL back between the steps of each statement, and Python hands
    the GIL over every 5 ms: the ~30 statements creating a warehouse would wait for the parse
    to end. While the thread runs, the hand-over interval is 0.2 ms (the parse is not slowed
    measurably; the warehouse is ready ~6x sooner)."""

    NAME = "pwh-writer-open"
    SWITCH_S = 0.0002

    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings

    def work(self):
        con = db.connect_rw(self.settings.warehouse)
        try:
            db.ensure_schema(con)
        except BaseException:
            con.close()
            raise
        return con


def writer_of(con):
    """``con``, or the connection a :class:`WriterAhead` opens (joined)."""
    return con.get() if isinstance(con, WriterAhead) else con


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


def sha256_file(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_bytes(settings: Settings, sha: str, data: bytes) -> Path:
    """Write ``data`` to the content-addressed archive (tmp file + rename; no-op if present)."""
    dest = settings.archive_dir / f"{sha}.json"
    if dest.exists() and dest.stat().st_size == len(data):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{sha}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, dest)
    return dest


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


def ingest_file(
    settings: Settings,
    path: str | os.PathLike[str],
    *,
    series: str | None = None,
    label: str | None = None,
    captured_at: str | dt.datetime | None = None,
    original_path: str | None = None,
    meta: runmeta.RunMeta | None = None,
    con=None,
) -> IngestResult:
    """Ingest one file. Never raises for a bad file: the result says what happened.

    ``con``: the batch's writer (an open connection, or a :class:`WriterAhead` still opening
    it); without one, the file gets a writer of its own, opened while the file is parsed. A file
    whose writer is still opening is parsed before the warehouse is asked whether it knows the
    file (an "already ingested" file then costs a parse, once per batch)."""
    t0 = time.perf_counter()
    path = Path(path)
    shown = original_path or str(path.resolve())
    sha = None
    try:
        if still_being_written(path):
            return IngestResult(shown, "skipped", message=STILL_WRITING,
                                seconds=time.perf_counter() - t0)
        before = _stat_key(path)
        if before[0] >= STREAM_MIN_BYTES // 8:  # big kernel traces (gzip too): streamed
            from warehouse.ingesting import trace_loader

            if trace_loader.wants_stream(path, before[0]):
                res = trace_loader.ingest_streamed(settings, path, shown, t0, con=con, meta=meta,
                                                   series=series, label=label,
                                                   captured_at=captured_at)
                if res is not None:
                    return res
        if before[0] >= STREAM_MIN_BYTES:
            from warehouse.ingesting.streamed import ingest_streamed_profile

            res = ingest_streamed_profile(settings, path, shown, t0, con=con, meta=meta, series=series,
                                   label=label, captured_at=captured_at)
            if res is not None:
                return res
        forks_done()  # the whole-document path forks nothing (a WriterAhead starts here)
        own = WriterAhead(settings) if con is None else None
        if own is not None:
            own.begin()
        opening = own or (con if isinstance(con, WriterAhead) else None)
        c = None if opening is not None else con
        loaded = False
        try:
            data = path.read_bytes()
            if _stat_key(path) != before or still_being_written(path):
                return IngestResult(shown, "skipped", message=STILL_WRITING,
                                    seconds=time.perf_counter() - t0)
            sha = sha256_file(data)
            parsed = failure = None
            if opening is not None:  # the writer opens meanwhile
                try:
                    parsed = _parse(data, shown, sha)
                except FormatError as exc:
                    failure = exc
                c = opening.get()
            db.ensure_schema(c)
            if _known(c, sha):
                return IngestResult(shown, "skipped", sha, message="already ingested",
                                    seconds=time.perf_counter() - t0)
            if failure is not None:
                raise failure
            if parsed is None:
                parsed = _parse(data, shown, sha)
            meta = (meta or runmeta.resolve(path, series=series, label=label,
                                            captured_at=captured_at)
                    ).with_file_clock(parsed.captured_at)
            arch = archive_bytes(settings, sha, data) if _archived(settings, path) is None else path
            size = len(data)
            del data
            _load(c, parsed, sha, shown, Path(shown).name, len_bytes=size, meta=meta,
                  archive_path=str(arch))
            loaded = True
        finally:
            if own is not None:  # our own writer: `pwh runs` current before letting go
                if c is None:  # never reached get(): wait for the opening, close what it opened
                    with contextlib.suppress(Exception):
                        c = own.get()
                if c is not None:
                    try:
                        if loaded:
                            _refresh_status(settings, c)
                    finally:
                        c.close()
        return _ingested(shown, sha, parsed.source_format, parsed.summary, t0)
    except (FormatError, OSError) as exc:
        return record_failure(settings, path, shown, getattr(exc, "sha256", None) or sha, exc, t0, con)
    except duckdb.Error as exc:  # e.g. the disk filled up while DuckDB wrote: nothing committed
        err = db.io_error(settings.warehouse, exc, f"write the run of {shown}")
        return record_failure(settings, path, shown, sha, OSError(errno.EIO, str(err)), t0, con,
                     keep_file=True)


def _ingested(shown: str, sha: str, source_format: str, summary: dict[str, int],
              t0: float) -> IngestResult:
    return IngestResult(shown, "ingested", sha, source_format,
                        f"{source_format}: " + ", ".join(f"{v} {k}" for k, v in summary.items()),
                        summary, time.perf_counter() - t0)


def _archived(settings: Settings, path: Path) -> Path | None:
    """``path`` itself if it already lives in the archive (the Dagster path stages files there)."""
    try:
        return path if path.resolve().parent == settings.archive_dir.resolve() else None
    except OSError:
        return None


def _parse(data: bytes, shown: str, sha: str) -> formats.Parsed:
    fmt, payload = formats.detect_payload(data, shown)  # gzip undone
    return fmt.parse(payload, shown, sha)


def _known(con, sha: str) -> bool:
    return con.execute("SELECT 1 FROM raw.files WHERE sha256 = ?", [sha]).fetchone() is not None


def _load(con, parsed: formats.Parsed, sha: str, shown: str, name: str, *, len_bytes: int,
          meta: runmeta.RunMeta, archive_path: str) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "INSERT INTO raw.files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [sha, shown, name, parsed.source_format, parsed.parser_version, len_bytes, utcnow(),
             meta.series, meta.label, meta.captured_at, meta.source, archive_path],
        )
        for tname, table in parsed.tables.items():
            if not table.num_rows:  # nothing to insert (a few ms per statement saved)
                continue
            con.register("_pwh_batch", table)
            try:
                con.execute(f"INSERT INTO raw.{tname} BY NAME SELECT * FROM _pwh_batch")  # noqa: S608
            finally:
                con.unregister("_pwh_batch")
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
            con.execute("ROLLBACK")
        raise


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
    """
    remove_stale_temp_files(settings)
    results = []
    con, opened = None, 0.0
    try:
        for p in expand(paths):
            if con is not None and time.monotonic() - opened > HOLD_WRITER_S:
                con.close()
                con = None
            if con is None:
                con = WriterAhead(settings)
                after_forks(con.begin)  # once this file's parser process (if any) is forked
                opened = time.monotonic()
            try:
                r = ingest_file(settings, p, con=con, **meta_kw)
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

            status.refresh(settings, con)  # `pwh runs` (and --errors) current right away
            con.close()  # closing the last writer checkpoints
    return results
