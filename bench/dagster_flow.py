"""Files dropped into the landing folder under the real ``make ui``, timed to queryable marts.

    python -m bench.dagster_flow WORK [--files 100] [--samples 300]

Measured in one run, on fresh warehouses, with the same generated files (audits and small
profiles with sidecars, ``bench.gen.write_history``):

1. the CLI reference: ``pwh ingest FOLDER``, ``pwh check``, ``pwh build`` as whole processes;
2. the burst: ``scripts/ui.py`` (what ``make ui`` runs: ``dagster dev``, webserver + daemon,
   the landing sensor and the schedules on) with its own DAGSTER_HOME, warehouse and landing
   folder; once the daemon's landing sensor has ticked, every file is dropped into the landing
   folder (written as ``*.part`` and renamed, as the README advises); the clock stops when the
   analysts' snapshot (``snapshots/current.duckdb``, published after the models) shows every
   run in ``marts.run_summary``;
3. one more file dropped on the now idle system, timed the same way.

Prints one JSON object: ``cli_seconds``, ``burst_seconds``, ``one_file_seconds``, the runs the
daemon launched per job, and the files.

``PWH_BENCH_DAGSTER_PART`` (or ``--part``) selects a part: ``all`` (default), ``burst`` (the CLI
reference and the burst only), ``one`` (one file only: the generated files are put in the
warehouse by ``pwh ingest``/``check``/``build`` before ``make ui`` starts, as a system that has
been in use, then one file is dropped; about a minute)::

    PWH_BENCH_DAGSTER_PART=one python -m bench.dagster_flow /tmp/flow --files 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PWH = str(Path(PY).with_name("pwh"))
PARTS = ("all", "burst", "one")
TIMEOUT_S = float(os.environ.get("PWH_BENCH_DAGSTER_TIMEOUT_S", "1800"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class UI:
    """``scripts/ui.py`` in its own process group, automation on."""

    def __init__(self, work: Path):
        self.home = work / "dagster_home"
        self.warehouse = work / "wh_dagster" / "warehouse.duckdb"
        self.landing = work / "landing"
        self.port = _free_port()
        self.log_path = work / "dagster_dev.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> UI:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DAGSTER_HOME": str(self.home), "PWH_WAREHOUSE": str(self.warehouse),
               "PWH_LANDING": str(self.landing), "PWH_AUTOMATION": "on"}
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [PY, str(ROOT / "scripts" / "ui.py"), "--port", str(self.port)], cwd=ROOT, env=env,
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_default_sigint)
        return self

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql", method="POST",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = json.loads(resp.read())
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def wait(self, what: str, ok, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited: {self.log_path.read_text()[-3000:]}")
            try:
                if ok():
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1)
        raise RuntimeError(f"{what}: not after {timeout:.0f} s; log {self.log_path}")

    def sensor_ticked(self) -> bool:
        q = """{ sensorsOrError(repositorySelector: {repositoryLocationName: "%s",
                 repositoryName: "__repository__"}) { ... on Sensors { results { name
                 sensorState { status ticks(limit: 1) { status } } } } } }"""
        loc = self.location()
        res = self.graphql(q % loc)["sensorsOrError"]["results"]
        landing = next(s for s in res if s["name"] == "landing_sensor")
        return landing["sensorState"]["status"] == "RUNNING" and bool(
            landing["sensorState"]["ticks"])

    def location(self) -> str:
        entries = self.graphql("""{ workspaceOrError { ... on Workspace { locationEntries {
            name loadStatus } } } }""")["workspaceOrError"]["locationEntries"]
        loaded = [e["name"] for e in entries if e["loadStatus"] == "LOADED"]
        if not loaded:
            raise OSError("code location not loaded yet")
        return loaded[0]

    def runs(self) -> dict[str, dict[str, int]]:
        """Runs per job and status."""
        out: dict[str, dict[str, int]] = {}
        rs = self.graphql("""{ runsOrError(limit: 1000) { ... on Runs { results {
            jobName status } } } }""")["runsOrError"]["results"]
        for r in rs:
            out.setdefault(r["jobName"], {}).setdefault(r["status"], 0)
            out[r["jobName"]][r["status"]] += 1
        return out

    def busy(self) -> bool:
        return any(st in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
                   for by in self.runs().values() for st in by)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self._log.close()


def runs_in_snapshot(warehouse: Path) -> int:
    """Runs in ``marts.run_summary`` of the analysts' current snapshot (0 while none)."""
    cur = warehouse.parent / "snapshots" / "current.duckdb"
    if not cur.exists():
        return 0
    try:
        con = duckdb.connect(str(cur.resolve()), read_only=True)
    except duckdb.Error:
        return 0
    try:
        return con.execute("select count(distinct run_id) from marts.run_summary").fetchone()[0]
    except duckdb.Error:
        return 0
    finally:
        con.close()


