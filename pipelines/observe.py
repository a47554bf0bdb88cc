"""The warehouse sensor: work done outside Dagster shows in the UI within one tick.

``pwh ingest``, ``pwh check``, ``pwh build`` and the Python API write the warehouse without
Dagster. Every ``PWH_OBSERVE_TICK_S`` seconds (default 15) this sensor asks the warehouse what
changed since its last look (``warehouse.serving.activity.peek``: read-only, only when the file
changed, never while a writer holds it) and reports it to the instance as runless events:

* a run ingested outside Dagster becomes a partition of the raw layer, materialised on every
  raw asset (row counts, 0 for the other format's tables; file name, series, label, parser
  version, ``reported_from``);
* a run ``pwh rederive`` re-derived (``meta.rederivations``; its ``ingested_at`` is kept) is
  materialised again on every raw asset, once, with its new row counts and a new data version;
* a validation recorded in ``checks.results`` becomes check evaluations, one per suite over
  the runs validated (skipped for a run whose validation a Dagster run of this instance
  recorded itself);
* a model built outside Dagster (``meta.model_builds``) becomes a materialisation of its asset,
  unless Dagster's own latest materialisation is newer, with the same numbers a Dagster build
  reports (``activity.model_numbers``); a snapshot published outside Dagster becomes a
  materialisation of ``snapshot/current``.

Reported work must not look stale when it is not: the events are written in dependency order
(raw, then each model after the models it reads, then the snapshot), each with a data version
(a raw partition: its file's SHA-256, or once re-derived that of its latest re-derivation; a
model: its build), its asset's code version and the
data version and event of each input as the instance holds it at that moment: the provenance
Dagster records for its own runs, so ``staleStatus`` is FRESH once reported. The provenance of
a model depends on the storage ids of its inputs' events, so the sensor writes the events
itself, in that order, rather than handing them to the daemon in its result.

The work of one tick is bounded (the daemon gives up on a tick after 60 s, and each event is a
few SQLite commits: ~16 ms of CPU, ~0.1 s of wall time under load; the first look at
``make demo``'s history is ~5,000 events): a tick reports the raw partitions of whole runs, in
ingestion order, until ``PWH_OBSERVE_MAX_EVENTS`` events (default 1000) or
``PWH_OBSERVE_BUDGET_S`` seconds (default 20) are spent, and the next tick goes on with the runs
not materialised yet (all of its look's: a run before the last one reported but not seen
before, the warehouse replaced meanwhile, is not skipped). The check results, the models and
the snapshot are reported once the raw partitions are caught up, in the tick that catches up
(or the next one, if its budget is spent): as one unbounded look would, event for event. Each
tick says what it reported and how many runs are left.

The cursor holds four watermarks (ingested, validated, built, derived: re-derivations) of the
last look that caught up, the digest of the runs and re-derivations up to them (``seen``, see
``activity.peek``), the file's signature (none while catching up: the next tick looks even if
the file did not change), and while catching up the last run reported (``raw``: its ingestion
time and SHA-256; it says a catch-up is going on, the runs left are those not materialised
yet). The watermarks alone would skip a run stamped before them but not in the warehouse at the
last look (committed late by a process whose clock or transaction started earlier, the clock
stepped back, a backup restored or the file replaced after a catch-up): when the runs up to
them are not those the last look saw (its digest differs; a cursor of an earlier version has
none), the look takes every run, and a catch-up it starts goes on from the beginning; the runs
reported already are looked at, not reported. A quiet tick still only compares the file's
signature; a tick after a change scans the manifest once more for the digest.
A raw partition already materialised on an asset (by a Dagster run, or reported by a tick whose
cursor was lost: the daemon gave up on it, the process died) is not reported on it again; a
re-derived run's, unless its latest materialisation there is not of its latest re-derivation
(its data version); and in a look at every run, a run not re-derived whose latest
materialisation is a re-derivation's (a backup taken before ``pwh rederive`` restored: the
warehouse holds the first derivation's rows again) is reported again with its file's version. A new instance (or a reset cursor) reports the warehouse's whole history
once, over as many ticks as it takes.
"""

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import threading
import time
from collections import defaultdict

