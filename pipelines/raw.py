"""Raw layer: one dynamic partition per run file, keyed by its name and SHA-256 prefix.

A partition key reads ``<file stem>-<first 12 hex digits of the SHA-256>`` (e.g.
``run_one-c8b1dd555b4a``): readable in the UI, and still the file's bytes (the stem only
labels it; two names for the same bytes are one partition, whichever name came first). The
identity stays the full SHA-256: ``raw.files.sha256``, the archive's file name, the
``sha256`` metadata of each ``raw/files`` materialisation. Keys of earlier versions (the
64-digit SHA-256 itself) are still understood (:func:`key_sha`, :func:`key_prefix`).

One op (``raw_files``) ingests staged files through the same loader as ``pwh ingest`` and
materialises one asset per raw table (``raw/files`` is the manifest, then one asset per entity
table), so column lineage from the marts reaches the exact raw column. A run covers one
partition (a backfill, the UI) or a batch: the landing sensor puts every file that settled
during a tick in one run whose config lists their partitions (a run's start-up costs seconds, a
small file's ingestion milliseconds). Each file still gets its own transaction and its own
partition materialisations; a bad file is quarantined, is not materialised, and fails the run
after the others are in.

The raw checks run inside this op when the run does not select the ``raw_checks`` step (the
sensor's runs): one validation of all the batch's runs, Great Expectations loaded once per run,
one check evaluation per suite for the batch (each partition's outcome is on its ``raw/files``
materialisation). The op takes the ``duckdb_writer`` pool; it opens
the warehouse only inside the op and closes it before returning.
"""

import datetime as dt
import re

import dagster as dg

from pipelines.resources import ValidationResource, WarehouseResource
from warehouse import db
from warehouse.ingesting.formats import ALL_TABLES
from warehouse.ingesting.landing import ingest_staged_batch
from warehouse.serving.activity import status_counts

PARTITIONS_NAME = "run_files"
KEY_HASH_LEN = 12
_HEX64 = re.compile(r"[0-9a-f]{64}")


def partition_key(sha: str, file_name: str) -> str:
    """The readable partition key of a run file: its stem (extensions dropped, characters
    other than letters, digits, ``_.-`` replaced, at most 40) and its SHA-256 prefix."""
    name = re.sub(r"(\.[A-Za-z0-9]{1,12})+$", "", (file_name or "").replace("\\", "/")
                  .rsplit("/", 1)[-1])
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._-")[:40].strip("._-") or "run"
    return f"{stem}-{sha[:KEY_HASH_LEN]}"


def key_prefix(key: str) -> str:
    """The SHA-256 prefix a partition key carries (an old 64-digit key: its first digits)."""
    return key[:KEY_HASH_LEN] if _HEX64.fullmatch(key) else key.rsplit("-", 1)[-1]


def key_sha(settings, key: str) -> str:
    """The full SHA-256 of a partition key: the staged file in the archive with its prefix."""
    if _HEX64.fullmatch(key):
        return key
    prefix = key_prefix(key)
    found = {p.name.split(".", 1)[0] for p in settings.archive_dir.glob(f"{prefix}*.json")}
    found = {f for f in found if _HEX64.fullmatch(f)}
    if len(found) != 1:
        raise dg.Failure(
            description=f"partition {key}: {'no' if not found else 'more than one'} staged file "
            f"in {settings.archive_dir} has a SHA-256 starting with {prefix} (the landing "
            "sensor stages each file there before its partition exists)",
            allow_retries=False)
    return found.pop()
run_files = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)

# Every op that writes the DuckDB file takes this pool; dagster.yaml limits every pool to 1.
WRITER_POOL = "duckdb_writer"

KINDS_RAW = {"duckdb", "python"}


def _ddl_columns(ddl: str) -> list[tuple[str, str, str]]:
    """(name, type, comment) of each column line of a ``CREATE TABLE`` with ``--`` comments."""
    out = []
    for line in ddl.splitlines():
        m = re.match(r"\s+(\w+)\s+([A-Z]+(?:\[\])?)\b[^-]*--\s*(.*)$", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3).strip()))
    return out


# raw table name -> (columns, description); the manifest first, then every format's tables.
RAW_TABLES: dict[str, tuple[list[tuple[str, str, str]], str]] = {
    "files": (_ddl_columns(db.MANIFEST_DDL),
              "Manifest of ingested run files: one row per file; sha256 is every table's run_id. "
              "Partition key = the file's stem and the first 12 digits of its SHA-256."),
    **{t.name: (list(t.columns), t.doc[0].upper() + t.doc[1:] + ".") for t in ALL_TABLES},
}


def raw_key(table: str) -> dg.AssetKey:
    return dg.AssetKey(["raw", table])


def table_schema(columns) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name=c, type=t, description=d or None)
                                   for c, t, d in columns])


