"""Profile Warehouse core: formats, loader, SQL models, checks and the analyst query layer.

Importable without Dagster. Analysts in a notebook use :func:`connect`.
"""

from __future__ import annotations

__version__ = "0.1.0"


def connect(warehouse=None, **kw):
    """Open a read-only, locked-down analyst connection (see ``docs/analyst-guide.md``)."""
    from .query import connect as _connect

    return _connect(warehouse, **kw)
