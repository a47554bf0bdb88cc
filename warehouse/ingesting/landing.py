"""Staging files for the Dagster path: copy into the content-addressed archive first.

The sensor stages a landing file (bytes + resolved run identity) under ``archive/<sha256>``;
the partition key is that SHA-256, so any partition can be (re)materialised from the archive
alone, across sensor ticks, daemon restarts and backfills.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

from warehouse.config import Settings
from warehouse.errors import FormatError
from warehouse.ingesting import runmeta
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


def stage(settings: Settings, path: str | os.PathLike[str]) -> str:
    """Archive ``path`` and its run identity; return its SHA-256 (the partition key)."""
    path = Path(path)
    data = path.read_bytes()
    sha = sha256_file(data)
    archive_bytes(settings, sha, data)
    meta_file = staged_meta_path(settings, sha)
    if not meta_file.exists():
        try:
            m = runmeta.resolve(path)
            meta = {"series": m.series, "label": m.label,
                    "captured_at": m.captured_at.isoformat(), "source": m.source,
                    "captured_default": m.captured_default}
        except Exception as exc:  # noqa: BLE001 - reported when the partition is ingested
            meta = {"error": str(exc)}
        meta["original_path"] = str(path.resolve())
        tmp = meta_file.with_name(meta_file.name + ".tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, meta_file)
    return sha


def ingest_staged(settings: Settings, sha: str) -> IngestResult:
    """Ingest a staged file by its SHA-256 through the same loader as the CLI."""
    path = staged_path(settings, sha)
    meta_file = staged_meta_path(settings, sha)
    info = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    if "error" in info:  # the sidecar was unreadable when staged: fail, never guess an identity
        shown = info.get("original_path") or str(path)
        return record_failure(settings, path, shown, sha,
                    FormatError(shown, "$", f"run identity: {info['error']}"),
                    time.perf_counter(), None)
    meta = None
    if "series" in info:
        meta = runmeta.RunMeta(info["series"], info["label"],
                               dt.datetime.fromisoformat(info["captured_at"]), info["source"],
                               info.get("captured_default", False))
    return ingest_file(settings, path, original_path=info.get("original_path"), meta=meta)
