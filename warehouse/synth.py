"""A reproducible example history of runs, derived from the two seed documents.

``generate(out, spec)`` writes, under ``out/``::

    runs/<series>/<seq>_<label>_r<k>.json            one run, in the seed's own JSON format
    runs/<series>/<seq>_<label>_r<k>.json.meta.json  its sidecar: series, label, captured_at
    ground_truth.json                                what was planted, and where

``pwh ingest out/runs`` loads the history through the real loader (the sidecars set the run
identity). Everything is a pure function of the spec (seed included): the same spec writes the
same bytes. The folder is written to a temporary sibling and renamed into place, so a failure
never leaves half a history.

Noise model (multiplicative, log-normal): every (run, kernel) value is the seed's value times
``exp(N(0, noise_pct))`` per kernel, ``exp(N(0, run_noise_pct))`` shared by the whole run,
``exp(N(0, label_noise_pct))`` shared by the runs of a label (build-to-build jitter), and with
probability ``outlier_rate`` an outlier factor in [1.1, 1.4] (interference, throttling). A
*plant* multiplies one kernel by ``factor`` from its label on (a step change that persists).

Derived fields are rescaled consistently, so every synthetic run keeps the seed's invariants:
tile profiles P1–P10 (all cycle counts of a group scale together; ms, means, ratios and
averages are recomputed from the scaled integers; offsets stretch so samples stay inside their
group), conv audits A1–A7 (components, totals and fractions are recomputed from the scaled
kernel durations; ids, shapes and input hashes are kept; ``audit_sha256`` is a fresh opaque
value per run).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from warehouse.modelling import kernel_names
from warehouse.shipped import data_path

SEEDS = data_path("examples/runs")  # the checkout's, or an installed wheel's copy
PROFILE_SEED = SEEDS / "000_b8c9894ad1339892.json"
AUDIT_SEED = SEEDS / "004_fe0a1716faf88a59.json"
FORMATS = ("tile_profile", "conv_audit")
GROUND_TRUTH = "ground_truth.json"
MIN_FACTOR, MAX_FACTOR = 0.5, 3.0


@dataclass(frozen=True)
class Plant:
    """A step change: ``kernel`` of ``series`` is ``factor`` times slower from ``label_seq`` on.

    ``match`` says how ``kernel`` names kernels: ``kernel`` (tile-profile kernel name, or the
    short name of an audit kernel), ``family`` (every audit kernel of that family) or ``all``
    (every kernel of the series: a change of the whole run, e.g. a clock or driver change;
    ``kernel`` is then ``*``).

    ``mode``: ``step`` (from ``label_seq`` on, until ``until``), ``drift`` (compounds at every
    label) or ``nudge`` (at ``label_seq`` only, and not a change: label noise placed where a
    scenario needs it, e.g. just before a real step; the ground truth lists it among the plants
    but expects nothing of it).
    """

    series: str
    label_seq: int
    kernel: str
    factor: float
    match: str = "kernel"
    until: int | None = None  # back to normal from this label on (a regress-then-revert pulse)
    mode: str = "step"  # step | drift (factor compounds at every label from label_seq on)

    @property
    def direction(self) -> str:
        return "regressed" if self.factor > 1 else "improved"

    def factor_at(self, seq: int) -> float:
        if seq < self.label_seq or (self.until is not None and seq >= self.until):
            return 1.0
        if self.mode == "drift":
            return self.factor ** (seq - self.label_seq + 1)
        if self.mode == "nudge" and seq != self.label_seq:
            return 1.0
        return self.factor


@dataclass(frozen=True)
class SeriesSpec:
    name: str
    source_format: str  # tile_profile | conv_audit


@dataclass(frozen=True)
class HistorySpec:
    seed: int = 1
    labels: int = 24
    repeats: int = 3
    single_repeat_every: int = 7  # every k-th label has one run only (0: never)
    noise_pct: float = 2.0
    run_noise_pct: float = 1.0
    label_noise_pct: float = 0.5
    outlier_rate: float = 0.01
    start: str = "2026-01-05T09:00:00Z"
    label_interval_hours: float = 24.0
    series: tuple[SeriesSpec, ...] = field(default_factory=lambda: DEFAULT_SERIES)
    plants: tuple[Plant, ...] = field(default_factory=lambda: DEFAULT_PLANTS)
    # whole-run noise (every kernel of the run): with probability run_outlier_rate a run is
    # run_outlier_factor times slower (heavy tails: 0.05 x1.4; bimodal: 0.5 x1.12)
    run_outlier_rate: float = 0.0
    run_outlier_factor: float = 1.4
    spike_runs: tuple[tuple[int, int, float], ...] = ()  # (label_seq, repeat, factor) whole run
    absent: tuple[tuple[str, str, int, int], ...] = ()  # (series, tile kernel, from, to): missing
    shuffle_files: bool = False  # file names in random order; sidecars in mixed UTC offsets
    quantise_pct: float = 0.0  # every factor rounded to a power of (1 + q%): quantised timings

    def repeats_of(self, label_seq: int) -> int:
        k = self.single_repeat_every
        if k and label_seq % k == k - 1:
            return 1
        return self.repeats


DEFAULT_SERIES = (
    SeriesSpec("decoder-tile", "tile_profile"),
    SeriesSpec("encoder-tile", "tile_profile"),
    SeriesSpec("vae-conv-audit", "conv_audit"),
)
DEFAULT_PLANTS = (
    Plant("decoder-tile", 8, "attention_softmax_d72_p768_tail_f8_sm4", 1.20),
    Plant("decoder-tile", 16, "gemm_f16_init_large_rows_interleaved_k80_c112_r121_r122", 0.82),
    Plant("vae-conv-audit", 12, "cudnn::nchwToNhwcKernel", 1.30, match="family"),
    Plant("encoder-tile", 23, "fill_zero_u64", 1.25),  # the latest build of the default history
)


class SynthError(ValueError):
    """The history spec is impossible (unknown kernel, factor out of range …)."""


def _rng(seed: int, *parts) -> np.random.Generator:
    h = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def label_name(seed: int, seq: int) -> str:
    """A commit-like label: 7 hex digits, deterministic from (seed, position)."""
    return hashlib.sha256(f"pwh-synth/{seed}/label/{seq}".encode()).hexdigest()[:7]


def _load_seeds() -> tuple[dict, dict]:
    return json.loads(PROFILE_SEED.read_bytes()), json.loads(AUDIT_SEED.read_bytes())


def _validate(spec: HistorySpec, profile: dict, audit: dict) -> None:
    problems = []
    if spec.labels < 1 or spec.repeats < 1:
        problems.append("labels and repeats must be >= 1")
    if spec.single_repeat_every < 0:
        problems.append("single_repeat_every must be >= 0")
    for v, n in ((spec.noise_pct, "noise_pct"), (spec.run_noise_pct, "run_noise_pct"),
                 (spec.label_noise_pct, "label_noise_pct")):
        if not 0 <= v <= 20:
            problems.append(f"{n}={v} must be in [0, 20] percent")
    if not 0 <= spec.quantise_pct <= 20:
        problems.append(f"quantise_pct={spec.quantise_pct} must be in [0, 20] percent")
    if not 0 <= spec.outlier_rate <= 0.5:
        problems.append(f"outlier_rate={spec.outlier_rate} must be in [0, 0.5]")
    if not 0 <= spec.run_outlier_rate <= 1 or not MIN_FACTOR <= spec.run_outlier_factor <= 3:
        problems.append(f"run_outlier_rate={spec.run_outlier_rate} must be in [0, 1] and "
                        f"run_outlier_factor={spec.run_outlier_factor} in [0.5, 3]")
    for seq, rep, f in spec.spike_runs:
        if not (0 <= seq < spec.labels and 0 <= rep < spec.repeats_of(seq)
                and MIN_FACTOR <= f <= MAX_FACTOR):
            problems.append(f"spike run ({seq}, {rep}, {f}): no such run or factor out of range")
    profile_names = {g["name"] for g in profile["groups"]}
    fmt0 = {s.name: s.source_format for s in spec.series}
    for ser, kernel, lo, hi in spec.absent:
        if fmt0.get(ser) != "tile_profile" or kernel not in profile_names or not 0 <= lo < hi:
            problems.append(f"absent ({ser}, {kernel}, {lo}, {hi}): needs a tile-profile series, "
                            "one of its kernels and 0 <= from < to")
    names = [s.name for s in spec.series]
    if len(set(names)) != len(names):
        problems.append(f"series names repeat: {names}")
    for s in spec.series:
        if s.source_format not in FORMATS:
            problems.append(f"series {s.name!r}: format {s.source_format!r} not in {FORMATS}")
        if not s.name or "/" in s.name or s.name.startswith("."):
            problems.append(f"series {s.name!r}: not a usable folder name")
    fmt = {s.name: s.source_format for s in spec.series}
    profile_kernels = {g["name"] for g in profile["groups"]}
    audit_names = {k["name"] for r in audit["rows"] for k in r["kernels"]}
    audit_short = {kernel_names.parse(n).short for n in audit_names}
    audit_family = {kernel_names.parse(n).family for n in audit_names}
    for p in spec.plants:
        where = f"plant {p.kernel!r} in series {p.series!r}"
        if p.series not in fmt:
            problems.append(f"{where}: no such series")
            continue
        if not 0 <= p.label_seq < spec.labels:
            problems.append(f"{where}: label_seq {p.label_seq} outside 0..{spec.labels - 1}")
        if not MIN_FACTOR <= p.factor <= MAX_FACTOR or p.factor == 1:
            problems.append(f"{where}: factor {p.factor} must be in [{MIN_FACTOR}, "
                            f"{MAX_FACTOR}] and not 1")
        if p.mode not in ("step", "drift", "nudge") or (p.until is not None
                                                         and p.until <= p.label_seq):
            problems.append(f"{where}: mode must be step, drift or nudge, and until after "
                            "label_seq")
        if p.match == "all":
            if p.kernel != "*":
                problems.append(f"{where}: match 'all' takes kernel '*'")
        elif fmt[p.series] == "tile_profile":
            if p.match != "kernel" or p.kernel not in profile_kernels:
                problems.append(f"{where}: not a kernel of the tile-profile seed")
        elif p.match not in ("kernel", "family") or p.kernel not in (
                audit_short if p.match == "kernel" else audit_family):
            problems.append(f"{where}: not a kernel {p.match} of the audit seed")
    if problems:
        raise SynthError("history spec: " + "; ".join(problems))


# --------------------------------------------------------------------------------------------
# factors


def _run_factors(spec: HistorySpec, series: str, seq: int, rep: int,
                 keys: list[str], planted: dict[str, float]) -> tuple[dict[str, float], float]:
    """Multiplicative factor of every kernel key in one run, and the run's common factor."""
    lrng = _rng(spec.seed, series, seq, "label")
    label_f = math.exp(lrng.normal(0, spec.label_noise_pct / 100))
    rng = _rng(spec.seed, series, seq, rep)
    run_f = math.exp(rng.normal(0, spec.run_noise_pct / 100))
    if spec.run_outlier_rate and _rng(spec.seed, series, seq, rep, "run-outlier").random() < \
            spec.run_outlier_rate:
        run_f *= spec.run_outlier_factor
    for s_seq, s_rep, s_f in spec.spike_runs:
        if (s_seq, s_rep) == (seq, rep):
            run_f *= s_f
    out = {}
    for k in keys:
        f = label_f * run_f * math.exp(rng.normal(0, spec.noise_pct / 100))
        if rng.random() < spec.outlier_rate:
            f *= rng.uniform(1.1, 1.4)
        f *= planted.get(k, 1.0)
        if spec.quantise_pct:
            q = math.log1p(spec.quantise_pct / 100)
            f = math.exp(round(math.log(f) / q) * q)
        out[k] = f
    return out, run_f


