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
