"""The benchmark harness keeps working: its quick level produces a complete, well-formed table.

No timing is asserted here (CI machines are shared and noisy): performance is judged by a person
running ``make bench``, whose figures are committed in bench/RESULTS.md.
"""

from __future__ import annotations

import json
import math

from bench import run

EXPECTED_GOALS = (
    "full-size ingest", "10x profile", "document over 4 GiB",
    "cost flat as history grows: ingest audit", "cost flat as history grows: ingest profile",
    "cost flat as history grows: marts build", "cost flat as history grows: validation",
    "cost flat as history grows: snapshot publish", "analyst queries", "Dagster path",
)


def test_quick_bench_writes_a_complete_table(tmp_path, capsys):
    assert run.main(["--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "results-quick.json").read_text())
    assert result["level"] == "quick"
    assert result["machine"]["cores"] >= 1 and result["machine"]["memory_gib"] > 0
    rows = result["rows"]
    for goal in EXPECTED_GOALS:
        assert any(r["goal"].startswith(goal) for r in rows), goal
        assert f"## {goal}" in printed, goal
    for r in rows:
        assert r["status"] in {"pass", "FAIL", "n/a", "info"}, r
        if r["status"] == "n/a":
            assert r["measured"] is None and r["note"], r  # a reason, never a silent gap
            continue
        assert isinstance(r["measured"], (int, float)) and math.isfinite(r["measured"]), r
        assert r["measured"] > 0, r
        if r["reference"] is not None:
            assert r["reference"] > 0 and math.isclose(r["ratio"], r["measured"] / r["reference"])
        if r["limit"] is not None:
            value = r["ratio"] if r["reference"] is not None else r["measured"]
            assert r["status"] == ("pass" if value <= r["limit"] else "FAIL"), r
    measured = {r["goal"].split(" (")[0] for r in rows if r["status"] != "n/a"}
    # everything that exists in this checkout is measured, not skipped
    assert {"full-size ingest", "10x profile", "cost flat as history grows: ingest audit",
            "cost flat as history grows: ingest profile"} <= measured
    assert not (tmp_path / "work").exists()  # generated inputs are cleaned up
