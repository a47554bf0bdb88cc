"""What the CLI prints (issue 23, items 8-12): a gate whose reader leaves keeps its exit status,
every --format json is strict RFC 8259 JSON, Markdown for a pull request with the changes first
and under GitHub's comment limit, `pwh runs` says what it left out, even number formats, an
ingest error that names its file once, and `pwh shell` running each statement on its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_report import PLANTED, history


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (what JSON.parse and RFC 8259 do)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def pwh(*argv, stdout=subprocess.PIPE, input=None, env=None):
    return subprocess.run([sys.executable, "-m", "warehouse.cli", *argv], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, input=input,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def hist(tmp_path_factory):
    return history(tmp_path_factory)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """Both seeds ingested, two files that failed, a snapshot published."""
    from tests.conftest import AUDIT_SEED, PROFILE_SEED
    from warehouse.config import settings
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.serving import snapshot

    root = tmp_path_factory.mktemp("cli-output")
    s = settings(root / "state" / "warehouse.duckdb")
    ingest_paths(s, [PROFILE_SEED, AUDIT_SEED])
    bad = []
    for name, text in (("truncated.json", '{"rows": ['), ("unknown.json", '{"a": 1}')):
        (root / name).write_text(text)
        bad.append(root / name)
    assert all(r.status == "failed" for r in ingest_paths(s, bad))
    snapshot.publish(s)
    return s


# ------------------------------------------------------------ 8: a gate whose output is cut


def closed_pipe():
    """The write end of a pipe whose read end is already closed: the first write the child
    makes fails with EPIPE, every time (a reader that left before the command wrote)."""
    r, w = os.pipe()
    os.close(r)
    return w


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_a_failing_gate_exits_1_when_its_reader_has_left(hist, fmt):
    w = closed_pipe()
    try:
        gate = ["--warehouse", str(hist.warehouse), "compare", "--series", "decoder-tile",
                "--format", fmt]
        p = pwh(*gate, "--fail-on", "inconclusive", stdout=w)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr
        p = pwh(*gate, stdout=w)  # the planted regression, default --fail-on regressed
        assert p.returncode == 1, p.stderr
        p = pwh(*gate, "--fail-on", "never", stdout=w)  # a passing gate stays 0
        assert p.returncode == 0, p.stderr
    finally:
        os.close(w)


def test_a_failing_gate_exits_1_under_head(hist):
    """`pwh compare … | head -3`: the reader takes three lines and leaves, whenever it does."""
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-m", "warehouse.cli", "--warehouse",
                              str(hist.warehouse), "compare", "--series", "decoder-tile",
                              "--fail-on", "inconclusive", "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        for _ in range(3):
            p.stdout.readline()
        p.stdout.close()
        assert p.wait(300) == 1
        assert b"Traceback" not in p.stderr.read()
        p.stderr.close()


def test_listing_commands_whose_reader_left_exit_0(filled):
    w = closed_pipe()
    try:
        for argv in (["runs"], ["runs", "--errors"], ["sql", "select * from range(20000)"]):
            p = pwh("--warehouse", str(filled.warehouse), *argv, stdout=w)
            assert p.returncode == 0 and "Traceback" not in p.stderr, (argv, p.stderr)
    finally:
        os.close(w)


def test_a_failed_query_whose_reader_left_still_fails(filled):
    w = closed_pipe()
    try:
        p = pwh("--warehouse", str(filled.warehouse), "sql", "select * from nowhere", stdout=w)
        assert p.returncode == 1 and "nowhere" in p.stderr
    finally:
        os.close(w)


def test_an_ingest_whose_reader_left_finishes_the_batch(wh, seeds, tmp_path):
    """`pwh ingest folder | head -1` used to stop at the first line it could not print, with
    exit 0; the batch now goes on to its end and exits with its own status."""
    bad = seeds["profile"].parent / "zz-bad.json"
    bad.write_text('{"rows": [')
    w = closed_pipe()
    try:
        p = pwh("--warehouse", str(wh.warehouse), "ingest", str(seeds["profile"].parent),
                stdout=w)
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr  # one file failed
    listed = strict(pwh("--warehouse", str(wh.warehouse), "runs", "--format", "json").stdout)
    assert len(listed) == 2  # both good files are in


# ------------------------------------------------------------ 9: strict JSON everywhere


NONFINITE_SQL = ("select 1/0 as x, -1/0 as y, 'nan'::double as n, [1.5, 'inf'::double] as l, "
                 "{'a': 'nan'::float} as s, null::double as z, 0.25 as d, 2.5::float as f")


def test_sql_json_is_strict_and_says_nan_and_infinity_as_strings(filled):
    p = pwh("--warehouse", str(filled.warehouse), "sql", NONFINITE_SQL, "--format", "json")
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout) == [{"x": "Infinity", "y": "-Infinity", "n": "NaN",
                                 "l": [1.5, "Infinity"], "s": {"a": "NaN"}, "z": None,
                                 "d": 0.25, "f": 2.5}]


def test_shell_json_is_strict(filled):
    p = pwh("--warehouse", str(filled.warehouse), "shell", "--format", "json",
            input=NONFINITE_SQL + ";\n")
    assert p.returncode == 0, p.stderr
    assert strict(p.stdout)[0]["n"] == "NaN"


def test_runs_and_compare_json_are_strict(filled, hist):
    p = pwh("--warehouse", str(filled.warehouse), "runs", "--format", "json")
    assert p.returncode == 0 and len(strict(p.stdout)) == 2
    p = pwh("--warehouse", str(filled.warehouse), "runs", "--errors", "--format", "json")
    assert p.returncode == 0 and len(strict(p.stdout)) == 2
    for series in ("decoder-tile", "vae-conv-audit", "hostile-names"):
        p = pwh("--warehouse", str(hist.warehouse), "compare", "--series", series,
                "--format", "json", "--fail-on", "never")
        assert p.returncode == 0, p.stderr
        assert strict(p.stdout)["rows"]


def test_check_json_is_strict(wh, seeds):
    from warehouse.ingesting.loader import ingest_paths

    ingest_paths(wh, [seeds["audit"]])
    p = pwh("--warehouse", str(wh.warehouse), "check", "--format", "json")
    assert p.returncode == 0, p.stderr
    results = strict(p.stdout)
    assert results and all(r["success"] for r in results)


def test_to_json_never_writes_nan(filled):
    from warehouse.serving.results import format_result, to_json

    nan, inf = float("nan"), float("inf")
    text = to_json({"a": [nan, inf, -inf], "b": {1: (inf,)}, "c": b"\x01"})
    assert strict(text) == {"a": ["NaN", "Infinity", "-Infinity"], "b": {"1": ["Infinity"]},
                            "c": "01"}
    assert strict(format_result(["v"], [(nan,), (None,)], "json")) == [{"v": "NaN"},
                                                                        {"v": None}]


# ------------------------------------------------------------ 10: markdown for a pull request


def test_markdown_puts_changes_first_and_folds_the_rest(hist):
    p = pwh("--warehouse", str(hist.warehouse), "compare", "--series", "decoder-tile",
            "--format", "markdown")
    assert p.returncode == 1, p.stderr
    md = p.stdout
    assert len(md) < 65_536
    first_details = md.index("<details>")
    changed = md[:first_details]
    assert "🔴 regressed" in changed and PLANTED.replace("_", "\\_") in changed
    assert "unchanged |" not in changed and "inconclusive |" not in changed
    folded = md[first_details:]
    assert folded.count("<details>") == folded.count("</details>") >= 1
    assert re.search(r"<details><summary>\d+ unchanged</summary>", folded)
    assert "🔴" not in folded
    # every kernel is there once
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line
            and not line.startswith("| verdict |")]
    n = strict(pwh("--warehouse", str(hist.warehouse), "compare", "--series", "decoder-tile",
                   "--format", "json").stdout)["rows"]
    assert len(rows) == len(n)
    # the p column is filled where the mart has a p-value (it was a blank "q")
    with_p = sum(r.get("p_value") is not None for r in n)
    assert with_p and sum(bool(line.split(" | ")[6].strip()) for line in rows) == with_p


def test_markdown_shows_what_fails_the_gate_unfolded():
    from warehouse.cli.compare import markdown
    from warehouse.serving.report.compare import Comparison

    def row(kernel, verdict, delta):
        return {"kernel_kind": "kernel", "kernel": kernel, "verdict": verdict,
                "delta_pct": delta, "share_of_run": 0.1, "median_us": 10.0,
                "baseline_median_us": 10.0, "p_value": 0.2, "q_value": None, "evidence": "e"}

    c = Comparison("s", "l", 3, None, "verdict baseline",
                   [row("up", "improved", -9.0), row("maybe", "inconclusive", 4.0),
                    row("same", "unchanged", 0.5)])
    head = markdown(c, "h", "st", "regressed").split("<details>")[0]
    assert "🟢 improved" in head and "maybe" not in head and "same" not in head
    head = markdown(c, "h", "st", "inconclusive").split("<details>")[0]
    assert "🟡 inconclusive" in head and "maybe" in head and "same" not in head
    md = markdown(c, "h", "st", "never")
    assert "No kernel" not in md and "<details><summary>1 unchanged</summary>" in md
    c.rows = [row("same", "unchanged", 0.5)]
    assert "No kernel regressed or improved." in markdown(c, "h", "st")


def test_markdown_stays_under_the_limit_and_says_what_it_cut(hist):
    from warehouse.cli.compare import markdown
    from warehouse.serving.query import connect
    from warehouse.serving.report import compare as cmpmod

    con = connect(hist)
    try:
        c = cmpmod.compare(con, "vae-conv-audit")
    finally:
        con.close()
    full = markdown(c, "head", "status")
    assert "not shown" not in full
    for limit in (len(full) - 1, len(full) // 2, 3000):
        md = markdown(c, "head", "status", limit=limit)
        assert len(md) + 1 <= limit  # with the newline print adds
        cut = [int(m.group(1)) for m in re.finditer(r"\*(\d+) more \w+ kernels? not shown", md)]
        rows = [line for line in md.splitlines() if line.startswith("| ")
                and not line.startswith(("| verdict |", "|---"))]
        assert cut and sum(cut) + len(rows) == len(c.rows)
        assert md.count("<details>") == md.count("</details>")
    # the unchanged go first
    md = markdown(c, "head", "status", limit=len(full) - 1)
    assert re.search(r"\d+ more unchanged kernels? not shown", md)
    assert not re.search(r"more (changed|inconclusive) kernels? not shown", md)


# ------------------------------------------------------------ 11: pwh runs says what it left out


def test_runs_says_how_many_more_and_how_to_see_them(filled):
    w = str(filled.warehouse)
    p = pwh("--warehouse", w, "runs", "--limit", "1")
    assert p.returncode == 0
    assert "(1 of 2 runs shown, newest first; 1 more: --limit 2 (or --limit 0) shows all)" \
        in p.stdout
    assert "2 files failed to ingest" in p.stdout and "pwh runs --errors" in p.stdout
    p = pwh("--warehouse", w, "runs", "--limit", "0")
    assert "(2 runs)" in p.stdout and "more" not in p.stdout.split("(2 runs)")[1]
    p = pwh("--warehouse", w, "runs", "--errors", "--limit", "1")
    assert "(1 of 2 errors shown, newest first; 1 more" in p.stdout
    assert "(1 error" not in p.stdout
    p = pwh("--warehouse", w, "runs", "--errors")
    assert "(2 errors; newest first)" in p.stdout
    # machine formats keep stdout clean: the note goes to stderr
    p = pwh("--warehouse", w, "runs", "--limit", "1", "--format", "json")
    assert len(strict(p.stdout)) == 1 and "1 more" in p.stderr
    p = pwh("--warehouse", w, "runs", "--limit", "-1")
    assert p.returncode == 2 and "--limit" in p.stderr


def test_runs_errors_name_the_file_once(filled):
    out = pwh("--warehouse", str(filled.warehouse), "runs", "--errors").stdout
    for name in ("truncated.json", "unknown.json"):
        assert out.count(name) == 2, out  # the header line and the quarantined copy's name


# ------------------------------------------------------------ 12: small ones


def test_an_ingest_error_names_its_file_once(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": [')
    p = pwh("--warehouse", str(tmp_path / "state" / "warehouse.duckdb"), "ingest", str(bad))
    assert p.returncode == 1
    fail = next(line for line in p.stdout.splitlines() if line.startswith("FAIL"))
    assert fail.count(str(bad)) == 1, fail
    assert fail.startswith(f"FAIL {bad}: at $")
    detail = p.stderr.split("failed: ")[1].splitlines()
    assert detail[0] == str(bad) and str(bad) not in detail[1]


def test_numbers_in_a_column_share_one_format():
    from warehouse.serving.results import format_result

    out = format_result(["x", "n", "s"], [(0.24933, 1, "a"), (5.2687, 22, "b"),
                                          (23.8, 333, "c")], "table").splitlines()
    # one number of decimals per column, numbers right-aligned under a right-aligned header
    assert out == ["       x    n  s", "--------  ---  -", " 0.24933    1  a", " 5.26870   22  b",
                   "23.80000  333  c", "(3 rows)"]
    one = format_result(["a", "b", "c"], [(0.24933, 5.2687, 23.8)]).splitlines()[2].split()
    assert one == ["0.24933", "5.2687", "23.8"]  # nothing lost, no padding digits
    assert format_result(["x"], [(float("nan"),), (1e-9,)]).splitlines()[2:4] == [
        "        NaN", "1.00000e-09"]  # a value fixed decimals would show as 0: exponents
    assert format_result(["x"], [(0.123456789,), (2.0,)], digits=4).splitlines()[2:4] == [
        "0.1235", "2.0000"]


def test_shell_script_runs_each_statement_on_its_own(filled):
    p = pwh("--warehouse", str(filled.warehouse), "shell",
            input="select 1 as one; select 'a;b' as two; -- a ; comment\nselect 3 as three;\n")
    assert p.returncode == 0, p.stderr
    assert "one" in p.stdout and "a;b" in p.stdout and "three" in p.stdout
    # a script stops at its first error: what came before ran, exit 1
    p = pwh("--warehouse", str(filled.warehouse), "shell",
            input="select 1 as one; selec 2; select 3 as three;\n")
    assert p.returncode == 1
    assert "one" in p.stdout and "three" not in p.stdout
    assert "statement 2 of 3 (selec 2;)" in p.stderr


def test_split_statements_follows_the_tokenizer():
    from warehouse.serving.results import ends_statement, split_statements

    assert split_statements("select ';' ; -- x;y\nselect $$a;b$$; selec 3") == [
        "select ';' ;", "-- x;y\nselect $$a;b$$;", "selec 3"]
    assert split_statements("-- only a comment;\n;;") == []
    assert ends_statement("select 1; -- done") and ends_statement('select "a;";')
    assert not ends_statement("select 'abc;") and not ends_statement("select 1 -- ;")
