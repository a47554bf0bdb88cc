"""Exceptions raised by the warehouse core. Each names what broke and where."""

from __future__ import annotations


class PwhError(Exception):
    """Base class of every error the warehouse raises on purpose."""


class FormatError(PwhError):
    """A source document is malformed, of an unknown format, or breaks its schema.

    ``path`` is the file, ``json_path`` the location inside the document (``$`` is the root)
    and ``expected`` what the parser wanted to find there.
    """

    def __init__(self, path: str, json_path: str, expected: str, *, kind: str = "schema"):
        self.path = str(path)
        self.json_path = json_path
        self.expected = expected
        self.kind = kind
        super().__init__(f"{self.path}: at {json_path}: {expected}")


class WarehouseBusyError(PwhError):
    """The warehouse file stayed locked by another writer for longer than the retry budget."""


class ModelError(PwhError):
    """A SQL model cannot be loaded or built (unknown table, cycle, SQL error)."""


class QueryRefused(PwhError):
    """An analyst query was refused by the read-only query layer."""


def internal_error(exc: BaseException) -> str:
    """An unexpected exception as one short line (its type and the start of its message: the
    message of a decode error can hold the whole input)."""
    text = str(exc)
    if len(text) > 300:
        text = text[:300] + f"… ({len(text)} characters)"
    return f"internal error: {type(exc).__name__}: {text}"