RAW_SPECS = [
    dg.AssetSpec(
        key=raw_key(name),
        description=f"`raw.{name}`: {doc}",
        group_name="raw",
        kinds=KINDS_RAW,
        partitions_def=run_files,
        skippable=True,  # a rejected file is not materialised; its run says why
        metadata={
            "dagster/column_schema": table_schema(cols),
            "dagster/table_name": f"raw.{name}",
        },
    )
    for name, (cols, doc) in RAW_TABLES.items()
]


def _file_metadata(f, batch) -> dict:
    """Metadata of one partition's ``raw/files`` materialisation: the file, its identity, checks."""
    r, ident = f.result, f.identity
    md = {  # no dagster/row_count: a partition of raw/files is one row, and the UI would show
        # "Row count 1" as the asset's; runs_ingested is the table's count
        "file_name": f.file_name,
        "path": dg.MetadataValue.path(r.path),
        "status": r.status,
        "source_format": f.source_format,
        "series": ident.get("series", ""),
        "label": ident.get("label", ""),
        "captured_at": ident.get("captured_at", ""),
        **({"job": ident["job"], "job_source": ident.get("job_source") or ""}
           if ident.get("job") else {}),  # a rank file of a distributed job
        "runs_ingested": dg.MetadataValue.int(batch.runs_in_warehouse),
        "files_in_this_run": dg.MetadataValue.int(len(batch.files)),
        "seconds": dg.MetadataValue.float(round(r.seconds, 3)),
        "ingested_at": dg.MetadataValue.timestamp(dt.datetime.now(dt.UTC).timestamp()),
    }
    return md


def raw_materializations(batch, checks_status: dict[str, str], *, as_outputs: bool,
                         keys: dict[str, str] | None = None):
    """One materialisation per raw table per file loaded (partition = its SHA-256); a file that
    failed is not materialised. ``raw/files`` carries the file's name, identity and the outcome
    of its blocking raw checks (``raw_checks``: passed / failed: invariants / not run).

    ``as_outputs`` (a partitioned run): the op's outputs, so that steps below it in the same run
    (the ``raw_checks`` step, models) run; otherwise (the sensor's batch run) one event per
    partition. A batch run is not itself partitioned: Dagster would otherwise plan, and record,
    one event per partition and asset before the run even starts (72 s for 100 files), and a
    bad file would mark its partition failed on all nine assets. ``keys``: SHA-256 -> partition
    key (default: the SHA-256 itself)."""
    keys = keys or {}
    for f in batch.files:
        if not f.result.ok:
            continue
        for name in RAW_TABLES:
            md = (_file_metadata(f, batch) if name == "files" else
                  {"dagster/row_count": dg.MetadataValue.int(f.rows.get(name, 0))})
            if name == "files":
                md["raw_checks"] = checks_status.get(f.sha, "not run in this run")
                md["sha256"] = f.sha
            if as_outputs:
                yield dg.MaterializeResult(asset_key=raw_key(name), metadata=md)
            else:
                # every raw table, 0 rows for the other format's: a partition is complete on
                # every raw asset, as after a backfill, never shown as missing
                yield dg.AssetMaterialization(asset_key=raw_key(name),
                                              partition=keys.get(f.sha, f.sha),
                                              description=f.file_name, metadata=md)


def failure_description(batch, status: dict[str, str] | None = None) -> str:
    """The run's failure: a headline naming each file and what it broke, then the details.
    ``status``: SHA-256 -> outcome of its blocking raw checks (``partition_status``)."""
    status = status or {}
    bad = batch.failed
    broke = [f for f in batch.files
             if f.result.ok and status.get(f.sha, "passed").startswith("failed")]
    heads = [f"{f.file_name} broke invariant(s) {status[f.sha].removeprefix('failed: ')}"
             for f in broke] + [f"{f.file_name} rejected" for f in bad]
    lines = ["; ".join(heads[:5]) + (f"; and {len(heads) - 5} more" if len(heads) > 5 else "")]
    if broke:
        lines.append(f"{len(broke)} run(s) failed their blocking raw checks (ingested, kept out "
                     "of the marts; `pwh runs --errors` lists them):")
        lines += [f"- {f.file_name} (run {f.sha[:12]}): invariant(s) "
                  f"{status[f.sha].removeprefix('failed: ')}" for f in broke[:20]]
    if bad:
        lines.append(f"{len(bad)} of {len(batch.files)} file(s) could not be ingested "
                     "(quarantined; `pwh runs --errors` lists them; the other files are "
                     "ingested):")
        lines += [f"- {f.result.message}" for f in bad[:20]]
    if len(bad) > 20 or len(broke) > 20:
        lines.append("- … and more (`pwh runs --errors`)")
    return "\n".join(lines)


class ShortFailure(dg.Failure):
    """A run failure the operator reads as is: its description names the files and what broke
    (``failure_description``); Dagster's own frames, the ~15 lines of the stack trace of any
    ``Failure``, say nothing more and are left out of the step's error."""


