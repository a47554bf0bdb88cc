"""Asset checks generated from the expectation suites (``expectations/suites``, issue 4).

Every suite is one asset check on the asset of the table it checks (``raw.audit_rows`` ->
``raw/audit_rows``); nothing is listed by hand. Checks on raw and staging assets, and
marts suites that declare ``meta.blocking`` (the invariants other models build on), are
*blocking*: a failing critical expectation yields severity ERROR, the run fails there and the
models below are not built in that run (and the refresh schedule does not build them from it
later, see ``schedules.py``). Non-critical failures are WARN.

* Raw checks validate the runs (partitions) a run ingested, against every raw suite at once (so
  ``checks.run_status`` sees each run's whole validation), record the results in
  ``checks.results`` and report one check result per suite for the whole batch, with the
  failing runs, invariant IDs, counts and sample rows as metadata. The sensor's batch runs
  validate inside the ingesting op (``raw_evaluations``); a run that selects the ``raw_checks``
  step (a backfill, the UI) validates there. Each partition's own outcome is also on its
  ``raw/files`` materialisation (metadata ``raw_checks``), which the refresh reads. The checks
  are not partitioned: one evaluation per suite per run, not per file, keeps a burst of files
  cheap to record.
* Model checks (staging/marts suites) validate, after the model is built in the same run, the
  runs whose rows the build changed plus the runs that failed the check's latest evaluation
  (listed in its metadata ``failing_run_ids``); every run after a full build, a changed suite,
  or when the check runs without its model (``model_check_scope``). Their results are reported to Dagster; ``checks.results`` receives them
  with each run's whole validation (``pwh check``, the daily full validation).
* ``checks/run_status`` is an asset: materialising it re-validates every run against every
  suite and records the results (the daily full validation).

Great Expectations is imported by ``warehouse.checks`` on the first validation only.
"""

import json
import re
from collections import defaultdict

import dagster as dg

from pipelines.models import table_key
from pipelines.raw import RAW_SPECS, WRITER_POOL
from pipelines.resources import ValidationResource, WarehouseResource
from warehouse import checks as wchecks
from warehouse import db

RUN_STATUS_KEY = dg.AssetKey(["checks", "run_status"])


def check_name(suite: wchecks.Suite) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", suite.name)


def check_key(suite: wchecks.Suite) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(table_key(suite.table), check_name(suite))


def _spec(suite: wchecks.Suite) -> dg.AssetCheckSpec:
    invariants = sorted({e.invariant_id for e in suite.expectations})
    return _check_spec(suite, invariants)


def _check_spec(suite: wchecks.Suite, invariants: list[str]) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        name=check_name(suite),
        asset=table_key(suite.table),
        blocking=suite.blocking,
        description=f"{suite.description[0].upper() + suite.description[1:]} "
        f"(suite `{suite.name}`, invariants {', '.join(invariants)}).",
        metadata={"suite": suite.name, "invariants": ", ".join(invariants),
                  "expectations": len(suite.expectations),
                  "source_format": suite.source_format or "any",
                  "suite_file": dg.MetadataValue.path(f"expectations/suites/{suite.path.name}")},
    )


