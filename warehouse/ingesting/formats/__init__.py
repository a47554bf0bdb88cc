"""Source formats: detect from content, parse strictly, return columnar tables.

Each format module exposes ``NAME``, ``PARSER_VERSION``, ``TABLES`` (its raw tables),
``detect(top_keys)``, ``parse(data, path, run_id)`` and ``rebuild(con, run_id)``.
"""

from __future__ import annotations

import msgspec

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import audit, profile
from warehouse.ingesting.formats.base import Parsed, Table

FORMATS = (profile, audit)
BY_NAME = {f.NAME: f for f in FORMATS}
ALL_TABLES: tuple[Table, ...] = tuple(t for f in FORMATS for t in f.TABLES)

__all__ = ["FORMATS", "BY_NAME", "ALL_TABLES", "Parsed", "detect", "parse"]




def detect(data: bytes, path: str):
    """Return the format module whose top-level keys ``data`` has, judged by content only."""
    top = jsonstrict.decode(data, dict[str, msgspec.Raw], path)
    keys = frozenset(top)
    for fmt in FORMATS:
        if fmt.detect(keys):
            return fmt
    shown = ", ".join(sorted(keys)[:12]) or "no keys"
    raise FormatError(
        path, "$",
        "a tile profile (keys clockHz, groups, samples) or a conv audit (keys rows, audit_sha256); "
        f"found an object with {shown}", kind="unknown_format")


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    return detect(data, path).parse(data, path, run_id)
