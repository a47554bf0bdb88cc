"""The analyst install (issue 12): `pip install .` has no Dagster and no Great Expectations, and
that core is enough for `pwh ingest/build/runs/sql/shell/snapshot` and `warehouse.connect()`.

The runtime test runs those commands in a fresh process in which importing Dagster, Great
Expectations, SQLAlchemy, pandas or scipy fails, as in a core install; it also checks that no
command module pulls them in when the CLI lists its commands, and that `pwh check` says which
extra it needs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

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
    import json

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
