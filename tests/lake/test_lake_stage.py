"""Lake ingestion goes through ``pwh ingest``'s own loader (no second parser) and DuckDB's
Parquet writer: the streamed path with its forked parser, data files written by DuckDB with the
Iceberg tables' field ids, nothing left behind, threads capped by ``PWH_LAKE_THREADS``."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.lake.conftest import lake_args, pwh
from tests.lake.test_lake_ingest import assert_exactly_once, assert_lake_equals_duckdb


def _data_files(cfg, name: str) -> tuple[list[str], object]:
    from tests.lake.test_lake_ingest import plain_catalog

    tbl = plain_catalog(cfg).load_table(tuple(name.split(".")))
    return [t.file.file_path for t in tbl.scan().plan_files()], tbl


def _local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def test_streamed_profile_through_the_loader_and_duckdb_parquet(sqlite_lake, tmp_path):
    """A profile big enough for the streamed path (threshold lowered) goes through the forked
    parser of ``pwh ingest`` and lands as DuckDB-written Parquet carrying the Iceberg field
    ids, row for row equal to ``pwh ingest``'s DuckDB warehouse."""
    from bench import gen

    f = tmp_path / "runs" / "big.json"
    f.parent.mkdir()
    gen.write_profile(f, 3000, seed=5)
    env = {"PWH_STREAM_MIN_BYTES": "1", "PWH_DEBUG_TIMING": "1"}
    r = pwh("lake", "ingest", str(f), *lake_args(sqlite_lake), env=env)
    assert "1 ingested" in r.stdout, r.stdout
    assert "pwh timing: copy" in r.stderr, "the streamed loader (forked parser) was not used"
    assert "pwh lake timing:" in r.stderr
    got = assert_lake_equals_duckdb(sqlite_lake, [f], tmp_path)
    assert len(got["raw.profile_samples"]) == 3000
    paths, tbl = _data_files(sqlite_lake, "raw.profile_sample_metadata")
    assert len(paths) == 1
    meta = pq.read_metadata(_local(paths[0]))
    assert "duckdb" in meta.created_by.lower(), meta.created_by
    ids = {fld.name: fld.metadata[b"PARQUET:field_id"].decode()
           for fld in pq.read_schema(_local(paths[0]))}
    assert ids == {fld.name: str(fld.field_id) for fld in tbl.schema().fields}
    # the raw bytes are archived under the lake, content-addressed; no scratch folder is left
    archive = Path(sqlite_lake.location) / "archive"
    sha = got["raw.files"][0]["sha256"]
    assert (archive / sha).read_bytes() == f.read_bytes()
    assert got["raw.files"][0]["archive_path"] == str(archive / sha)
    assert sorted(p.name for p in archive.iterdir()) == [sha]
    # the first file of a command is parsed while the catalog opens (its commit is skipped);
    # every later file the lake has is recognised by its SHA-256 before any parsing
    again = pwh("lake", "ingest", str(f), *lake_args(sqlite_lake), env=env)
    assert "0 ingested, 1 already ingested" in again.stdout
    g = tmp_path / "first" / "small.json"
    g.parent.mkdir()
    gen.write_profile(g, 50, seed=6)
    both = pwh("lake", "ingest", str(g), str(f), *lake_args(sqlite_lake), env=env)
    assert "1 ingested, 1 already ingested" in both.stdout, both.stdout
    assert both.stderr.count("pwh timing: copy") == 1, "a run the lake has was parsed again"
    assert_exactly_once(sqlite_lake, [f, g])


def test_list_columns_keep_their_element_field_ids(sqlite_lake, seeds, tmp_path):
    """BIGINT[] columns (conv audit) are written with the element's own field id and read back
    equal to DuckDB's."""
    pwh("lake", "ingest", str(seeds["audit"]), *lake_args(sqlite_lake))
    assert_lake_equals_duckdb(sqlite_lake, [seeds["audit"]], tmp_path)
    from pyiceberg.types import ListType

    from warehouse.lake import schemas

    checked = 0
    for name in schemas.raw_schemas():
        if not name.startswith("raw.audit"):
            continue
        paths, tbl = _data_files(sqlite_lake, name)
        lists = [f for f in tbl.schema().fields if isinstance(f.field_type, ListType)]
        for p in paths:
            schema = pq.read_schema(_local(p))
            for f in lists:
                elem = schema.field(f.name).type.value_field
                assert elem.metadata[b"PARQUET:field_id"].decode() == str(
                    f.field_type.element_id)
                checked += 1
    assert checked, "the audit seed has a list column"


def test_bad_file_is_quarantined_and_leaves_no_scratch(sqlite_lake, tmp_path):
    """A bad file fails as in ``pwh ingest`` (quarantined in the warehouse's own quarantine
    folder, named in the error) and the lake keeps no temporary folder of it."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"samples": [1, 2')
    wh = tmp_path / "state" / "warehouse.duckdb"
    r = pwh("--warehouse", str(wh), "lake", "ingest", str(bad), *lake_args(sqlite_lake),
            check=False)
    assert "1 failed" in r.stdout and str(bad) in r.stdout, r.stdout + r.stderr
    quarantined = list((wh.parent / "quarantine").iterdir())
    assert any(p.name.endswith("bad.json") for p in quarantined), quarantined
    archive = Path(sqlite_lake.location) / "archive"
    assert not archive.exists() or list(archive.iterdir()) == []


def test_threads_per_writer(monkeypatch, seeds, tmp_path):
    """``PWH_LAKE_THREADS`` caps the private DuckDB database's threads; a bad value is refused
    naming the variable."""
    from warehouse.config import settings
    from warehouse.lake import stage
    from warehouse.lake.catalog import LakeError

    monkeypatch.setenv("PWH_LAKE_THREADS", "1")
    with stage.load_private(settings(tmp_path / "wh.duckdb"), str(tmp_path / "lake"),
                            seeds["audit"], shown=str(seeds["audit"])) as run:
        assert run.result.status == "ingested"
        assert run.con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
        assert run.counts()["raw.audit_kernels"] == 79
        scratch = run.tmp
    assert not scratch.exists()
    for bad in ("0", "two"):
        monkeypatch.setenv("PWH_LAKE_THREADS", bad)
        with pytest.raises(LakeError, match="PWH_LAKE_THREADS"):
            stage.threads()