import dagster as dg
from dagster import DagsterEventType
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_TAG,
    extract_data_version_from_entry,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)

from pipelines.checks import RUN_STATUS_KEY, check_evaluation, raw_suites, run_status_event
from pipelines.models import numbers_metadata, table_key
from pipelines.raw import (
    KEY_HASH_LEN,
    PARTITIONS_NAME,
    RAW_TABLES,
    key_prefix,
    partition_key,
    raw_key,
)
from pipelines.refresh import REPORTED_KEY
from pipelines.resources import WarehouseResource
from pipelines.sensors import automation_status
from warehouse import checks as wchecks
from warehouse.serving import activity

TICK_SECONDS = int(os.environ.get("PWH_OBSERVE_TICK_S", "15"))
# One look at a time per code server: the daemon gives up on a tick after 60 s, but the code
# server goes on with it (the first look at `make demo`'s history writes ~5,000 events: 79 s of
# CPU, 10 min under load). Without this, every later tick started the same look again beside
# it: each partition and model was reported up to 6 times and the code server, busy, showed
# the code location as failed.
_LOOKING = threading.Lock()
_SINCE = [0.0]  # when the look holding _LOOKING started (time.monotonic())
# Per tick: at most this many events (whole runs: a run is len(RAW_TABLES) events; at least
# one run a tick) and no new run started after this many seconds.
MAX_EVENTS = int(os.environ.get("PWH_OBSERVE_MAX_EVENTS", "1000"))
BUDGET_SECONDS = float(os.environ.get("PWH_OBSERVE_BUDGET_S", "20"))
RAW_RUN_COLUMNS = {t: ("sha256" if t == "files" else "run_id") for t in RAW_TABLES}
REPORTED = "warehouse (pwh CLI or Python API)"
LOOK_KEY = "reported_look"  # a reported check result: the watermarks of the look it is from


def _ts(when: dt.datetime) -> float:
    return when.replace(tzinfo=dt.UTC).timestamp() if when.tzinfo is None else when.timestamp()


def _load(cursor: str | None) -> dict:
    try:
        data = json.loads(cursor or "{}")
    except ValueError:
        data = {}
    return data if data.get("v") == 1 else {}


def _when(data: dict, key: str) -> dt.datetime:
    return dt.datetime.fromisoformat(data[key]) if data.get(key) else activity.EPOCH


def derived_version(run: dict) -> str:
    """A raw partition's data version: its file's SHA-256 (its bytes: its data), or, once
    ``pwh rederive`` re-derived its rows, that of the SHA-256, the parser version and the
    time of its latest re-derivation (new rows: a new data version)."""
    sha = run["sha256"]
    if not run.get("rederived_at"):
        return sha[:16]
    return hashlib.sha256(f"{sha} {run['parser_version']} {run['rederived_at'].isoformat()}"
                          .encode()).hexdigest()[:16]


