"""The Dagster raw layer: one asset per raw table, one partition per run file (its SHA-256),
materialised by one op that calls the same loader as ``pwh ingest``."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pipelines.definitions import defs
from pipelines.raw import (
    PARTITIONS_NAME,
    RAW_SPECS,
    RAW_TABLES,
    WRITER_POOL,
    partition_key,
    raw_files,
)
from pipelines.resources import ValidationResource, WarehouseResource
from tests.conftest import RAW_TABLES as RAW_TABLE_NAMES
from tests.conftest import counts, ro
from warehouse.ingesting.formats import ALL_TABLES
from warehouse.ingesting.landing import stage


def _materialize(wh, keys, key):
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions(PARTITIONS_NAME, keys)
    return inst, dg.materialize([raw_files], instance=inst, partition_key=key,
                                resources={"warehouse": WarehouseResource(path=str(wh.warehouse)),
                                           "validation": ValidationResource()},
                                raise_on_error=False)


def test_definitions_load_with_one_asset_per_raw_table():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    raw = {k for k in graph.get_all_asset_keys() if k.path[0] == "raw"}
    assert raw == {dg.AssetKey(["raw", t]) for t in ("files", *(t.name for t in ALL_TABLES))}
    assert set(RAW_TABLE_NAMES) <= {k.path[1] for k in raw}
    for spec in RAW_SPECS:
        node = graph.get(spec.key)
        assert node.partitions_def.name == PARTITIONS_NAME
        assert node.group_name == "raw"
        assert {"duckdb", "python"} <= set(node.kinds)
        schema = spec.metadata["dagster/column_schema"]
        cols, _ = RAW_TABLES[spec.key.path[1]]
        assert [c.name for c in schema.columns] == [c for c, _, _ in cols]
        assert all(c.description for c in schema.columns), spec.key  # documented columns
    assert raw_files.op.pool == WRITER_POOL


def test_materialise_partitions_on_ephemeral_instance(wh, seeds):
    keys = [stage(wh, p) for p in seeds.values()]
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions(PARTITIONS_NAME, keys)
    res = {"warehouse": WarehouseResource(path=str(wh.warehouse)), "validation": ValidationResource()}
    runs_ingested = []
    for k in keys:
        r = dg.materialize([raw_files], instance=inst, partition_key=k, resources=res)
        assert r.success
        events = [e.materialization for e in r.get_asset_materialization_events()]
        mats = {m.asset_key.path[1]: m.metadata for m in events if m.asset_key.path[0] == "raw"}
        assert set(mats) == set(RAW_TABLES)  # every raw table, 0 rows for the other format
        # the runs were validated: checks.run_status changed, and says so (issue 25)
        (status,) = [m for m in events if m.asset_key.path == ["checks", "run_status"]]
        assert status.metadata["runs_validated"].value == 1
        with ro(wh) as con:
            for t, md in mats.items():
                if t == "files":  # one row per partition: no "Row count 1" in the UI
                    assert "dagster/row_count" not in md and md["sha256"].value == k
                    continue
                n = con.execute(f"SELECT count(*) FROM raw.{t} WHERE run_id = ?", [k]
                                ).fetchone()[0]
                assert md["dagster/row_count"].value == n
        runs_ingested.append(mats["files"]["runs_ingested"].value)
        assert mats["files"]["series"].value == "seeds"
    assert runs_ingested == [1, 2]  # plotted across materialisations
    c = counts(wh)
    assert (c["files"], c["profile_groups"], c["audit_kernels"]) == (2, 19, 79)
    # re-materialising a partition is idempotent
    r = dg.materialize([raw_files], instance=inst, partition_key=keys[0], resources=res)
    assert r.success
    assert counts(wh) == c
    # a readable key (stem-<SHA-256 prefix>, issue 12) names the same staged file
    name = next(p.name for p in seeds.values() if stage(wh, p) == keys[1])
    readable = partition_key(keys[1], name)
    assert readable.endswith("-" + keys[1][:12]) and len(readable) < 64
    inst.add_dynamic_partitions(PARTITIONS_NAME, [readable])
    r = dg.materialize([raw_files], instance=inst, partition_key=readable, resources=res)
    assert r.success and counts(wh) == c
    (mat,) = [e.materialization for e in r.get_asset_materialization_events()
              if e.asset_key.path == ["raw", "files"]]
    assert mat.metadata["sha256"].value == keys[1]


def test_bad_partition_fails_with_the_error_and_is_quarantined(wh, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"clockHz": 1, "groups": [], "samples": "nope"}')
    key = stage(wh, bad)
    _, r = _materialize(wh, [key], key)
    assert not r.success
    failure = next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE")
    assert "samples: Expected `array`" in failure.step_failure_data.error.message
    assert str(bad.resolve()) in failure.step_failure_data.error.message
    assert counts(wh)["files"] == 0
    (record,) = [json.loads(p.read_text()) for p in wh.quarantine_dir.glob("*.error.json")]
    assert record["path"] == str(bad.resolve()) and "samples" in record["message"]


def test_unreadable_sidecar_fails_the_run_instead_of_guessing(wh, seeds):
    side = seeds["profile"].with_name(seeds["profile"].name + ".meta.json")
    side.write_text('{"series": "vae", "colour": "blue"}')  # unknown field
    key = stage(wh, seeds["profile"])
    _, r = _materialize(wh, [key], key)
    assert not r.success
    failure = next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE")
    msg = failure.step_failure_data.error.message
    assert "run identity" in msg and "colour" in msg
    assert counts(wh)["files"] == 0
    with ro(wh) as con:
        (n, qpath), = con.execute(
            "SELECT count(*), any_value(quarantine_path) FROM raw.ingest_errors").fetchall()
    assert n == 1 and qpath
    record = json.loads((wh.quarantine_dir / (qpath.rsplit("/", 1)[1] + ".error.json"))
                        .read_text())
    assert "colour" in record["message"]


@pytest.mark.parametrize("landing_env", [None, "custom"])
def test_landing_folder_is_configurable(tmp_path, monkeypatch, landing_env):
    wh = tmp_path / "state" / "warehouse.duckdb"
    if landing_env:
        monkeypatch.setenv("PWH_LANDING", str(tmp_path / landing_env))
    r = WarehouseResource(path=str(wh))
    expected = tmp_path / landing_env if landing_env else tmp_path / "state" / "landing"
    assert r.landing_dir == expected.resolve()
    assert WarehouseResource(path=str(wh), landing=str(tmp_path / "x")).landing_dir == \
        (tmp_path / "x").resolve()


def test_writers_of_different_processes_never_overlap(tmp_path):
    """The file lock behind the writer pool: two processes, one holder at a time."""
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from pipelines.resources import WarehouseResource\n"
        "r = WarehouseResource(path=sys.argv[1])\n"
        "with r.exclusive():\n"
        "    t0 = time.time(); time.sleep(0.3); print(t0, time.time())\n")
    wh = str(tmp_path / "state" / "warehouse.duckdb")
    procs = [subprocess.Popen([sys.executable, "-c", code, wh], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    # the timeout bounds a hang only: three Dagster imports at once on a busy 2-core machine
    spans = sorted(tuple(map(float, p.communicate(timeout=600)[0].split())) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    for (_a0, a1), (b0, _b1) in zip(spans, spans[1:], strict=False):
        assert a1 <= b0


def test_landing_batch_leaves_pwh_runs_current(wh, seeds, tmp_path):
    """Issue 25: after a Dagster ingest batch, `pwh runs` and `pwh runs --errors` (the status
    file, not --live) show its runs, the runs that broke invariants and the rejected files."""
    from warehouse import checks as wchecks
    from warehouse.ingesting.landing import ingest_staged_batch
    from warehouse.serving import status

    doc = json.loads(seeds["audit"].read_text())
    doc["rows"][0]["components"][0]["fraction_of_profiled_sum"] += 1e-6  # breaks A1
    broken = tmp_path / "broken_audit.json"
    broken.write_text(json.dumps(doc, indent=1))
    truncated = tmp_path / "truncated.json"
    truncated.write_text(seeds["profile"].read_text()[:200])
    keys = [stage(wh, p) for p in (seeds["profile"], broken, truncated)]
    suites = [s for s in wchecks.load_suites() if s.layer == "raw"]

    def shown():
        con = status.open_status(wh)  # publishes only when there is no status file yet
        try:
            return (dict(con.execute("select run_id, checks from runs").fetchall()),
                    con.execute("select stage, original_path from errors").fetchall())
        finally:
            con.close()

    assert ingest_staged_batch(wh, keys[:1], suites=suites).files[0].result.ok
    assert shown() == ({keys[0]: "passed"}, [])
    batch = ingest_staged_batch(wh, keys[1:], suites=suites)  # the next Dagster run
    assert [f.result.ok for f in batch.files] == [True, False]
    runs, errors = shown()
    assert runs == {keys[0]: "passed", keys[1]: "failed"}
    assert ("checks", str(broken.resolve())) in errors
    assert ("ingest", str(truncated.resolve())) in errors
