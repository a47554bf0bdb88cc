"""The Dagster refresh publishes the analysts' snapshot after the models are built."""

import dagster as dg

from pipelines.definitions import build_definitions
from pipelines.snapshot import SNAPSHOT_KEY
from warehouse.ingesting.landing import stage
from warehouse.serving import query


def test_refresh_publishes_the_snapshot_after_the_models(wh, seeds):
    d = build_definitions(str(wh.warehouse))
    keys = [stage(wh, p) for p in seeds.values()]
    graph = d.resolve_asset_graph()
    assert set(graph.get(SNAPSHOT_KEY).parent_keys) == {
        k for k in graph.get_all_asset_keys() if k.path[0] in ("staging", "marts")}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("run_files", keys)
        for k in keys:
            assert d.resolve_job_def("ingest_file").execute_in_process(
                instance=instance, partition_key=k).success
        assert not (wh.snapshot_dir / "current.duckdb").exists()
        r = d.resolve_job_def("refresh_models").execute_in_process(instance=instance)
        assert r.success
        (mat,) = [e.materialization for e in r.get_asset_materialization_events()
                  if e.asset_key == SNAPSHOT_KEY]
        assert mat.metadata["method"].value in ("copy", "delta")
    con = query.connect(wh)  # the analysts' default: the published snapshot
    try:
        n = con.execute("SELECT count(*) FROM marts.run_summary").fetchone()[0]
    finally:
        con.close()
    assert n == 2
