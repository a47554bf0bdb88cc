"""The pwh command line: help on every command, exit codes, output formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from warehouse.cli import _commands, main


def pwh(*argv, env=None, input=None):
    return subprocess.run([sys.executable, "-m", "warehouse.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, **(env or {})}, input=input,
                          timeout=600)


@pytest.mark.parametrize("command", [None] + [c[1] for c in _commands()])
def test_help_on_every_command(command, capsys):
    with pytest.raises(SystemExit) as e:
        main(([command] if command else []) + ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "usage: pwh" in out
    if command is None:
        assert "exit codes" in out and "PWH_WAREHOUSE" in out


def test_usage_error_exits_2():
    r = pwh("ingest")
    assert r.returncode == 2 and "usage" in r.stderr
    assert pwh("no-such-command").returncode == 2


def test_ingest_runs_sql_end_to_end(wh, seeds):
    w = str(wh.warehouse)
    r = pwh("ingest", *map(str, seeds.values()), env={"PWH_WAREHOUSE": w})
    assert r.returncode == 0, r.stderr
    assert "2 ingested" in r.stdout
    r = pwh("--warehouse", w, "ingest", str(seeds["audit"].parent))
    assert r.returncode == 0 and "2 already ingested" in r.stdout
    r = pwh("--warehouse", w, "runs", "--format", "json")
    runs = json.loads(r.stdout)
    assert {x["format"] for x in runs} == {"tile_profile", "conv_audit"}
    r = pwh("runs", "--warehouse", w, "--format", "csv")  # --warehouse also after the command
    assert r.returncode == 0 and r.stdout.startswith("run,format,series,label")
    r = pwh("--warehouse", w, "sql", "SELECT count(*) AS n FROM raw.audit_kernels",
            "--format", "json")
    assert json.loads(r.stdout) == [{"n": 79}]
    r = pwh("--warehouse", w, "sql", "-", "--format", "csv",
            input="SELECT category, count(*) AS n FROM raw.audit_components "
                  "GROUP BY 1 ORDER BY 1")
    assert r.stdout.splitlines()[:2] == ["category,n", "convolution_or_gemm,17"]
    r = pwh("--warehouse", w, "sql", "SELECT name FROM raw.profile_groups ORDER BY group_idx")
    assert "exchange" in r.stdout and "(19 rows)" in r.stdout


def test_partial_failure_exits_1_with_summary(wh, seeds):
    bad = seeds["audit"].parent / "broken.json"
    bad.write_text('{"status": "x", "rows": [}')
    r = pwh("--warehouse", str(wh.warehouse), "ingest", str(seeds["audit"].parent))
    assert r.returncode == 1
    assert "2 ingested, 0 already ingested, 1 failed" in r.stdout
    assert "broken.json" in r.stderr and "quarantined" in r.stderr


def test_sql_is_read_only(wh, seeds):
    w = str(wh.warehouse)
    pwh("--warehouse", w, "ingest", str(seeds["audit"]))
    r = pwh("--warehouse", w, "sql", "DELETE FROM raw.files")
    assert r.returncode == 1 and "read-only" in r.stderr.lower()
    r = pwh("--warehouse", w, "sql", "SELECT count(*) AS n FROM raw.files", "--format", "csv")
    assert r.stdout.split() == ["n", "1"]


def test_missing_warehouse_is_a_clear_error(tmp_path):
    r = pwh("--warehouse", str(tmp_path / "nope.duckdb"), "runs")
    assert r.returncode == 1 and "no warehouse here yet" in r.stderr


def test_output_into_a_closed_pipe_is_quiet(wh, seeds):
    w = str(wh.warehouse)
    pwh("--warehouse", w, "ingest", str(seeds["audit"]))
    r = subprocess.run(
        f"{sys.executable} -m warehouse.cli --warehouse {w} sql "
        "'SELECT * FROM range(200000)' | head -1", shell=True, capture_output=True, text=True,
        cwd=ROOT, timeout=600)
    assert r.stdout.strip() == "range" and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [
    ["ingest", "a.json", "--label", "x"], ["--warehouse", "w.duckdb", "runs", "--errors"],
    ["--warehouse=w.duckdb", "import", "DIR", "--replace"], ["sql", "select 1"],
    ["compare", "--help"], ["bogus"], ["--help"], [],
])
def test_the_parser_of_the_command_alone_parses_like_the_whole_one(argv, capsys):
    from warehouse.cli import _command_of, build_parser

    def parse(parser):
        try:
            ns = vars(parser.parse_args(argv))
        except SystemExit as exc:
            return ("exit", exc.code, capsys.readouterr())
        return {k: (v.__name__ if k == "_module" else v) for k, v in ns.items()}

    assert parse(build_parser(_command_of(argv))) == parse(build_parser())


def test_a_command_imports_its_own_module_only():
    code = ("import sys; from warehouse.cli import build_parser, _command_of; "
            "build_parser(_command_of(['--warehouse', 'w', 'ingest', 'x'])); "
            "print(sorted(m for m in sys.modules if m.startswith('warehouse.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "['warehouse.cli.ingest']"
