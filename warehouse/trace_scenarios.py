"""The trace scenarios of ``pwh synth --scenario NAME``: generated multi-rank Kineto histories
with ground truth, each planting one reason why a training job got slower (issue 20, item 6).

Every scenario is one series named after it: ``labels`` labels (commit-like ids, one day apart)
of ``repeats`` jobs, each job ``ranks`` rank files (``distributedInfo`` rank / world_size) of
``steps`` training steps (:func:`warehouse.ingesting.formats.kineto_gen.write_training`), with
a sidecar per file (series, label, captured_at). From label ``plant_at`` on:

* ``trace-kernel-swap`` — aten::mm launches another kernel (a library picked another GEMM),
  15 % slower: the old kernel's trend ends, ``op_kernel_ns`` of aten::mm regresses;
* ``trace-idle-growth`` — the input pipeline stalls 15 us per step before the GPU gets work: no
  kernel slower, ``gpu_idle_share`` and ``step_time`` regress;
* ``trace-straggler`` — one rank (the last) runs 10 % slower in everything: ``step_time`` of
  key ``rank N`` regresses (the job's other ranks do not, and the pooled ``(run)`` figures
  barely move: 1 value in ``ranks``);
* ``trace-slow-collective`` — the NCCL allreduce (its own stream, overlapping compute) 20 %
  slower: ``communication_ns`` regresses (and ``op_kernel_ns`` of ``nccl:all_reduce``, the
  operator that launched it); neither step time nor idle share moves.
* ``trace-noise`` — nothing planted: every flag is a false one.

The ground truth's ``expected`` rows are computed, not asserted: the same traces are generated
noise-free with and without the plant, their facts derived as ``marts.trace_trends`` derives
them (mean step time, idle / span, the communication union, kernel time per operator; the
median over ranks for the pooled keys) and every fact that moves is listed with its change.
:func:`score` scores a series' ``marts.trace_trends`` rows against it (``python -m
bench.trace_verdicts``, ``tests/test_trace_scenarios.py``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from warehouse.ingesting.formats import kineto_gen
from warehouse.synth import SynthError, publish

SWAP_KERNEL = "ampere_sgemm_64x32_sliced1x4_tn"  # what aten::mm launches after the swap
GROUND_TRUTH = "ground_truth.json"

# name -> (description, plant: write_training arguments from plant_at on; "ranks": which ranks
# carry it (default every rank))
SCENARIOS: dict[str, tuple[str, dict]] = {
    "trace-kernel-swap": (
        "aten::mm launches another kernel from the plant label on, its GPU time +15%: found on "
        "op_kernel_ns of aten::mm", {"swap": {"aten::mm": SWAP_KERNEL},
                                     "factors": {"aten::mm": 1.15}}),
    "trace-idle-growth": (
        "the input pipeline stalls 15 us per step (GPU idle between steps grows, no kernel "
        "slower): found on gpu_idle_share and step_time", {"stall_ns": 15_000}),
    "trace-straggler": (
        "the last rank of the job is 10% slower in everything: found on step_time of key "
        "'rank N'", {"slowdown": 1.10, "ranks": "last"}),
    "trace-slow-collective": (
        "the NCCL allreduce kernel 20% slower (overlapping compute): found on communication_ns",
        {"factors": {"nccl:all_reduce": 1.20}}),
    "trace-noise": ("nothing planted (the same jobs and noise): every flag is false", {}),
}


@dataclass(frozen=True)
class TraceSpec:
    name: str
    seed: int = 1
    labels: int = 12
    repeats: int = 3
    ranks: int = 4
    steps: int = 4
    plant_at: int | None = None  # default labels // 2
    start: str = "2026-01-05T09:00:00Z"
    plant: dict = field(default_factory=dict)
    series: str = ""  # default: the scenario's name

    @property
    def series_name(self) -> str:
        return self.series or self.name

    @property
    def plant_seq(self) -> int:
        return self.labels // 2 if self.plant_at is None else self.plant_at

    def planted_ranks(self) -> list[int]:
        return [self.ranks - 1] if self.plant.get("ranks") == "last" else list(range(self.ranks))


class TraceScenarioError(SynthError):
    """An impossible trace scenario spec (unknown name, too few labels or ranks)."""


def names() -> list[str]:
    return list(SCENARIOS)


def spec(name: str, seed: int = 1, **over) -> TraceSpec:
    """The history of scenario ``name``; ``over``: labels, repeats, ranks, steps, plant_at,
    series (default: the scenario's name)."""
    if name not in SCENARIOS:
        raise TraceScenarioError(f"unknown trace scenario {name!r} (known: {', '.join(SCENARIOS)})")
    s = TraceSpec(name=name, seed=seed, plant=SCENARIOS[name][1],
                  **{k: v for k, v in over.items() if v is not None})
    if s.labels < 3 or not 1 <= s.plant_seq < s.labels:
        raise TraceScenarioError(f"{name}: the plant label #{s.plant_seq} must lie after the "
                                 f"first label and before label #{s.labels} (--labels >= 3)")
    if s.repeats < 1 or s.steps < 1 or s.ranks < 1:
        raise TraceScenarioError(f"{name}: repeats, steps and ranks must be at least 1")
    if s.plant.get("ranks") == "last" and s.ranks < 3:
        raise TraceScenarioError(f"{name}: a straggler needs a job of at least 3 ranks (one "
                                 "slow rank must not be the median of the job)")
    return s


def _kwargs(s: TraceSpec, seq: int, rank: int) -> dict:
    if seq < s.plant_seq or rank not in s.planted_ranks():
        return {}
    return {k: v for k, v in s.plant.items() if k != "ranks"}


def _facts(truth: dict, rank: int, ranks: int) -> dict[tuple[str, str], float]:
    """One run's facts, as marts.trace_trends derives them (from write_training's figures)."""
    out = {("step_time", "(run)"): truth["step_ns"],
           ("gpu_idle_share", "(run)"): (truth["span_ns"] - truth["busy_ns"]) / truth["span_ns"],
           ("communication_ns", "(run)"): float(truth["communication_ns"])}
    if ranks > 1:
        out[("step_time", f"rank {rank}")] = truth["step_ns"]
    for op, o in truth["ops"].items():
        out[("op_kernel_ns", op)] = float(o["kernel_ns"])
    return out


def _noise_free(s: TraceSpec, seq: int) -> dict[tuple[str, str], float]:
    """The facts of label ``seq`` without noise (pooled keys: the median over ranks)."""
    per_key: dict[tuple[str, str], list[float]] = {}
    for rank in range(s.ranks):
        t = kineto_gen.write_training(io.BytesIO(), steps=s.steps, rank=rank,
                                      world_size=s.ranks, noise=0, run_noise=0,
                                      cpu_jitter_ns=0, **_kwargs(s, seq, rank))
        for k, v in _facts(t, rank, s.ranks).items():
            per_key.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in per_key.items()}


