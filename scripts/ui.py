"""`make ui`: the Dagster webserver and daemon on 127.0.0.1, stopped cleanly by Ctrl-C.

* DAGSTER_HOME is ``.pwh/dagster`` (git-ignored) unless set; the repo's ``dagster.yaml`` is
  copied there and the writer pool ``duckdb_writer`` is set to 1 explicitly.
* The warehouse is ``$PWH_WAREHOUSE`` (default ``.pwh/warehouse.duckdb``); the landing folder
  the sensor watches is ``$PWH_LANDING`` (default ``.pwh/landing``).
* The landing sensor and both schedules run (``PWH_AUTOMATION=on``) unless ``--no-automation``.
* ``--read-only`` serves the UI alone (``dagster-webserver --read-only``, no daemon): viewers
  can browse assets, lineage, checks and runs but cannot launch, cancel or toggle anything.

SIGINT is reset to the default before exec: a non-interactive shell that starts this in the
background hands it SIGINT ignored, and ``dagster dev`` would then ignore SIGTERM too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POOL = "duckdb_writer"


def prepare_home(home: Path) -> None:
    """DAGSTER_HOME with this repo's dagster.yaml and the writer pool limited to 1."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Open http://HOST:PORT; drop run files into the landing folder.")
    ap.add_argument("--host", default=os.environ.get("PWH_UI_HOST", "127.0.0.1"),
                    help="address to listen on (default 127.0.0.1, this machine only)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PWH_UI_PORT", "3000")),
                    help="port (default 3000)")
    ap.add_argument("--read-only", action="store_true",
                    help="webserver only, read-only: no daemon, nobody can launch runs")
    ap.add_argument("--no-automation", action="store_true",
                    help="leave the landing sensor and the schedules stopped")
    args = ap.parse_args(argv)
    home = Path(os.environ.get("DAGSTER_HOME") or ROOT / ".pwh" / "dagster").resolve()
    prepare_home(home)
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.setdefault("PWH_WAREHOUSE", str(ROOT / ".pwh" / "warehouse.duckdb"))
    if args.no_automation:
        env["PWH_AUTOMATION"] = "off"
    env.setdefault("PWH_AUTOMATION", "on")
    landing = env.get("PWH_LANDING") or str(Path(env["PWH_WAREHOUSE"]).parent / "landing")
    Path(landing).mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    bindir = Path(sys.executable).parent
    if args.read_only:
        exe = str(bindir / "dagster-webserver")
        argv_ = [exe, "--read-only", "-m", "pipelines.definitions", "-d", str(ROOT),
                 "-h", args.host, "-p", str(args.port)]
    else:
        exe = str(bindir / "dagster")
        argv_ = [exe, "dev", "-m", "pipelines.definitions", "-d", str(ROOT), "-h", args.host,
                 "-p", str(args.port)]
    mode = "read-only" if args.read_only else (
        f"automation {env['PWH_AUTOMATION']}")
    print(f"Dagster UI on http://{args.host}:{args.port} ({mode}); DAGSTER_HOME={home}\n"
          f"warehouse {env['PWH_WAREHOUSE']}\nlanding folder {landing}\n"
          f"trend report {Path(env['PWH_WAREHOUSE']).parent / 'report' / 'index.html'} "
          "(open from disk; written by the report asset and `pwh report`)\nCtrl-C stops it",
          flush=True)
    # run from DAGSTER_HOME: dagster would warn about the repo's own dagster.yaml in the cwd
    os.chdir(home)
    os.execve(exe, argv_, env)


if __name__ == "__main__":
    main()
