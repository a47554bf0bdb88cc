"""Deterministic generators of benchmark inputs: tile profiles of any size, audit histories.

Every output is a pure function of its arguments (seed included): the same call writes the same
bytes, so benchmark inputs never need to be stored.

* :func:`write_profile` — a tile profile with ``n_samples`` samples, pretty-printed like the seed
  (``json.dumps(indent=2)`` layout), streamed to disk group by group so memory stays bounded at
  any size (the 10x profile is ~2.9 GB). Every invariant P1–P10 of the seed README holds:
  groups' aggregates are computed from the very samples written (two passes over a per-group
  random stream).
* :func:`write_audit` — a conv audit derived from the seed audit with multiplicative noise
  (one factor per run and per kernel), keeping A1–A7.
* :func:`write_history` — a folder of runs with ``.meta.json`` sidecars (series, label,
  captured_at): audits and small profiles in several series, labels and repeats.

Command line: ``python -m bench.gen profile OUT --samples 232260 --seed 1`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUDIT_SEED = ROOT / "examples" / "runs" / "004_fe0a1716faf88a59.json"

FULL_SAMPLES = 232_260  # samples of the seed's real run
CLOCK_HZ = 1_500_000_000
TILES = 1472
TILE_COUNTS = (16, 32, 64, 192, 288, 352, 384, 704, 1152, 1472, 1472, 1472)

# (family, kind, operation stem, has work estimate, useful fraction range or None)
FAMILIES = (
    ("exchange", "exchange", "exchange", False, None),
    ("copy_u64", "compute", "copy", False, None),
    ("copy_strided_u64", "compute", "copy", False, None),
    ("fill_zero_u64", "compute", "fill", True, (0.0, 0.0)),
    ("cast_f16_f8", "compute", "cast", True, (0.05, 0.1)),
    ("reduce_sum_f16", "compute", "reduce", True, (0.3, 0.5)),
    ("attention_softmax_d{a}_p{b}_tail_f8_sm4", "compute", "softmax", True, (0.4, 0.5)),
    ("attention_merge_v{a}_p80_k{b}_out16_p8_f16", "compute", "merge", False, None),
    ("gemm_f16_init_{lr}_rows_interleaved_k{a}_c{b}_r{c}_r{d}", "compute", "gemm", True, (0.6, 0.7)),
    ("gemm_f8_init_{lr}_rows_interleaved_k{a}_c{b}_r{c}_r{d}", "compute", "gemm", True, (0.55, 0.65)),
    ("rearrange_row_major_to_amp_f16_o2_r{c}_p64_c{a}_p{a}_b64x16", "compute", "rearrange",
     True, (0.03, 0.3)),
)


def _json_str(s: str) -> str:
    return json.dumps(s)


def _fmt_float(x: float) -> str:
    """Python's float repr, which ``json.dumps`` writes too (round-trips exactly)."""
    return json.dumps(x)


@dataclass
class GroupSpec:
    idx: int
    name: str
    kind: str
    operation: str
    has_work: bool
    useful: tuple[float, float] | None
    tiles: int  # distinct tiles that run the kernel
    n: int  # samples
    base: int  # typical duration, cycles
    uniform: bool  # every invocation takes the same time
    first: int  # firstOffset
    phase0: int
    epoch: int
    seed: int
    spec: str  # kernelSpec text
    basis: str  # workEstimateBasis text
    lane: float | None  # workLaneOccupancy


