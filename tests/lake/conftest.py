"""Fixtures of the lake tests: catalogs (SQLite file, PostgreSQL from Debian on a Unix socket in a
temporary folder), generated run histories, and a Spark standalone cluster on 127.0.0.1.

Everything runs on loopback or Unix sockets; every process started here is recorded by PID and
stopped. Skips (with the reason) when the [lake] extra, PostgreSQL or Java is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="lake tests need the [lake] extra")

from warehouse.lake.catalog import LakeConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PWH = str(Path(sys.executable).with_name("pwh"))


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of our own: initdb in a temporary folder, listening only on a Unix
    socket there (no TCP). Yields the server's base URI; stopped at the end."""
    from warehouse.lake import localpg

    if localpg.bindir() is None:
        pytest.skip("PostgreSQL from Debian's postgresql package is not installed")
    with localpg.server() as uri:
        yield uri


_PG_DB_COUNTER = [0]


@pytest.fixture
def postgres_lake(postgres, tmp_path) -> LakeConfig:
    """A fresh lake on the PostgreSQL server: a new database, a new folder."""
    from warehouse.lake.catalog import normalise_uri
    from warehouse.lake.localpg import create_database

    _PG_DB_COUNTER[0] += 1
    uri = create_database(postgres, f"lake{os.getpid()}_{_PG_DB_COUNTER[0]}")

    return LakeConfig(normalise_uri(uri), str(tmp_path / "lake"))


@pytest.fixture
def sqlite_lake(tmp_path) -> LakeConfig:
    return LakeConfig(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "lake"))


@pytest.fixture(params=["sqlite", "postgres"])
def lake(request) -> LakeConfig:
    """Both catalogs: each test taking ``lake`` runs on SQLite and on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_lake")


@pytest.fixture(scope="session")
def spark_lake(tmp_path_factory) -> LakeConfig:
    """The lake the Spark equality tests build on (made once: ingest is most of its cost)."""
    from tests.lake.spark_equality import make_lake

    return make_lake(tmp_path_factory.mktemp("spark-lake"))


@pytest.fixture(scope="session")
def spark_lake_on_duckdb(spark_lake) -> dict:
    """Every model built on DuckDB over ``spark_lake`` once, as Arrow tables: the reference each
    Spark deployment's tables are compared with (a Spark build reads only the lake's raw and
    checks tables, never a model table, so one DuckDB build serves them all)."""
    from tests.lake.spark_equality import duckdb_tables

    return duckdb_tables(spark_lake)


@pytest.fixture(scope="session")
def small_history(tmp_path_factory) -> Path:
    """A small generated history: 3 series x 3 labels (~25 runs), with sidecars."""
    from warehouse import synth

    out = tmp_path_factory.mktemp("history") / "h"
    synth.generate(out, synth.HistorySpec(labels=int(os.environ.get("PWH_LAKE_TEST_LABELS", 3)),
                                          plants=()))
    return out / "runs"


def run_files(folder: Path) -> list[Path]:
    from warehouse.ingesting.loader import expand

    return list(expand([folder]))


def pwh(*args: str, env: dict | None = None, check: bool = True,
        timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([PWH, *args], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise AssertionError(f"pwh {' '.join(args[:3])} … exited {r.returncode}:\n"
                             f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def lake_args(cfg: LakeConfig) -> list[str]:
    return ["--catalog", cfg.uri, "--location", cfg.location]


# ------------------------------------------------------------------ Spark standalone cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float, procs) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a Spark daemon exited early ({p.args})")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark master and 2 workers (1 core each) on 127.0.0.1, started from the
    pyspark package's own launcher; PIDs recorded, all stopped (and waited for) at the end.
    Yields the master URL."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Java (Debian's openjdk-17-jre-headless) is not installed")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    launcher = spark_home / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("spark-logs")
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOG_DIR": str(logs), "SPARK_WORKER_DIR": str(logs / "work")}
    procs: list[subprocess.Popen] = []
    pids = logs / "pids"

    def start(cls: str, *args: str, name: str) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen([str(launcher), cls, *args], stdout=out, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True)
        procs.append(p)
        with open(pids, "a") as fh:
            fh.write(f"{name} {p.pid}\n")
        return p

    try:
        start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
              str(port), "--webui-port", str(_free_port()), name="master")
        _wait_port(port, 600, procs)  # bounds a hang: JVMs start slowly on a busy machine
        url = f"spark://127.0.0.1:{port}"
        for i in range(2):
            start("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                  "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                  name=f"worker{i}")
        _wait_workers(logs, 2, 600, procs)
        yield url
    finally:
        _stop(procs)


def _wait_workers(logs: Path, n: int, timeout: float, procs) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a Spark daemon exited early ({p.args})")
        text = (logs / "master.log").read_text(errors="replace")
        if text.count("Registering worker") >= n:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{n} Spark workers did not register in {timeout} s")


# ------------------------------------------------------------------ Spark Connect server


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory):
    """A Spark Connect server (``local[2]`` behind it) on 127.0.0.1, started from the pyspark
    package's own ``sbin/start-connect-server.sh --wait`` in its own process group; PID
    recorded, stopped (and waited for) at the end. Yields the ``sc://`` URL."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Java (Debian's openjdk-17-jre-headless) is not installed")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    logs = tmp_path_factory.mktemp("spark-connect")
    port = _free_port()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(logs),
           "SPARK_PID_DIR": str(logs), "SPARK_IDENT_STRING": "pwh-test",
           "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    out = open(logs / "server.log", "wb")  # noqa: SIM115 - closed with the process
    p = subprocess.Popen(
        [str(spark_home / "sbin" / "start-connect-server.sh"), "--wait",
         "--master", "local[2]",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g",
         "--conf", f"spark.sql.warehouse.dir={logs / 'warehouse'}"],
        stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    (logs / "pids").write_text(f"connect-server {p.pid}\n")
    try:
        _wait_port(port, 600, [p])
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop([p])
        out.close()


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, then SIGKILL what has not ended within 5 s in all. Nothing
    of theirs is kept (their folders are the session's temporary ones), and the standalone
    cluster's JVMs sat out every grace given on SIGTERM: 30 s per fixture made the session's
    end wait 61 s on a fresh clone."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