def _planted(spec: HistorySpec, series: str, seq: int) -> list[Plant]:
    return [p for p in spec.plants if p.series == series and p.factor_at(seq) != 1.0]


def _planted_factors(spec: HistorySpec, series: str, seq: int, rep: int, keys: list[str],
                     family_of: dict[str, str]) -> dict[str, float]:
    """Kernel key -> the product of the plants' factors in run ``rep`` of label ``seq``. A nudge
    moves the label's runs by factor, factor² and 1 in turn (median: factor), as label noise
    does: the label's median moves, its runs spread."""
    planted: dict[str, float] = {}
    for p in _planted(spec, series, seq):
        f = p.factor_at(seq)
        if p.mode == "nudge":
            f = f ** ((rep + 1) % 3)
        if p.match == "all":
            hit = keys
        elif p.match == "family" and family_of:
            hit = [short for short, fam in family_of.items() if fam == p.kernel]
        else:
            hit = [p.kernel]
        for k in hit:
            planted[k] = planted.get(k, 1.0) * f
    return planted


def _keys(profile: dict, audit: dict) -> tuple[list[str], list[str], dict[str, str]]:
    """The kernel keys of a tile-profile run and of a conv-audit run, in the order their noise
    is drawn, and the family of each conv-audit key (what a ``family`` plant moves)."""
    audit_keys = sorted({kernel_names.parse(k["name"]).short
                         for r in audit["rows"] for k in r["kernels"]})
    family_of = {kernel_names.parse(k["name"]).short: kernel_names.parse(k["name"]).family
                 for r in audit["rows"] for k in r["kernels"]}
    return [g["name"] for g in profile["groups"]], audit_keys, family_of


