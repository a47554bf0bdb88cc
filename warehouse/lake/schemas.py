"""Arrow schemas of the lake's raw tables, and the types Iceberg accepts for model outputs.

The raw tables are derived from the same definitions as the DuckDB warehouse's
(``formats.ALL_TABLES`` and the manifest ``raw.files``), with the same names and columns. Iceberg
has no JSON type (JSON columns are strings), no unsigned 64-bit integers (UBIGINT's maximum does
not fit a ``long``) and no 128-bit integers: :func:`iceberg_compatible` maps what DuckDB returns
onto what Iceberg stores, refusing values that would not survive.
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.errors import PwhError

FILES = pa.schema([
    ("sha256", pa.string()),
    ("original_path", pa.string()),
    ("file_name", pa.string()),
    ("source_format", pa.string()),
    ("parser_version", pa.string()),
    ("byte_size", pa.int64()),
    ("ingested_at", pa.timestamp("us")),
    ("series", pa.string()),
    ("label", pa.string()),
    ("captured_at", pa.timestamp("us")),
    ("meta_source", pa.string()),
    ("archive_path", pa.string()),
])

CHECK_RESULTS = pa.schema([
    ("run_id", pa.string()),
    ("suite", pa.string()),
    ("expectation", pa.string()),
    ("invariant_id", pa.string()),
    ("critical", pa.bool_()),
    ("success", pa.bool_()),
    ("unexpected_count", pa.int64()),
    ("sample_failures", pa.string()),  # JSON in DuckDB: Iceberg has no JSON type
    ("validated_at", pa.timestamp("us")),
])


def raw_schemas() -> dict[str, pa.Schema]:
    """``raw.<table>`` -> Arrow schema, for every raw table of every format, plus the manifest."""
    from warehouse.ingesting.formats import ALL_TABLES

    out = {"raw.files": FILES}
    for t in ALL_TABLES:
        out[f"raw.{t.name}"] = t.arrow_schema
    return out


def source_schemas() -> dict[str, pa.Schema]:
    """Every table the loader and the check runner write (what models read)."""
    return {**raw_schemas(), "checks.results": CHECK_RESULTS}


class LakeTypeError(PwhError):
    """A value or type Iceberg cannot store (the message names the table and column)."""


def _field_type(t: pa.DataType, where: str) -> pa.DataType:
    if isinstance(t, pa.ExtensionType):
        return _field_type(t.storage_type, where)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_decimal(t) and t.scale == 0 and t.precision > 18:
        return pa.int64()  # DuckDB's HUGEINT sums: checked to fit when cast
    if pa.types.is_unsigned_integer(t):
        return pa.int64()  # checked to fit when cast
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return pa.int32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_dictionary(t):
        return _field_type(t.value_type, where)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_field_type(t.value_type, where + "[]"))
    if pa.types.is_map(t):
        return pa.map_(_field_type(t.key_type, where + ".key"),
                       _field_type(t.item_type, where + ".value"))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _field_type(f.type, f"{where}.{f.name}"))
                          for f in t])
    if pa.types.is_null(t):
        return pa.string()
    return t


def iceberg_compatible(table: pa.Table, name: str) -> pa.Table:
    """``table`` cast to types Iceberg stores; :class:`LakeTypeError` if a value would not fit."""
    fields = [pa.field(f.name, _field_type(f.type, f.name)) for f in table.schema]
    target = pa.schema(fields)
    if target == table.schema:
        return table
    try:
        return table.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        bad = [f"{a.name} ({a.type} -> {b.type})" for a, b in zip(table.schema, target,
                                                                    strict=True)
               if a.type != b.type]
        raise LakeTypeError(f"{name}: cannot store {', '.join(bad)} in Iceberg: {exc}") from None