def _group_specs(n_samples: int, seed: int) -> list[GroupSpec]:
    rng = random.Random(f"groups/{seed}")
    n_groups = min(n_samples, max(3, min(150, n_samples // 1500)))  # every group >= 1 sample
    weights = [rng.lognormvariate(0, 1.0) for _ in range(n_groups)]
    total_w = sum(weights)
    counts = [max(1, int(n_samples * w / total_w)) for w in weights]
    counts[-1] += n_samples - sum(counts)
    while min(counts) < 1:  # tiny inputs: take from the largest group
        big = counts.index(max(counts))
        counts[big] -= 1
        counts[counts.index(min(counts))] += 1
    names: set[str] = set()
    specs = []
    cursor = 200_000
    for i, n in enumerate(counts):
        fam, kind, op, has_work, useful = FAMILIES[i % len(FAMILIES)] if i < len(FAMILIES) else \
            FAMILIES[rng.randrange(len(FAMILIES))]
        for _ in range(1000):
            name = fam.format(a=rng.choice((16, 32, 72, 80, 96, 112, 128)),
                              b=rng.choice((80, 96, 112, 729, 768)),
                              c=rng.choice((0, 64, 104, 121)), d=rng.choice((105, 122)),
                              lr=rng.choice(("large", "small")))
            if name not in names:
                break
            name = f"{name}_v{i}"
            if name not in names:
                break
        names.add(name)
        tiles = min(n, rng.choice(TILE_COUNTS))
        base = int(rng.lognormvariate(8.5, 1.3)) + 20
        first = cursor + rng.randrange(0, 5_000)
        cursor = first + rng.randrange(2_000, 20_000)
        specs.append(GroupSpec(
            idx=i, name=name, kind=kind, operation=f"operation.{i}", has_work=has_work,
            useful=useful, tiles=tiles, n=n, base=base, uniform=rng.random() < 0.4,
            first=first, phase0=rng.randrange(0, 200), epoch=1 + i // 40,
            seed=rng.getrandbits(64),
            spec=f"{op.capitalize()} {{ columns: {rng.randrange(8, 1024)}, rows: "
                 f"{rng.randrange(1, 256)}, padded_columns: {rng.randrange(8, 1024)} }}",
            basis=f"{op}: arithmetic/conversion issue slots, excluding loads and row addressing",
            lane=(round(rng.uniform(0.5, 1.0), 6) if has_work and useful and useful[1] > 0
                  else None),
        ))
    return specs


def _samples(g: GroupSpec):
    """Yield (tile, offset, duration, phase, useful, work, args) for every sample of ``g``.

    Deterministic from ``g.seed``; called twice (aggregates, then writing)."""
    rng = random.Random(g.seed)
    per_tile, extra = divmod(g.n, g.tiles)
    tile0 = rng.randrange(0, TILES - g.tiles + 1)
    ulo, uhi = g.useful or (0.0, 0.0)
    for t in range(g.tiles):
        k = per_tile + (1 if t < extra else 0)
        at = g.first + rng.randrange(0, 400)
        for j in range(k):
            d = g.base if g.uniform else max(1, int(g.base * rng.lognormvariate(0, 0.35)))
            if g.has_work:
                work = max(0, d - rng.randrange(0, 64)) if d > 64 else d
                useful = int(work * rng.uniform(ulo, uhi))
            else:
                work = useful = 0
            yield (tile0 + t, at, d, g.phase0 + j, useful, work,
                   (rng.randrange(1, 64), rng.randrange(1, 1024), j))
            at += d + rng.randrange(0, 40)


def _aggregate(g: GroupSpec) -> dict:
    durs = []
    busy: dict[int, int] = {}
    last = g.first
    useful = work = 0
    phases = set()
    for tile, off, d, phase, u, w, _ in _samples(g):
        durs.append(d)
        busy[tile] = busy.get(tile, 0) + d
        last = max(last, off + d)
        useful += u
        work += w
        phases.add(phase)
    durs.sort()
    n = len(durs)
    work_cycles = sum(durs)
    phase_cycles = max(busy.values())
    last += 6
    est = work if g.has_work else 0
    useful_f = float(useful) if g.has_work else 0.0
    util = useful_f / est if est else None
    return {
        "name": g.name,
        "dimensions": {},
        "sampleCount": n,
        "tileCount": len(busy),
        "phaseCount": len(phases),
        "phaseCycles": phase_cycles,
        "phaseMs": phase_cycles / CLOCK_HZ * 1000,
        "workCycles": work_cycles,
        "averageActiveTiles": work_cycles / phase_cycles,
        "usefulCycles": useful_f,
        "estimatedWorkCycles": est,
        "usefulUtilization": util,
        "workLaneOccupancy": g.lane if est else None,
        "deviceUsefulUtilization": useful_f / (phase_cycles * TILES) if est else None,
        "meanCycles": work_cycles / n,
        "p50Cycles": durs[max(0, math.ceil(0.50 * n) - 1)],
        "p95Cycles": durs[max(0, math.ceil(0.95 * n) - 1)],
        "maximumCycles": durs[-1],
        "firstOffset": g.first,
        "lastOffset": last,
    }


def _sample_head(g: GroupSpec) -> str:
    kind, op, kernel = (_json_str(x).replace("%", "%%") for x in (g.kind, g.operation, g.name))
    return (
        "    {\n"
        '      "physicalTile": %d,\n'
        '      "offset": %d,\n'
        '      "duration": %d,\n'
        '      "phase": %d,\n'
        '      "epoch": %d,\n'
        f'      "kind": {kind},\n'
        f'      "operation": {op},\n'
        f'      "kernel": {kernel},\n'
        '      "metadata": [\n'
    )


_PAIR = '        {\n          "name": %s,\n          "value": %s\n        }'
_SAMPLE_TAIL = "\n      ]\n    }"


def _pair(name: str, value_fmt: str) -> str:
    return _PAIR % (_json_str(name), value_fmt)


def _sample_template(g: GroupSpec) -> str:
    """A %-template of one sample of ``g``: head, then its metadata pairs."""
    head = _sample_head(g)
    if g.kind == "exchange":
        pairs = [("reason", '"Exchange"'), ("value", '"%d"'), ("bytesSent", '"%d"'),
                 ("bytesReceived", '"%d"'), ("partners", '"%d"'), ("invocations", '"1"'),
                 ("uniformInvocations", '"false"'), ("arguments", '"[%d, %d, %d]"'),
                 ("exchangeSpec", _json_str(g.spec).replace("%", "%%")),
                 ("exchangeMode", '"bulk-synchronous"'), ("direction", '"all-to-all"')]
    else:
        pairs = [("reason", '"OperatorKernel"'), ("value", '"%d"'),
                 ("kernelSpec", _json_str(g.spec).replace("%", "%%")),
                 ("outputElements", '"%d"'), ("input0Elements", '"%d"')]
        if g.has_work:
            pairs += [("usefulCycles", '"%d"'), ("physicalWorkCycles", '"%d"'),
                      ("workEstimateBasis", _json_str(g.basis).replace("%", "%%"))]
        else:
            pairs += [("outputBytes", '"%d"'), ("input0Bytes", '"%d"'), ("strided", '"false"')]
        pairs += [("invocations", '"1"'),
                  ("uniformInvocations", '"true"' if g.uniform else '"false"'),
                  ("arguments", '"[%d, %d, %d]"')]
    return head + ",\n".join(_pair(n, v) for n, v in pairs) + _SAMPLE_TAIL


def _dumps_indented(obj, level: int) -> str:
    pad = " " * (2 * level)
    return "\n".join(pad + line if i else line
                     for i, line in enumerate(json.dumps(obj, indent=2).split("\n")))


def write_profile(path: str | Path, n_samples: int = FULL_SAMPLES, seed: int = 1) -> dict:
    """Write a tile profile with ``n_samples`` samples; return facts about it."""
    if n_samples < 1:
        raise ValueError("n_samples must be >= 1")
    specs = _group_specs(n_samples, seed)
    groups = [_aggregate(g) for g in specs]
    start = min(g["firstOffset"] for g in groups)
    end = max(g["lastOffset"] for g in groups)
    span = end - start
    head = {
        "clockHz": CLOCK_HZ, "tileCount": TILES, "sampleCount": n_samples,
        "matchedSampleCount": sum(g["sampleCount"] for g in groups),
        "profileSpanCycles": span, "profileSpanMs": span / CLOCK_HZ * 1000, "atOffset": None,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pairs = 0
    with open(tmp, "w", encoding="utf-8", buffering=1 << 22) as fh:
        fh.write("{\n")
        for k, v in head.items():
            fh.write(f'  "{k}": {json.dumps(v)},\n')
        fh.write('  "groups": ' + _dumps_indented(groups, 1) + ",\n")
        fh.write('  "samples": [\n')
        first = True
        for g in specs:
            tpl = _sample_template(g)
            exchange = g.kind == "exchange"
            per_sample = tpl.count('"name": ')
            buf = []
            for tile, off, d, phase, u, w, (a, b, c) in _samples(g):
                if exchange:
                    vals = (tile, off, d, phase, g.epoch, d // 7, d * 16, d * 16, a % 8 + 1,
                            a, b, c)
                elif g.has_work:
                    vals = (tile, off, d, phase, g.epoch, d // 96, b * 16, a * 64, u, w, a, b, c)
                else:
                    vals = (tile, off, d, phase, g.epoch, d // 96, b * 16, a * 64, b * 128,
                            a * 512, a, b, c)
                pairs += per_sample
                buf.append(tpl % vals)
                if len(buf) >= 4096:
                    fh.write(("" if first else ",\n") + ",\n".join(buf))
                    first = False
                    buf.clear()
            if buf:
                fh.write(("" if first else ",\n") + ",\n".join(buf))
                first = False
        fh.write("\n  ]\n}")
    tmp.replace(path)
    return {"path": str(path), "samples": n_samples, "groups": len(groups),
            "metadata_pairs": pairs, "bytes": path.stat().st_size, "seed": seed}


# ---------------------------------------------------------------- audits and histories


def audit_doc(seed: int, factor: float = 1.0, noise: float = 0.03) -> dict:
    """The seed audit with every kernel duration scaled by ``factor`` x lognormal noise.

    Components, totals and fractions are recomputed from the kernels, so A1–A7 hold."""
    rng = random.Random(f"audit/{seed}")
    doc = json.loads(AUDIT_SEED.read_bytes())
    for row in doc["rows"]:
        per_cat: dict[str, float] = {}
        for k in row["kernels"]:
            k["duration_us"] = round(k["duration_us"] * factor * rng.lognormvariate(0, noise), 3)
            per_cat[k["category"]] = per_cat.get(k["category"], 0.0) + k["duration_us"]
        total = sum(per_cat[c["category"]] for c in row["components"])
        for c in row["components"]:
            c["us"] = per_cat[c["category"]]
            c["fraction_of_profiled_sum"] = c["us"] / total
        row["total_profiled_us"] = total
    doc["audit_sha256"] = hashlib.sha256(f"audit-ref/{seed}".encode()).hexdigest()
    return doc


def write_audit(path: str | Path, seed: int, factor: float = 1.0) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(audit_doc(seed, factor), indent=2))
    return path


def write_sidecar(path: Path, series: str, label: str, captured_at: dt.datetime) -> None:
    side = path.with_name(path.name + ".meta.json")
    side.write_text(json.dumps({"series": series, "label": label,
                                "captured_at": captured_at.isoformat() + "Z"}))


def history_plan(n_runs: int, seed: int = 7, profile_every: int = 4) -> list[dict]:
    """What :func:`write_history` writes: one dict per run (kind, series, label, repeat, time)."""
    rng = random.Random(f"history/{seed}")
    t0 = dt.datetime(2026, 1, 1)
    plan = []
    series = ("vae_decoder", "vae_encoder", "tile_attention")
    for i in range(n_runs):
        kind = "profile" if i % profile_every == profile_every - 1 else "audit"
        s = series[2] if kind == "profile" else series[i % 2]
        label_no = i // 6
        plan.append({"i": i, "kind": kind, "series": s, "label": f"build-{label_no:04d}",
                     "captured_at": t0 + dt.timedelta(minutes=10 * i + rng.randrange(0, 5)),
                     "seed": seed * 1_000_003 + i})
    return plan


def write_history(folder: str | Path, n_runs: int, *, seed: int = 7, profile_samples: int = 300,
                  start: int = 0) -> list[Path]:
    """Write runs ``start`` .. ``n_runs - 1`` of a history (audits and small profiles)."""
    folder = Path(folder)
    out = []
    for r in history_plan(n_runs, seed)[start:]:
        p = folder / r["series"] / f"run_{r['i']:05d}.json"
        if r["kind"] == "audit":
            write_audit(p, r["seed"], factor=1.0 + 0.002 * (r["i"] // 6 % 10))
        else:
            write_profile(p, profile_samples, r["seed"])
        write_sidecar(p, r["series"], r["label"], r["captured_at"])
        out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("profile", help="one tile profile")
    p.add_argument("out")
    p.add_argument("--samples", type=int, default=FULL_SAMPLES,
                   help=f"samples in the file (default {FULL_SAMPLES}; 10x = {FULL_SAMPLES * 10})")
    p.add_argument("--seed", type=int, default=1)
    h = sub.add_parser("history", help="a folder of audits and small profiles with sidecars")
    h.add_argument("out")
    h.add_argument("--runs", type=int, default=100)
    h.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    if a.what == "profile":
        print(json.dumps(write_profile(a.out, a.samples, a.seed)))
    else:
        print(f"{len(write_history(a.out, a.runs, seed=a.seed))} runs in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
