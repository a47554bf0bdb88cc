"""Python functions registered on the build connection for SQL models to call.

Kept separate from the models so that the statistics are unit-testable on their own.
"""

from __future__ import annotations


def register(con) -> None:
    """Register every function models use. Safe to call more than once on a connection."""
    return None
