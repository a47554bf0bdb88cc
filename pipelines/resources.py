"""Dagster resources: where the warehouse and its landing folder live.

Nothing here holds a DuckDB connection: every op opens the file, does its work and closes it
(DuckDB allows one read-write process per file, and runs in other processes need it next).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from warehouse.config import Settings, settings


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse file and the landing folder the sensor watches.

    ``path``: the warehouse file; default ``$PWH_WAREHOUSE``, else ``./.pwh/warehouse.duckdb``.
    ``landing``: the landing folder; default ``$PWH_LANDING``, else ``landing/`` beside the
    warehouse file (inside the git-ignored state folder).
    """

    path: str = ""
    landing: str = ""

    @property
    def settings(self) -> Settings:
        return settings(self.path or os.environ.get("PWH_WAREHOUSE") or None)

    @property
    def landing_dir(self) -> Path:
        if self.landing:
            return Path(self.landing).expanduser().resolve()
        return self.settings.landing_dir

    @contextmanager
    def exclusive(self, log=None) -> Iterator[None]:
        """Hold the warehouse for writing across processes, for the duration of one op.

        The ``duckdb_writer`` pool (limit 1) is what queues writers. Its slots live in the
        instance's storage, and with the default SQLite storage two processes can, rarely,
        both claim the last slot (the claim is a read then a write, with no row lock). This
        file lock is the backstop: writers never overlap, whatever the instance storage.
        """
        lock = self.settings.state_dir / ".dagster-writer.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "a+b") as fh:
            t0 = time.time()
            fcntl.flock(fh, fcntl.LOCK_EX)
            t1 = time.time()
            if log is not None:
                if t1 - t0 > 0.5:
                    log.warning(f"waited {t1 - t0:.1f} s for another writer of the warehouse")
                log.debug(f"pwh writer lock acquired {t1:.6f}")
            try:
                yield
            finally:
                if log is not None:
                    log.debug(f"pwh writer lock released {time.time():.6f}")
                fcntl.flock(fh, fcntl.LOCK_UN)


class ValidationResource(dg.ConfigurableResource):
    """Great Expectations for the asset checks, loaded when a run starts.

    Importing GX costs seconds. Doing it while the run initialises its resources, before any
    step queues for the ``duckdb_writer`` pool, means the pool is held for validating only, and
    runs waiting for the writer import in parallel. Only runs with check steps load it.
    """

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from warehouse import checks

        checks.warm_up()  # GX imported and its context built, before any pooled step