def _raw_events(runs: list[dict], rows: dict[str, dict[str, int]],
                materialized: dict[str, set[str]], existing: dict[str, str],
                versions: dict[str, dict[str, str]] | None = None) -> tuple[list, list[str]]:
    """The materialisations of ``runs`` on every raw asset. ``materialized``: per raw table, the
    SHA-256 prefixes of its materialised partitions (a Dagster run's, or reported already);
    ``existing``: prefix -> partition key of every partition (a run keeps the key it has, old
    64-digit ones too); ``versions``: per raw table, partition key -> the data version of its
    latest materialisation, of the re-derived runs' partitions (a re-derived run is reported on
    the tables whose latest materialisation is not of its re-derivation)."""
    events, keys = [], []
    for run in runs:
        sha = run["sha256"]
        version = derived_version(run)
        key = existing.get(sha[:KEY_HASH_LEN]) or partition_key(sha, run["file_name"])
        latest = {n: (versions or {}).get(n, {}).get(key) for n in RAW_TABLES}
        # last reported as a re-derivation the warehouse no longer holds (a backup taken
        # before it restored): its rows are the first derivation's
        restored = set() if run.get("rederived_at") else {
            n for n in RAW_TABLES if _rederivation(latest[n], sha)}
        if run.get("rederived_at"):
            todo = [n for n in RAW_TABLES if latest[n] != version]
        else:  # not materialised yet, or restored
            todo = [n for n in RAW_TABLES if sha[:KEY_HASH_LEN] not in materialized.get(n, ())
                    or n in restored]
        if not todo:
            continue  # ingested by a Dagster run, which reported it already (or reported)
        keys.append(key)
        counts = rows.get(sha, {})
        for name in todo:
            md = {REPORTED_KEY: REPORTED}
            if name != "files":  # one row per partition: "Row count 1" would mislead
                md["dagster/row_count"] = dg.MetadataValue.int(counts.get(name, 0))
            if name == "files":
                md.update({"file_name": run["file_name"], "sha256": sha,
                           "path": dg.MetadataValue.path(run["original_path"]),
                           "source_format": run["source_format"], "series": run["series"],
                           "label": run["label"], "captured_at": str(run["captured_at"]),
                           "parser_version": run["parser_version"],
                           "ingested_at": dg.MetadataValue.timestamp(_ts(run["ingested_at"]))})
                if run.get("rederived_at"):
                    md["rederived_at"] = dg.MetadataValue.timestamp(_ts(run["rederived_at"]))
            events.append(dg.AssetMaterialization(
                asset_key=raw_key(name), partition=key,
                description=run["file_name"] + (
                    f" (re-derived: {run['parser_version']})" if run.get("rederived_at")
                    else f" (as first derived: {run['parser_version']})" if name in restored
                    else ""),
                metadata=md, tags={DATA_VERSION_TAG: version}))
    return events, keys


def _rederivation(version: str | None, sha: str) -> bool:
    """Is ``version`` (a raw partition's latest data version) that of a re-derivation this sensor
    reported (:func:`derived_version`: 16 hex digits, not the SHA-256's first 16)? A Dagster
    run's own version is Dagster's (64 digits)."""
    return version is not None and len(version) == 16 and version != sha[:16]


def _latest_versions(instance, keys: list[str]) -> dict[str, dict[str, str]]:
    """Per raw table, partition key -> the data version of its latest materialisation, of
    ``keys`` (one query a table)."""
    if not keys:
        return {}
    store = instance.event_log_storage
    return {name: {k: tags.get(DATA_VERSION_TAG, "") for k, tags in
                   store.get_latest_tags_by_partition(
                       raw_key(name), DagsterEventType.ASSET_MATERIALIZATION,
                       [DATA_VERSION_TAG], asset_partitions=keys).items()}
            for name in RAW_TABLES}


def _dagster_validated(instance, runs: list[str]) -> dict[str, float]:
    """Per run (SHA-256): when a Dagster run last materialised its partition (its checks ran
    just before)."""
    if not runs:
        return {}
    existing = {key_prefix(k): k for k in instance.get_dynamic_partitions(PARTITIONS_NAME)}
    by_key = {existing[r[:KEY_HASH_LEN]]: r for r in runs if r[:KEY_HASH_LEN] in existing}
    if not by_key:
        return {}
    recs = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=raw_key("files"), asset_partitions=list(by_key)),
        limit=10 * len(by_key)).records
    out: dict[str, float] = {}
    for r in recs:
        if r.run_id and REPORTED_KEY not in (r.asset_materialization.metadata or {}):
            sha = by_key.get(r.partition_key)
            if sha:
                out[sha] = max(out.get(sha, 0.0), r.timestamp)
    return out


