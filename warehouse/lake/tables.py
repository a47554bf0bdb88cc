"""Reading the lake's source tables into DuckDB, and replacing model tables in the lake.

Model tables have one writer at a time (a build or a sync); each replacement is one Iceberg
commit of that table (pyiceberg retries its own conflicts), so readers see the old rows or the
new ones. A model whose columns changed type gets its table recreated.
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.lake import schemas
from warehouse.lake.catalog import load_consistent, table_ident


def source_duckdb(cat, con) -> dict[str, int]:
    """Create the DuckDB warehouse's raw and checks layer on ``con`` (same DDL, same types)
    and fill it from the lake as of one instant. Returns rows per table."""
    from warehouse import db

    db.ensure_schema(con)
    names = list(schemas.source_schemas())
    loaded = load_consistent(cat, names)
    counts = {}
    con.execute("BEGIN")
    try:
        for n in names:
            tbl = loaded.get(n)
            if tbl is None:
                counts[n] = 0
                continue
            data = tbl.scan().to_arrow()
            counts[n] = data.num_rows
            if data.num_rows:
                con.register("_pwh_lake", data)
                try:
                    con.execute(f"INSERT INTO {n} BY NAME SELECT * FROM _pwh_lake")  # noqa: S608
                finally:
                    con.unregister("_pwh_lake")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return counts


def _same_types(a: pa.Schema, b: pa.Schema) -> bool:
    if a.names != b.names:
        return False
    return all(schemas._field_type(x.type, x.name).equals(schemas._field_type(y.type, y.name))
               for x, y in zip(a, b, strict=True))


def ensure_table(cat, name: str, schema: pa.Schema):
    """The lake table ``name`` with ``schema`` (created, or recreated if its columns changed)."""
    from pyiceberg.exceptions import NoSuchTableError

    ident = table_ident(name)
    try:
        tbl = cat.load_table(ident)
    except NoSuchTableError:
        return cat.create_table(ident, schema=schema)
    if _same_types(tbl.schema().as_arrow(), schema):
        return tbl
    cat.drop_table(ident)
    return cat.create_table(ident, schema=schema)


def replace_table(cat, name: str, data: pa.Table, properties: dict[str, str] | None = None):
    """Replace every row of the lake table ``name`` with ``data`` in one commit."""
    import warnings

    data = schemas.iceberg_compatible(data, name)
    tbl = ensure_table(cat, name, _without_meta(data.schema))
    with warnings.catch_warnings():  # an empty table: "Delete operation did not match"
        warnings.simplefilter("ignore", UserWarning)
        tbl.overwrite(data.cast(tbl.schema().as_arrow()), snapshot_properties=properties or {})
    return tbl


def replace_keys(cat, name: str, key: str, keys: list, data: pa.Table,
                 properties: dict[str, str] | None = None):
    """Replace the rows of ``name`` whose ``key`` is in ``keys`` with ``data``, in one commit."""
    import warnings

    from pyiceberg.expressions import In

    data = schemas.iceberg_compatible(data, name)
    tbl = ensure_table(cat, name, _without_meta(data.schema))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tbl.overwrite(data.cast(tbl.schema().as_arrow()), overwrite_filter=In(key, keys),
                      snapshot_properties=properties or {})
    return tbl


def _without_meta(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type) for f in schema])


def read_table(cat, name: str) -> pa.Table:
    return cat.load_table(table_ident(name)).scan().to_arrow()
