"""pwh export / pwh import: a round trip restores an equal warehouse (every table, view, row and
archived raw byte); damaged exports and unsafe overwrites are refused."""

from __future__ import annotations

import json

import duckdb
import pytest

from tests.reliability.conftest import assert_consistent, pwh, write_runs
from warehouse import db
from warehouse.config import settings
from warehouse.ingesting.loader import ingest_paths
from warehouse.serving import backup, snapshot


def everything(path) -> dict:
    """Every table's rows (sorted) and every view's definition, pwh_snapshot excluded."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for s, t in con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                                "WHERE schema_name <> 'pwh_snapshot'").fetchall():
            cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE "
                               "schema_name = ? AND table_name = ? ORDER BY column_index",
                               [s, t]).fetchall()
            rows = con.execute(f'SELECT * FROM "{s}"."{t}"').fetchall()
            out[f"{s}.{t}"] = (cols, sorted(rows, key=repr))
        for s, v, sql in con.execute("SELECT schema_name, view_name, sql FROM duckdb_views() "
                                     "WHERE NOT internal").fetchall():
            out[f"view {s}.{v}"] = sql
        return out
    finally:
        con.close()


@pytest.fixture
def rich(wh, tmp_path):
    """Runs of both formats, a failed file, a model table and a view with awkward types."""
    runs = write_runs(tmp_path / "in", 4, samples=50)
    bad = tmp_path / "in" / "broken.json"
    bad.write_bytes(b'{"rows": [')
    ingest_paths(wh, [*runs, bad])
    with db.writer(wh.warehouse) as con:
        con.execute("CREATE SCHEMA marts")
        con.execute("""CREATE TABLE marts.odd AS SELECT sha256 AS run_id,
            [1, NULL, 3]::BIGINT[] AS l, {'a': 1.5, 'b': 'x'} AS st, '{"k": [1, 2]}'::JSON AS j,
            TIMESTAMP '2026-01-02 03:04:05.123456' AS ts, 1e308::DOUBLE AS big,
            -0.0::DOUBLE AS negzero, 'quote '' and "dq" and \\ and ünï' AS txt,
            170141183460469231731687303715884105727::HUGEINT AS h, NULL::VARCHAR AS nothing
            FROM raw.files""")
        con.execute("CREATE VIEW marts.v1 AS SELECT run_id, l FROM marts.odd")
        con.execute("CREATE VIEW marts.v2 AS SELECT count(*) AS n FROM marts.v1")
    return wh


def test_export_import_round_trip_is_equal(rich, tmp_path):
    out = tmp_path / "backup"
    r = pwh("--warehouse", str(rich.warehouse), "export", str(out))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "pwh-export.json").read_text())
    assert m["format"] == backup.FORMAT and m["source"]["kind"] == "live"
    assert {t["name"] for t in m["tables"]} >= {"raw.files", "raw.ingest_errors", "marts.odd"}
    assert all((out / t["file"]).exists() and t["file"].endswith(".parquet") for t in m["tables"])
    assert m["archive"]["files"] == 4
    target = settings(tmp_path / "restored" / "warehouse.duckdb")
    r = pwh("--warehouse", str(target.warehouse), "import", str(out))
    assert r.returncode == 0, r.stderr
    assert "fingerprint verified" in r.stdout
    assert everything(target.warehouse) == everything(rich.warehouse)
    # the archive came back byte for byte, and the restored runs rebuild from it
    for f in rich.archive_dir.iterdir():
        assert (target.archive_dir / f.name).read_bytes() == f.read_bytes()
    assert len(assert_consistent(rich)) == 4
    # analysts of the restored warehouse see it at once
    assert snapshot.current(target) is not None
    r = pwh("--warehouse", str(target.warehouse), "sql", "SELECT count(*) AS n FROM marts.v1",
            "--format", "csv")
    assert r.stdout.split() == ["n", "4"]


def test_export_from_snapshot_does_not_need_the_writer(rich, tmp_path):
    snapshot.publish(rich)
    holder = duckdb.connect(str(rich.warehouse))  # a writer holds the live file meanwhile
    try:
        m = backup.export(rich, tmp_path / "b", from_snapshot=True)
    finally:
        holder.close()
    assert m["source"]["kind"] == "snapshot"
    target = settings(tmp_path / "r" / "warehouse.duckdb")
    backup.restore(target, tmp_path / "b")
    assert everything(target.warehouse) == everything(rich.warehouse)


def test_import_refuses_to_overwrite_without_replace_and_keeps_the_old_file(rich, tmp_path):
    backup.export(rich, tmp_path / "b")
    before = everything(rich.warehouse)
    r = pwh("--warehouse", str(rich.warehouse), "import", str(tmp_path / "b"))
    assert r.returncode == 1 and "--replace" in r.stderr
    with db.writer(rich.warehouse) as con:  # diverge, then restore over it
        con.execute("DELETE FROM marts.odd")
    r = pwh("--warehouse", str(rich.warehouse), "import", str(tmp_path / "b"), "--replace")
    assert r.returncode == 0, r.stderr
    assert everything(rich.warehouse) == before
    kept = list(rich.state_dir.glob("warehouse.duckdb.before-import-*"))
    assert len(kept) == 1
    con = duckdb.connect(str(kept[0]), read_only=True)
    assert con.execute("SELECT count(*) FROM marts.odd").fetchone() == (0,)
    con.close()


def test_damaged_export_is_refused_and_nothing_is_replaced(rich, tmp_path):
    out = tmp_path / "b"
    backup.export(rich, out)
    # a changed Parquet file: same row count, different content
    bad = out / "data" / "raw.files.parquet"
    con = duckdb.connect()
    con.execute("COPY (SELECT * REPLACE (label || '!' AS label) FROM read_parquet(?)) TO ? "
                "(FORMAT parquet)", [str(bad), str(tmp_path / "x.parquet")])
    con.close()
    (tmp_path / "x.parquet").replace(bad)
    target = settings(tmp_path / "r" / "warehouse.duckdb")
    with pytest.raises(backup.BackupError, match=r"raw\.files differs from the export"):
        backup.restore(target, out)
    assert not target.warehouse.exists()
    assert not list(target.state_dir.glob(".warehouse.duckdb.import-*"))
    # a missing data file, a damaged archive file, a foreign folder
    backup.export(rich, tmp_path / "b2")
    (tmp_path / "b2" / "data" / "raw.audit_rows.parquet").unlink()
    with pytest.raises(backup.BackupError, match="missing from the export"):
        backup.restore(target, tmp_path / "b2")
    backup.export(rich, tmp_path / "b3")
    victim = next((tmp_path / "b3" / "archive").iterdir())
    victim.write_bytes(victim.read_bytes() + b" ")
    with pytest.raises(backup.BackupError, match="does not match its SHA-256"):
        backup.restore(target, tmp_path / "b3")
    with pytest.raises(backup.BackupError, match="not a pwh export"):
        backup.restore(target, tmp_path / "in")
    assert not target.warehouse.exists()


def test_export_refuses_a_non_empty_destination(rich, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    r = pwh("--warehouse", str(rich.warehouse), "export", str(tmp_path / "full"))
    assert r.returncode == 1 and "not an empty folder" in r.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
