"""The benchmark generators: deterministic, seed-like layout, and every invariant of the seeds.

Invariants are checked here independently of the warehouse's own suites, straight from the JSON
(shared/seeds/README.md: P1-P10 for tile profiles, A1-A7 for audits).
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from bench import gen
from warehouse.ingesting.formats import audit, profile

TOL = 1e-9


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(a), abs(b))


def check_profile(d: dict) -> None:
    c, t = d["clockHz"], d["tileCount"]
    assert close(d["profileSpanMs"], d["profileSpanCycles"] / c * 1000)  # P1
    assert sum(g["sampleCount"] for g in d["groups"]) == d["matchedSampleCount"]  # P2
    assert d["matchedSampleCount"] <= d["sampleCount"]
    groups = {}
    for g in d["groups"]:
        assert g["name"] not in groups
        groups[g["name"]] = g
        assert close(g["phaseMs"], g["phaseCycles"] / c * 1000)  # P3
        assert close(g["meanCycles"], g["workCycles"] / g["sampleCount"])  # P4
        assert close(g["averageActiveTiles"], g["workCycles"] / g["phaseCycles"])  # P5
        if g["estimatedWorkCycles"] == 0:  # P6, P7
            assert g["usefulUtilization"] is None and g["deviceUsefulUtilization"] is None
        else:
            assert close(g["usefulUtilization"], g["usefulCycles"] / g["estimatedWorkCycles"])
            assert close(g["deviceUsefulUtilization"],
                         g["usefulCycles"] / (g["phaseCycles"] * t))
        assert g["p50Cycles"] <= g["p95Cycles"] <= g["maximumCycles"]  # P8
        assert g["tileCount"] <= t
        assert g["phaseCycles"] <= g["lastOffset"] - g["firstOffset"]
        for k in ("usefulUtilization", "workLaneOccupancy", "deviceUsefulUtilization"):  # P9
            assert g[k] is None or 0 <= g[k] <= 1
    for s in d["samples"]:  # P10
        g = groups[s["kernel"]]
        assert 0 <= s["physicalTile"] < t
        assert g["firstOffset"] <= s["offset"]
        assert s["offset"] + s["duration"] <= g["lastOffset"]
        assert all(isinstance(m["value"], str) for m in s["metadata"])


def check_audit(d: dict) -> None:
    hexre = re.compile(r"^[0-9a-f]{64}$")
    assert hexre.match(d["audit_sha256"])  # A6
    seen = set()
    for r in d["rows"]:
        assert hexre.match(r["input_sha256"]) and r["input_sha256"] not in seen  # A6
        seen.add(r["input_sha256"])
        comps = r["components"]
        assert abs(sum(c["fraction_of_profiled_sum"] for c in comps) - 1) <= TOL  # A1
        assert close(sum(c["us"] for c in comps), r["total_profiled_us"])  # A2
        for c in comps:
            assert close(c["fraction_of_profiled_sum"], c["us"] / r["total_profiled_us"])  # A3
        cats = [c["category"] for c in comps]
        assert len(cats) == len(set(cats))  # A4
        for c in comps:
            k = sum(k["duration_us"] for k in r["kernels"] if k["category"] == c["category"])
            assert close(k, c["us"])
        assert [k["id"] for k in r["kernels"]] == [str(i) for i in range(len(r["kernels"]))]  # A5
        for shape in (r["input_shape"], r["output_shape"]):  # A7
            assert len(shape) == 5 and all(isinstance(x, int) and x > 0 for x in shape)
        assert r["input_shape"][0] == r["output_shape"][0]


@pytest.mark.parametrize("n,seed", [(1, 1), (7, 2), (2500, 1), (12000, 9)])
def test_profile_invariants_and_layout(tmp_path, n, seed):
    p = tmp_path / "p.json"
    info = gen.write_profile(p, n, seed)
    raw = p.read_bytes()
    d = json.loads(raw)
    assert json.dumps(d, indent=2).encode() == raw  # pretty-printed like the seed
    assert len(d["samples"]) == d["sampleCount"] == n == info["samples"]
    assert sum(len(s["metadata"]) for s in d["samples"]) == info["metadata_pairs"]
    assert info["bytes"] == len(raw)
    check_profile(d)
    # and the loader's strict schema accepts it
    assert profile.parse(raw, str(p), "r" * 64).summary["samples"] == n


def test_profile_is_deterministic(tmp_path):
    a, b, c = (tmp_path / f"{x}.json" for x in "abc")
    gen.write_profile(a, 3000, seed=5)
    gen.write_profile(b, 3000, seed=5)
    gen.write_profile(c, 3000, seed=6)
    digest = [hashlib.sha256(x.read_bytes()).hexdigest() for x in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


def test_full_size_shape_matches_the_issue():
    """Per-sample size and metadata count as in the real 288 MB / 2.55 M-pair profile, checked
    on the generator's own layout without writing the full 291 MB."""
    specs = gen._group_specs(gen.FULL_SAMPLES, 1)
    assert sum(g.n for g in specs) == gen.FULL_SAMPLES
    per_sample = {gen._sample_template(g).count('"name": ') for g in specs}
    assert per_sample == {11}  # 232,260 x 11 = 2,554,860 pairs


def test_audits_keep_a1_to_a7_and_differ(tmp_path):
    docs = [gen.audit_doc(seed, factor) for seed, factor in ((1, 1.0), (2, 1.1), (1, 1.0))]
    for d in docs:
        check_audit(d)
        audit.parse(json.dumps(d).encode(), "x", "r" * 64)  # strict schema
    assert docs[0] == docs[2] and docs[0] != docs[1]


def test_history_mixes_audits_and_small_profiles(tmp_path):
    files = gen.write_history(tmp_path, 12, profile_samples=20)
    assert len(files) == 12
    kinds = [("clockHz" in json.loads(f.read_bytes())) for f in files]
    assert kinds.count(True) == 3 and kinds.count(False) == 9
    for f in files:
        side = json.loads(f.with_name(f.name + ".meta.json").read_text())
        assert set(side) == {"series", "label", "captured_at"}
    assert len({f.read_bytes() for f in files}) == 12  # every run is a distinct file
