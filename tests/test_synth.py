"""`pwh synth`: deterministic, derived from the seeds, invariants P1–P10/A1–A7 kept, ground truth."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED
from warehouse import synth
from warehouse.cli import main
from warehouse.ingesting import formats
from warehouse.modelling.kernel_names import parse

SMALL = synth.HistorySpec(
    seed=3, labels=6, repeats=2, single_repeat_every=3, outlier_rate=0.0,
    plants=(synth.Plant("decoder-tile", 2, "copy_u64", 1.5),
            synth.Plant("encoder-tile", 3, "exchange", 0.7),
            synth.Plant("vae-conv-audit", 4, "cudnn::nchwToNhwcKernel", 1.3, match="family")))


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "h"
    truth = synth.generate(out, SMALL)
    return out, truth


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_other_bytes(history, tmp_path):
    out, _ = history
    again = tmp_path / "again"
    synth.generate(again, SMALL)
    assert _digest(again) == _digest(out)
    other = tmp_path / "other"
    synth.generate(other, synth.HistorySpec(**{**SMALL.__dict__, "seed": 4}))
    assert _digest(other) != _digest(out)


def test_layout_sidecars_and_ground_truth(history):
    out, truth = history
    files = sorted((out / "runs").rglob("*.json"))
    runs = [f for f in files if not f.name.endswith(".meta.json")]
    # 3 series x 6 labels; labels 2 and 5 have one run, the others two
    assert len(runs) == 3 * (4 * 2 + 2 * 1) == len(truth["files"])
    assert {p.parent.name for p in runs} == {"decoder-tile", "encoder-tile", "vae-conv-audit"}
    labels = [x["label"] for x in truth["labels"]]
    assert len(set(labels)) == 6 and all(len(x) == 7 for x in labels)
    times = []
    for r in runs:
        meta = json.loads((r.parent / (r.name + ".meta.json")).read_text())
        assert set(meta) == {"series", "label", "captured_at"}
        assert meta["series"] == r.parent.name and meta["label"] in r.name
        times.append((meta["series"], labels.index(meta["label"]), meta["captured_at"]))
    for s in {t[0] for t in times}:  # capture time increases with the label
        seq = sorted((t[2], t[1]) for t in times if t[0] == s)
        assert [x[1] for x in seq] == sorted(x[1] for x in seq)
    assert [p["label"] for p in truth["plants"]] == [labels[2], labels[3], labels[4]]
    assert [p["direction"] for p in truth["plants"]] == ["regressed", "improved", "regressed"]
    exp = {(e["kernel_kind"], e["kernel"]): e for e in truth["expected"]}
    assert exp[("kernel", "copy_u64")]["expected_delta_pct"] == pytest.approx(50)
    assert exp[("family", "cudnn::nchwToNhwcKernel")]["expected_delta_pct"] == pytest.approx(30)
    sig = [e for e in truth["expected"] if e["kernel_kind"] == "signature_category"]
    assert sig and all(0 < e["expected_delta_pct"] <= 30 + 1e-9 for e in sig)
    assert all(e["kernel"].endswith("/ layout_conversion") for e in sig)


def test_every_run_goes_through_the_real_parsers(history):
    out, truth = history
    for f in truth["files"]:
        data = (out / f).read_bytes()
        fmt = formats.detect(data, f)
        parsed = fmt.parse(data, f, "0" * 64)
        assert parsed.source_format == ("conv_audit" if "audit" in f else "tile_profile")


# ------------------------------------------------------------------ invariants, independently
def _close(a, b, tol=1e-9):
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def check_profile(d: dict) -> list[str]:
    bad = []
    C, T = d["clockHz"], d["tileCount"]
    if not _close(d["profileSpanMs"], d["profileSpanCycles"] / C * 1000):
        bad.append("P1")
    if not (sum(g["sampleCount"] for g in d["groups"]) == d["matchedSampleCount"]
            <= d["sampleCount"]):
        bad.append("P2")
    groups = {g["name"]: g for g in d["groups"]}
    for g in d["groups"]:
        n = g["name"]
        if not _close(g["phaseMs"], g["phaseCycles"] / C * 1000):
            bad.append(f"P3 {n}")
        if not _close(g["meanCycles"], g["workCycles"] / g["sampleCount"]):
            bad.append(f"P4 {n}")
        if not _close(g["averageActiveTiles"], g["workCycles"] / g["phaseCycles"]):
            bad.append(f"P5 {n}")
        if g["estimatedWorkCycles"] == 0:
            if g["usefulUtilization"] is not None or g["deviceUsefulUtilization"] is not None:
                bad.append(f"P6/P7 null {n}")
        else:
            if not _close(g["usefulUtilization"], g["usefulCycles"] / g["estimatedWorkCycles"]):
                bad.append(f"P6 {n}")
            if not _close(g["deviceUsefulUtilization"],
                          g["usefulCycles"] / (g["phaseCycles"] * T)):
                bad.append(f"P7 {n}")
        if not (g["p50Cycles"] <= g["p95Cycles"] <= g["maximumCycles"] and g["tileCount"] <= T
                and g["phaseCycles"] <= g["lastOffset"] - g["firstOffset"]):
            bad.append(f"P8 {n}")
        for k in ("usefulUtilization", "workLaneOccupancy", "deviceUsefulUtilization"):
            if g[k] is not None and not 0 <= g[k] <= 1:
                bad.append(f"P9 {n} {k}")
    for i, s in enumerate(d["samples"]):
        g = groups.get(s["kernel"])
        if g is None or not 0 <= s["physicalTile"] < T or not (
                g["firstOffset"] <= s["offset"]
                and s["offset"] + s["duration"] <= g["lastOffset"]):
            bad.append(f"P10 sample {i}")
    return bad


def check_audit(d: dict) -> list[str]:
    bad = []
    hexd = set("0123456789abcdef")
    if len(d["audit_sha256"]) != 64 or set(d["audit_sha256"]) - hexd:
        bad.append("A6 audit_sha256")
    seen = set()
    for i, r in enumerate(d["rows"]):
        comps = r["components"]
        if not _close(sum(c["fraction_of_profiled_sum"] for c in comps), 1.0):
            bad.append(f"A1 row {i}")
        if not _close(sum(c["us"] for c in comps), r["total_profiled_us"]):
            bad.append(f"A2 row {i}")
        for c in comps:
            if not _close(c["fraction_of_profiled_sum"], c["us"] / r["total_profiled_us"]):
                bad.append(f"A3 row {i}")
        cats = [c["category"] for c in comps]
        if len(cats) != len(set(cats)):
            bad.append(f"A4 dup row {i}")
        for c in comps:
            s = sum(k["duration_us"] for k in r["kernels"] if k["category"] == c["category"])
            if not _close(s, c["us"]):
                bad.append(f"A4 row {i} {c['category']}")
        if [k["id"] for k in r["kernels"]] != [str(j) for j in range(len(r["kernels"]))]:
            bad.append(f"A5 row {i}")
        if len(r["input_sha256"]) != 64 or set(r["input_sha256"]) - hexd or \
                r["input_sha256"] in seen:
            bad.append(f"A6 row {i}")
        seen.add(r["input_sha256"])
        for shape in (r["input_shape"], r["output_shape"]):
            if len(shape) != 5 or any(x <= 0 for x in shape):
                bad.append(f"A7 row {i}")
        if r["input_shape"][0] != r["output_shape"][0]:
            bad.append(f"A7 batch row {i}")
    return bad


def test_checkers_accept_the_seeds_and_catch_breakage():
    profile = json.loads(PROFILE_SEED.read_bytes())
    audit = json.loads(AUDIT_SEED.read_bytes())
    assert check_profile(profile) == [] and check_audit(audit) == []
    profile["groups"][1]["phaseMs"] *= 1.01
    audit["rows"][0]["components"][0]["us"] += 1
    assert "P3 attention_softmax_d72_p768_tail_f8_sm4" in check_profile(profile)
    assert {"A2 row 0", "A3 row 0"} <= set(check_audit(audit))


def test_synthetic_runs_keep_every_invariant(history):
    out, truth = history
    for f in truth["files"]:
        d = json.loads((out / f).read_bytes())
        bad = check_audit(d) if "rows" in d else check_profile(d)
        assert bad == [], f"{f}: {bad}"


def test_extreme_factors_keep_invariants():
    profile = json.loads(PROFILE_SEED.read_bytes())
    audit = json.loads(AUDIT_SEED.read_bytes())
    import numpy as np

    for f in (0.5, 0.67, 1.0, 1.9, 3.0):
        p = synth.synth_profile(profile, {g["name"]: f for g in profile["groups"]}, 1.0 / f)
        assert check_profile(p) == [], f
        shorts = {parse(k["name"]).short for r in audit["rows"] for k in r["kernels"]}
        a = synth.synth_audit(audit, dict.fromkeys(shorts, f), np.random.default_rng(0), "a" * 64)
        assert check_audit(a) == [], f


def test_plants_move_the_planted_kernel_only(history):
    out, truth = history
    base = {g["name"]: g["phaseCycles"] for g in json.loads(PROFILE_SEED.read_bytes())["groups"]}

    def ratio(label_seq, kernel):
        label = truth["labels"][label_seq]["label"]
        f = next(f for f in truth["files"] if "decoder-tile" in f and label in f)
        g = {g["name"]: g for g in json.loads((out / f).read_bytes())["groups"]}
        return g[kernel]["phaseCycles"] / base[kernel]

    assert ratio(1, "copy_u64") == pytest.approx(1.0, abs=0.15)
    assert ratio(2, "copy_u64") == pytest.approx(1.5, rel=0.15)  # planted at label 2
    assert ratio(5, "copy_u64") == pytest.approx(1.5, rel=0.15)  # and it persists
    assert ratio(5, "exchange") == pytest.approx(1.0, abs=0.15)  # the plant is per series


def test_bad_specs_are_refused_and_nothing_is_written(tmp_path):
    for spec, msg in [
        (synth.HistorySpec(plants=(synth.Plant("decoder-tile", 3, "nope", 1.2),)), "not a kernel"),
        (synth.HistorySpec(plants=(synth.Plant("nope", 3, "copy_u64", 1.2),)), "no such series"),
        (synth.HistorySpec(plants=(synth.Plant("decoder-tile", 99, "copy_u64", 1.2),)),
         "outside"),
        (synth.HistorySpec(plants=(synth.Plant("decoder-tile", 3, "copy_u64", 9.0),)), "factor"),
        (synth.HistorySpec(noise_pct=-1), "noise_pct"),
    ]:
        with pytest.raises(synth.SynthError, match=msg):
            synth.generate(tmp_path / "x", spec)
        assert not (tmp_path / "x").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(synth.SynthError, match="not empty"):
        synth.generate(tmp_path / "full", SMALL)
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cli(tmp_path, capsys, wh):
    out = tmp_path / "cli"
    rc = main(["--warehouse", str(wh.warehouse), "synth", str(out), "--labels", "3",
               "--repeats", "1", "--series", "s1=tile_profile", "--series", "s2=conv_audit",
               "--plant", "s1", "1", "1.3", "copy_u64", "--ingest"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "wrote 6 runs" in text and "planted regressed: s1 kernel copy_u64 x1.3" in text
    assert "6 ingested" in text
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["spec"]["series"] == [{"name": "s1", "source_format": "tile_profile"},
                                       {"name": "s2", "source_format": "conv_audit"}]
    assert main(["synth", str(out)]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "y"), "--series", "bad"]) == 2
    assert main(["synth", str(tmp_path / "y"), "--no-plants", "--plant", "s", "1", "2",
                 "k"]) == 2
    assert main(["synth", str(tmp_path / "y"), "--labels", "5", "--no-plants"]) == 0
    assert "pure noise" in capsys.readouterr().out


# ------------------------------------------------------------------ scenarios (issue 10)
def test_every_scenario_is_a_valid_history_with_its_plants(tmp_path):
    from warehouse import scenarios

    profile = json.loads(PROFILE_SEED.read_bytes())
    audit = json.loads(AUDIT_SEED.read_bytes())
    for name in scenarios.names():
        spec = scenarios.spec(name, 2)
        synth._validate(spec, profile, audit)  # raises on an impossible scenario
        assert [s.name for s in spec.series] == [f"{name}-tile", f"{name}-audit"]
        assert bool(spec.plants) == (scenarios.kind(name) != "noise"), name
    with pytest.raises(KeyError, match="unknown scenario"):
        scenarios.spec("nope")


def test_scenario_noise_kinds_move_whole_runs():
    from warehouse import scenarios

    spec = scenarios.spec("bimodal", 1)
    f = [synth._run_factors(spec, "bimodal-tile", s, r, ["copy_u64"], {})[1]
         for s in range(40) for r in range(3)]
    assert 0.3 < sum(x > 1.06 for x in f) / len(f) < 0.7  # half the runs are +12%
    spike = scenarios.spec("outlier-run", 1)
    assert synth._run_factors(spike, "x", 8, 0, ["a"], {})[1] > 1.4
    assert synth._run_factors(spike, "x", 8, 1, ["a"], {})[1] < 1.1


def test_revert_drift_vanish_and_shuffle(tmp_path):
    from warehouse import scenarios

    pulse = synth.Plant("s", 6, "copy_u64", 1.15, until=10)
    assert [pulse.factor_at(s) for s in (5, 6, 9, 10)] == [1.0, 1.15, 1.15, 1.0]
    drift = synth.Plant("s", 1, "copy_u64", 1.01, mode="drift")
    assert drift.factor_at(3) == pytest.approx(1.01 ** 3)
    spec = dataclasses.replace(scenarios.spec("vanish-appear", 1), labels=11)
    truth = synth.generate(tmp_path / "va", spec)
    revert = synth.generate(tmp_path / "rv", dataclasses.replace(
        scenarios.spec("revert", 1), labels=11, series=scenarios.spec("revert").series[:1],
        plants=scenarios.spec("revert").plants[:1]))
    assert [(e["label_seq"], e["direction"]) for e in revert["expected"]] == [
        (6, "regressed"), (10, "improved")]
    for f in truth["files"]:
        d = json.loads((tmp_path / "va" / f).read_bytes())
        assert (check_audit(d) if "rows" in d else check_profile(d)) == [], f
        if "rows" not in d:
            names = {g["name"] for g in d["groups"]}
            seq = int(Path(f).name[:3])
            assert ("exchange" in names) == (seq < 8) and ("reduce_sum_f16" in names) == (seq >= 5)
    shuffled = synth.generate(tmp_path / "sh", dataclasses.replace(
        scenarios.spec("out-of-order", 1), labels=4, plants=()))
    offsets = set()
    for f in shuffled["files"]:
        meta = json.loads((tmp_path / "sh" / (f + ".meta.json")).read_text())
        offsets.add(meta["captured_at"][-6:])
    assert len(offsets) > 3  # mixed UTC offsets, not all 'Z'
    names = [Path(f).name for f in shuffled["files"] if "-tile/" in f]
    assert sorted(names) != names  # file order is not label order


def test_cli_scenario(tmp_path, capsys):
    assert main(["synth", "--list-scenarios"]) == 0
    listed = capsys.readouterr().out
    assert "early-label-2" in listed and "bimodal" in listed
    out = tmp_path / "sc"
    assert main(["synth", str(out), "--scenario", "single-kernel", "--labels", "6"]) == 0
    truth = json.loads((out / "ground_truth.json").read_text())
    assert {p["kernel"] for p in truth["plants"]} == {"copy_u64", "cudnn::nhwcToNchwKernel"}
    assert len(truth["labels"]) == 6
    assert main(["synth", str(tmp_path / "z"), "--scenario", "nope"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    assert main(["synth", str(tmp_path / "z"), "--scenario", "drift", "--no-plants"]) == 2


# ------------------------------------------------------------------ scenarios (issue 22)
def test_quantised_timings_land_on_a_grid():
    from warehouse import scenarios

    spec = scenarios.spec("quantised", 1)
    f, _ = synth._run_factors(spec, "quantised-tile", 3, 0, [f"k{i}" for i in range(50)], {})
    steps = [math.log(v) / math.log(1.02) for v in f.values()]
    assert all(abs(s - round(s)) < 1e-9 for s in steps)
    assert len({round(s) for s in steps}) > 2  # noise remains, on the grid


def test_nudge_and_whole_run_plants(tmp_path):
    nudge = synth.Plant("s", 6, "copy_u64", 0.95, mode="nudge")
    assert [nudge.factor_at(s) for s in (5, 6, 7)] == [1.0, 0.95, 1.0]
    spec = synth.HistorySpec(
        seed=4, labels=4, repeats=2, single_repeat_every=0, outlier_rate=0.0,
        series=(synth.SeriesSpec("t", "tile_profile"), synth.SeriesSpec("a", "conv_audit")),
        plants=(synth.Plant("t", 1, "copy_u64", 0.95, mode="nudge"),
                synth.Plant("t", 2, "*", 1.08, match="all"),
                synth.Plant("a", 2, "*", 1.08, match="all")))
    truth = synth.generate(tmp_path / "h", spec)
    exp = truth["expected"]
    assert {e["label_seq"] for e in exp} == {2}  # the nudge is noise, not a change
    tile = [e for e in exp if e["series"] == "t"]
    assert len(tile) == 19 and all(e["expected_delta_pct"] == pytest.approx(8) for e in tile)
    audit = [e for e in exp if e["series"] == "a"]
    assert audit and all(e["expected_delta_pct"] == pytest.approx(8) for e in audit)
    for f in truth["files"]:
        d = json.loads((tmp_path / "h" / f).read_bytes())
        assert (check_audit(d) if "rows" in d else check_profile(d)) == [], f
    with pytest.raises(synth.SynthError, match="match 'all'"):
        synth._validate(dataclasses.replace(spec, plants=(
            synth.Plant("t", 2, "copy_u64", 1.08, match="all"),)), *synth._load_seeds())
