"""The oracle bench of issue 22 (bench/verdict_limits.py): what the generated noise lets any test
find. Its figures back the claim that two goal rows cannot both be met on these scenarios, so a
wrongly wired oracle (values not from the generator, the plant missing, the run factor not
removed, a test that always or never fires) must fail here."""

from __future__ import annotations

import dataclasses
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


def test_oracle_values_are_the_ones_generate_draws(tmp_path, monkeypatch):
    """The bench draws the factors ``synth.generate`` draws: same keys in the same order (each
    kernel's noise comes from the run's random stream in key order), plant included, and the
    run-wide factor divided out when split."""
    spec = dataclasses.replace(scenarios.spec("lone-kernel-heavy", 7), labels=7)
    seen = {}
    real = synth._run_factors

    def spy(spec_, series, seq, rep, keys, planted):
        f, run_f = real(spec_, series, seq, rep, keys, planted)
        if scenarios.T1 in f:  # the tile series
            seen[(series, seq, rep)] = (f[scenarios.T1], run_f)
        return f, run_f

    monkeypatch.setattr(synth, "_run_factors", spy)
    synth.generate(tmp_path / "h", spec)
    monkeypatch.undo()
    series = "lone-kernel-heavy-tile"
    x = verdict_limits._kernel_runs(spec, series, [scenarios.T1], range(7), split=True)[0]
    raw = verdict_limits._kernel_runs(spec, series, [scenarios.T1], range(7), split=False)[0]
    for seq in range(7):
        for rep in range(3):
            f, run_f = seen[(series, seq, rep)]
            assert raw[seq, rep] == pytest.approx(math.log(f))
            assert x[seq, rep] == pytest.approx(math.log(f / run_f))
    # over many histories the plant shows as log(1.10) between labels 5-9 and 0-4
    diffs = [(v := verdict_limits._kernel_runs(scenarios.spec("lone-kernel-heavy", seed),
                                               series, [scenarios.T1], range(10),
                                               split=True)[0])[5:].mean() - v[:5].mean()
             for seed in range(1, 201)]
    assert np.mean(diffs) == pytest.approx(math.log(1.10), abs=0.01)


def test_the_oracle_neither_always_nor_never_finds_the_lone_kernel(lone):
    found = [lone["plant +10%"]["found"][str(a)]["welch_t"] for a in verdict_limits.ALPHAS]
    assert found == sorted(found)  # more found at a larger alpha
    assert 0.3 < found[0] and found[-1] < 1.0  # even alpha 0.05 misses some histories
    best = lone["plant +10%"]["found"]["0.05"]["z_known_noise"]
    assert found[-1] <= best + 0.03 and best < 1.0  # the z-test that knows the noise bounds it
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
    # seed 1101 is such a history (the bench's 6.25% series); 1102 is not
    assert verdict_limits.first_high(1, seed_base=1101)["all_first_runs_high_none_later"] == 1
    assert verdict_limits.first_high(1, seed_base=1102)["all_first_runs_high_none_later"] == 0
    nb = verdict_limits.noise_before_step(60, seed_base=1)
    assert nb["kernel_histories"] == 180 and nb["histories"] == 60
    assert 0.02 < nb["label6_at_new_level_beyond_floor"] < 0.4


def test_cli_prints_the_table(capsys):
    assert verdict_limits.main(["--histories", "40"]) == 0
    out = capsys.readouterr().out
    assert "| 0.05 |" in out and "first label high" in out and "noise before a step" in out
