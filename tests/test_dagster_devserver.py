"""The real ``make ui`` launch path (``scripts/ui.py`` -> ``dagster dev``) as a test helper.

``DevServer`` starts ``scripts/ui.py`` on 127.0.0.1 with a free port, a temporary DAGSTER_HOME,
warehouse and landing folder, SIGINT reset to the default before exec (a background child of a
non-interactive shell would inherit it ignored, and ``dagster dev`` would then ignore SIGTERM
too), and in its own process group so Ctrl-C can be emulated and nothing is left behind.
tests/test_browser.py uses it (backfill, browser, Ctrl-C); the tests here check the launcher.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 600  # bounds a hang: ~65 s with other suites running on 2 cores


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


BIND_FAILED = re.compile(r"address already in use|error while attempting to bind", re.I)


class PortTaken(Exception):
    """The webserver could not bind its port: another process took it after it was picked."""


class DevServer:
    """``dagster dev`` for one test module: temp state, free port, clean shutdown."""

    def __init__(self, tmp: Path, *extra_args: str):
        self.tmp = tmp
        self.extra_args = list(extra_args)
        self.home = tmp / "dagster_home"
        self.warehouse = tmp / "state" / "warehouse.duckdb"
        self.landing = tmp / "landing"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "dagster_dev.log"
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DAGSTER_HOME": str(self.home),
                "PWH_WAREHOUSE": str(self.warehouse), "PWH_LANDING": str(self.landing),
                "PWH_AUTOMATION": "off", "PYTHONUNBUFFERED": "1"}

    def start(self) -> DevServer:
        """Start and wait until loaded. The free port is only free when picked: if another
        process (a second test suite beside this one) took it before the webserver bound it,
        dagster dev exits saying so, and it starts again on a new port."""
        self.home.mkdir(parents=True, exist_ok=True)
        for attempt in range(4):
            self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "scripts" / "ui.py"), "--port", str(self.port),
                 "--no-automation", *self.extra_args],
                cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_default_sigint)
            try:
                self.wait_ready()
                return self
            except PortTaken:
                if attempt == 3:
                    raise
                self.stop()
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def graphql(self, query: str, variables: dict | None = None, timeout: float = 60) -> dict:
        req = urllib.request.Request(
            f"{self.url}/graphql", method="POST",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read())
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def wait_ready(self) -> None:
        """Until the code location is loaded (or the server died: fail with its log)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        q = """{ workspaceOrError { __typename ... on Workspace { locationEntries {
                 name loadStatus locationOrLoadError { __typename
                 ... on PythonError { message } } } } } }"""
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if BIND_FAILED.search(self.log()):
                    raise PortTaken(self.port)
                raise AssertionError(f"dagster dev exited with {self.proc.returncode}:\n"
                                     f"{self.log()[-4000:]}")
            try:
                if not self._ours():
                    raise ConnectionError("another server answers on this port")
                entries = self.graphql(q, timeout=10)["workspaceOrError"]["locationEntries"]
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                last = str(exc)
                time.sleep(1)
                continue
            loaded = [e for e in entries if e["loadStatus"] == "LOADED"]
            if loaded and entries:
                err = loaded[0]["locationOrLoadError"]
                if err["__typename"] == "PythonError":
                    raise AssertionError(f"code location failed to load: {err['message']}")
                return
            last = str(entries)
            time.sleep(1)
        raise AssertionError(f"dagster dev not ready after {READY_TIMEOUT_S} s ({last}):\n"
                             f"{self.log()[-4000:]}")

    def _ours(self) -> bool:
        """Whether the server on the port is this one (its instance lives in our DAGSTER_HOME),
        not one that took the port first; a server that hides its instance counts as ours."""
        try:
            info = self.graphql("{ instance { info } }", timeout=10)["instance"]["info"]
        except (AssertionError, KeyError, TypeError):  # a schema without it: cannot tell
            return True
        return info is None or str(self.home) in info

    def group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def ctrl_c(self, timeout: float = 90) -> int | None:
        """What Ctrl-C in the terminal does: SIGINT to the whole process group; wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Ctrl-C, then make sure nothing of ours survives (by our process group only)."""
        if self.proc is not None:
            self.ctrl_c()
            deadline = time.monotonic() + 30
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.5)
            if self.group_alive():
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if getattr(self, "_log", None):
            self._log.close()


def _load_ui_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("pwh_ui", ROOT / "scripts" / "ui.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ui_prepares_dagster_home_with_the_writer_pool(tmp_path, monkeypatch):
    ui = _load_ui_script()
    home = tmp_path / "home"
    ui.prepare_home(home)
    assert (home / "dagster.yaml").read_text() == (ROOT / "dagster.yaml").read_text()
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        info = instance.event_log_storage.get_concurrency_info(ui.POOL)
        assert (info.slot_count, info.using_default_limit) == (1, False)
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert not instance.telemetry_enabled
        assert not instance.nux_enabled  # no "join the community" pop-up
        from dagster._core.scheduler.instigation import InstigatorType, TickStatus

        kept = instance.get_tick_retention_settings(InstigatorType.SENSOR)
        assert kept[TickStatus.SKIPPED] == 1 and 0 < kept[TickStatus.SUCCESS] <= 30
        # one file to the marts in under a minute (issue 12): the landing sensor is never
        # held up by another sensor, and queued runs start within a second
        assert instance.get_settings("sensors")["use_threads"]
        assert instance.run_coordinator.dequeue_interval_seconds <= 1


def test_ui_help_documents_read_only_mode():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ui.py"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--read-only" in out and "--no-automation" in out and "127.0.0.1" in out


def test_read_only_ui_serves_the_graph_but_launches_nothing(tmp_path):
    server = DevServer(tmp_path, "--read-only")
    try:
        server.start()
        nodes = server.graphql("{ assetNodes { assetKey { path } } }")["assetNodes"]
        assert {"raw", "staging", "marts"} <= {n["assetKey"]["path"][0] for n in nodes}
        perms = server.graphql("{ permissions { permission value } }")["permissions"]
        assert {p["permission"]: p["value"] for p in perms}["launch_pipeline_execution"] is False
        entries = server.graphql("""{ workspaceOrError { ... on Workspace { locationEntries {
            name } } } }""")["workspaceOrError"]["locationEntries"]
        res = server.graphql(
            """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename } }""",
            {"p": {"selector": {"repositoryLocationName": entries[0]["name"],
                                "repositoryName": "__repository__", "jobName": "refresh_models"},
                   "runConfigData": {}}})["launchRun"]
        assert res["__typename"] == "UnauthorizedError"
        assert "dagster.daemon" not in server.log() and "(read-only)" in server.log()
    finally:
        server.stop()