def _check_events(instance, act: activity.Activity) -> list:
    """One evaluation per suite, over the runs validated outside Dagster since the last look."""
    suites = {s.name: s for s in wchecks.load_suites()}
    by_dagster = _dagster_validated(instance, sorted({r.run_id for r in act.results}))
    per_suite: dict[str, list] = defaultdict(list)
    for r in act.results:
        if r.suite not in suites:
            continue  # a suite removed since
        if by_dagster.get(r.run_id, 0.0) >= _ts(r.validated_at):
            continue  # a Dagster run validated it and reported the outcome itself
        per_suite[r.suite].append(r)
    out = [check_evaluation(suites[name], res, partition=None,
                            runs_validated=len({r.run_id for r in res}),
                            earlier=[r for r in act.failing if r.run_id not in
                                     {x.run_id for x in res}], names=act.names)
           for name, res in sorted(per_suite.items())]
    if act.runs:  # new raw partitions: a raw check still failing for an earlier run says so
        # after them, not "not evaluated" (its latest evaluation would predate them)
        for s in raw_suites():
            earlier = [r for r in act.failing if r.suite == s.name]
            if s.name not in per_suite and earlier:
                out.append(check_evaluation(s, [], partition=None, runs_validated=0,
                                            why_not="the new runs were not validated yet",
                                            earlier=earlier, names=act.names))
    return out


def _unreported(instance, checks: list, act: activity.Activity) -> list:
    """``checks`` marked with the look they come from (its watermarks), without those the
    instance holds already: a tick whose cursor was lost (the daemon gave up on it, the process
    died) is not reported again by the next one. An evaluation over runs validated is the same
    for every look with its validation watermark (a run ingested since the lost tick changes
    the look's ingestion watermark, not the results validated); one saying the new runs were
    not validated yet belongs to the runs ingested too: to the runs up to the look's
    watermarks, its digest (a run committed late or re-derived leaves the ingestion watermark
    where it was, and is new all the same)."""
    mark = (f"{act.ingested_at.isoformat()} {act.derived_at.isoformat()} "
            f"{act.seen[0]}:{act.seen[1]} {act.validated_at.isoformat()}")
    out = []
    for evt in checks:
        key = dg.AssetCheckKey(evt.asset_key, evt.check_name)
        last = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
        data = last[0].event.dagster_event.event_specific_data if last and last[0].event else None
        seen = getattr((getattr(data, "metadata", None) or {}).get(LOOK_KEY), "value", None)
        validated = getattr(evt.metadata.get("runs_validated"), "value", 0)
        same = (seen == mark if not validated else
                isinstance(seen, str) and seen.split(" ")[-1] == mark.split(" ")[-1])
        if not same:
            out.append(evt.with_metadata({**evt.metadata, LOOK_KEY: mark}))
    return out


def _latest(instance, key: dg.AssetKey):
    recs = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
    return recs[0] if recs else None


def provenance_tags(instance, graph, key: dg.AssetKey, data_version: str) -> dict[str, str]:
    """The tags Dagster writes on a materialisation of ``key`` by a run: its data version, its
    asset's code version, and per input the data version and the event (storage id) the
    instance holds now (partitioned inputs: the newest event of any partition)."""
    node = graph.get(key)
    tags = {DATA_VERSION_TAG: data_version}
    if node.code_version:
        tags[CODE_VERSION_TAG] = node.code_version
    for parent in sorted(node.parent_keys):
        rec = _latest(instance, parent)
        if rec is None:
            version = "INITIAL" if graph.get(parent).is_external else "NULL"
        else:
            found = extract_data_version_from_entry(rec.event_log_entry)
            version = found.value if found else "INITIAL"
        tags[get_input_data_version_tag(parent)] = version
        tags[get_input_event_pointer_tag(parent)] = str(rec.storage_id) if rec else "NULL"
    return tags


