"""The scoring of the `verdicts` bench goal (bench/verdicts.py) on hand-made trend rows: a bench
that miscounts would report the method's quality wrongly."""

from __future__ import annotations

from bench import verdicts


def _row(key, seq, verdict, runs=(100.0, 101.0, 99.0), delta=0.0, base_labels=0):
    return {"kernel_kind": "kernel", "kernel": key, "label_seq": seq, "verdict": verdict,
            "run_values_us": list(runs), "delta_pct": delta, "baseline_labels": base_labels,
            "floor_pct": 5.0, "alpha": 0.05}


def test_score_series_counts_each_outcome():
    truth = {"expected": [
        {"series": "s", "kernel_kind": "kernel", "kernel": "a", "label_seq": 2,
         "direction": "regressed", "expected_delta_pct": 15.0},
        {"series": "s", "kernel_kind": "kernel", "kernel": "b", "label_seq": 2,
         "direction": "regressed", "expected_delta_pct": 12.0},
        {"series": "s", "kernel_kind": "kernel", "kernel": "c", "label_seq": 2,
         "direction": "improved", "expected_delta_pct": -20.0},
        {"series": "s", "kernel_kind": "kernel", "kernel": "d", "label_seq": 1,
         "direction": "regressed", "expected_delta_pct": 3.0},
        {"series": "other", "kernel_kind": "kernel", "kernel": "a", "label_seq": 0,
         "direction": "regressed", "expected_delta_pct": 50.0},
    ]}
    rows = [_row("a", 2, "regressed"), _row("a", 3, "unchanged"),  # found at its label
            _row("b", 2, "inconclusive"), _row("b", 3, "regressed"),  # late
            _row("c", 2, "regressed"),  # wrong direction: missed and not excused
            _row("d", 1, "regressed"),  # below the floor
            _row("e", 5, "improved"),  # nothing moved there
            _row("e", 6, "inconclusive", delta=7.0)]  # the watch list
    # 'unchanged' with power: 3 runs far from a tight 9-run baseline vs one without
    base = [_row("p", s, "unchanged", runs=(100.0, 100.1, 99.9)) for s in range(3)]
    powered = _row("p", 3, "unchanged", runs=(100.05, 100.02, 99.98), base_labels=3)
    weak = _row("w", 1, "unchanged", runs=(100.0, 130.0, 70.0), base_labels=1)
    rows += base + [powered, _row("w", 0, "inconclusive", runs=(90.0, 110.0)), weak]
    sc = verdicts.score_series(rows, truth, "s", "steps")
    assert (sc["planted"], sc["at_label"], sc["late"]) == (3, 1, 1)
    assert sc["by_4th"] == 1  # decided at its own label
    assert sc["missed"] == ["c@2: regressed"]
    assert sc["below_floor_flagged"] == 1
    assert sc["false_flags"] == 3  # c (wrong way), d (below floor), e
    assert sc["watch"] == 1 and sc["cells"] == len(rows)
    assert sc["unchanged"] == 6 and sc["unchanged_without_power"] == 5  # only p@3 is powered
    drift = verdicts.score_series(rows, {"expected": []}, "s", "drift")
    assert drift["false_flags"] == 0 and drift["drift_flags"] == 5
    assert drift["first_drift_flag"] == 1


def test_a_step_confirmed_after_the_4th_label_is_counted_apart():
    """A change written on its label but decided by a label more than 4 after it (issue 22,
    defect 6's goal: by the 4th label) is at its label, not decided by the 4th."""
    truth = {"expected": [{"series": "s", "kernel_kind": "kernel", "kernel": "a", "label_seq": 2,
                           "direction": "regressed", "expected_delta_pct": 12.0}]}

    def rows(by):
        out = [dict(_row("a", s, "inconclusive"), label=f"L{s}") for s in range(10)]
        out[2].update(verdict="regressed", confirmed_by_label=f"L{by}")
        return out

    early = verdicts.score_series(rows(6), truth, "s", "steps")
    late = verdicts.score_series(rows(7), truth, "s", "steps")
    assert (early["at_label"], early["by_4th"]) == (1, 1)
    assert (late["at_label"], late["by_4th"]) == (1, 0)

