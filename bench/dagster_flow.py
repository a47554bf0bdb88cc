"""One new file through Dagster in one process: sensor tick -> ingest run -> models + checks.

    python -m bench.dagster_flow WAREHOUSE LANDING FILE

Copies FILE into LANDING (made old enough to count as stable), evaluates the landing sensor
once, executes the ingest run it requests (raw partition and its checks) and then the refresh
run (every staging model and mart with their checks), all in process on an ephemeral Dagster
instance. Prints ``{"seconds": <sensor to last check>, "import_seconds": …}`` as JSON; the
process's own wall time (imports included) is measured by the caller.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    wh, landing, file = (Path(x) for x in (argv or sys.argv[1:]))
    t_import = time.perf_counter()
    import dagster as dg

    from pipelines import sensors
    from pipelines.definitions import build_definitions
    from pipelines.raw import PARTITIONS_NAME
    from pipelines.resources import WarehouseResource

    defs = build_definitions(warehouse=str(wh), landing=str(landing))
    import_s = time.perf_counter() - t_import
    landing.mkdir(parents=True, exist_ok=True)
    dest = landing / file.name
    shutil.copy(file, dest)
    side = file.with_name(file.name + ".meta.json")
    if side.exists():
        shutil.copy(side, landing / side.name)
    old = time.time() - 3600  # settled: the sensor stages it on its first tick
    for p in landing.iterdir():
        os.utime(p, (old, old))
    with dg.DagsterInstance.ephemeral() as inst:
        t0 = time.perf_counter()
        ctx = dg.build_sensor_context(instance=inst, resources={
            "warehouse": WarehouseResource(path=str(wh), landing=str(landing))})
        result = sensors.landing_sensor(ctx)
        keys = [r.partition_key for r in result.run_requests or []]
        if len(keys) != 1:
            raise SystemExit(f"the sensor requested {len(keys)} runs, expected 1: {result}")
        inst.add_dynamic_partitions(PARTITIONS_NAME, keys)
        ok = defs.get_job_def("ingest_file").execute_in_process(
            instance=inst, partition_key=keys[0], raise_on_error=False).success
        ok = ok and defs.get_job_def("refresh_models").execute_in_process(
            instance=inst, raise_on_error=False).success
        seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "import_seconds": import_s, "success": bool(ok),
                      "run_id": keys[0]}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