def _model_events(instance, act: activity.Activity, graph) -> list[tuple[dg.AssetKey, dict]]:
    """(asset key, materialisation arguments) of every model built outside Dagster, in
    dependency order; the provenance tags are added when each is written."""
    order = {k: i for i, k in enumerate(graph.toposorted_asset_keys)}
    out = []
    for model, built in act.builds.items():
        key = table_key(model)
        if key not in order:
            continue  # a model removed since
        latest = instance.get_latest_materialization_event(key)
        if latest is not None and latest.timestamp >= _ts(built):
            continue  # Dagster built it (or already heard of this build)
        md = {REPORTED_KEY: REPORTED, "built_at": dg.MetadataValue.timestamp(_ts(built)),
              **numbers_metadata(act.numbers.get(model, {}))}
        version = hashlib.sha256(f"{model}@{built.isoformat()}".encode()).hexdigest()[:16]
        out.append((key, {"metadata": md, "description": "built outside Dagster",
                          "version": version}))
    return sorted(out, key=lambda kv: order[kv[0]])


def _snapshot_event(instance, act: activity.Activity) -> tuple[dg.AssetKey, dict] | None:
    """``snapshot/current`` when the current snapshot was published outside Dagster."""
    from pipelines.snapshot import SNAPSHOT_KEY

    if not act.snapshot:
        return None
    rec = _latest(instance, SNAPSHOT_KEY)
    md = rec.asset_materialization.metadata if rec and rec.asset_materialization else {}
    if rec is not None and getattr(md.get("version"), "value", None) == act.snapshot:
        return None  # Dagster published it (or already heard of it)
    return SNAPSHOT_KEY, {"metadata": {REPORTED_KEY: REPORTED, "version": act.snapshot},
                          "description": "published outside Dagster", "version": act.snapshot}


def report(instance, graph, events: list, ordered: list[tuple[dg.AssetKey, dict]]) -> int:
    """Write ``events`` (raw partitions, check evaluations), then ``ordered`` (models, the
    snapshot) one by one, each with the provenance of the inputs written before it."""
    for evt in events:
        instance.report_runless_asset_event(evt)
    for key, kw in ordered:
        kw = dict(kw)
        tags = provenance_tags(instance, graph, key, kw.pop("version"))
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, tags=tags,
                                                                    **kw))
    return len(events) + len(ordered)


def _graph():
    from pipelines.definitions import defs  # definitions imports this module

    return defs.resolve_asset_graph()


def observe(instance, settings, cursor: str | None, graph=None, *,
            max_events: int | None = None, budget_s: float | None = None
            ) -> dg.SensorResult | dg.SkipReason:
    """One tick (separate from the decorator so tests can call it): the events are written to
    ``instance`` here (:func:`report`); the result carries the cursor. ``graph``: the code
    location's asset graph (default: ``pipelines.definitions``). ``max_events``,
    ``budget_s``: this tick's budget (default ``PWH_OBSERVE_MAX_EVENTS``,
    ``PWH_OBSERVE_BUDGET_S``)."""
    if not _LOOKING.acquire(blocking=False):
        return dg.SkipReason(
            f"still reporting the previous look at the warehouse, started "
            f"{time.monotonic() - _SINCE[0]:.0f} s ago (a tick's raw partitions stop after "
            f"PWH_OBSERVE_BUDGET_S, {BUDGET_SECONDS:g} s: a look going on far longer is stuck, "
            "restart the code server); looking again next tick")
    try:
        with _instance_lock(instance) as held:
            if not held:
                return dg.SkipReason(
                    "another process is reporting a look at the warehouse to this Dagster "
                    f"instance ({_LOCK_NAME} in its folder is locked: e.g. the code server "
                    "before a restart, still at it); looking again next tick")
            _SINCE[0] = time.monotonic()
            return _observe(instance, settings, cursor, graph,
                            MAX_EVENTS if max_events is None else max_events,
                            BUDGET_SECONDS if budget_s is None else budget_s)
    finally:
        _LOOKING.release()


_LOCK_NAME = ".pwh-observe.lock"