def _short_errors() -> None:
    """Make the step error of a :class:`ShortFailure` its description alone. Dagster builds a
    step's error from the exception and its traceback with no way to leave the trace out; this
    wraps that function (``dagster._core.execution.plan.objects``, dagster pinned) for this
    class only: every other error keeps its stack."""
    from dagster._core.execution.plan import objects
    from dagster._utils.error import SerializableErrorInfo

    full = objects.serializable_error_info_from_exc_info
    if getattr(full, "pwh_short", False):
        return

    def error_info(exc_info, *args, **kwargs):
        exc = exc_info[1]
        if isinstance(exc, ShortFailure):
            return SerializableErrorInfo(message=f"{exc.description}\n", stack=[],
                                         cls_name="Failure")
        return full(exc_info, *args, **kwargs)

    error_info.pwh_short = True
    objects.serializable_error_info_from_exc_info = error_info


_short_errors()


def plan_failed_partitions(context, keys: list[str]) -> None:
    """Record that this run meant to materialise ``keys`` of ``raw/files`` (the event Dagster
    writes itself before a partitioned run starts): a partition planned by a run that failed
    and never materialised is what Dagster counts as *failed*, linked to that run and its
    error. Only for the files a batch run rejected (planning every file up front would cost an
    event per file before anything is ingested), and only on the manifest, the asset of the
    files themselves: one bad file is one failed partition, not every raw table drawn red."""
    import logging

    from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent

    step = context.op_execution_context.get_step_execution_context().step.key
    for key in keys:
        context.instance.report_dagster_event(
            DagsterEvent.build_asset_materialization_planned_event(
                context.run.job_name, step,
                AssetMaterializationPlannedData(raw_key("files"), partition=key)),
            context.run_id, logging.DEBUG)


class RawFilesConfig(dg.Config):
    """``files``: the SHA-256s a batch run of the landing sensor ingests, ``keys`` their
    partition keys (same order; default: the SHA-256s). Empty: the run's own partition (a
    backfill, a launch from the UI)."""

    files: list[str] = []
    keys: list[str] = []


@dg.multi_asset(
    name="raw_files",
    specs=RAW_SPECS,
    pool=WRITER_POOL,
    description="Ingest run files (staged in the archive by the landing sensor; one partition "
    "per file, all the files of a sensor tick in one run) into every raw table, one "
    "transaction per file, through the same loader as `pwh ingest`; then validate them against "
    "the raw suites at once (the raw asset checks, per partition).",
)
def raw_files(context: dg.AssetExecutionContext, config: RawFilesConfig,
              warehouse: WarehouseResource, validation: ValidationResource):
    from pipelines import checks as pchecks  # checks.py imports this module

    batch_run = bool(config.files)
    if batch_run:
        shas = list(config.files)
        pkeys = dict(zip(shas, config.keys or shas, strict=True))
    else:
        pkeys = {key_sha(warehouse.settings, k): k for k in context.partition_keys}
        shas = list(pkeys)
    inline = not pchecks.raw_checks_in_run(context)  # else the raw_checks step validates
    suites = pchecks.raw_suites() if inline else None
    earlier: list = []
    names: dict[str, str] = {}
    statuses = None
    with warehouse.exclusive(context.log):
        batch = ingest_staged_batch(warehouse.settings, shas, suites=suites)
        if inline:  # runs validated before that still fail: the checks describe the data
            con = db.connect_rw(warehouse.settings.warehouse)
            try:
                earlier, names = pchecks.failing_elsewhere(
                    con, [f.sha for f in batch.files if f.result.ok], suites)
                statuses = status_counts(con) if batch.check_results else None
            finally:
                con.close()
    status = pchecks.partition_status(batch.check_results) if inline else {}
    if batch_run and batch.failed:
        plan_failed_partitions(context, [pkeys[f.sha] for f in batch.failed])
    yield from raw_materializations(batch, status, as_outputs=not batch_run, keys=pkeys)
    if inline:
        yield from pchecks.raw_evaluations(batch, earlier, names)
    if statuses is not None:  # checks.run_status changed: not "never materialized" in the UI
        yield pchecks.run_status_event(statuses, len({r.run_id for r in batch.check_results}))
    failed_checks = sorted(k for k, v in status.items() if v != "passed")
    context.log.info(
        f"{len(batch.files)} file(s): {len(batch.files) - len(batch.failed)} loaded, "
        f"{len(batch.failed)} rejected; raw checks failed for {len(failed_checks)} run(s)"
        + "".join(f"\n{f.file_name} ({f.sha[:12]}): {f.result.message}" for f in batch.files))
    if batch.failed or failed_checks:
        # one short message naming the files and the invariants (Dagster's own for a blocking
        # check names only the check)
        md = {}
        if batch.failed:
            md["rejected_files"] = dg.MetadataValue.json(
                [{"file": f.result.path, "sha256": f.sha, "error": f.result.message,
                  "quarantine": f.result.quarantine_path} for f in batch.failed[:50]])
        if failed_checks:
            md["failed_checks"] = dg.MetadataValue.json(
                [{"file": f.file_name, "sha256": f.sha, "raw_checks": status[f.sha]}
                 for f in batch.files if f.sha in failed_checks][:50])
        raise ShortFailure(description=failure_description(batch, status), metadata=md,
                           allow_retries=False)
