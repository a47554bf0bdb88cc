"""The oracle bench of issue 22 (bench/verdict_limits.py): what the generated noise lets any test
find. Its figures back the claim that two goal rows cannot both be met on these scenarios, so a
wrongly wired oracle (values not from the generator, the plant missing, the run factor not
removed, a test that always or never fires) must fail here."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from bench import verdict_limits  # noqa: E402
from warehouse import scenarios, synth  # noqa: E402

N = 300


@pytest.fixture(scope="module")
def lone():
    return verdict_limits.lone_kernel(N, seed_base=1)


def test_oracle_values_are_the_generators_with_the_plant_and_without_the_run_factor():
    spec = scenarios.spec("lone-kernel-heavy", 7)
    x = verdict_limits._kernel_runs(spec, "lone-kernel-heavy-tile", scenarios.T1, range(10),
                                    split=True)
    raw = verdict_limits._kernel_runs(spec, "lone-kernel-heavy-tile", scenarios.T1, range(10),
                                      split=False)
    assert x.shape == (10, 3)
    for seq in range(10):
        for rep in range(3):
            planted = synth._planted_factors(spec, "lone-kernel-heavy-tile", seq, rep,
                                             [scenarios.T1], {})
            f, run_f = synth._run_factors(spec, "lone-kernel-heavy-tile", seq, rep,
                                          [scenarios.T1], planted)
            assert raw[seq, rep] == pytest.approx(math.log(f[scenarios.T1]))
            assert x[seq, rep] == pytest.approx(math.log(f[scenarios.T1] / run_f))
    # over many histories the plant shows as log(1.10) between labels 5-9 and 0-4
    diffs = []
    for seed in range(1, 201):
        v = verdict_limits._kernel_runs(scenarios.spec("lone-kernel-heavy", seed),
                                        "lone-kernel-heavy-tile", scenarios.T1, range(10),
                                        split=True)
        diffs.append(v[5:].mean() - v[:5].mean())
    assert np.mean(diffs) == pytest.approx(math.log(1.10), abs=0.01)


def test_the_oracle_neither_always_nor_never_finds_the_lone_kernel(lone):
    found = [lone["plant +10%"]["found"][str(a)]["welch_t"] for a in verdict_limits.ALPHAS]
    assert found == sorted(found)  # more found at a larger alpha
    assert 0.3 < found[0] and found[-1] < 1.0  # even alpha 0.05 misses some histories
    fp = lone["nothing planted"]["found"]["0.05"]
    assert 0 < fp["welch_t"] <= 0.1 and fp["mann_whitney"] <= 0.1
    assert lone["nothing planted"]["found"]["0.0025"]["welch_t"] <= 0.02
    # the late test's form (labels after the onset only, its alpha over the onsets it tries)
    lt = lone["plant +10%"]["late_test_form"]
    assert lt["alpha"] < 0.001 and 0 < lt["found"] < found[0]
    assert lone["nothing planted"]["late_test_form"]["found"] <= 0.01
    # the estimate alone falls short of the floor in some histories: no alpha finds them all
    assert 0 < lone["plant +10%"]["estimate_below_floor"]["median"] < 0.3


def test_first_high_and_noise_before_step_rates_are_counted_from_the_generator():
    fh = verdict_limits.first_high(200, seed_base=1)
    assert fh["expected"] == pytest.approx(0.05 * 0.95 ** 45)
    assert 0 <= fh["all_first_runs_high_none_later"] < 0.05
    nb = verdict_limits.noise_before_step(60, seed_base=1)
    assert nb["kernel_histories"] == 180
    assert 0.02 < nb["label6_at_new_level_beyond_floor"] < 0.4


def test_cli_prints_the_table(capsys):
    assert verdict_limits.main(["--histories", "40"]) == 0
    out = capsys.readouterr().out
    assert "| 0.05 |" in out and "first label high" in out and "noise before a step" in out