@contextlib.contextmanager
def _instance_lock(instance):
    """One look at a time per Dagster instance across processes too: a code server restarted
    while the old one still reports a look would otherwise report the same runs beside it (each
    tick reads what is materialised once, at its start). An ``flock`` on a file in the
    instance's folder, released with the process if it dies; an instance without a folder on
    this machine has only the per-process lock. Yields whether it is held."""
    root = getattr(instance, "root_directory", None)
    if not root or not os.path.isdir(root):
        yield True
        return
    fd = os.open(os.path.join(root, _LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _catching_up(data: dict) -> bool:
    """Whether the cursor is that of a catch-up (``raw``: the last run reported by its ticks):
    the runs to report are those not materialised yet."""
    raw = data.get("raw")
    return isinstance(raw, list) and len(raw) == 2


def _report_runs(instance, graph, act: activity.Activity, pending: list[dict],
                 max_events: int, deadline: float, rewound: bool = False
                 ) -> tuple[int, int, int, int]:
    """Report the raw partitions of ``pending`` (in ingestion order), whole runs, until the
    budget is spent (at least one run). Returns (runs looked at, runs reported, events
    written, re-derived runs reported): a run materialised already (by a Dagster run, or a
    tick whose cursor was lost; a re-derived run: with its re-derivation's data version) is
    looked at, not reported."""
    materialized = {name: {key_prefix(k) for k in instance.get_materialized_partitions(
        raw_key(name))} for name in RAW_TABLES}
    existing = {key_prefix(k): k for k in instance.get_dynamic_partitions(PARTITIONS_NAME)}
    # the latest data versions: of the re-derived runs, and in a look at every run (a backup
    # restored, the file replaced) of every run, whose re-derivation may be gone
    versions = _latest_versions(instance, [
        existing[r["sha256"][:KEY_HASH_LEN]] for r in pending
        if (rewound or r.get("rederived_at")) and r["sha256"][:KEY_HASH_LEN] in existing])
    events_of = [_raw_events([run], act.rows, materialized, existing, versions)
                 for run in pending]
    known = set(existing.values())  # once: a set per run was quadratic in the partitions
    add = [k for _, keys in events_of for k in keys if k not in known]
    if add:  # partitions first, then their events
        instance.add_dynamic_partitions(PARTITIONS_NAME, add)
    looked = runs = n = rederived = 0
    for (events, _), run in zip(events_of, pending, strict=True):
        if looked and (n + len(events) > max_events or time.monotonic() >= deadline):
            break
        n += report(instance, graph, events, [])
        looked += 1
        runs += bool(events)
        rederived += bool(events) and bool(run.get("rederived_at"))
    return looked, runs, n, rederived


def _observe(instance, settings, cursor: str | None, graph, max_events: int, budget_s: float
             ) -> dg.SensorResult | dg.SkipReason:
    deadline = time.monotonic() + budget_s
    data = _load(cursor)
    sig = activity.file_signature(settings)
    if sig is None:
        return dg.SkipReason(f"no warehouse at {settings.warehouse} yet")
    if sig == data.get("sig"):
        return dg.SkipReason("the warehouse has not changed since the last look")
    # from the watermarks of the last look that caught up: every tick catching up sees the
    # same history (and what came since), as one unbounded look would
    act = activity.peek(settings, _when(data, "ingested"), _when(data, "validated"),
                        _when(data, "built"), RAW_RUN_COLUMNS, _when(data, "derived"),
                        data.get("seen"))
    if act is None:
        return dg.SkipReason("the warehouse is being written; looking again next tick")
    # the runs up to the last look's watermarks are not those it saw (a run committed late
    # with an earlier ingestion time, a warehouse restored or replaced): every run was looked
    # at, and a catch-up goes on from the start (those reported already are not reported)
    rewound = ("; runs appeared before the last look's watermark: every run looked at"
               if act.rewound else "")
    graph = graph or _graph()
    catching_up = _catching_up(data)
    # every run of the look, not only those after the last one reported: a run the ticks
    # before reported is materialised already (looked at, not reported, at no cost), and one
    # ingested before it but not seen by them (the warehouse replaced meanwhile, the clock
    # stepped back) is reported, as one unbounded look would
    looked, runs, n_raw, n_rederived = _report_runs(
        instance, graph, act, act.runs, max_events, deadline,
        act.rewound or bool(data.get("full"))) if act.runs else (0, 0, 0, 0)
    rederived = f" (of which {n_rederived} re-derived)" if n_rederived else ""
    left = len(act.runs) - looked
    if left or (looked and (n_raw >= max_events or time.monotonic() >= deadline)):
        last = act.runs[looked - 1]
        new_cursor = {**data, "v": 1, "sig": None,
                      "raw": [last["ingested_at"].isoformat(), last["sha256"]]}
        if act.rewound:  # the catch-up's looks start from the beginning, not the watermarks
            new_cursor.update(ingested=None, derived=None, seen=None, full=True)
        what = ("any new check results, models and snapshot" if not left else
                f"{left} run(s) left, then any new check results, models and snapshot")
        return dg.SensorResult(cursor=json.dumps(new_cursor), skip_reason=dg.SkipReason(
            f"reported {n_raw} event(s) of work done outside Dagster: the raw partitions of "
            f"{runs} run(s){rederived} ({looked} of {len(act.runs)} caught up); "
            f"{what} next tick{rewound}"))
    checks = _unreported(instance, _check_events(instance, act), act)
    ordered = _model_events(instance, act, graph)
    n_models = len(ordered)
    if checks:  # validated outside Dagster: checks.run_status changed, before the models
        evt = run_status_event(act.statuses, len({r.run_id for r in act.results}),
                               **{REPORTED_KEY: REPORTED})
        ordered.insert(0, (RUN_STATUS_KEY, {
            "metadata": evt.metadata, "description": evt.description,
            "version": hashlib.sha256(act.validated_at.isoformat().encode()).hexdigest()[:16]}))
    snap = _snapshot_event(instance, act) if ordered or act.runs else None
    n = n_raw + report(instance, graph, checks, ordered + ([snap] if snap else []))
    new_cursor = json.dumps({"v": 1, "sig": sig, "ingested": act.ingested_at.isoformat(),
                             "validated": act.validated_at.isoformat(),
                             "built": act.built_at.isoformat(),
                             "derived": act.derived_at.isoformat(), "seen": act.seen})
    if not n:
        why = ("caught up: no new check results, models or snapshot" if catching_up
               else "nothing done outside Dagster")
    else:
        parts = [f"the raw partitions of {runs} run(s){rederived}"
                 if n_raw else "",
                 f"{len(checks)} check result(s)" if checks else "",
                 f"{n_models} model(s)" if n_models else "", "the snapshot" if snap else ""]
        why = (f"reported {n} event(s) of work done outside Dagster: "
               f"{', '.join(p for p in parts if p) or 'checks.run_status'}"
               + ("; caught up" if catching_up or n_raw else ""))
    return dg.SensorResult(cursor=new_cursor, skip_reason=dg.SkipReason(why + rewound))


@dg.sensor(
    name="warehouse_sensor",
    minimum_interval_seconds=TICK_SECONDS,
    default_status=automation_status(dg.DefaultSensorStatus),
    description="Reports work done outside Dagster (pwh ingest / check / build, the Python "
    "API) as runless events: new runs become raw partitions with their materialisations and "
    "check results, models built become materialisations. Reads the warehouse read-only and "
    "only when nobody is writing it.",
)
def warehouse_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource):
    result = observe(context.instance, warehouse.settings, context.cursor,
                     context.repository_def.asset_graph if context.repository_def else None)
    if isinstance(result, dg.SkipReason):
        return dg.SensorResult(skip_reason=result, cursor=context.cursor)
    return result
