"""The landing sensor: files dropped into the landing folder become partitions, in one run.

Per tick (every ``PWH_LANDING_TICK_S`` seconds at least, default 4: the daemon looks at its
sensors every 5 s, and a minimum just under that lets every look tick rather than every
other), for every file under the landing
folder (sub-folders too; a sub-folder's name is the default *series*):

* skipped for good: hidden files, ``*.tmp``, ``*.part``, ``*.partial``, ``*.crdownload``,
  sidecars ``*.meta.json`` and ``*.error.json`` records;
* skipped until stable: a file (or its sidecar ``<file>.meta.json``) whose size or mtime changed
  since the previous tick, or that is seen for the first time while modified less than
  ``PWH_LANDING_SETTLE_S`` seconds ago (default 10);
* a stable file is *staged*: its bytes and run identity (series, label, captured-at from the
  sidecar, else the defaults) are archived under its SHA-256, which becomes its partition key.

All the files staged in one tick that are not partitions yet become new partitions and ONE
``ingest_file`` run whose config lists them (``raw_files.config.files``) and whose run key is
derived from the keys. A file whose SHA-256 is already a partition is never requested again,
and Dagster never launches two runs with the same run key for a sensor: each file is ingested
exactly once across ticks, renames, copies and daemon restarts.

When raw partitions were ingested (by runs whose blocking raw checks passed) since the last
``refresh_models`` run, the same tick requests a refresh of staging and marts: one file dropped
on an idle system reaches the marts within seconds of its ingestion, not at the next schedule.

The cursor is small whatever the landing folder holds: a time watermark (files whose inode
change time is older were all looked at already: ``mv``, ``cp`` and writes all update it), the
files still waiting to settle, and the files staged in the last seconds before the watermark. Files are never moved or deleted: the archive is the
warehouse's own copy.
"""

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipelines.jobs import ingest_job, refresh_job
from pipelines.raw import PARTITIONS_NAME
from pipelines.refresh import refresh_request
from pipelines.resources import WarehouseResource
from warehouse.ingesting import runmeta
from warehouse.ingesting.landing import stage
from warehouse.ingesting.loader import is_candidate

SETTLE_SECONDS = float(os.environ.get("PWH_LANDING_SETTLE_S", "10"))
TICK_SECONDS = int(os.environ.get("PWH_LANDING_TICK_S", "4"))
CURSOR_VERSION = 2
# Files changed up to this long before a tick started are looked at again on the next tick
# (file-system timestamps are coarse and may lag the clock a little).
WATERMARK_MARGIN_NS = 2_000_000_000


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


def signature(path: Path) -> tuple[list[int], int]:
    """Size and mtime of the file and of its sidecar (any change means 'still being written'),
    and the newest inode change time of the two."""
    st = path.stat()
    sig, ctime = [st.st_size, st.st_mtime_ns], st.st_ctime_ns
    side = runmeta.sidecar_path(path)
    try:
        sst = side.stat()
        sig += [sst.st_size, sst.st_mtime_ns]
        ctime = max(ctime, sst.st_ctime_ns)
    except FileNotFoundError:
        pass
    return sig, ctime


def _load_cursor(raw: str | None) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
    """(watermark in ns, {pending file: signature}, {file staged within the margin: signature});
    an unknown cursor means 'look at everything'."""
    if not raw:
        return 0, {}, {}
    try:
        data = json.loads(raw)
    except ValueError:
        return 0, {}, {}
    if data.get("v") != CURSOR_VERSION:
        return 0, {}, {}
    return int(data.get("since", 0)), dict(data.get("pending", {})), dict(data.get("recent", {}))


@dataclass
class Tick:
    """What one evaluation found."""

    staged: dict[str, str] = field(default_factory=dict)  # landing file -> SHA-256, this tick
    pending: list[str] = field(default_factory=list)  # files still being written
    cursor: str = ""