def run_keys(source_format: str) -> tuple[list[str], dict[str, str]]:
    """(keys, family_of) as :func:`generate` passes them to ``_planted_factors`` and
    ``_run_factors`` for a run of ``source_format``."""
    profile_keys, audit_keys, family_of = _keys(*_load_seeds())
    return (profile_keys if source_format == "tile_profile" else audit_keys), family_of


def drop_kernel(doc: dict, kernel: str) -> dict:
    """The tile profile without group ``kernel`` (and its samples): the kernel did not run."""
    doc = copy.deepcopy(doc)
    gone = [g for g in doc["groups"] if g["name"] == kernel]
    doc["groups"] = [g for g in doc["groups"] if g["name"] != kernel]
    doc["samples"] = [x for x in doc["samples"] if x["kernel"] != kernel]
    doc["matchedSampleCount"] -= sum(g["sampleCount"] for g in gone)
    return doc


# --------------------------------------------------------------------------------------------
# tile profile


def synth_profile(seed_doc: dict, factors: dict[str, float], run_f: float) -> dict:
    """A tile profile whose group ``g`` took ``factors[g.name]`` times the seed's cycles."""
    doc = copy.deepcopy(seed_doc)
    C, T = doc["clockHz"], doc["tileCount"]
    windows = {}
    for g in doc["groups"]:
        f = factors[g["name"]]
        first0, last0 = g["firstOffset"], g["lastOffset"]
        phase = max(1, round(g["phaseCycles"] * f))
        work = round(g["workCycles"] * f)
        est = round(g["estimatedWorkCycles"] * f)
        useful = float(g["usefulCycles"])
        if est and useful > est:
            useful = float(est)
        first = round(first0 * run_f)
        last = first + max(round((last0 - first0) * f), phase)
        windows[g["name"]] = (first0, first, last, f)
        p50, p95, mx = (round(g[k] * f) for k in ("p50Cycles", "p95Cycles", "maximumCycles"))
        g.update({
            "phaseCycles": phase,
            "phaseMs": phase / C * 1000,
            "workCycles": work,
            "averageActiveTiles": work / phase,
            "usefulCycles": useful,
            "estimatedWorkCycles": est,
            "usefulUtilization": useful / est if est else None,
            "deviceUsefulUtilization": useful / (phase * T) if est else None,
            "meanCycles": work / g["sampleCount"],
            "p50Cycles": p50, "p95Cycles": p95, "maximumCycles": mx,
            "firstOffset": first, "lastOffset": last,
        })
        if not est:
            g["workLaneOccupancy"] = None
    for s in doc["samples"]:
        first0, first, last, f = windows[s["kernel"]]
        off = first + math.floor((s["offset"] - first0) * f)
        dur = math.floor(s["duration"] * f)
        s["offset"], s["duration"] = off, min(dur, last - off)
        meta = {m["name"]: m for m in s["metadata"]}
        if "physicalWorkCycles" in meta and meta["physicalWorkCycles"]["value"].isdigit():
            pw = math.floor(int(meta["physicalWorkCycles"]["value"]) * f)
            meta["physicalWorkCycles"]["value"] = str(pw)
            u = meta.get("usefulCycles")
            if u is not None and u["value"].isdigit() and int(u["value"]) > pw:
                u["value"] = str(pw)
    span = max(round(doc["profileSpanCycles"] * run_f),
               max(g["lastOffset"] for g in doc["groups"]))
    doc["profileSpanCycles"] = span
    doc["profileSpanMs"] = span / C * 1000
    return doc


