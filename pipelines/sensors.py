"""The landing sensor: files dropped into the landing folder become partitions, in one run.

Per tick (every ``PWH_LANDING_TICK_S`` seconds at least, default 4: the daemon looks at its
sensors every 5 s, and a minimum just under that lets every look tick rather than every
other), for every file under the landing folder (sub-folders too; a sub-folder's name is the
default *series*):

* skipped for good: hidden files, ``*.tmp``, ``*.part``, ``*.partial``, ``*.crdownload``,
  sidecars ``*.meta.json`` and ``*.error.json`` records;
* skipped until stable: a file (or its sidecar ``<file>.meta.json``) whose size or mtime changed
  since the previous tick, or that is seen for the first time while modified less than
  ``PWH_LANDING_SETTLE_S`` seconds ago (default 10);
* a stable file is *staged*: its bytes and run identity (series, label, captured-at and job
  from the sidecar, else the defaults) are archived under its SHA-256; its partition key is its
  name's stem and the SHA-256's first 12 digits (``pipelines.raw.partition_key``). A Kineto rank
  file (``distributedInfo`` with ``world_size`` >= 2) is by default a rank of the job named
  after its folder, decided file by file (``warehouse.ingesting.landing.stage``): the ranks of
  a job settling over several ticks form one job, the one ``pwh ingest`` of the folder forms.

All the files staged in one tick that are not partitions yet become new partitions and ONE
``ingest_file`` run whose config lists them (``raw_files.config.files``) and whose run key is
derived from the SHA-256s. A file whose SHA-256 is already a partition (under whatever name)
is never requested again, and Dagster never launches two runs with the same run key for a
sensor: each file is ingested exactly once across ticks, renames, copies and daemon restarts.
A file the warehouse holds no run of (refused: a duplicated rank, say) and dropped again with
another identity (another folder, name or sidecar) is the exception: staged again with it and
requested again, under a run key of that identity (:func:`restaged`); unchanged, it is not.
When the warehouse is replaced (``make demo`` re-run, a backup restored) while the instance and
the landing folder persist, the files it lacks are ingested again, once per warehouse
generation (:func:`lost_partitions`).

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
from pipelines.raw import KEY_HASH_LEN, PARTITIONS_NAME, key_prefix, partition_key
from pipelines.refresh import IN_PROGRESS, INGEST_JOB, refresh_request
from pipelines.resources import WarehouseResource
from warehouse.ingesting import runmeta
from warehouse.ingesting.landing import identity_digest, restage, stage, staged_identity
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


def _cursor_data(raw: str | None) -> dict:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) and data.get("v") == CURSOR_VERSION else {}


def _load_cursor(raw: str | None) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
    """(watermark in ns, {pending file: signature}, {file staged within the margin: signature});
    an unknown cursor means 'look at everything'."""
    data = _cursor_data(raw)
    return int(data.get("since", 0)), dict(data.get("pending", {})), dict(data.get("recent", {}))


def warehouse_state(settings, shas: list[str]) -> tuple[str, set[str]] | None:
    """The warehouse's generation and which of ``shas`` its ``raw.files`` holds; None while a
    writer holds the file (look again next tick).

    The generation changes when the warehouse is replaced (``make demo`` re-run, a backup
    restored): the file's inode and its first ingestion time; empty while there is no file or
    nothing ingested."""
    import duckdb

    from warehouse import db

    path = settings.warehouse
    if not path.exists():
        return "", set()
    try:
        con = duckdb.connect(str(path), read_only=True, config=dict(db.BASE_CONFIG))
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            return None
        raise
    try:
        if not db.has_table(con, "raw", "files"):
            return "", set()
        first = con.execute("SELECT min(ingested_at) FROM raw.files").fetchone()[0]
        have = {r[0] for r in con.execute(
            "SELECT sha256 FROM raw.files WHERE sha256 IN (SELECT unnest($ids))",
            {"ids": list(shas)}).fetchall()} if shas else set()
        return (f"{path.stat().st_ino}:{first}" if first is not None else ""), have
    finally:
        con.close()


@dataclass
class Tick:
    """What one evaluation found."""

    staged: dict[str, str] = field(default_factory=dict)  # landing file -> SHA-256, this tick
    pending: list[str] = field(default_factory=list)  # files still being written
    cursor: str = ""
    generation: str = ""  # of the warehouse (see warehouse_state)
    recheck: bool = False  # the warehouse was replaced: are the staged partitions in it?


def evaluate(landing: Path, settings, cursor: str | None, log, now: float | None = None) -> Tick:
    """Look at the landing folder once: stage every stable new or changed file.

    When the warehouse was replaced since the last tick (another generation: ``make demo``
    re-run, a backup restored) every landing file is looked at again, so that files the new
    warehouse lacks are ingested again (:func:`lost_partitions`)."""
    now = time.time() if now is None else now
    data = _cursor_data(cursor)
    since, waiting, recent = _load_cursor(cursor)
    gen = data.get("gen")
    recheck = bool(data.get("recheck"))
    sig = activity_signature(settings)
    if sig != data.get("wsig") or gen is None:
        state = warehouse_state(settings, [])
        if state is None:  # being written: look at the generation next tick
            sig = data.get("wsig")
        else:
            # no file, or nothing ingested yet: no generation (keep the last one known), so
            # the first ingestion is no replacement, and a deleted-then-rebuilt one is
            if state[0] and gen and state[0] != gen:
                log.info(f"the warehouse is not the one of the last tick (generation {gen} -> "
                         f"{state[0]}): every landing file is looked at again")
                since, recent, recheck = 0, {}, True
            gen = state[0] or gen
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
            tick.staged[rel] = stage(settings, path, landing=landing)
        except OSError as exc:
            log.warning(f"{path}: cannot stage yet ({exc}); retrying next tick")
            pending[rel] = sig
            continue
        if ctime > new_since:
            done[rel] = sig
    tick.pending = sorted(pending)
    tick.generation = gen or ""
    tick.recheck = recheck
    tick.cursor = json.dumps({"v": CURSOR_VERSION, "since": new_since, "pending": pending,
                              "recent": done, "gen": gen, "wsig": sig, "recheck": recheck},
                             separators=(",", ":"))
    return tick


def activity_signature(settings) -> list[int] | None:
    """Size and mtime of the warehouse file and its WAL (unchanged: same generation)."""
    from warehouse.serving.activity import file_signature

    return file_signature(settings)


def batch_request(keys: list[str], files: dict[str, list[str]], generation: str = "",
                  pkeys: dict[str, str] | None = None) -> dg.RunRequest:
    """One ingest_file run for the files ``keys`` (SHA-256s, listed in its config with their
    partition keys ``pkeys``); the run key is derived from the SHA-256s, so a batch is never
    launched twice (``generation``: files the warehouse lost, ingested again once per warehouse
    generation; or files staged again with another identity, once per identity)."""
    pkeys = pkeys or {k: partition_key(k, files[k][0]) for k in keys}
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()
    if generation:
        digest = hashlib.sha256(f"{digest}@{generation}".encode()).hexdigest()
    names = [n for k in keys for n in files[k]]
    tags = {"pwh/files": str(len(keys)),
            "pwh/landing_file": (names[0] if len(names) == 1 else
                                 f"{names[0]} and {len(names) - 1} more")[-200:]}
    if len(keys) == 1:
        tags["pwh/sha256"] = keys[0]
    return dg.RunRequest(run_key=f"files-{digest}", job_name=ingest_job.name, tags=tags,
                         run_config={"ops": {"raw_files": {"config": {
                             "files": keys, "keys": [pkeys[k] for k in keys]}}}})


def new_partitions(instance, tick: Tick, log
                   ) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """The staged SHA-256s that are not partitions yet (in landing order), the files of every
    staged SHA-256, and its partition key (the existing one, whatever name it was given, or a
    new one from its first file's name)."""
    files: dict[str, list[str]] = {}
    for rel, sha in tick.staged.items():
        files.setdefault(sha, []).append(rel)
    existing = {key_prefix(k): k for k in instance.get_dynamic_partitions(PARTITIONS_NAME)
                } if files else {}
    new = [k for k in files if k[:KEY_HASH_LEN] not in existing]
    pkeys = {k: existing.get(k[:KEY_HASH_LEN]) or partition_key(k, files[k][0]) for k in files}
    for k in files:
        names = ", ".join(files[k][:3])
        if k not in new:
            log.info(f"{names}: already a partition ({pkeys[k]})")
        elif len(files[k]) > 1:
            log.info(f"{names}: the same bytes ({k[:12]}); one partition for them")
    return new, files, pkeys


def _held(settings, instance, files: dict[str, list[str]], new: list[str]
          ) -> tuple[list[str], set] | None:
    """The staged files that are partitions already and the SHA-256s of them the warehouse
    holds; ``([], set())`` when there are none. None: cannot tell now (a writer holds the
    warehouse, or an ingest run is in flight), the files wait for the next tick."""
    old = [k for k in files if k not in new]
    if not old:
        return [], set()
    if instance.get_runs_count(dg.RunsFilter(job_name=INGEST_JOB, statuses=IN_PROGRESS)):
        return None
    state = warehouse_state(settings, old)
    return None if state is None else (old, state[1])


def lost_partitions(settings, instance, files: dict[str, list[str]], new: list[str], log
                    ) -> list[str] | None:
    """Staged files that are partitions already but that the warehouse does not hold (it was
    replaced or restored while the Dagster instance and the landing folder persisted): they are
    ingested again (asked only on the ticks after the warehouse's generation changed, so a
    file whose ingestion failed is not retried on every tick). None: cannot tell now (a writer holds the warehouse, or an ingest run is
    in flight), the files wait for the next tick."""
    held = _held(settings, instance, files, new)
    if held is None:
        return None
    old, holds = held
    lost = [k for k in old if k not in holds]
    for k in lost[:10]:
        log.info(f"{files[k][0]}: a partition ({k[:12]}) the warehouse does not hold (replaced "
                 "or restored since): ingested again")
    return lost


def restaged(settings, instance, landing: Path, files: dict[str, list[str]], new: list[str],
             log) -> list[str] | None:
    """Staged files that are partitions already, that the warehouse holds no run of (refused,
    or never ingested) and that were dropped again with another identity: staged again with it
    and ingested again. A refused duplicate rank moved into a
    folder of its own or given a sidecar's ``"job"`` is so ingested as that job. The same
    identity again (the file touched, copied back) is not requested again, and a file the
    warehouse holds keeps its identity: ingested once. None: cannot tell now (a writer holds
    the warehouse, or an ingest run is in flight), the files wait for the next tick."""
    held = _held(settings, instance, files, new)
    if held is None:
        return None
    old, holds = held
    again = []
    for k in old:
        names = ", ".join(files[k][:3])
        if k in holds:
            log.info(f"{names}: ingested already ({k[:12]}), not again")
        elif restage(settings, [landing / r for r in files[k]], k, landing=landing):
            again.append(k)
            m = staged_identity(settings, k)
            log.info(f"{files[k][0]}: not in the warehouse ({k[:12]}: refused or never "
                     f"ingested) and dropped again as series {m.get('series')!r}, label "
                     f"{m.get('label')!r}, job {m.get('job')!r}: ingested again")
        else:
            log.info(f"{names}: not in the warehouse ({k[:12]}: refused or never ingested) "
                     "and its identity is unchanged: not requested again (move it into a "
                     "folder of its own or give it a sidecar to ingest it as another run)")
    return again


def _recheck_later(cursor: str, rels: list[str], recheck: bool | None = None) -> str:
    """The cursor with ``rels`` pending again (looked at on the next tick) and the recheck of
    lost partitions still to do if ``recheck`` (default: if there are ``rels``)."""
    data = json.loads(cursor)
    data["recheck"] = bool(rels) if recheck is None else recheck
    for rel in rels:
        data["recent"].pop(rel, None)
        data["pending"][rel] = []  # never equal to a signature: looked at, then stable
    return json.dumps(data, separators=(",", ":"))


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
    keys, files, pkeys = new_partitions(context.instance, tick, context.log)
    again = restaged(warehouse.settings, context.instance, landing, files, keys, context.log)
    lost = (lost_partitions(warehouse.settings, context.instance, files, keys, context.log)
            if tick.recheck and again is not None else [])
    # cannot tell yet: these files are looked at again next tick (still to be rechecked if
    # they were)
    later = [r for k in files if k not in keys for r in files[k]]
    tick.cursor = _recheck_later(tick.cursor, [] if again is not None and lost is not None
                                 else later, tick.recheck if again is None else None)
    again = again or []
    lost = [k for k in lost or [] if k not in again]
    requests = []
    if keys:
        requests.append(batch_request(keys, files, pkeys=pkeys))
        context.log.info(f"{len(keys)} new file(s), one ingest_file run: "
                         + ", ".join(files[k][0] for k in keys[:10]))
    if again:  # a new run key per staged identity: requested once per change
        requests.append(batch_request(again, files, "identity " + " ".join(
            identity_digest(staged_identity(warehouse.settings, k)) for k in again), pkeys))
    if lost:
        requests.append(batch_request(lost, files, tick.generation, pkeys))
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
            [dg.AddDynamicPartitionsRequest(PARTITIONS_NAME, [pkeys[k] for k in keys])]
            if keys else []),
        cursor=tick.cursor,
    )
