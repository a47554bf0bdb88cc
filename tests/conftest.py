"""Shared fixtures. Every test gets its own temporary warehouse; seeds are copied, never edited."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from warehouse.config import Settings, settings

# Definitions are built at import time: automation stays off in tests whatever the shell says.
os.environ.pop("PWH_AUTOMATION", None)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "runs"
PROFILE_SEED = EXAMPLES / "000_b8c9894ad1339892.json"
AUDIT_SEED = EXAMPLES / "004_fe0a1716faf88a59.json"

RAW_TABLES = (
    "files", "profile_runs", "profile_groups", "profile_samples", "profile_sample_metadata",
    "audit_documents", "audit_rows", "audit_components", "audit_kernels",
)


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path_factory, monkeypatch):
    """No test may touch the real warehouse, landing folder or Dagster home by accident."""
    home = tmp_path_factory.mktemp("pwh-default-state")
    monkeypatch.setenv("PWH_WAREHOUSE", str(home / "warehouse.duckdb"))
    monkeypatch.delenv("PWH_LANDING", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    (home / "dagster").mkdir()


@pytest.fixture
def wh(tmp_path) -> Settings:
    """Settings of a fresh, empty warehouse in a temporary folder."""
    return settings(tmp_path / "state" / "warehouse.duckdb")


@pytest.fixture
def seeds(tmp_path) -> dict[str, Path]:
    """Copies of both seeds in a folder named ``seeds`` (so series defaults to 'seeds')."""
    d = tmp_path / "seeds"
    d.mkdir()
    return {
        "profile": Path(shutil.copy(PROFILE_SEED, d / PROFILE_SEED.name)),
        "audit": Path(shutil.copy(AUDIT_SEED, d / AUDIT_SEED.name)),
    }


def counts(s: Settings) -> dict[str, int]:
    """Row count of every raw table (all zero when the warehouse does not exist yet)."""
    if not s.warehouse.exists():
        return dict.fromkeys(RAW_TABLES, 0)
    con = duckdb.connect(str(s.warehouse), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM raw.{t}").fetchone()[0] for t in RAW_TABLES}
    finally:
        con.close()


def ro(s: Settings):
    return duckdb.connect(str(s.warehouse), read_only=True)
