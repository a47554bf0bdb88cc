"""Profile Warehouse core: formats, loader, SQL models, checks and the analyst query layer.

Importable without Dagster. Analysts in a notebook use :func:`connect`.
"""

from __future__ import annotations

__version__ = "0.1.0"


def connect(warehouse=None, **kw):
    """Open a read-only, locked-down analyst connection to the published snapshot.

    ``warehouse``: path of the warehouse file (default ``$PWH_WAREHOUSE`` or
    ``./.pwh/warehouse.duckdb``). Keyword arguments: ``timeout`` (seconds, 0 = none),
    ``memory`` (e.g. ``"2GB"``), ``live=True`` for the live file (short operator queries only).
    The connection never blocks ingestion, keeps the snapshot it opened until it is closed, and
    refuses writes, ATTACH, extensions, configuration changes and file access outside
    ``<state>/exports/``. See ``docs/analyst-guide.md`` and ``docs/operations.md``.

        import warehouse
        con = warehouse.connect()
        df = con.sql("select * from marts.run_summary").pl()
    """
    from warehouse.serving.query import connect as _connect

    return _connect(warehouse, **kw)