def _outcome(suite: wchecks.Suite, results: list, *, runs_validated: int, why_not: str = "",
             earlier: list | None = None, names: dict[str, str] | None = None) -> dict:
    """passed, severity, description and metadata of one suite's warehouse results.

    ``earlier``: the failing results of this suite of runs validated before (not in
    ``results``) that still fail it (:func:`failing_elsewhere`): the outcome describes the data,
    not only the runs validated now, so a batch that validates nothing (every file rejected) or
    only good runs never turns a failing check green while a failing run is in the warehouse.
    ``names``: run -> file name, for the description."""
    earlier = [r for r in earlier or [] if r.suite == suite.name]
    names = names or {}
    failing = [r for r in results if not r.success] + earlier
    critical = [r for r in failing if r.critical]
    md: dict = {
        "runs_validated": dg.MetadataValue.int(runs_validated),
        "expectations_evaluated": dg.MetadataValue.int(len(results)),
        "failing_expectations": dg.MetadataValue.int(len(failing)),
    }
    if not results:
        md["not_applicable"] = why_not or "no batch to validate"
    if earlier:
        md["failing_from_earlier"] = dg.MetadataValue.int(len({r.run_id for r in earlier}))
    if failing:
        invs = sorted({r.invariant_id for r in failing})
        failed_runs = sorted({r.run_id for r in critical})
        md["failed_invariants"] = ", ".join(invs)
        md["failed_runs"] = dg.MetadataValue.int(len(failed_runs))
        md["unexpected_rows"] = dg.MetadataValue.int(sum(r.unexpected_count or 0 for r in failing))
        md["failures"] = dg.MetadataValue.json([{
            "run_id": r.run_id, "invariant_id": r.invariant_id, "table": r.table,
            "expectation": r.expectation, "critical": r.critical, "rule": r.rule,
            "unexpected_count": r.unexpected_count,
            "sample_failures": json.loads(json.dumps(r.sample_failures, default=str)),
        } for r in failing[:20]])
        lines = [f"{r.invariant_id} on {r.table}: {r.rule or r.expectation} "
                 f"({r.unexpected_count if r.unexpected_count is not None else '?'} failing, "
                 f"run {r.run_id[:12]}{_named(r.run_id, names)}"
                 f"{', validated earlier' if r in earlier else ''})" for r in failing[:10]]
        md["summary"] = dg.MetadataValue.md("\n".join(f"- {ln}" for ln in lines))
    files = list(dict.fromkeys(names.get(r.run_id) or r.run_id[:12] for r in failing))
    return {
        "passed": not failing,
        "severity": dg.AssetCheckSeverity.ERROR if critical else dg.AssetCheckSeverity.WARN,
        "description": ("passed" if not failing else
                        f"{', '.join(sorted({r.invariant_id for r in failing}))} broken in "
                        f"{', '.join(files[:3])}{' …' if len(files) > 3 else ''}"
                        + (" (still in the warehouse)" if not results or all(
                            r.success for r in results) else "")),
        "metadata": md,
    }


def _named(run_id: str, names: dict[str, str]) -> str:
    return f", {names[run_id]}" if names.get(run_id) else ""


def failing_elsewhere(con, exclude, suites: list[wchecks.Suite]
                      ) -> tuple[list, dict[str, str]]:
    """The failing results of ``suites`` of the runs validated before, not in ``exclude``, that
    still fail them (``activity.failing_results``), and run -> file name."""
    from warehouse.serving.activity import failing_results

    wanted = {s.name for s in suites}
    failing, names = failing_results(con, exclude)
    return [r for r in failing if r.suite in wanted], names


def check_result(suite: wchecks.Suite, results: list, *, runs_validated: int, why_not: str = "",
                 extra: dict | None = None, earlier: list | None = None,
                 names: dict[str, str] | None = None) -> dg.AssetCheckResult:
    """One Dagster check result from the warehouse results of one suite (``extra``: more
    metadata; ``earlier``, ``names``: see :func:`_outcome`)."""
    out = _outcome(suite, results, runs_validated=runs_validated, why_not=why_not,
                   earlier=earlier, names=names)
    if not any(not r.success and r.critical for r in results):
        # only runs validated before still fail: reported, but a blocking check's ERROR would
        # fail this run (and skip what follows it) for files that passed
        out["severity"] = dg.AssetCheckSeverity.WARN
    out["metadata"].update(extra or {})
    return dg.AssetCheckResult(asset_key=table_key(suite.table), check_name=check_name(suite),
                               **out)


def check_evaluation(suite: wchecks.Suite, results: list, *, partition: str | None,
                     runs_validated: int = 1, why_not: str = "", earlier: list | None = None,
                     names: dict[str, str] | None = None) -> dg.AssetCheckEvaluation:
    """The same outcome as an evaluation event for one partition (a batch run, or work done
    outside Dagster reported by the warehouse sensor). Blocking (fails the run) only when a run
    validated now fails: runs that failed before are reported, never blamed on this run."""
    out = _outcome(suite, results, runs_validated=runs_validated, why_not=why_not,
                   earlier=earlier, names=names)
    return dg.AssetCheckEvaluation(
        asset_key=table_key(suite.table), check_name=check_name(suite), partition=partition,
        blocking=suite.blocking and any(
            not r.success and r.critical for r in results), **out)


