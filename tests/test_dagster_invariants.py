"""Issue 4 acceptance through Dagster, one test per format invariant: a seed copy mutated so that
exactly that invariant breaks fails its blocking raw asset check (naming the invariant), the run
fails, and the refresh schedule refuses to build the marts from it.

(The pwh-check side and the exclusion from trends are shown per invariant in
tests/test_checks_mutations.py; warehouse-side mutations such as CHECKSUM/SCHEMA edits are
covered there too, since Dagster ingests files, not edited tables.)
"""

import dagster as dg
import pytest

from pipelines.definitions import build_definitions
from tests.mutations import MUTATIONS, write_mutated
from warehouse.ingesting.landing import stage

DOCUMENT_MUTATIONS = sorted(n for n, m in MUTATIONS.items()
                            if m.edit_document is not None and m.edit_warehouse is None
                            and not m.needs_original)


def test_every_format_invariant_has_a_document_mutation():
    ids = {MUTATIONS[n].invariant_id for n in DOCUMENT_MUTATIONS}
    assert {f"P{i}" for i in range(1, 11)} | {f"A{i}" for i in range(1, 8)} <= ids


@pytest.mark.slow
@pytest.mark.parametrize("name", DOCUMENT_MUTATIONS)
def test_broken_invariant_fails_its_dagster_check_and_blocks_the_marts(wh, seeds, tmp_path,
                                                                        name):
    m = MUTATIONS[name]
    key = stage(wh, write_mutated(m, seeds[m.seed], tmp_path / "mutated"))
    d = build_definitions(str(wh.warehouse))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("run_files", [key])
        r = d.resolve_job_def("ingest_file").execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False)
        assert not r.success
        evaluations = [e.asset_check_evaluation_data for e in r.all_events
                       if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        failed = [e for e in evaluations if not e.passed]
        assert failed and all(e.severity == dg.AssetCheckSeverity.ERROR for e in failed)
        named = {i for e in failed for i in str(e.metadata["failed_invariants"].value).split(",")}
        assert m.invariant_id in {x.strip(" []'\"") for x in named}, (name, named)
        sched = next(s for s in d.schedules if s.name == "refresh_models_schedule")
        tick = sched.evaluate_tick(dg.build_schedule_context(instance=instance))
        assert not tick.run_requests and key[:12] in (tick.skip_message or "")
