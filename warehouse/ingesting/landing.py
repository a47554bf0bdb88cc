"""Staging files for the Dagster path: copy into the content-addressed archive first.

The sensor stages a landing file (bytes + resolved run identity) under ``archive/<sha256>``;
the partition key is that SHA-256, so any partition can be (re)materialised from the archive
alone, across sensor ticks, daemon restarts and backfills. The run keeps its landing name:
``raw.files.original_path``/``file_name`` are the landing file's, never the archive's. The
identity is ``pwh ingest``'s (sidecar, else defaults), the job included: a folder of Kineto rank
files is one job, decided file by file as the files settle (:func:`stage`). It is kept once
staged, except for a file the warehouse holds no run of (refused) dropped again with another
identity (:func:`restage`): so a refused duplicate rank moved into a folder of its own is
ingested as that folder's job.

``ingest_staged_batch`` is what one Dagster run does for all the files of a sensor tick: one
writer connection, every file in its own transaction (the same loader as ``pwh ingest``), then
one validation of all the new runs against the raw suites (Great Expectations loaded once).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from warehouse import db
from warehouse.config import Settings
from warehouse.errors import FormatError, PwhError, internal_error
from warehouse.ingesting import jobs, runmeta
from warehouse.ingesting.loader import (
    IngestResult,
    archive_bytes,
    ingest_file,
    record_failure,
    sha256_file,
)


def staged_path(settings: Settings, sha: str) -> Path:
    return settings.archive_dir / f"{sha}.json"


def staged_meta_path(settings: Settings, sha: str) -> Path:
    return settings.archive_dir / f"{sha}.meta.json"


def stage(settings: Settings, path: str | os.PathLike[str], *,
          landing: str | os.PathLike[str] | None = None) -> str:
    """Archive ``path`` and its run identity; return its SHA-256 (the partition key).

    The identity is decided here, once, and kept with the bytes, so a partition materialised
    later (the sensor's run, a backfill) is ingested as it was staged. Its job, when neither a
    sidecar nor anything else names one: the folder's, for a Kineto rank file of a job of 2 or
    more ranks (:func:`jobs.folder_job`, from the file's own ``distributedInfo``): the rank
    files of a job dropped into one folder form the job ``pwh ingest`` of that folder forms,
    whether they settle in one sensor tick or over many; a duplicated or foreign rank is refused
    when ingested (:func:`jobs.join`). ``landing``: the landing folder itself, whose files get
    no folder job: every drop, over months, lands there, so its rank files are of unrelated
    jobs (a folder ``pwh ingest`` makes no job of); one job per sub-folder."""
    path = Path(path)
    data = path.read_bytes()
    sha = sha256_file(data)
    archive_bytes(settings, sha, data)
    meta_file = staged_meta_path(settings, sha)
    if not meta_file.exists():
        _write_meta(meta_file, _identity(path, jobs.head_info(data), landing))
    return sha


def restage(settings: Settings, paths: list[str | os.PathLike[str]], sha: str, *,
            landing: str | os.PathLike[str] | None = None) -> bool:
    """Stage the identity the landing files ``paths`` (copies of the staged ``sha``) give it
    now (folder, name and sidecar, as :func:`stage` decides it): the first one's, unless one of
    them still has the identity staged before (then nothing changes: two copies never take
    turns). True when the staged identity changed.

    Only for a file the warehouse holds no run of (refused, or never ingested): a refused
    duplicate rank moved into a folder of its own, or given a sidecar's ``"job"``, is ingested
    as that job when its partition is materialised again. The caller makes sure of that: an
    ingested file keeps the identity it was ingested with."""
    paths = [Path(p) for p in paths if Path(p).exists()]  # gone since: nothing to decide by
    if not paths:
        return False
    info = jobs.head_info(staged_path(settings, sha))
    before = _compared(staged_identity(settings, sha))
    metas = [_identity(p, info, landing) for p in paths]
    if any(_compared(m) == before for m in metas):
        return False
    _write_meta(staged_meta_path(settings, sha), metas[0])
    return True


def identity_digest(identity: dict) -> str:
    """A short digest of a staged identity (part of the run key of a file staged again)."""
    return hashlib.sha256(json.dumps(_compared(identity), sort_keys=True).encode()
                          ).hexdigest()[:16]


def _compared(identity: dict) -> dict:
    """What makes two staged identities differ: not the path alone (the same series, label and
    job again would be refused again), nor a captured-at that is only the file's mtime (a copy
    has another; the loader takes the file's own clock)."""
    out = {k: v for k, v in identity.items() if k != "original_path"}
    if out.get("captured_default"):
        out.pop("captured_at", None)
    return out


def _identity(path: Path, info: dict | None, landing) -> dict:
    try:
        in_root = landing is not None and path.resolve().parent == Path(landing).resolve()
        job = None if in_root else jobs.folder_job(path, info)
        m = runmeta.resolve(path, job_default=job)
        meta = {"series": m.series, "label": m.label,
                "captured_at": m.captured_at.isoformat(), "source": m.source,
                "captured_default": m.captured_default, "job": m.job,
                "job_source": m.job_source}
    except Exception as exc:  # noqa: BLE001 - reported when the partition is ingested
        meta = {"error": str(exc)}
    meta["original_path"] = str(path.resolve())
    return meta


def _write_meta(meta_file: Path, meta: dict) -> None:
    tmp = meta_file.with_name(meta_file.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, meta_file)


def ingest_staged(settings: Settings, sha: str, *, con=None) -> IngestResult:
    """Ingest a staged file by its SHA-256 through the same loader as the CLI."""
    path = staged_path(settings, sha)
    meta_file = staged_meta_path(settings, sha)
    info = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    if "error" in info:  # the sidecar was unreadable when staged: fail, never guess an identity
        shown = info.get("original_path") or str(path)
        return record_failure(settings, path, shown, sha,
                    FormatError(shown, "$", f"run identity: {info['error']}"),
                    time.perf_counter(), con)
    meta = None
    if "series" in info:
        meta = runmeta.RunMeta(info["series"], info["label"],
                               dt.datetime.fromisoformat(info["captured_at"]), info["source"],
                               info.get("captured_default", False), info.get("job"),
                               info.get("job_source"))
    return ingest_file(settings, path, original_path=info.get("original_path"), meta=meta,
                       con=con)


def staged_identity(settings: Settings, sha: str) -> dict:
    """The run identity staged with ``sha`` (series, label, captured_at, original_path…)."""
    try:
        return json.loads(staged_meta_path(settings, sha).read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class Staged:
    """What happened to one staged file of a batch."""

    sha: str
    result: IngestResult
    identity: dict
    rows: dict[str, int] = field(default_factory=dict)  # rows of this run per raw table
    source_format: str = ""  # as recorded in raw.files (also for a file ingested before)

    @property
    def file_name(self) -> str:
        return Path(self.identity.get("original_path") or self.result.path).name


@dataclass
class Batch:
    files: list[Staged]
    check_results: list = field(default_factory=list)  # warehouse.checks.Result
    runs_in_warehouse: int = 0

    @property
    def failed(self) -> list[Staged]:
        return [f for f in self.files if not f.result.ok]


def ingest_staged_batch(settings: Settings, shas: list[str], *, suites=None) -> Batch:
    """Ingest staged files, then validate the runs loaded against ``suites`` (if given).

    One writer connection for the whole batch; each file is still one transaction, and a bad
    file is quarantined and recorded exactly as by ``pwh ingest`` while the others go on. The
    validation results are recorded in ``checks.results`` in the same connection, and the
    status ``pwh runs`` reads is refreshed before the connection is closed.
    """
    from warehouse.ingesting.formats import ALL_TABLES

    out: list[Staged] = []
    con = db.connect_rw(settings.warehouse)
    try:
        db.ensure_schema(con)
        for sha in dict.fromkeys(shas):
            try:
                r = ingest_staged(settings, sha, con=con)
            except PwhError:
                raise  # the warehouse itself failed: stop, nothing half-written
            except Exception as exc:  # noqa: BLE001 - one broken file must not stop the batch
                r = IngestResult(str(staged_path(settings, sha)), "failed", sha,
                                 message=f"{staged_path(settings, sha)}: {internal_error(exc)}")
            out.append(Staged(sha, r, staged_identity(settings, sha)))
        loaded = [f.sha for f in out if f.result.ok]
        tables = {"files": "sha256", **{t.name: "run_id" for t in ALL_TABLES}}
        for name, col in tables.items():
            got = dict(con.execute(
                f"SELECT {col}, count(*) FROM raw.{name} WHERE {col} IN "  # noqa: S608 - fixed names
                "(SELECT unnest($ids)) GROUP BY 1", {"ids": loaded}).fetchall())
            for f in out:
                f.rows[name] = got.get(f.sha, 0)
        fmts = dict(con.execute("SELECT sha256, source_format FROM raw.files WHERE sha256 IN "
                                "(SELECT unnest($ids))", {"ids": loaded}).fetchall())
        for f in out:
            f.source_format = fmts.get(f.sha, f.result.source_format or "")
        batch = Batch(out)
        if suites and loaded:
            from warehouse import checks

            batch.check_results = checks.validate_runs(con, loaded, suites)
            checks.record_results(con, batch.check_results)
        batch.runs_in_warehouse = con.execute("SELECT count(*) FROM raw.files").fetchone()[0]
    finally:
        try:  # `pwh runs` (and --errors) current before the writer is let go, as after the CLI
            from warehouse.serving import status

            status.refresh(settings, con)
        finally:
            con.close()
    return batch
