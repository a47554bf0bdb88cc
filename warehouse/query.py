"""The analyst query layer: read-only connections and result formatting.

Analyst connections are opened read-only and locked down (no external file access, no extension
install or load, configuration locked). See ``docs/analyst-guide.md``.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import os
from pathlib import Path

import duckdb

from .config import Settings
from .config import settings as resolve_settings
from .errors import PwhError

LOCKED_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "enable_external_access": False,
    "memory_limit": os.environ.get("PWH_ANALYST_MEMORY", "4GB"),
}


def connect(warehouse: str | os.PathLike[str] | Settings | None = None, *, locked: bool = True):
    """A read-only connection to the warehouse for analysts."""
    s = warehouse if isinstance(warehouse, Settings) else resolve_settings(warehouse)
    path = s.warehouse
    if not path.exists():
        raise PwhError(f"{path}: no warehouse here yet (run `pwh ingest` first, or set --warehouse)")
    config = dict(LOCKED_CONFIG) if locked else {"autoinstall_known_extensions": False}
    con = duckdb.connect(str(path), read_only=True, config=config)
    if locked:
        con.execute("SET lock_configuration = true")
    return con


def _jsonable(v):
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.hex()
    return v


def format_result(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    if fmt == "json":
        return json.dumps([{c: _jsonable(v) for c, v in zip(columns, r, strict=True)} for r in rows],
                          indent=2, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _cell(v, limit: int = 60) -> str:
    if v is None:
        s = "NULL"
    elif isinstance(v, float):
        s = f"{v:.6g}"
    else:
        s = str(v)
    s = s.replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def run_query(con, sql: str, params: list | None = None) -> tuple[list[str], list[tuple]]:
    try:
        cur = con.execute(sql, params or [])
    except duckdb.Error as exc:
        raise PwhError(f"query failed: {exc}") from None
    if cur.description is None:
        return [], []
    return [d[0] for d in cur.description], cur.fetchall()


def default_path() -> Path:
    return resolve_settings().warehouse
