"""pwh compare (issue 11): the label-vs-baseline table in the terminal and the CI gate: exit 1
at or above --fail-on, 0 otherwise, 2 for unknown series or labels (naming the known ones);
json rows equal the mart; markdown for a pull request; --baseline judges against one label."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys

import pytest

from tests.test_report import PLANTED, history, mart
from warehouse.cli import main


@pytest.fixture
def hist(tmp_path_factory):
    return history(tmp_path_factory)


def pwh(capsys, s, *args) -> tuple[int, str, str]:
    rc = main(["compare", "--warehouse", str(s.warehouse), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def labels(s, series: str) -> list[str]:
    return [r["label"] for r in mart(s, "select distinct label, label_seq from "
                                        "marts.kernel_trends where series = ? order by label_seq",
                                     [series])]


def test_gate_fails_on_the_planted_regression_and_passes_otherwise(hist, capsys):
    rc, out, _ = pwh(capsys, hist, "--series", "decoder-tile")
    assert rc == 1
    assert "FAIL: 1 regressed" in out and PLANTED in out
    rc, out, _ = pwh(capsys, hist, "--series", "decoder-tile", "--fail-on", "never")
    assert rc == 0 and "ok:" in out
    # an earlier label of the same series: nothing regressed there
    earlier = labels(hist, "decoder-tile")[-2]
    verdicts = {r["verdict"] for r in mart(
        hist, "select verdict from marts.kernel_trends where series = 'decoder-tile' "
              "and label = ?", [earlier])}
    assert "regressed" not in verdicts
    rc, _, _ = pwh(capsys, hist, "--series", "decoder-tile", "--label", earlier)
    assert rc == 0
    rc, _, _ = pwh(capsys, hist, "--series", "decoder-tile", "--label", earlier,
                   "--fail-on", "inconclusive")
    assert rc == (1 if "inconclusive" in verdicts else 0)
    # the first label has no baseline: every kernel is inconclusive
    first = labels(hist, "decoder-tile")[0]
    rc, out, _ = pwh(capsys, hist, "--series", "decoder-tile", "--label", first,
                     "--fail-on", "inconclusive", "--format", "json")
    assert rc == 1 and json.loads(out)["counts"]["inconclusive"] > 0


def test_unknown_series_and_labels_are_usage_errors(hist, capsys):
    rc, out, err = pwh(capsys, hist, "--series", "nope")
    assert rc == 2 and out == ""
    assert "unknown series 'nope'" in err and "decoder-tile" in err and "vae-conv-audit" in err
    rc, _, err = pwh(capsys, hist, "--series", "decoder-tile", "--label", "zzz")
    assert rc == 2 and "unknown label 'zzz'" in err and labels(hist, "decoder-tile")[-1] in err
    rc, _, err = pwh(capsys, hist, "--series", "decoder-tile", "--baseline", "zzz")
    assert rc == 2 and "unknown baseline label 'zzz'" in err
    with pytest.raises(SystemExit) as e:  # argparse: a bad --fail-on
        main(["compare", "--series", "x", "--fail-on", "sometimes"])
    assert e.value.code == 2


def test_json_rows_equal_the_mart_sorted_by_abs_delta(hist, capsys):
    rc, out, _ = pwh(capsys, hist, "--series", "vae-conv-audit", "--format", "json",
                     "--fail-on", "never")
    d = json.loads(out)
    assert rc == 0 and d["label"] == labels(hist, "vae-conv-audit")[-1]
    want = {(r["kernel_kind"], r["kernel"]): r for r in mart(
        hist, "select * from marts.kernel_trends where series = ? and label = ?",
        ["vae-conv-audit", d["label"]])}
    assert len(d["rows"]) == len(want)
    for r in d["rows"]:
        m = want[(r["kernel_kind"], r["kernel"])]
        for col in ("median_us", "baseline_median_us", "delta_pct", "q_value", "verdict",
                    "evidence"):
            assert r[col] == m[col], col
    deltas = [abs(r["delta_pct"]) for r in d["rows"] if r["delta_pct"] is not None]
    assert deltas == sorted(deltas, reverse=True)
    assert d["counts"] == {v: sum(r["verdict"] == v for r in want.values())
                           for v in ("regressed", "improved", "inconclusive", "unchanged")}


def test_markdown_is_a_table_to_post(hist, capsys):
    rc, out, _ = pwh(capsys, hist, "--series", "decoder-tile", "--format", "markdown")
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith("### pwh compare")
    header = next(i for i, line in enumerate(lines) if line.startswith("| verdict |"))
    assert lines[header + 1].startswith("|---|")
    rows = [line for line in lines[header + 2:] if line.startswith("| ")
            and not line.startswith("| verdict |")]
    assert rows and all(r.endswith("|") for r in rows)
    assert sum("🔴 regressed" in r for r in rows) == 1
    assert PLANTED.replace("_", "\\_") in next(r for r in rows if "regressed" in r)
    n_cols = lines[header].count("|")
    assert all(r.count("|") == n_cols for r in rows)  # no cell breaks the table
    # and hostile text cannot break it either
    rc, out, _ = pwh(capsys, hist, "--series", "hostile-names", "--format", "markdown",
                     "--fail-on", "never")
    rows = [r for r in out.splitlines() if r.startswith("| ")]
    assert all(r.count("|") == n_cols for r in rows) and all(len(r) < 1000 for r in rows)


def test_baseline_label_judges_against_that_label_alone(hist, capsys):
    ls = labels(hist, "decoder-tile")
    rc, out, _ = pwh(capsys, hist, "--series", "decoder-tile", "--baseline", ls[0],
                     "--format", "json", "--fail-on", "never")
    d = json.loads(out)
    assert rc == 0 and d["baseline"] == ls[0]
    vals = {(r["kernel"], r["label"]): r["run_values_us"] for r in mart(
        hist, "select kernel, label, run_values_us from marts.kernel_trends "
              "where series = 'decoder-tile'")}
    for r in d["rows"]:
        mine, base = vals[(r["kernel"], ls[-1])], vals[(r["kernel"], ls[0])]
        assert r["median_us"] == pytest.approx(statistics.median(mine))
        assert r["baseline_median_us"] == pytest.approx(statistics.median(base))
        assert r["delta_pct"] == pytest.approx(
            100 * (statistics.median(mine) / statistics.median(base) - 1))
        assert r["baseline_labels"] == 1 and r["baseline_runs"] == len(base)
    planted = next(r for r in d["rows"] if r["kernel"] == PLANTED)
    assert planted["delta_pct"] > 20 and planted["verdict"] in ("regressed", "inconclusive")


def test_exit_status_of_the_real_process(hist):
    exe = [sys.executable, "-m", "warehouse.cli", "compare", "--warehouse", str(hist.warehouse),
           "--series", "decoder-tile"]
    assert subprocess.run(exe, capture_output=True).returncode == 1
    assert subprocess.run([*exe, "--fail-on", "never"], capture_output=True).returncode == 0
    p = subprocess.run([*exe[:-1], "nope"], capture_output=True, text=True)
    assert p.returncode == 2 and "known series" in p.stderr


def test_cannot_compare_is_exit_2_never_the_regressed_code(tmp_path, wh, seeds):
    """Review finding: a missing warehouse or snapshot exited 1, the code CI reads as "a kernel
    regressed"; models not built is 2 as well. Real processes, as CI runs them."""
    from warehouse.ingesting.loader import ingest_paths

    def gate(w):
        return subprocess.run([sys.executable, "-m", "warehouse.cli", "compare", "--warehouse",
                               str(w), "--series", "seeds"], capture_output=True, text=True)

    p = gate(tmp_path / "nowhere" / "warehouse.duckdb")
    assert p.returncode == 2 and "no warehouse here yet" in p.stderr, p.stderr
    ingest_paths(wh, [seeds["profile"]])
    p = gate(wh.warehouse)  # publishes a snapshot first, which has no models
    assert p.returncode == 2 and "no models built yet" in p.stderr, p.stderr
    shutil.rmtree(wh.snapshot_dir)  # no snapshot, and none can be published:
    wh.snapshot_dir.write_text("not a folder")  # (chmod would not stop root)
    p = gate(wh.warehouse)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"pwh compare: {wh.snapshot_dir}: cannot create"), p.stderr


def test_a_series_of_kernels_only_keeps_its_rows_and_columns(hist, capsys):
    """Trace facts and metrics (tests/test_compare_facts.py) add a fact column only where a
    series has them: a series of kernels prints the kernel columns and rows as before."""
    from warehouse.cli.compare import COLUMNS

    rc, out, _ = pwh(capsys, hist, "--series", "vae-conv-audit", "--fail-on", "never")
    assert rc == 0 and out.splitlines()[1].split() == [
        c for c in COLUMNS if c != "q_value" or " q_value " in out.splitlines()[1] + " "]
    rc, out, _ = pwh(capsys, hist, "--series", "vae-conv-audit", "--format", "json",
                     "--fail-on", "never")
    d = json.loads(out)
    assert set(d) == {"series", "label", "label_seq", "captured_at", "baseline", "fail_on",
                      "failed", "counts", "rows"}
    assert all(not {"fact", "mart", "gates"} & set(r) for r in d["rows"])
    assert set(d["counts"]) == {"regressed", "improved", "inconclusive", "unchanged"}