def raw_suites() -> list[wchecks.Suite]:
    raw_keys = {s.key for s in RAW_SPECS}
    return [s for s in wchecks.load_suites() if table_key(s.table) in raw_keys]


def raw_checks_in_run(context) -> bool:
    """Whether this run executes the ``raw_checks`` step (a backfill or a materialisation from
    the UI with its checks); the sensor's ``ingest_file`` runs do not, and validate inline."""
    return any(n.name == "raw_checks" for n in context.job_def.nodes)


def partition_status(results: list) -> dict[str, str]:
    """Per run: ``passed`` or ``failed: <invariants>`` (its blocking raw checks)."""
    return {run: ("passed" if s["passed"] else "failed: " + ", ".join(s["failed_invariants"]))
            for run, s in wchecks.summarize(results).items()}


def _why_not(suite: wchecks.Suite, formats: set[str]) -> str:
    if not formats:
        return "no run to validate"
    if not any(suite.applies_to(f) for f in formats):
        return f"validates {suite.source_format} runs; these runs are {', '.join(sorted(formats))}"
    return ""


def _run_partitions(context) -> list[str]:
    """The partitions (run files) of this run: one key, or the range of a batch."""
    try:
        return list(context.partition_keys)
    except Exception:  # noqa: BLE001 - an unpartitioned check in a partitioned run
        tags = context.run.tags
        if "dagster/partition" in tags:
            return [tags["dagster/partition"]]
        raise


def raw_evaluations(batch, earlier: list | None = None, names: dict[str, str] | None = None):
    """One evaluation per raw suite for the runs a batch loaded, and the runs validated before
    that still fail it (``earlier``, :func:`failing_elsewhere`): a batch that validates nothing
    leaves a failing check failed. Blocking (the run fails) only for a failing critical
    expectation of a run of this batch."""
    by_suite: dict[str, list] = defaultdict(list)
    for r in batch.check_results:
        by_suite[r.suite].append(r)
    loaded = [f for f in batch.files if f.result.ok]
    formats = {f.source_format for f in loaded}
    names = {**(names or {}), **{f.sha: f.file_name for f in loaded}}
    for s in raw_suites():
        yield check_evaluation(s, by_suite.get(s.name, []), partition=None,
                               runs_validated=len(loaded), why_not=_why_not(s, formats),
                               earlier=earlier, names=names)


def _raw_checks(suites: list[wchecks.Suite]) -> dg.AssetChecksDefinition:
    by_key = {check_key(s): s for s in suites}

    @dg.multi_asset_check(
        name="raw_checks",
        specs=[_spec(s) for s in suites],
        can_subset=True,
        pool=WRITER_POOL,
        description="Validate one run (partition) against every raw-layer suite; record the "
        "results in checks.results; one check result per suite.",
    )
    def raw_checks(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource,
                   validation: ValidationResource):
        from pipelines.raw import key_sha

        shas = [key_sha(warehouse.settings, k) for k in _run_partitions(context)]
        with warehouse.exclusive(context.log), db.writer(warehouse.settings.warehouse) as con:
            fmts = dict(con.execute("SELECT sha256, source_format FROM raw.files WHERE sha256 "
                                    "IN (SELECT unnest($ids))", {"ids": shas}).fetchall())
            present = [s for s in shas if s in fmts]
            # the runs' whole raw validation at once, whatever subset is selected
            results = wchecks.validate_runs(con, present, suites) if present else []
            wchecks.record_results(con, results)
            earlier, names = failing_elsewhere(con, present, suites)
        by_suite = defaultdict(list)
        for r in results:
            by_suite[r.suite].append(r)
        for sha, st in sorted(partition_status(results).items()):
            context.log.info(f"run {sha[:12]} ({fmts.get(sha)}): {st}")
        for key in sorted(context.selected_asset_check_keys, key=str):
            s = by_key[key]
            yield check_result(s, by_suite.get(s.name, []), runs_validated=len(present),
                               why_not=_why_not(s, set(fmts.values())), earlier=earlier,
                               names=names)

    return raw_checks


