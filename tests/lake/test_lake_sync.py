"""`pwh lake sync` publishes a DuckDB warehouse: the lake's tables equal the warehouse's, and a
second sync sends only the new run and the model keys that changed."""

from __future__ import annotations

import re
import shutil

import duckdb

from tests.lake.compare import diff
from tests.lake.conftest import lake_args, pwh
from warehouse.lake import schemas
from warehouse.lake.catalog import open_catalog
from warehouse.lake.tables import read_table
from warehouse.modelling import models


def assert_lake_equals_warehouse(cfg, warehouse) -> None:
    cat = open_catalog(cfg)
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        problems = []
        for name in [*schemas.source_schemas(), *models.load_project().order]:
            want = schemas.iceberg_compatible(con.sql(f"SELECT * FROM {name}").arrow().read_all(),
                                              name)
            problems += diff(name, want, read_table(cat, name))
    finally:
        con.close()
    assert not problems, "\n".join(problems)


def test_sync_publishes_then_sends_only_what_changed(sqlite_lake, seeds, tmp_path):
    from warehouse.ingesting.formats import kineto_gen

    wh = str(tmp_path / "state" / "warehouse.duckdb")
    trace = tmp_path / "traces" / "t.pt.trace.json.gz"
    kineto_gen.write_file(trace, gz=True, steps=2, seed=3)
    pwh("--warehouse", wh, "ingest", str(seeds["audit"]), str(trace))
    pwh("--warehouse", wh, "build")
    first = pwh("lake", "sync", "--warehouse", wh, *lake_args(sqlite_lake)).stdout
    assert "synced 2 new run(s)" in first
    assert read_table(open_catalog(sqlite_lake), "raw.trace_events").num_rows > 0
    assert_lake_equals_warehouse(sqlite_lake, wh)

    again = pwh("lake", "sync", "--warehouse", wh, *lake_args(sqlite_lake)).stdout
    assert "synced 0 new run(s), 0 model key(s) changed" in again

    later = tmp_path / "later" / seeds["profile"].name
    later.parent.mkdir()
    shutil.copy(seeds["profile"], later)
    pwh("--warehouse", wh, "ingest", str(later))
    pwh("--warehouse", wh, "build")
    second = pwh("lake", "sync", "--warehouse", wh, *lake_args(sqlite_lake)).stdout
    assert "synced 1 new run(s)" in second
    sent = dict(re.findall(r"^(\S+): (\d+) run_id key\(s\) sent$", second, re.M))
    # every model incremental by run sends the new run's key only, never the first run's again
    assert sent and set(sent.values()) == {"1"}, second
    assert {"staging.runs", "marts.run_summary", "staging.profile_samples"} <= set(sent)
    assert_lake_equals_warehouse(sqlite_lake, wh)
