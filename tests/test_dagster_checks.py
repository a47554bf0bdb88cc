"""Asset checks generated from the expectation suites: blocking on raw and staging, with the
failing invariant in their metadata; a run that breaks one never feeds the marts."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pipelines.checks import check_key, unattached_suites
from pipelines.definitions import build_definitions, defs
from tests.conftest import ro
from warehouse import checks as wchecks
from warehouse.checks.suites import BLOCKING_LAYERS
from warehouse.ingesting.landing import stage


def test_every_suite_is_a_check_on_the_asset_of_its_table():
    graph = defs.resolve_asset_graph()
    assert unattached_suites(graph.get_all_asset_keys()) == []
    suites = wchecks.load_suites()
    assert {check_key(s) for s in suites} == set(graph.asset_check_keys)
    for s in suites:
        node = graph.get(check_key(s))
        assert node.key.asset_key.path == s.table.split(".")
        assert node.blocking == s.blocking, s.name
        # one result per run (a batch of files), not per partition: see pipelines/checks.py
        assert node.partitions_def is None, s.name
        assert s.name in node.description
    # raw and staging block by default; marts only the invariants other models build on
    assert all(s.blocking for s in suites if s.layer in BLOCKING_LAYERS)
    declared = {s.name for s in suites if s.layer == "marts" and s.blocking}
    assert {"gpu_timeline_invariants", "op_rollup_invariants",
            "ncu_rollup_invariants"} <= declared
    assert not any(s.blocking for s in suites if s.name == "marts.kernel_trends")


def _broken_audit(seeds, tmp_path):
    """The audit seed with one component fraction off by 1e-6: breaks A1 (and A3)."""
    doc = json.loads(seeds["audit"].read_text())
    doc["rows"][0]["components"][0]["fraction_of_profiled_sum"] += 1e-6
    bad = tmp_path / "bad" / "audit_a1.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(doc, indent=1))
    return bad


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


@pytest.mark.slow
def test_a_broken_invariant_fails_the_run_and_blocks_the_models(wh, seeds, tmp_path):
    d = build_definitions(str(wh.warehouse))
    bad_key = stage(wh, _broken_audit(seeds, tmp_path))
    good_key = stage(wh, seeds["profile"])
    everything = d.resolve_implicit_global_asset_job_def()
    model_keys = [k for k in d.resolve_asset_graph().get_all_asset_keys()
                  if k.path[0] in ("staging", "marts")]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("run_files", [bad_key, good_key])
        # raw + staging + marts in one run: the blocking raw check stops the models
        r = everything.execute_in_process(
            instance=instance, partition_key=bad_key, raise_on_error=False,
            asset_selection=[*(s.key for s in d.resolve_assets_def(
                dg.AssetKey(["raw", "files"])).specs), *model_keys])
        assert not r.success
        materialised = {e.asset_key for e in r.get_asset_materialization_events()}
        assert dg.AssetKey(["raw", "audit_rows"]) in materialised  # kept, flagged
        assert not materialised & set(model_keys)
        ev = _checks(r)["audit_row_invariants"]
        assert not ev.passed and ev.severity == dg.AssetCheckSeverity.ERROR
        assert "A1" in ev.metadata["failed_invariants"].value
        failures = ev.metadata["failures"].value
        assert failures[0]["sample_failures"] and failures[0]["run_id"] == bad_key
        assert _checks(r)["raw_profile_runs"].metadata["not_applicable"].value  # other format
        with ro(wh) as con:
            status, invs = con.execute("SELECT status, failed_invariants FROM "
                                       "checks.run_status WHERE run_id = ?", [bad_key]).fetchone()
        assert status == "failed" and "A1" in invs

        # the refresh schedule never builds from it...
        sched = next(s for s in d.schedules if s.name == "refresh_models_schedule")
        tick = sched.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert not tick.run_requests and "failed" in tick.skip_message
        assert bad_key[:12] in tick.skip_message

        # ...only from runs that passed: the marts then show the bad run as failed
        ok = d.resolve_job_def("ingest_file").execute_in_process(
            instance=instance, partition_key=good_key)
        assert ok.success
        # issue 25: a check describes the data, not the last batch: the audit's A1 check stays
        # failed on the bad run still in the warehouse, reported, never blamed on the good run
        evs = _checks(ok)
        still = {n: e for n, e in evs.items() if not e.passed}
        assert still, "the bad run's failing check turned green"
        for name, e in still.items():
            assert e.metadata["failing_from_earlier"].value == 1, name
            assert {f["run_id"] for f in e.metadata["failures"].value} == {bad_key}, name
            assert "still in the warehouse" in e.description, name
        tick = sched.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert len(tick.run_requests) == 1
        refresh = d.resolve_job_def("refresh_models").execute_in_process(instance=instance)
        assert refresh.success
        model_checks = _checks(refresh)
        assert model_checks and all(v.passed for v in model_checks.values())
        with ro(wh) as con:
            rows = dict(con.execute("SELECT run_id, check_status FROM marts.run_summary"
                                    ).fetchall())
        assert rows == {bad_key: "failed", good_key: "passed"}

        # the daily full validation: every run against every suite, recorded, models rebuilt
        full = d.resolve_job_def("full_validation").execute_in_process(
            instance=instance, raise_on_error=False)
        assert full.success
        (mat,) = [e.materialization for e in full.get_asset_materialization_events()
                  if e.asset_key == dg.AssetKey(["checks", "run_status"])]
        assert (mat.metadata["runs_validated"].value, mat.metadata["failed_runs"].value) == (2, 1)
        assert "A1" in mat.metadata["failed_invariants"].value
    with ro(wh) as con:
        n = con.execute("SELECT count(DISTINCT validated_at) FROM checks.results").fetchone()[0]
    assert n == 3  # one validation per ingested run, then one full validation


def _profile(tmp_path, i: int):
    import datetime as dt

    from bench import gen

    p = tmp_path / "gen" / "tile" / f"run_{i}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    gen.write_profile(p, 40, seed=100 + i)
    gen.write_sidecar(p, "tile", f"build-{i}", dt.datetime(2027, 1, 1 + i))
    return p


@pytest.mark.slow
def test_model_checks_validate_only_the_runs_the_build_changed(wh, tmp_path):
    """After the first (full) build every run is validated; after one more file only that run
    (issue 12: the refresh of one file no longer re-validates every run per suite)."""
    d = build_definitions(str(wh.warehouse))
    keys = [stage(wh, _profile(tmp_path, i)) for i in range(3)]
    refresh = d.resolve_job_def("refresh_models")
    ingest = d.resolve_job_def("ingest_file")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("run_files", keys)
        for k in keys[:2]:
            assert ingest.execute_in_process(instance=instance, partition_key=k).success
        first = _checks(refresh.execute_in_process(instance=instance))
        ev = first["staging_profile_kernels"]
        assert ev.passed and ev.metadata["runs_validated"].value == 2
        assert ev.metadata["failing_run_ids"].value == []
        assert ingest.execute_in_process(instance=instance, partition_key=keys[2]).success
        second = _checks(refresh.execute_in_process(instance=instance))
        ev = second["staging_profile_kernels"]
        assert ev.passed and ev.metadata["runs_validated"].value == 1
        assert ev.metadata["runs_in_warehouse"].value == 3
        assert "1 run(s) rebuilt" in ev.metadata["scope"].value
        # nothing changed: nothing validated, the earlier outcome stands
        third = _checks(refresh.execute_in_process(instance=instance))
        assert third["staging_profile_kernels"].metadata["runs_validated"].value == 0


class _Storage:
    def __init__(self, md):
        from types import SimpleNamespace as NS

        self.rec = NS(event=NS(dagster_event=NS(event_specific_data=NS(metadata=md))))

    def get_asset_check_execution_history(self, key, limit, status=None):
        return [self.rec]


def test_model_check_scope_keeps_validating_the_runs_that_failed():
    """A run that failed a (blocking) model check stays in the scope until it passes: a build
    that did not touch it never turns the check green."""
    from types import SimpleNamespace as NS

    from pipelines.checks import model_check_scope

    key = dg.AssetCheckKey(dg.AssetKey(["staging", "runs"]), "staging_runs")
    md = {"suite_fingerprint": dg.MetadataValue.text("f1"),
          "failing_run_ids": dg.MetadataValue.json(["bad"])}
    inst = NS(event_log_storage=_Storage(md))
    scope, why = model_check_scope(inst, [key], "f1", ["new"], ["bad", "new", "old"])
    assert scope == ["bad", "new"] and "failed before" in why
    # a changed suite, or no earlier evaluation: every run
    assert model_check_scope(inst, [key], "f2", ["new"], ["bad", "new", "old"])[0] == [
        "bad", "new", "old"]
    inst0 = NS(event_log_storage=NS(get_asset_check_execution_history=lambda *a, **k: []))
    assert model_check_scope(inst0, [key], "f1", [], ["a", "b"])[0] == ["a", "b"]
    # a full build (or the check without its model in the run): every run
    assert model_check_scope(inst, [key], "f1", None, ["a", "b"])[0] == ["a", "b"]
