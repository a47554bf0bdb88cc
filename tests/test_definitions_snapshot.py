"""A snapshot of the Dagster graph: asset keys, their dependencies, groups and partitioning,
their checks (blocking or not), jobs, schedules and sensors. A change to the graph (a new model,
a new suite, a changed dependency) shows up in review as a diff of
``tests/snapshots/definitions.json``.

After an intended change: ``PWH_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest
tests/test_definitions_snapshot.py`` rewrites the file; commit it with the change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipelines.definitions import defs

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"


def _key(k) -> str:
    return k.to_user_string()


def snapshot() -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for k in sorted(graph.get_all_asset_keys(), key=_key):
        node = graph.get(k)
        assets[_key(k)] = {
            "group": node.group_name,
            "deps": sorted(_key(p) for p in node.parent_keys),
            "partitions": node.partitions_def.name if node.partitions_def else None,
            "kinds": sorted(node.kinds),
            "materializable": node.is_materializable,
            "pool": next((p for p in node.pools), None) if node.pools else None,
        }
    checks = {}
    for ck in sorted(graph.asset_check_keys, key=lambda c: (_key(c.asset_key), c.name)):
        node = graph.get(ck)
        checks[f"{_key(ck.asset_key)}:{ck.name}"] = {
            "blocking": node.blocking,
            "partitioned": node.partitions_def is not None,
        }
    jobs = {}
    for job in sorted(defs.jobs or [], key=lambda j: j.name):
        resolved = defs.resolve_job_def(job.name)
        jobs[job.name] = sorted(_key(k) for k in resolved.asset_layer.executable_asset_keys)
    return {
        "assets": assets,
        "checks": checks,
        "jobs": jobs,
        "schedules": {s.name: {"cron": s.cron_schedule, "job": s.job_name,
                               "default_status": s.default_status.value}
                      for s in sorted(defs.schedules or [], key=lambda s: s.name)},
        "sensors": {s.name: {"jobs": sorted(j.name for j in s.jobs) if s.has_jobs else [],
                             "minimum_interval_seconds": s.minimum_interval_seconds,
                             "default_status": s.default_status.value}
                    for s in sorted(defs.sensors or [], key=lambda s: s.name)},
    }


def test_definitions_match_the_snapshot():
    got = json.dumps(snapshot(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("PWH_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(got)
    want = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    assert got == want, (
        "the Dagster definitions changed; review the diff and, if intended, run "
        "`PWH_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_definitions_snapshot.py` "
        "and commit tests/snapshots/definitions.json")