def _file_seed(s: TraceSpec, seq: int, rep: int) -> int:
    """A job's seed: distinct per scenario too (equal bytes would be one run in the warehouse)."""
    h = hashlib.sha256(f"pwh-trace-synth/{s.series_name}/{s.seed}/{seq}/{rep}".encode()).digest()
    return int.from_bytes(h[:6], "little")


def expected(s: TraceSpec, labels: list[str]) -> list[dict]:
    """Every (fact, key) the plant moves, with its change at the plant label."""
    before, after = _noise_free(s, s.plant_seq - 1), _noise_free(s, s.plant_seq)
    out = []
    for (fact, key), v in sorted(after.items()):
        b = before.get((fact, key))
        if not b or abs(v / b - 1) < 1e-4:
            continue
        out.append({"series": s.series_name, "label": labels[s.plant_seq], "label_seq": s.plant_seq,
                    "direction": "regressed" if v > b else "improved", "fact": fact,
                    "key": key, "expected_delta_pct": round((v / b - 1) * 100, 3)})
    return out


def generate(out: str | os.PathLike[str], s: TraceSpec, *, force: bool = False) -> dict:
    """Write the history of ``s`` under ``out`` (``runs/<series>/<series>-<seq>_<label>_r<k>/
    rank<r>.pt.trace.json`` + sidecars: one folder per job, named uniquely, since a job's
    name is the folder's; ``ground_truth.json``); return the ground truth. Written
    to a temporary sibling and renamed into place: never half a history."""
    from warehouse.synth import label_name

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise TraceScenarioError(f"{out}: exists and is not empty (use --force to replace it)")
    labels = [label_name(s.seed, i) for i in range(s.labels)]
    start = dt.datetime.fromisoformat(s.start.replace("Z", "+00:00")).astimezone(dt.UTC)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    files = []
    try:
        for seq, label in enumerate(labels):
            for rep in range(s.repeats):
                job = f"{s.series_name}-{seq:03d}_{label}_r{rep}"  # the folder names the job
                folder = tmp / "runs" / s.series_name / job
                folder.mkdir(parents=True)
                when = start + dt.timedelta(days=seq, minutes=10 * rep)
                stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                for rank in range(s.ranks):
                    f = folder / f"rank{rank}.pt.trace.json"
                    with open(f, "wb") as fh:
                        kineto_gen.write_training(
                            fh, steps=s.steps, seed=_file_seed(s, seq, rep),
                            rank=rank, world_size=s.ranks, relative=bool((rep + rank) % 2),
                            **_kwargs(s, seq, rank))
                    (folder / (f.name + ".meta.json")).write_text(json.dumps(
                        {"series": s.series_name, "label": label, "captured_at": stamp}) + "\n")
                    files.append(f"runs/{s.series_name}/{job}/{f.name}")
        plant = {k: v for k, v in s.plant.items() if k != "ranks"}
        truth = {
            "generator": "pwh synth (trace scenario)",
            "scenario": s.name,
            "description": SCENARIOS[s.name][0],
            "spec": asdict(s),
            "labels": [{"label_seq": i, "label": lab} for i, lab in enumerate(labels)],
            "series": s.series_name,
            "plants": [{"series": s.series_name, "label": labels[s.plant_seq],
                        "label_seq": s.plant_seq, "ranks": s.planted_ranks(), **plant}]
            if plant else [],
            "expected": expected(s, labels),
            "files": files,
        }
        publish(tmp, out, truth, GROUND_TRUTH)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return truth


