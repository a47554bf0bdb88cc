"""`make ui`: the Dagster webserver and daemon on 127.0.0.1, stopped cleanly by Ctrl-C.

DAGSTER_HOME is ``.pwh/dagster`` (git-ignored) with a copy of the repo's ``dagster.yaml``.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default=os.environ.get("PWH_UI_HOST", "127.0.0.1"))
    ap.add_argument("--port", default=os.environ.get("PWH_UI_PORT", "3000"))
    args = ap.parse_args()
    home = Path(os.environ.get("DAGSTER_HOME") or ROOT / ".pwh" / "dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.setdefault("PWH_WAREHOUSE", str(ROOT / ".pwh" / "warehouse.duckdb"))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    dagster = str(Path(sys.executable).with_name("dagster"))
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={home}); Ctrl-C stops it")
    os.chdir(ROOT)
    os.execve(dagster, [dagster, "dev", "-m", "pipelines.definitions", "-h", args.host,
                        "-p", str(args.port)], env)


if __name__ == "__main__":
    main()
