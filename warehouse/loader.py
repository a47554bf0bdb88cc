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

import datetime as dt
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import db, formats, runmeta
from .config import Settings
from .errors import FormatError, PwhError

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


def quarantine(settings: Settings, path: Path, sha: str | None, err: dict) -> Path | None:
    """Copy a bad file into quarantine with a ``.error.json`` sidecar. Returns the copy's path."""
    qdir = settings.quarantine_dir
    qdir.mkdir(parents=True, exist_ok=True)
    stem = f"{(sha or 'unreadable')[:16]}_{path.name}"
    dest = qdir / stem
    try:
        tmp = dest.with_name(f".{stem}.tmp")
        tmp.write_bytes(path.read_bytes())
        os.replace(tmp, dest)
    except OSError:
        dest = None  # unreadable source: only the error record is kept
    side = qdir / f"{stem}.error.json"
    side.write_text(json.dumps(err, indent=2, default=str) + "\n")
    return dest


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
    """Ingest one file. Never raises for a bad file: the result says what happened."""
    t0 = time.perf_counter()
    path = Path(path)
    shown = original_path or str(path.resolve())
    sha = None
    try:
        data = path.read_bytes()
        sha = sha256_file(data)
        c = con or db.connect_rw(settings.warehouse)
        try:
            db.ensure_schema(c)
            if _known(c, sha):
                return IngestResult(shown, "skipped", sha, message="already ingested",
                                    seconds=time.perf_counter() - t0)
            fmt = formats.detect(data, shown)
            parsed = fmt.parse(data, shown, sha)
            meta = meta or runmeta.resolve(path, series=series, label=label,
                                           captured_at=captured_at)
            arch = archive_bytes(settings, sha, data) if _archived(settings, path) is None else path
            size = len(data)
            del data
            _load(c, parsed, sha, shown, path.name, len_bytes=size, meta=meta,
                  archive_path=str(arch))
        finally:
            if con is None:
                c.close()
        return IngestResult(shown, "ingested", sha, parsed.source_format,
                            f"{parsed.source_format}: " + ", ".join(
                                f"{v} {k}" for k, v in parsed.summary.items()),
                            parsed.summary, time.perf_counter() - t0)
    except (FormatError, OSError) as exc:
        return _fail(settings, path, shown, sha, exc, t0, con)


def _archived(settings: Settings, path: Path) -> Path | None:
    """``path`` itself if it already lives in the archive (the Dagster path stages files there)."""
    try:
        return path if path.resolve().parent == settings.archive_dir.resolve() else None
    except OSError:
        return None


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
            con.register("_pwh_batch", table)
            try:
                con.execute(f"INSERT INTO raw.{tname} BY NAME SELECT * FROM _pwh_batch")  # noqa: S608
            finally:
                con.unregister("_pwh_batch")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _fail(settings, path: Path, shown: str, sha, exc: Exception, t0: float, con) -> IngestResult:
    if isinstance(exc, FormatError):
        kind, jpath, msg = exc.kind, exc.json_path, str(exc)
    else:
        kind, jpath, msg = "io", None, f"{shown}: {exc.strerror or exc}"
    record = {"path": shown, "sha256": sha, "error_kind": kind, "json_path": jpath,
              "message": msg, "occurred_at": utcnow().isoformat() + "Z"}
    qpath = None
    if kind != "io" or path.exists():
        try:
            qpath = quarantine(settings, path, sha, record)
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
            if own:
                c.close()
    except Exception as dbexc:  # noqa: BLE001 - the file's own error is what the user needs
        msg += f" (error not recorded in the warehouse: {dbexc})"
    return IngestResult(shown, "failed", sha, message=msg, seconds=time.perf_counter() - t0,
                        quarantine_path=str(qpath) if qpath else None)


def ingest_paths(settings: Settings, paths: Iterable[str | os.PathLike[str]], *,
                 progress: Callable[[IngestResult], None] | None = None, **meta_kw
                 ) -> list[IngestResult]:
    """Ingest files and folders; keep going past bad files; checkpoint once at the end."""
    results = []
    for p in expand(paths):
        try:
            r = ingest_file(settings, p, **meta_kw)
        except PwhError:
            raise  # e.g. the warehouse stayed busy: stop the batch, nothing half-written
        except Exception as exc:  # noqa: BLE001 - one broken file must not stop the batch
            r = IngestResult(str(p), "failed", message=f"{p}: internal error: {exc!r}")
        results.append(r)
        if progress:
            progress(r)
    if any(r.status == "ingested" for r in results):
        try:
            with db.writer(settings.warehouse, quiet=True) as con:
                con.execute("CHECKPOINT")
        except PwhError:
            pass  # another writer holds the file; it will checkpoint
    return results