# --------------------------------------------------------------------------------------------
# conv audit


def synth_audit(seed_doc: dict, factors: dict[str, float], rng: np.random.Generator,
                audit_sha256: str, launch_noise_pct: float = 0.5) -> dict:
    """A conv audit whose kernels took ``factors[short name]`` times the seed's durations."""
    doc = copy.deepcopy(seed_doc)
    doc["audit_sha256"] = audit_sha256
    for row in doc["rows"]:
        by_cat: dict[str, float] = {}
        for k in row["kernels"]:
            f = factors[kernel_names.parse(k["name"]).short]
            f *= math.exp(rng.normal(0, launch_noise_pct / 100))
            k["duration_us"] = max(0.001, round(k["duration_us"] * f, 3))
            by_cat[k["category"]] = by_cat.get(k["category"], 0.0) + k["duration_us"]
        for c in row["components"]:
            c["us"] = by_cat.get(c["category"], 0.0)
        total = 0.0
        for c in row["components"]:
            total += c["us"]
        row["total_profiled_us"] = total
        for c in row["components"]:
            c["fraction_of_profiled_sum"] = c["us"] / total if total else 0.0
    return doc


# --------------------------------------------------------------------------------------------
# the history


def _expected(spec: HistorySpec, audit: dict, labels: list[str],
              profile: dict) -> list[dict]:
    """Trend rows each plant should move, with the expected relative change."""
    out = []
    fmt = {s.name: s.source_format for s in spec.series}
    events = []
    for p in spec.plants:
        if p.mode in ("drift", "nudge"):
            continue  # no step: reported in the ground truth's plants only
        events.append((p, p.label_seq, p.factor))
        if p.until is not None and p.until < spec.labels:
            events.append((p, p.until, 1 / p.factor))
    for p, seq, factor in events:
        base = {"series": p.series, "label": labels[seq], "label_seq": seq,
                "direction": "regressed" if factor > 1 else "improved", "factor": factor}
        if fmt[p.series] == "tile_profile":
            tile = [g["name"] for g in profile["groups"]] if p.match == "all" else [p.kernel]
            out += [{**base, "kernel_kind": "kernel", "kernel": k,
                     "expected_delta_pct": (factor - 1) * 100} for k in tile]
            continue
        fam_total: dict[str, float] = {}
        fam_hit: dict[str, float] = {}
        sig_total: dict[str, float] = {}
        sig_hit: dict[str, float] = {}
        for row in audit["rows"]:
            sig = "x".join(map(str, row["input_shape"])) + "->" + \
                "x".join(map(str, row["output_shape"]))
            for k in row["kernels"]:
                kn = kernel_names.parse(k["name"])
                hit = p.match == "all" or (
                    kn.family if p.match == "family" else kn.short) == p.kernel
                key = f"{sig} / {k['category']}"
                sig_total[key] = sig_total.get(key, 0.0) + k["duration_us"]
                fam_total[kn.family] = fam_total.get(kn.family, 0.0) + k["duration_us"]
                if hit:
                    sig_hit[key] = sig_hit.get(key, 0.0) + k["duration_us"]
                    fam_hit[kn.family] = fam_hit.get(kn.family, 0.0) + k["duration_us"]
        for kind, total, hit in (("family", fam_total, fam_hit),
                                 ("signature_category", sig_total, sig_hit)):
            for key, h in sorted(hit.items()):
                out.append({**base, "kernel_kind": kind, "kernel": key,
                            "expected_delta_pct": h / total[key] * (factor - 1) * 100})
    return out


