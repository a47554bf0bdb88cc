"""The analyst install (issue 12): `pip install .` has no Dagster and no Great Expectations, and
that core is enough for `pwh ingest/build/runs/sql/shell/snapshot` and `warehouse.connect()`.

The runtime test runs those commands in a fresh process in which importing Dagster, Great
Expectations, SQLAlchemy, pandas or scipy fails, as in a core install; it also checks that no
command module pulls them in when the CLI lists its commands, and that `pwh check` says which
extra it needs.

The wheel (issue 24): built from a clean copy of the source tree, installed in a fresh venv with
`[checks]`, run from an empty folder, `pwh ingest` (the example runs the wheel carries),
`build`, `check`, `report` and `compare` give what they give in the checkout; with `[pipeline]`,
`dagster definitions validate` passes and `dagster dev` serves the checkout's whole asset graph.
The venvs are cached (~/.cache/pwh-test-venvs, or $PWH_TEST_VENVS) per dependency set: only the
first run installs the dependencies (from pip's cache). A test holds its venv's lock file while it
installs the wheel and uses the venv: a second suite beside it (another clone, same home folder)
waits instead of reinstalling or deleting the venv under it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT

NOT_CORE = ("dagster", "dagster_webserver", "dagster_shared", "dagster_pipes",
            "great_expectations", "sqlalchemy", "pandas", "scipy")

CHILD = r'''
import importlib.abc, io, json, sys, contextlib
NOT_CORE = set(sys.argv[1].split(","))
w, seeds = sys.argv[2], sys.argv[3:]

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in NOT_CORE:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the core install)")

sys.meta_path.insert(0, NotInstalled())
from warehouse.cli import _commands, main

names = [c[1] for c in _commands()]  # imports every command module
def pwh(*argv, stdin=None):
    out = io.StringIO()
    old_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            rc = main(["--warehouse", w, *argv])
    finally:
        sys.stdin = old_stdin
    return rc, out.getvalue()

assert pwh("ingest", *seeds)[0] == 0
assert pwh("build")[0] == 0
rc, out = pwh("runs", "--format", "json")
assert rc == 0 and len(json.loads(out)) == 2, out
rc, out = pwh("sql", "select count(*) as n from marts.run_summary", "--format", "json")
assert rc == 0 and json.loads(out) == [{"n": 2}], out
rc, out = pwh("shell", "--format", "csv", stdin="select count(*) as n from raw.files;\n")
assert rc == 0 and out.split() == ["n", "2"], out
assert pwh("snapshot")[0] == 0
import warehouse
with warehouse.connect(w) as con:
    assert con.execute("select count(*) as n from marts.kernel_run_rollup").pl().height == 1
rc, _ = pwh("check")
assert rc == 1
loaded = sorted(m for m in sys.modules if m.split(".")[0] in NOT_CORE)
print(json.dumps({"commands": names, "loaded": loaded}))
'''


def test_core_commands_work_without_dagster_or_great_expectations(wh, seeds):
    r = subprocess.run([sys.executable, "-c", CHILD, ",".join(NOT_CORE), str(wh.warehouse),
                        *map(str, seeds.values())], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert {"ingest", "build", "runs", "sql", "shell", "check"} <= set(report["commands"])
    # pwh check names the extra it needs instead of a traceback
    assert "pip install '.[checks]'" in r.stderr and "Traceback" not in r.stderr


def test_pyproject_keeps_dagster_and_gx_out_of_the_core():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in reqs}

    core = names(project["dependencies"])
    assert {"duckdb", "polars", "pyarrow", "sqlglot"} <= core
    assert not core & {"dagster", "dagster-webserver", "great-expectations", "sqlalchemy",
                       "pandas", "scipy"}
    extras = project["optional-dependencies"]
    assert {"great-expectations", "pandas"} <= names(extras["checks"])
    assert {"dagster", "dagster-webserver"} <= names(extras["pipeline"])
    # the pipeline runs the checks; `all` is both; `dev` (make demo / make test) is everything
    assert "profile-warehouse[checks]" in extras["pipeline"]
    assert any(r.startswith("profile-warehouse[") and "checks" in r and "pipeline" in r
               for r in extras["all"])
    assert "profile-warehouse[all]" in extras["dev"]
    install = [line for line in (ROOT / "Makefile").read_text().splitlines()
               if "pip install" in line and "-e" in line]
    assert len(install) == 1 and "dev" in install[0] and "all" in install[0]


# ------------------------------------------------------------------ the wheel, outside the checkout
# A wheel built from a clean copy of the source tree (what `git clone` gives: tracked and new
# files, no build products), installed in a fresh venv, run from an empty folder. Venvs are
# cached between sessions (keyed by the dependencies and Python), only the wheel is reinstalled.


CACHE = Path(os.environ.get("PWH_TEST_VENVS") or
             Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pwh-test-venvs")
CAPTURED = "2026-01-02T03:04:05Z"


def _run(argv, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 1200), **kw)
    assert r.returncode == 0, f"{argv}: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A clean copy of the source tree: what a fresh clone gives (with uncommitted edits)."""
    tmp = tmp_path_factory.mktemp("source")
    src = tmp / "clone"
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"not a git checkout (git ls-files: {r.stderr.strip()[:200]})")
    files = r.stdout.split("\0")
    for rel in filter(None, files):
        p = ROOT / rel
        if p.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, src / rel)
    assert not (src / "warehouse" / "_data").exists() and not list(src.rglob("*.so"))
    return src


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"),
          str(source)])
    (whl,) = (tmp / "dist").glob("profile_warehouse-*.whl")
    return whl