def drop(files: list[Path], src_root: Path, landing: Path) -> None:
    """Copy files (and sidecars) into the landing folder: ``*.part``, then rename."""
    for f in files:
        for p in (f.with_name(f.name + ".meta.json"), f):
            if not p.exists():
                continue
            dest = landing / p.relative_to(src_root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            shutil.copyfile(p, part)
            os.replace(part, dest)


def until_runs(warehouse: Path, n: int, t0: float, ui: UI) -> float:
    deadline = t0 + TIMEOUT_S
    while time.perf_counter() < deadline:
        if runs_in_snapshot(warehouse) >= n:
            return time.perf_counter() - t0
        if ui.proc.poll() is not None:
            raise RuntimeError(f"dagster dev exited: {ui.log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"{n} runs not in the snapshot after {TIMEOUT_S:.0f} s "
                       f"(runs: {ui.runs()}); log {ui.log_path}")


def cli_reference(folder: Path, work: Path, wh: Path | None = None) -> dict[str, float]:
    wh = wh or work / "wh_cli" / "warehouse.duckdb"
    out = {}
    for cmd in (["ingest", str(folder)], ["check"], ["build"]):
        t0 = time.perf_counter()
        subprocess.run([PWH, "--warehouse", str(wh), *cmd], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out[cmd[0]] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    from bench import gen

    ap = argparse.ArgumentParser(prog="python -m bench.dagster_flow", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path, help="an empty work folder")
    ap.add_argument("--files", type=int, default=100, help="files in the burst (default 100)")
    ap.add_argument("--samples", type=int, default=300, help="samples per generated profile")
    ap.add_argument("--part", choices=PARTS, default=os.environ.get("PWH_BENCH_DAGSTER_PART",
                                                                    "all"),
                    help="all (default), burst, or one ($PWH_BENCH_DAGSTER_PART)")
    a = ap.parse_args(argv)
    if a.part not in PARTS:
        ap.error(f"PWH_BENCH_DAGSTER_PART={a.part}: expected one of {', '.join(PARTS)}")
    work = a.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    src = work / "files"
    files = gen.write_history(src, a.files, profile_samples=a.samples)
    ui = UI(work)
    cli: dict[str, float] = {}
    burst = single = None
    runs_burst: dict = {}
    if a.part == "one":  # a system in use: the files are in the warehouse and the snapshot
        cli_reference(src, work, ui.warehouse)
    else:
        cli = cli_reference(src, work)
    ui.start()
    try:
        ui.wait("the code location", lambda: bool(ui.location()), timeout=600)
        ui.wait("a tick of the landing sensor", ui.sensor_ticked, timeout=600)
        if a.part != "one":
            t0 = time.perf_counter()
            drop(files, src, ui.landing)
            burst = until_runs(ui.warehouse, len(files), t0, ui)
            runs_burst = ui.runs()
        if a.part != "burst":
            ui.wait("an idle system", lambda: not ui.busy(), timeout=600)
            time.sleep(5)
            one = work / "one" / "tile_attention" / "run_one.json"
            gen.write_profile(one, a.samples, seed=4242)
            gen.write_sidecar(one, "tile_attention", "build-one", dt.datetime(2027, 6, 1))
            t1 = time.perf_counter()
            drop([one], work / "one", ui.landing)
            single = until_runs(ui.warehouse, len(files) + 1, t1, ui)
        runs_all = ui.runs()
    finally:
        ui.stop()
    print(json.dumps({"files": len(files), "part": a.part,
                      "cli_seconds": sum(cli.values()) if cli else None, "cli": cli,
                      "burst_seconds": burst, "one_file_seconds": single,
                      "runs_after_burst": runs_burst, "runs": runs_all}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
