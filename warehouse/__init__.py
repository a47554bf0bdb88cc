"""Profile Warehouse core: formats, loader, SQL models, checks and the analyst query layer.

Importable without Dagster. Analysts in a notebook use :func:`connect`.
"""

from __future__ import annotations

__version__ = "0.1.0"


def connect(warehouse=None, **kw):
    """Open a read-only, locked-down analyst connection to the published snapshot.

    ``warehouse``: path of the warehouse file (default ``$PWH_WAREHOUSE``, else
    ``.pwh/warehouse.duckdb`` under the current folder: from a notebook elsewhere, pass the path
    or set ``PWH_WAREHOUSE``). Keyword arguments: ``timeout`` (seconds, 0 = none), ``memory``
    (e.g. ``"2GB"``), ``live=True`` for the live file (short operator queries only).
    The connection never blocks ingestion, keeps the snapshot it opened until it is closed, and
    refuses writes, ATTACH, extensions, configuration changes and file access outside
    ``<state>/exports/`` (``con.export_dir``; relative paths land there). Ctrl-C (a notebook's
    interrupt) stops a running query. See ``docs/analyst-guide.md`` and ``docs/operations.md``.

        import warehouse
        con = warehouse.connect("/path/to/.pwh/warehouse.duckdb")
        df = con.execute("select * from marts.run_summary").pl()
    """
    from warehouse.serving.query import connect as _connect

    return _connect(warehouse, **kw)