def suite_fingerprint(suites: list[wchecks.Suite]) -> str:
    """A short hash of the suites' expectations (a changed suite is validated on every run)."""
    import hashlib

    text = json.dumps([[s.name, [e.gx_config() for e in s.expectations]]
                       for s in sorted(suites, key=lambda s: s.name)], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _last_evaluation_md(instance, key: dg.AssetCheckKey) -> dict:
    """The metadata of the check's latest completed evaluation (empty if none)."""
    from dagster._core.storage.asset_check_execution_record import (
        COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES,
    )

    try:
        recs = instance.event_log_storage.get_asset_check_execution_history(
            key, limit=1, status=COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES)
    except Exception:  # noqa: BLE001 - storage without check history: validate everything
        return {}
    ev = recs[0].event if recs else None
    data = ev.dagster_event.event_specific_data if ev and ev.dagster_event else None
    md = getattr(data, "metadata", None) or {}
    return {k: getattr(v, "value", v) for k, v in md.items()}


def model_check_scope(instance, keys: list[dg.AssetCheckKey], fingerprint: str,
                      rebuilt: list[str] | None, all_runs: list[str]) -> tuple[list[str], str]:
    """The runs a model check validates after a build, and why.

    Every run after a full build, for a check run without its model's build, or when a
    suite changed or any check has no earlier evaluation that says which runs failed.
    Otherwise only the runs whose model rows this build changed, plus the runs that failed
    (or warned) the latest evaluation: the others' rows are unchanged since they passed, so
    a blocking failure is never cleared by a build that did not touch the failing run."""
    if rebuilt is None:
        return all_runs, "every run (full build, or no build of the model in this run)"
    again: set[str] = set()
    for key in keys:
        md = _last_evaluation_md(instance, key)
        if md.get("suite_fingerprint") != fingerprint or "failing_run_ids" not in md:
            return all_runs, "every run (first evaluation, or a suite changed)"
        again.update(md["failing_run_ids"] or [])
    have = set(all_runs)
    scope = sorted((set(rebuilt) | again) & have)
    return scope, (f"{len(set(rebuilt) & have)} run(s) rebuilt by this build and "
                   f"{len(again & have)} that failed before; the other "
                   f"{len(have) - len(scope)} passed before and are unchanged")


def _model_checks(asset: dg.AssetKey, suites: list[wchecks.Suite]) -> dg.AssetChecksDefinition:
    from pipelines.models import REBUILT

    by_key = {check_key(s): s for s in suites}
    name = "__".join(asset.path) + "_checks"
    model = ".".join(asset.path)

    @dg.multi_asset_check(
        name=name,
        specs=[_spec(s) for s in suites],
        can_subset=True,
        pool=WRITER_POOL,
        description=f"Validate the runs of `{model}` that its build changed (every run after a "
        "full build) and those that failed before, against its suites.",
    )
    def _checks(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource,
                validation: ValidationResource):
        keys = sorted(context.selected_asset_check_keys, key=str)
        selected = [by_key[k] for k in keys]
        fingerprint = suite_fingerprint(selected)
        with warehouse.exclusive(context.log), db.writer(warehouse.settings.warehouse) as con:
            runs = [r[0] for r in con.execute("SELECT sha256 FROM raw.files").fetchall()]
            scope, why = model_check_scope(context.instance, keys, fingerprint,
                                           REBUILT.get((context.run.run_id, model)), runs)
            results = wchecks.validate_runs(con, scope, selected) if scope else []
        context.log.info(f"{model}: validated {len(scope)} of {len(runs)} run(s): {why}")
        by_suite = defaultdict(list)
        for r in results:
            by_suite[r.suite].append(r)
        for s in selected:
            failing = sorted({r.run_id for r in by_suite.get(s.name, []) if not r.success})
            yield check_result(s, by_suite.get(s.name, []), runs_validated=len(scope),
                               why_not=why if runs else "no run in the warehouse", extra={
                                   "suite_fingerprint": fingerprint,
                                   "failing_run_ids": dg.MetadataValue.json(failing),
                                   "runs_in_warehouse": dg.MetadataValue.int(len(runs)),
                                   "scope": why})

    return _checks


def build_asset_checks(asset_keys: set[dg.AssetKey]) -> list[dg.AssetChecksDefinition]:
    """One multi-check op for the raw layer, one per model with suites."""
    suites = [s for s in wchecks.load_suites() if table_key(s.table) in asset_keys]
    raw_keys = {s.key for s in RAW_SPECS}
    raw = [s for s in suites if table_key(s.table) in raw_keys]
    per_model: dict[dg.AssetKey, list] = defaultdict(list)
    for s in suites:
        if table_key(s.table) not in raw_keys:
            per_model[table_key(s.table)].append(s)
    out = [_raw_checks(raw)] if raw else []
    out += [_model_checks(k, v) for k, v in sorted(per_model.items(), key=lambda kv: str(kv[0]))]
    return out


def unattached_suites(asset_keys: set[dg.AssetKey]) -> list[str]:
    """Suites whose table has no asset (a test asserts there are none)."""
    return [s.name for s in wchecks.load_suites() if table_key(s.table) not in asset_keys]


def run_status_event(counts: dict, validated: int, **metadata) -> dg.AssetMaterialization:
    """``checks/run_status`` after runs were validated outside its own asset (a landing batch,
    ``pwh check`` reported by the warehouse sensor): the view changed, so it is materialised,
    with the same numbers as the full validation."""
    failed, invs = counts.get("failed", (0, []))
    return dg.AssetMaterialization(asset_key=RUN_STATUS_KEY, description=(
        f"{validated} run(s) validated; {failed} failed run(s) in the warehouse"), metadata={
        "runs_validated": dg.MetadataValue.int(validated),
        "runs_in_status": dg.MetadataValue.int(sum(n for n, _ in counts.values())),
        "failed_runs": dg.MetadataValue.int(failed),
        "failed_invariants": ", ".join(invs), **metadata})


@dg.asset(
    key=RUN_STATUS_KEY,
    deps=[s.key for s in RAW_SPECS],
    group_name="checks",
    kinds={"duckdb", "python"},
    pool=WRITER_POOL,
    description="Validation status of every run (`checks.run_status`, derived from "
    "`checks.results`). Materialising it is the full validation: every run against every "
    "suite, results recorded in the warehouse; models then show each run's status and keep "
    "failed runs out of trends and baselines.",
    metadata={"dagster/table_name": "checks.run_status"},
)
def run_status(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
               validation: ValidationResource) -> dg.MaterializeResult:
    with warehouse.exclusive(context.log), db.writer(warehouse.settings.warehouse) as con:
        runs = [r[0] for r in con.execute("SELECT sha256 FROM raw.files ORDER BY 1").fetchall()]
        results = wchecks.validate_runs(con, runs) if runs else []
        wchecks.record_results(con, results)
        statuses = wchecks.run_status(con, runs)
    failed = sorted(r for r, st in statuses.items() if st.status == "failed")
    invariants = sorted({i for r in failed for i in statuses[r].failed_invariants})
    context.log.info(f"validated {len(runs)} run(s): {len(failed)} failed {invariants or ''}")
    return dg.MaterializeResult(metadata={
        "runs_validated": dg.MetadataValue.int(len(runs)),
        "failed_runs": dg.MetadataValue.int(len(failed)),
        "expectations_evaluated": dg.MetadataValue.int(len(results)),
        "failed_invariants": ", ".join(invariants),
        "failed_run_ids": dg.MetadataValue.json(failed[:50]),
    })
