"""The Dagster raw layer: definitions load; the partitioned asset calls the same loader."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.definitions import defs
from pipelines.raw import raw_files
from pipelines.resources import WarehouseResource
from tests.conftest import counts
from warehouse.landing import stage


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_assets_def(dg.AssetKey(["raw", "files"])) is not None


def test_materialise_partitions_on_ephemeral_instance(wh, seeds, tmp_path):
    keys = [stage(wh, p) for p in seeds.values()]
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("run_files", keys)
    res = {"warehouse": WarehouseResource(path=str(wh.warehouse))}
    for k in keys:
        assert dg.materialize([raw_files], instance=inst, partition_key=k, resources=res).success
    c = counts(wh)
    assert (c["files"], c["profile_groups"], c["audit_kernels"]) == (2, 19, 79)
    # re-materialising a partition is idempotent
    assert dg.materialize([raw_files], instance=inst, partition_key=keys[0], resources=res).success
    assert counts(wh) == c


def test_bad_partition_fails_with_the_error(wh, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"clockHz": 1, "groups": [], "samples": "nope"}')
    key = stage(wh, bad)
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("run_files", [key])
    with pytest.raises(dg.Failure, match=r"samples: Expected `array`"):
        dg.materialize([raw_files], instance=inst, partition_key=key,
                       resources={"warehouse": WarehouseResource(path=str(wh.warehouse))})
    assert counts(wh)["files"] == 0
    assert list(wh.quarantine_dir.glob("*.error.json"))