@contextlib.contextmanager
def _venv(extra: str, whl: Path):
    """A venv with ``profile-warehouse[extra]`` from ``whl``: the dependencies installed once per
    cache key, the wheel itself always reinstalled. The venv is the caller's until the ``with``
    ends: an exclusive lock on ``<venv>.lock`` (released by the kernel if the process dies), so
    that two suites never install into, delete or run one venv at the same time."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    key = hashlib.sha256(json.dumps([sys.version, project["dependencies"],
                                     project["optional-dependencies"], extra]).encode()
                         ).hexdigest()[:16]
    d = CACHE / f"{extra}-{key}"
    py = d / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{d.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".ready").exists():  # absent, or half-made by a process that died
            shutil.rmtree(d, ignore_errors=True)
            venv.EnvBuilder(with_pip=True).create(d)
            _run([str(py), "-m", "pip", "install", "-q", f"{whl}[{extra}]"])
            (d / ".ready").touch()
        _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(whl)])
        yield d


def _clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("PWH_", "PYTHON"))},
            **extra}


def _pwh(pwh: list[str], cwd: Path, *argv: str, ok=(0,)) -> subprocess.CompletedProcess:
    """``pwh`` is the command: the installed console script, or the checkout's module."""
    src = [a.split("=", 1)[1] for a in pwh if a.startswith("PYTHONPATH=")]
    cmd = [a for a in pwh if not a.startswith("PYTHONPATH=")]
    env = _clean_env(**({"PYTHONPATH": src[0]} if src else {}))
    r = subprocess.run([*cmd, "--warehouse", "w/warehouse.duckdb", *argv],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode in ok, f"pwh {argv}: {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


MODEL_QUERIES = {
    "rollup": "select * from marts.kernel_run_rollup order by all",
    "categories": "select * from marts.audit_category_rollup order by all",
    "points": "select * from staging.trend_points order by all",
    "trends": "select * from marts.kernel_trends order by all",
    "summary": "select * exclude (ingested_at, validated_at) from marts.run_summary order by all",
}


def _session(pwh: list[str], cwd: Path, runs: list[Path]) -> dict:
    """ingest (both example runs), build, check, report, compare: what each one gave."""
    cwd.mkdir(parents=True)
    out = {}
    r = _pwh(pwh, cwd, "ingest", "--series", "examples", "--captured-at", CAPTURED,
             *map(str, runs))
    out["ingest"] = r.stdout.count("ok ")
    r = _pwh(pwh, cwd, "build")
    out["built"] = [line.split(":")[0] for line in r.stdout.splitlines()
                    if line.startswith("built ")]
    r = _pwh(pwh, cwd, "check")
    out["check"] = sorted(line.split(" (")[0] for line in r.stdout.splitlines()
                          if line.startswith("run "))
    _pwh(pwh, cwd, "report")
    report = cwd / "w" / "report"
    out["report"] = sorted(p.relative_to(report).as_posix() for p in report.rglob("*.html"))
    out["compare"] = json.loads(_pwh(pwh, cwd, "compare", "--series", "examples",
                                     "--format", "json").stdout)
    for name, q in MODEL_QUERIES.items():
        out[name] = json.loads(_pwh(pwh, cwd, "sql", q, "--format", "json").stdout)
    return out


@pytest.mark.slow
def test_the_wheel_works_outside_the_checkout_as_in_it(source, wheel, tmp_path):
    with _venv("checks", wheel) as d:  # the venv is this test's until it ends
        bin_dir = d / "bin"
        where = _run([str(bin_dir / "python"), "-c",
                      "import json; from warehouse import shipped; print(json.dumps({k: "
                      "str(shipped.data_path(k)) for k in shipped.SHIPPED}))"], cwd=tmp_path
                     ).stdout
        where = {k: Path(v) for k, v in json.loads(where).items()}
        for name, path in where.items():  # inside the installed package, not a checkout
            assert "site-packages" in path.parts and path.exists(), (name, path)
        shipped_files = {p.relative_to(where["sql"]) for p in where["sql"].rglob("*.sql")}
        assert shipped_files == {p.relative_to(source / "sql") for p in (source / "sql").rglob("*.sql")}
        for sub in ("suites", "views"):
            assert {p.name for p in (where["expectations"] / sub).iterdir()} == \
                {p.name for p in (source / "expectations" / sub).iterdir()}
        runs = sorted(where["examples/runs"].glob("*.json"))
        examples = sorted((source / "examples" / "runs").glob("*.json"))
        assert [p.read_bytes() for p in runs] == [p.read_bytes() for p in examples]

        installed = _session([str(bin_dir / "pwh")], tmp_path / "empty", runs)
        # the same commands in the checkout the wheel was built from
        checkout = _session([sys.executable, "-m", "warehouse.cli", f"PYTHONPATH={source}"],
                            tmp_path / "checkout", examples)
        assert installed["ingest"] == 2 and installed["check"] and installed["report"]
        assert installed["rollup"] and installed["trends"]
        for key in checkout:
            assert installed[key] == checkout[key], f"{key}: the wheel differs from the checkout"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _asset_keys(url: str) -> set[str] | None:
    req = urllib.request.Request(f"{url}/graphql", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps(
        {"query": "{ assetNodes { assetKey { path } } }"}).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = json.loads(resp.read())
    except OSError:
        return None
    nodes = (body.get("data") or {}).get("assetNodes")
    return {"/".join(n["assetKey"]["path"]) for n in nodes} if nodes else None


@pytest.mark.slow
def test_the_wheel_serves_the_full_dagster_graph_outside_the_checkout(source, wheel, tmp_path):
    with _venv("pipeline", wheel) as d:  # the venv is this test's until it ends
        empty = tmp_path / "empty"
        empty.mkdir()
        env = _clean_env(DAGSTER_HOME=str(tmp_path / "home"), PWH_AUTOMATION="off",
                         PWH_WAREHOUSE=str(empty / "w.duckdb"))
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        dagster = str(d / "bin" / "dagster")
        _run([dagster, "definitions", "validate", "-m", "pipelines.definitions"], cwd=empty, env=env)
        # what the checkout's code location defines
        want = json.loads(_run([sys.executable, "-c", (
            "import json; from pipelines.definitions import defs; print(json.dumps(sorted("
            "k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())))")],
            cwd=tmp_path, env={**env, "PYTHONPATH": str(source)}).stdout.splitlines()[-1])
        assert any(k.startswith("marts/") for k in want) and any(k.startswith("raw/") for k in want)
        got = _dev_asset_keys(dagster, empty, env, tmp_path / "dagster_dev.log",
                              tmp_path / "home")
        assert got, (tmp_path / "dagster_dev.log").read_text(errors="replace")[-3000:]
        assert got == set(want)


BIND_FAILED = re.compile(r"address already in use|error while attempting to bind", re.I)


def _dev_asset_keys(dagster: str, cwd: Path, env: dict, log_path: Path, home: Path):
    """The asset keys ``dagster dev`` serves (None if it never served them). The free port is
    only free when picked: if another process (a second suite beside this one) took it first,
    dagster dev exits saying so and starts again on a new port; a server answering that is not
    ours (its instance is not in ``home``) does not count."""
    for _attempt in range(4):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(log_path, "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [dagster, "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 600  # bounds a hang only
            while time.monotonic() < deadline and proc.poll() is None:
                got = _asset_keys(url) if _ours(url, home) else None
                if got:
                    return got
                time.sleep(2)
            if proc.poll() is None or not BIND_FAILED.search(
                    log_path.read_text(errors="replace")):
                return None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
            log.close()
    return None


def _ours(url: str, home: Path) -> bool:
    req = urllib.request.Request(f"{url}/graphql", method="POST", headers={
        "Content-Type": "application/json"}, data=json.dumps(
        {"query": "{ instance { info } }"}).encode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            info = ((json.loads(resp.read()).get("data") or {}).get("instance") or {}).get("info")
    except OSError:
        return False
    return info is None or str(home) in info
