"""The landing sensor: a file dropped into the landing folder becomes a partition and a run.

Per tick, for every file under the landing folder (sub-folders too; a sub-folder's name is the
default *series*):

* skipped for good: hidden files, ``*.tmp``, ``*.part``, ``*.partial``, ``*.crdownload``,
  sidecars ``*.meta.json`` and ``*.error.json`` records;
* skipped until stable: a file (or its sidecar ``<file>.meta.json``) whose size or mtime changed
  since the previous tick, or that is seen for the first time while modified less than
  ``PWH_LANDING_SETTLE_S`` seconds ago (default 10);
* a stable file is *staged*: its bytes and run identity (series, label, captured-at from the
  sidecar, else the defaults) are archived under its SHA-256, which becomes the partition key
  and the run key. Dagster never launches two runs with the same run key for a sensor, so each
  file is ingested exactly once across ticks, renames, copies and daemon restarts.

The cursor remembers each landing file's size/mtime and SHA-256, so unchanged files are not
hashed again. Files are never moved or deleted: the archive is the warehouse's own copy.
"""

import json
import os
import time
from pathlib import Path

import dagster as dg

from pipelines.jobs import ingest_job
from pipelines.raw import PARTITIONS_NAME
from pipelines.resources import WarehouseResource
from warehouse.ingesting import runmeta
from warehouse.ingesting.landing import stage
from warehouse.ingesting.loader import is_candidate

SETTLE_SECONDS = float(os.environ.get("PWH_LANDING_SETTLE_S", "10"))
CURSOR_VERSION = 1


def automation_status(kind):
    """RUNNING only when ``PWH_AUTOMATION=on`` (``make ui`` sets it); STOPPED otherwise, tests too."""
    on = os.environ.get("PWH_AUTOMATION", "off").lower() in ("1", "on", "true", "yes")
    return kind.RUNNING if on else kind.STOPPED


def landing_files(landing: Path) -> list[Path]:
    """Candidate files under ``landing``, sorted; hidden folders are not entered."""
    out = []
    if not landing.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(landing):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(Path(dirpath) / f for f in sorted(filenames) if is_candidate(Path(f)))
    return out


def signature(path: Path) -> list[int]:
    """Size and mtime of the file and of its sidecar: any change means 'still being written'."""
    st = path.stat()
    sig = [st.st_size, st.st_mtime_ns]
    side = runmeta.sidecar_path(path)
    try:
        sst = side.stat()
        sig += [sst.st_size, sst.st_mtime_ns]
    except FileNotFoundError:
        pass
    return sig


def _load_cursor(raw: str | None) -> dict[str, dict]:
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data.get("files", {}) if data.get("v") == CURSOR_VERSION else {}


def evaluate(landing: Path, settings, cursor: str | None, log, now: float | None = None):
    """One tick: (run requests, new partition keys, new cursor, files still pending)."""
    now = time.time() if now is None else now
    seen = _load_cursor(cursor)
    files: dict[str, dict] = {}
    requests: list[dg.RunRequest] = []
    new_keys: list[str] = []
    pending: list[str] = []
    for path in landing_files(landing):
        rel = path.relative_to(landing).as_posix()
        try:
            sig = signature(path)
        except FileNotFoundError:
            continue  # vanished between listing and stat
        old = seen.get(rel)
        if old and old["sig"] == sig and old.get("sha"):
            files[rel] = old  # staged on an earlier tick and unchanged since
            continue
        young = now - max(sig[1::2]) / 1e9 < SETTLE_SECONDS
        stable = (old is not None and old["sig"] == sig) or (old is None and not young)
        if not stable:
            files[rel] = {"sig": sig}
            pending.append(rel)
            continue
        try:
            sha = stage(settings, path)
        except OSError as exc:
            log.warning(f"{path}: cannot stage yet ({exc}); retrying next tick")
            files[rel] = {"sig": sig}
            pending.append(rel)
            continue
        files[rel] = {"sig": sig, "sha": sha}
        if sha in new_keys:
            log.info(f"{rel}: same bytes as another new file ({sha[:12]}); one run for both")
            continue
        new_keys.append(sha)
        requests.append(dg.RunRequest(
            run_key=sha, partition_key=sha,
            tags={"pwh/landing_file": rel[-200:], "pwh/sha256": sha}))
        log.info(f"{rel}: new run file {sha[:12]}, requesting its ingestion")
    new_cursor = json.dumps({"v": CURSOR_VERSION, "files": files}, separators=(",", ":"))
    return requests, new_keys, new_cursor, pending


@dg.sensor(
    name="landing_sensor",
    job=ingest_job,
    minimum_interval_seconds=30,
    default_status=automation_status(dg.DefaultSensorStatus),
    description="Watches the landing folder ($PWH_LANDING, default <state>/landing). Each new, "
    "stable file becomes a raw partition (its SHA-256) and one ingest_file run with that run "
    "key. Files still being written (*.tmp, *.part, size/mtime changing) wait; bad files fail "
    "their run with the error and land in quarantine/.",
)
def landing_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    landing = warehouse.landing_dir
    landing.mkdir(parents=True, exist_ok=True)
    requests, keys, cursor, pending = evaluate(landing, warehouse.settings, context.cursor,
                                               context.log)
    if not requests:
        why = f"no new stable file in {landing}"
        if pending:
            why += f"; waiting for {len(pending)} still being written: {', '.join(pending[:5])}"
        return dg.SensorResult(skip_reason=dg.SkipReason(why), cursor=cursor)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest(PARTITIONS_NAME, keys)],
        cursor=cursor,
    )
