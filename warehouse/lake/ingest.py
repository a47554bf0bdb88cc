"""``pwh lake ingest``: run files into the lake's raw tables, one exactly-once commit per run.

The same formats (every format :mod:`warehouse.ingesting.formats` detects, kernel traces
included, gzip undone first), identity (SHA-256 of the file's own bytes = ``run_id``) and run
metadata (options, sidecar, defaults; a trace's own clock when no time was given) as
``pwh ingest``; files are read whole (``pwh ingest`` streams very big traces); the raw bytes are archived content-addressed under
``<location>/archive/``. Any number of processes or machines may ingest at once: see
:mod:`warehouse.lake.commit`. Bad files are copied to the local quarantine folder with an
``.error.json`` record, as ``pwh ingest`` does, and the batch goes on.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa

from warehouse.config import Settings
from warehouse.errors import FormatError
from warehouse.ingesting import formats, loader, runmeta
from warehouse.ingesting.loader import IngestResult
from warehouse.lake import commit, ledger, schemas
from warehouse.lake.catalog import LakeConfig, open_catalog


def prepare(cat) -> None:
    """The lake's raw and checks tables, created if missing."""
    commit.create_tables(cat, schemas.source_schemas())


def files_row(sha: str, shown: str, name: str, parsed: formats.Parsed, size: int,
              meta: runmeta.RunMeta, archive_path: str) -> pa.Table:
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    row = {"sha256": sha, "original_path": shown, "file_name": name,
           "source_format": parsed.source_format, "parser_version": parsed.parser_version,
           "byte_size": size, "ingested_at": now, "series": meta.series, "label": meta.label,
           "captured_at": meta.captured_at, "meta_source": meta.source,
           "archive_path": archive_path}
    return pa.Table.from_pylist([row], schema=schemas.FILES)


def _archive(cat, location: str, sha: str, data: bytes) -> str:
    path = f"{location.rstrip('/')}/archive/{sha}"
    io = cat._load_file_io(location=path)
    inp = io.new_input(path)
    if inp.exists() and len(inp) == len(data):
        return path
    if "://" not in path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # never a half-written archive file under the final name
    else:
        with io.new_output(path).create(overwrite=True) as fh:  # object stores: atomic put
            fh.write(data)
    return path


def ingest_file(settings: Settings, cat, cfg: LakeConfig, path: Path, *,
                series: str | None = None, label: str | None = None,
                captured_at: str | None = None, meta: runmeta.RunMeta | None = None,
                original_path: str | None = None,
                on_retry: Callable[[int, str], None] | None = None,
                hook: Callable[[str], None] | None = None) -> IngestResult:
    t0 = time.perf_counter()
    shown = original_path or str(path.resolve())
    sha = None
    try:
        if loader.still_being_written(path):
            return IngestResult(shown, "skipped", message=loader.STILL_WRITING,
                                seconds=time.perf_counter() - t0)
        data = path.read_bytes()
        sha = loader.sha256_file(data)
        if ledger.committed(cat.engine, cat.name, [sha]):
            return IngestResult(shown, "skipped", sha, message="already ingested",
                                seconds=time.perf_counter() - t0)
        fmt, payload = formats.detect_payload(data, shown)  # gzip undone, as pwh ingest
        parsed = fmt.parse(payload, shown, sha)
        del payload
        meta = (meta or runmeta.resolve(path, series=series, label=label,
                                        captured_at=captured_at)
                ).with_file_clock(parsed.captured_at)
        arch = _archive(cat, cfg.location, sha, data)
        tables = {f"raw.{k}": v for k, v in parsed.tables.items()}
        tables["raw.files"] = files_row(sha, shown, Path(shown).name, parsed, len(data), meta,
                                        arch)
        done = commit.commit_run(cat, sha, parsed.source_format, tables, on_retry=on_retry,
                                 hook=hook)
        if not done:
            return IngestResult(shown, "skipped", sha, message="already ingested",
                                seconds=time.perf_counter() - t0)
        return loader._ingested(shown, sha, parsed.source_format, parsed.summary, t0)
    except (FormatError, OSError) as exc:
        sha = getattr(exc, "sha256", None) or sha
        if isinstance(exc, FormatError):
            kind, jpath, msg = exc.kind, exc.json_path, str(exc)
        else:
            kind, jpath, msg = "io", None, f"{shown}: {exc.strerror or exc}"
        record = {"path": shown, "sha256": sha, "error_kind": kind, "json_path": jpath,
                  "message": msg, "occurred_at": loader.utcnow().isoformat() + "Z"}
        qpath = None
        if kind != "io":
            try:
                qpath = loader.quarantine(settings, path, sha, record)
            except OSError as qexc:
                msg += f" (could not quarantine: {qexc})"
        return IngestResult(shown, "failed", sha, message=msg, seconds=time.perf_counter() - t0,
                            quarantine_path=str(qpath) if qpath else None)


def ingest_paths(settings: Settings, cfg: LakeConfig, paths: Iterable[str | os.PathLike[str]],
                 *, progress: Callable[[IngestResult], None] | None = None,
                 **meta_kw) -> list[IngestResult]:
    """Ingest files and folders into the lake; keep going past bad files."""
    cat = open_catalog(cfg)
    prepare(cat)
    results = []
    for p in loader.expand(paths):
        r = ingest_file(settings, cat, cfg, p, **meta_kw)
        results.append(r)
        if progress:
            progress(r)
    return results


def ingest_staged(settings: Settings, cat, cfg: LakeConfig, sha: str, **kw) -> IngestResult:
    """Ingest a file the landing sensor staged (by SHA-256), with the identity it recorded."""
    import json

    from warehouse.ingesting import landing

    path = landing.staged_path(settings, sha)
    meta_file = landing.staged_meta_path(settings, sha)
    info = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    if "error" in info:
        shown = info.get("original_path") or str(path)
        return IngestResult(shown, "failed", sha, message=f"{shown}: run identity: {info['error']}")
    meta = None
    if "series" in info:
        meta = runmeta.RunMeta(info["series"], info["label"],
                               dt.datetime.fromisoformat(info["captured_at"]), info["source"])
    return ingest_file(settings, cat, cfg, path, meta=meta,
                       original_path=info.get("original_path"), **kw)