def score(rows: list[dict], truth: dict, floor: float = 5.0) -> dict:
    """Score one series' ``marts.trace_trends`` rows (dicts with fact, key, label_seq, verdict)
    against its ground truth.

    planted: expected cells moving by at least twice the floor (to 0.1 pp), found ``at_label`` (that cell
    flags the expected direction), ``late`` (one of the next 3 labels does) or missed.
    false flags: regressed/improved cells that are no expected change (a flag in a plant's
    direction on its (fact, key) at its label or the 3 after is not one), with their share of
    the series' cells overall and for the fact with the most."""
    series = truth["series"]
    moved = {(e["fact"], e["key"]): e for e in truth["expected"] if e["series"] == series}
    flags = {(r["fact"], r["key"], r["label_seq"]): r["verdict"] for r in rows
             if r["verdict"] in ("regressed", "improved")}
    cells: dict[str, int] = {}
    for r in rows:
        cells[r["fact"]] = cells.get(r["fact"], 0) + 1
    out = {"series": series, "cells": len(rows), "planted": 0, "at_label": 0, "late": 0,
           "missed": [], "false_flags": [], "false_flag_pct": 0.0}
    for (fact, key), e in moved.items():
        if round(abs(e["expected_delta_pct"]), 1) < 2 * floor:  # 9.96 % is a 10 % plant
            continue
        out["planted"] += 1
        seq = e["label_seq"]
        if flags.get((fact, key, seq)) == e["direction"]:
            out["at_label"] += 1
        elif any(flags.get((fact, key, s)) == e["direction"] for s in range(seq + 1, seq + 4)):
            out["late"] += 1
        else:
            got = next((r["verdict"] for r in rows if (r["fact"], r["key"], r["label_seq"])
                        == (fact, key, seq)), "no row")
            out["missed"].append(f"{fact} {key}@{seq}: {got}")
    for (fact, key, seq), verdict in sorted(flags.items()):
        e = moved.get((fact, key))
        if (e and abs(e["expected_delta_pct"]) >= floor and verdict == e["direction"]
                and e["label_seq"] <= seq < e["label_seq"] + 4):
            continue
        out["false_flags"].append(f"{fact} {key}@{seq}: {verdict}")
    if rows:
        out["false_flag_pct"] = 100 * len(out["false_flags"]) / len(rows)
    return out