def publish(tmp: Path, out: Path, truth: dict, name: str | None = None) -> None:
    """Write the ground truth into the finished folder ``tmp`` and put it in place of ``out``
    (renames: a reader sees the old history or the new one, never half of one)."""
    (tmp / (name or GROUND_TRUTH)).write_text(json.dumps(truth, indent=2) + "\n")
    if out.exists():
        old = out.with_name(f".{out.name}.old.{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def generate(out: str | os.PathLike[str], spec: HistorySpec | None = None, *,
             force: bool = False) -> dict:
    """Write the history of ``spec`` under ``out`` (see the module doc). Returns the ground truth.

    ``out`` must not exist or be empty, unless ``force`` (then it is replaced).
    """
    spec = spec or HistorySpec()
    profile, audit = _load_seeds()
    _validate(spec, profile, audit)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise SynthError(f"{out}: exists and is not empty (use --force to replace it)")
    labels = [label_name(spec.seed, i) for i in range(spec.labels)]
    start = dt.datetime.fromisoformat(spec.start.replace("Z", "+00:00"))
    if start.tzinfo is not None:
        start = start.astimezone(dt.UTC).replace(tzinfo=None)
    profile_keys, audit_keys, family_of = _keys(profile, audit)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    files, shas = [], set()
    try:
        for s in spec.series:
            folder = tmp / "runs" / s.name
            folder.mkdir(parents=True)
            for seq, label in enumerate(labels):
                keys = profile_keys if s.source_format == "tile_profile" else audit_keys
                label_time = start + dt.timedelta(hours=spec.label_interval_hours * seq)
                for rep in range(spec.repeats_of(seq)):
                    planted = _planted_factors(spec, s.name, seq, rep, keys, family_of)
                    factors, run_f = _run_factors(spec, s.name, seq, rep, keys, planted)
                    if s.source_format == "tile_profile":
                        doc = synth_profile(profile, factors, run_f)
                        for ser, kernel, lo, hi in spec.absent:
                            if ser == s.name and lo <= seq < hi:
                                doc = drop_kernel(doc, kernel)
                    else:
                        sha = hashlib.sha256(
                            f"pwh-synth/{spec.seed}/{s.name}/{label}/{rep}".encode()).hexdigest()
                        doc = synth_audit(audit, factors, _rng(spec.seed, s.name, seq, rep,
                                                               "launch"), sha)
                    data = json.dumps(doc, indent=2).encode()
                    digest = hashlib.sha256(data).hexdigest()
                    if digest in shas:
                        raise SynthError(f"{s.name}/{label}/r{rep}: identical bytes to another "
                                         "run (raise the noise)")
                    shas.add(digest)
                    name = f"{seq:03d}_{label}_r{rep}.json"
                    captured = label_time + dt.timedelta(minutes=10 * rep)
                    stamp = captured.isoformat() + "Z"
                    if spec.shuffle_files:  # ingestion order says nothing; offsets vary
                        srng = _rng(spec.seed, s.name, seq, rep, "shuffle")
                        name = f"{int(srng.integers(0, 10**6)):06d}_{label}_r{rep}.json"
                        off = int(srng.integers(-11, 13))
                        tz = dt.timezone(dt.timedelta(hours=off))
                        stamp = captured.replace(tzinfo=dt.UTC).astimezone(tz).isoformat()
                    (folder / name).write_bytes(data)
                    meta = {"series": s.name, "label": label, "captured_at": stamp}
                    (folder / (name + ".meta.json")).write_text(json.dumps(meta, indent=2) + "\n")
                    files.append(f"runs/{s.name}/{name}")
        truth = {
            "generator": "pwh synth",
            "spec": _spec_dict(spec),
            "labels": [{"label_seq": i, "label": lab,
                        "captured_at": (start + dt.timedelta(
                            hours=spec.label_interval_hours * i)).isoformat() + "Z",
                        "repeats": spec.repeats_of(i)} for i, lab in enumerate(labels)],
            "plants": [{**asdict(p), "label": labels[p.label_seq], "direction": p.direction}
                       for p in spec.plants],
            "expected": _expected(spec, audit, labels, profile),
            "files": files,
        }
        publish(tmp, out, truth)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return truth


def _spec_dict(spec: HistorySpec) -> dict:
    d = asdict(spec)
    d["series"] = [asdict(s) for s in spec.series]
    d["plants"] = [asdict(p) for p in spec.plants]
    return d


def noise_only(spec: HistorySpec) -> HistorySpec:
    """The same history without any plant."""
    return HistorySpec(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__},
                          "plants": ()})
