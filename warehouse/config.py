"""Where the warehouse and its state live.

Everything the warehouse writes sits in one *state folder*: by default ``./.pwh`` (git-ignored),
or the folder of the file named by ``--warehouse`` / ``PWH_WAREHOUSE``::

    <state>/warehouse.duckdb   the live read-write database (one writer at a time)
    <state>/archive/           content-addressed copies of every ingested raw file (by SHA-256)
    <state>/quarantine/        bad files, each with a ``.error.json`` sidecar
    <state>/landing/           the folder the Dagster sensor watches (``PWH_LANDING`` overrides)
    <state>/snapshots/         read-only snapshots published for analysts
    <state>/exports/           the only folder analyst SQL may ``COPY TO``
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = Path(".pwh")
DEFAULT_WAREHOUSE = DEFAULT_STATE_DIR / "warehouse.duckdb"


@dataclass(frozen=True)
class Settings:
    """Resolved locations of one warehouse. Build it with :func:`settings`."""

    warehouse: Path

    @property
    def state_dir(self) -> Path:
        return self.warehouse.parent

    @property
    def archive_dir(self) -> Path:
        return self.state_dir / "archive"

    @property
    def quarantine_dir(self) -> Path:
        return self.state_dir / "quarantine"

    @property
    def landing_dir(self) -> Path:
        env = os.environ.get("PWH_LANDING")
        return Path(env).resolve() if env else self.state_dir / "landing"

    @property
    def snapshot_dir(self) -> Path:
        return self.state_dir / "snapshots"

    @property
    def export_dir(self) -> Path:
        return self.state_dir / "exports"


def settings(warehouse: str | os.PathLike[str] | None = None) -> Settings:
    """Resolve the warehouse path: explicit argument, then ``PWH_WAREHOUSE``, then the default."""
    raw = warehouse or os.environ.get("PWH_WAREHOUSE") or DEFAULT_WAREHOUSE
    return Settings(warehouse=Path(raw).expanduser().resolve())
