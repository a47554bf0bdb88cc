"""Types DuckDB returns that Iceberg cannot hold as they are: mapped, or refused by name."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from warehouse.lake.schemas import LakeTypeError, iceberg_compatible


def test_hugeint_sums_and_json_become_iceberg_types():
    con = duckdb.connect()
    t = con.sql("SELECT sum(x) AS s, '{\"a\": 1}'::JSON AS j, 3::UTINYINT AS u "
                "FROM (VALUES (1::BIGINT), (2)) v(x)").arrow().read_all()
    out = iceberg_compatible(t, "marts.example")
    assert out.schema.field("s").type == pa.int64()
    assert out.schema.field("j").type == pa.string()
    assert out.schema.field("u").type == pa.int64()
    assert out.to_pylist() == [{"s": 3, "j": '{"a": 1}', "u": 3}]


def test_ubigint_max_is_refused_naming_table_and_column():
    con = duckdb.connect()
    t = con.sql("SELECT 18446744073709551615::UBIGINT AS big").arrow().read_all()
    with pytest.raises(LakeTypeError, match=r"marts\.example: cannot store big \(uint64"):
        iceberg_compatible(t, "marts.example")


def test_null_list_of_structs_survives_the_lake(tmp_path):
    """A NULL list of structs (run_summary.per_device of a non-trace run) stays NULL, not []."""
    from warehouse.lake.catalog import LakeConfig, open_catalog
    from warehouse.lake.tables import read_table, replace_table

    cat = open_catalog(LakeConfig(f"sqlite:///{tmp_path / 'c.db'}", str(tmp_path / "lake")))
    st = pa.struct([("device", pa.string()), ("busy_us", pa.float64())])
    t = pa.table({"run_id": ["a", "b", "c"],
                  "per_device": pa.array([None, [{"device": "0", "busy_us": 1.5}], []],
                                         pa.list_(st))})
    replace_table(cat, "marts.example", t)
    assert read_table(cat, "marts.example").to_pylist() == t.to_pylist()