def evaluate(landing: Path, settings, cursor: str | None, log, now: float | None = None) -> Tick:
    """Look at the landing folder once: stage every stable new or changed file."""
    now = time.time() if now is None else now
    since, waiting, recent = _load_cursor(cursor)
    start_ns = time.time_ns()
    new_since = start_ns - WATERMARK_MARGIN_NS
    tick = Tick()
    pending: dict[str, list[int]] = {}
    done: dict[str, list[int]] = {}  # staged, changed after new_since: not to be hashed again
    for path in landing_files(landing):
        rel = path.relative_to(landing).as_posix()
        try:
            sig, ctime = signature(path)
        except FileNotFoundError:
            continue  # vanished between listing and stat
        old = waiting.get(rel)
        if old is None and (ctime <= since or recent.get(rel) == sig):
            if ctime > new_since:
                done[rel] = sig
            continue  # looked at on an earlier tick and unchanged since
        young = now - max(sig[1::2]) / 1e9 < SETTLE_SECONDS
        stable = (old is not None and old == sig) or (old is None and not young)
        if not stable:
            pending[rel] = sig
            continue
        try:
            tick.staged[rel] = stage(settings, path)
        except OSError as exc:
            log.warning(f"{path}: cannot stage yet ({exc}); retrying next tick")
            pending[rel] = sig
            continue
        if ctime > new_since:
            done[rel] = sig
    tick.pending = sorted(pending)
    tick.cursor = json.dumps({"v": CURSOR_VERSION, "since": new_since, "pending": pending,
                              "recent": done}, separators=(",", ":"))
    return tick


def batch_request(keys: list[str], files: dict[str, list[str]]) -> dg.RunRequest:
    """One ingest_file run for the partitions ``keys`` (listed in its config); the run key is
    derived from the keys, so a batch is never launched twice."""
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    names = [n for k in keys for n in files[k]]
    tags = {"pwh/files": str(len(keys)),
            "pwh/landing_file": (names[0] if len(names) == 1 else
                                 f"{names[0]} and {len(names) - 1} more")[-200:]}
    if len(keys) == 1:
        tags["pwh/sha256"] = keys[0]
    return dg.RunRequest(run_key=f"files-{digest}", job_name=ingest_job.name, tags=tags,
                         run_config={"ops": {"raw_files": {"config": {"files": keys}}}})


def new_partitions(instance, tick: Tick, log) -> tuple[list[str], dict[str, list[str]]]:
    """The staged SHA-256s that are not partitions yet (in landing order), and their files."""
    files: dict[str, list[str]] = {}
    for rel, sha in tick.staged.items():
        files.setdefault(sha, []).append(rel)
    existing = set(instance.get_dynamic_partitions(PARTITIONS_NAME)) if files else set()
    new = [k for k in files if k not in existing]
    for k in files:
        names = ", ".join(files[k][:3])
        if k in existing:
            log.info(f"{names}: already a partition ({k[:12]}), ingested once already")
        elif len(files[k]) > 1:
            log.info(f"{names}: the same bytes ({k[:12]}); one partition for them")
    return new, files


@dg.sensor(
    name="landing_sensor",
    jobs=[ingest_job, refresh_job],
    minimum_interval_seconds=TICK_SECONDS,
    default_status=automation_status(dg.DefaultSensorStatus),
    description="Watches the landing folder ($PWH_LANDING, default <state>/landing). The "
    "stable new files of a tick become raw partitions (their SHA-256) and one ingest_file run "
    "over them; files still being written (*.tmp, *.part, size/mtime changing) wait; bad files "
    "fail their run with the error and land in quarantine/. After good partitions arrive it "
    "requests a refresh_models run (staging, marts, snapshot).",
)
def landing_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    landing = warehouse.landing_dir
    landing.mkdir(parents=True, exist_ok=True)
    tick = evaluate(landing, warehouse.settings, context.cursor, context.log)
    keys, files = new_partitions(context.instance, tick, context.log)
    requests = []
    if keys:
        requests.append(batch_request(keys, files))
        context.log.info(f"{len(keys)} new file(s), one ingest_file run: "
                         + ", ".join(files[k][0] for k in keys[:10]))
    refresh = refresh_request(context.instance)
    if isinstance(refresh, dg.RunRequest):
        requests.append(refresh)
    if not requests:
        why = f"no new stable file in {landing}"
        if tick.pending:
            why += (f"; waiting for {len(tick.pending)} still being written: "
                    f"{', '.join(tick.pending[:5])}")
        if isinstance(refresh, dg.SkipReason) and refresh.skip_message:
            why += f"; models: {refresh.skip_message}"
        return dg.SensorResult(skip_reason=dg.SkipReason(why), cursor=tick.cursor)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=(
            [dg.AddDynamicPartitionsRequest(PARTITIONS_NAME, keys)] if keys else []),
        cursor=tick.cursor,
    )
