"""`pwh runs` reads a status file: it must follow every writer (the Dagster path included) and
belong to one warehouse file (review findings 4 and 5)."""

from __future__ import annotations

import json
import shutil

from tests.test_analyst import pwh
from warehouse.config import settings
from warehouse.ingesting import landing
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving import status


def runs(s, *args) -> list[dict]:
    r = pwh("--warehouse", str(s.warehouse), "runs", "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_dagster_path_refreshes_what_pwh_runs_shows(wh, seeds, tmp_path):
    assert ingest_paths(wh, [seeds["profile"]])[0].status == "ingested"
    assert len(runs(wh)) == 1 and runs(wh, "--errors") == []  # the status file exists
    bad = tmp_path / "landing" / "bad.json"
    bad.parent.mkdir()
    bad.write_bytes(b'{"rows": [')
    r = landing.ingest_staged(wh, landing.stage(wh, bad))
    assert r.status == "failed"
    errors = runs(wh, "--errors")
    assert [(e["stage"], e["original_path"]) for e in errors] == [("ingest", str(bad))]
    assert errors[0]["quarantine_path"] == r.quarantine_path
    r = landing.ingest_staged(wh, landing.stage(wh, seeds["audit"]))
    assert r.status == "ingested"
    assert sorted(x["run"] for x in runs(wh)) == sorted(
        [r.sha256[:12], ingest_paths(wh, [seeds["profile"]])[0].sha256[:12]])


def test_each_warehouse_file_has_its_own_status(wh, seeds):
    kept = settings(wh.state_dir / "warehouse.duckdb.before-import-20261201T000000.000000Z-x")
    live = ingest_paths(wh, [seeds["profile"]])[0].sha256[:12]
    assert [x["run"] for x in runs(wh)] == [live]
    old = ingest_paths(kept, [seeds["audit"]])[0].sha256[:12]  # a writer on the kept file
    assert [x["run"] for x in runs(kept)] == [old]
    assert [x["run"] for x in runs(wh)] == [live]
    assert status.path(wh) != status.path(kept)
    assert status.path(kept).name == kept.warehouse.name + ".duckdb"
    # a status file that describes another warehouse file (a copied state folder) is redone
    shutil.copy(status.path(wh), status.path(kept))
    assert [x["run"] for x in runs(kept)] == [old]
