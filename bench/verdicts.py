"""Bench goal ``verdicts`` (issues 10, 22): how well ``marts.kernel_trends`` judges generated histories,
and what it costs.

    python -m bench.verdicts [--seeds 3] [--quick] [--cost-runs 1000]
    python -m bench.run --only verdicts

Quality: every ``pwh synth --scenario`` history (``warehouse/scenarios.py``), for each seed, is
generated, ingested through the real loader into one temporary warehouse and built by the real
models; each series is then scored against its ground truth:

* **planted** — trend rows a plant moves by at least twice the floor: found *at* their label
  (the row of that label flags the right direction), *late* (one of the next 3 labels does) or
  *missed*; of those at their label, how many were decided by the 4th label after it (the
  confirming label, ``confirmed_by_label``), shown when not all;
* **false flags** — regressed/improved cells where nothing moved beyond the floor (a flag in a
  plant's direction at its label or the 3 after is not one; the other direction is), as a share
  of the series' cells; drift series are counted apart (everything moves there);
* **below floor flagged** — cells of plants smaller than the floor that were flagged;
* **unchanged failing the equivalence rule** (issue 22) — `unchanged` cells whose runs placed at
  the baseline median × (1 ± floor), spread kept, would NOT each give p <= alpha against the
  baseline runs, recomputed here from the rows with ``stats.mann_whitney_u`` (exact with ties;
  kernel-specific values in a split series); "unchecked" when the baseline cannot be rebuilt
  from the rows (an open candidate inside its span);
* **newest-label flags** — what a CI gate reads: every series cut after each label t (t >= 2),
  judged again by ``verdicts.judge_series`` from ``staging.trend_points`` (run ids included),
  and the flags of label t counted where no plant moved that cell (at t or the 3 labels
  before, in that direction);
* **every kernel** — for a step of every kernel (``match='all'``): the keys flagged at its label;
* **watch list** — `inconclusive` cells with |delta| >= floor.

Seeds start at ``--seed-base`` (101): held out from the seeds the tests use.

Cost: a conv-audit series of ``--cost-runs`` runs (3 per label, 59 keys) is built in full
(`pwh build --full-refresh` of marts.kernel_trends, timed), then one run at a time is added and
the incremental rebuild timed with the new verdict code and, on a copy of the same warehouse,
with the verdict code of ``--old-ref`` (git; the code before issue 10), interleaved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD_REF = "41979ab"  # the verdict code before issue 10
SEED_BASE = 101  # held-out seeds: the tests use seeds 0-12


def scenarios_kind(name: str) -> str:
    from warehouse import scenarios

    return scenarios.kind(name)


def _rows(con, series: str) -> list[dict]:
    cur = con.execute("select * from marts.kernel_trends where series = ? order by kernel_kind, "
                      "kernel, label_seq", [series])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _kernel_values(row: dict) -> list[float]:
    """The row's runs, each divided by its ``run_factors`` where the row has them (a split
    series, or a lone outlier run's label in a series not split): what was judged; else as
    measured."""
    vals, fs = row.get("run_values_us") or [], row.get("run_factors") or []
    return [v / f for v, f in zip(vals, fs, strict=True)] if len(fs) == len(vals) else list(vals)


def _equivalent(row: dict, by_label: dict[int, dict], floor: float, alpha: float) -> bool | None:
    """The equivalence rule of ``unchanged`` (issue 22), re-tested here: the label's runs placed
    at the baseline median × (1 ± floor), spread kept, must each differ from the baseline runs
    at ``alpha`` (two-sided, exact with ties). On kernel-specific values when the run-wide
    factor was split off (``run_factors``). None when the baseline cannot be rebuilt from the
    rows (a label of the span left out as an open candidate: fewer labels than the row says)."""
    from warehouse.modelling import stats

    n = row["baseline_labels"] or 0
    lo = next((s for s, r in by_label.items() if r.get("label") is not None
               and r["label"] == row.get("baseline_from_label")), None)
    if lo is None:
        lo = row["label_seq"] - n
    span = [s for s in range(lo, row["label_seq"]) if _kernel_values(by_label.get(s, {}))]
    if n and len(span) != n:
        return None
    base = [x for s in span for x in _kernel_values(by_label[s])]
    vals = _kernel_values(row)
    if not base or not vals:
        return False
    bmed, med = stats.median(base), stats.median(vals)
    for f in (1 + floor / 100, 1 - floor / 100):
        if stats.mann_whitney_u([x * bmed * f / med for x in vals], base).p > alpha:
            return False
    return True


def score_series(rows: list[dict], truth: dict, series: str, kind: str,
                 floor: float = 5.0) -> dict:
    """Score one series' trend rows against the ground truth (see the module doc)."""
    moved: dict[tuple, dict] = {}
    for e in truth["expected"]:
        if e["series"] == series:
            moved[(e["kernel_kind"], e["kernel"], e["label_seq"])] = e
    by_key: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        by_key.setdefault((r["kernel_kind"], r["kernel"]), {})[r["label_seq"]] = r
    flags = {(r["kernel_kind"], r["kernel"], r["label_seq"]): r["verdict"] for r in rows
             if r["verdict"] in ("regressed", "improved")}
    out = {"cells": len(rows), "planted": 0, "at_label": 0, "late": 0, "missed": [],
           "false_flags": 0, "below_floor_flagged": 0, "drift_flags": 0,
           "unchanged": 0, "unchanged_without_power": 0, "unchanged_unchecked": 0, "watch": 0, "first_drift_flag": None,
           "labels": 0, "watch_labels": 0, "whole_run_keys": 0, "whole_run_at_label": 0,
           "by_4th": 0}
    excused: dict[tuple, str] = {}  # cells where a flag in the plant's direction is no error
    for (kk, k, seq), e in moved.items():
        if abs(e["expected_delta_pct"]) >= floor:
            excused.update({(kk, k, s): e["direction"] for s in range(seq, seq + 4)})
        if abs(e["expected_delta_pct"]) < 2 * floor:
            if abs(e["expected_delta_pct"]) < floor and flags.get((kk, k, seq)):
                out["below_floor_flagged"] += 1
            continue
        out["planted"] += 1
        if flags.get((kk, k, seq)) == e["direction"]:
            out["at_label"] += 1
            r = by_key[(kk, k)][seq]
            by = next((s for s, x in by_key[(kk, k)].items() if x.get("label") is not None
                       and x.get("label") == r.get("confirmed_by_label")), seq)
            out["by_4th"] += by <= seq + 4  # decided by the 4th label after it
        elif any(flags.get((kk, k, s)) == e["direction"] for s in range(seq + 1, seq + 4)):
            out["late"] += 1
        else:
            r = by_key.get((kk, k), {}).get(seq)
            out["missed"].append(f"{k}@{seq}: {r['verdict'] if r else 'no row'}")
    for cell in flags:
        if kind == "drift":
            out["drift_flags"] += 1
            s = cell[2]
            if out["first_drift_flag"] is None or s < out["first_drift_flag"]:
                out["first_drift_flag"] = s
        elif excused.get(cell) != flags[cell]:
            out["false_flags"] += 1
    for r in rows:
        if r["verdict"] == "unchanged":
            out["unchanged"] += 1
            ok = _equivalent(r, by_key[(r["kernel_kind"], r["kernel"])], r["floor_pct"],
                             r["alpha"])
            if ok is None:
                out["unchanged_unchecked"] += 1
            elif not ok:
                out["unchanged_without_power"] += 1
        if (r["verdict"] == "inconclusive" and r["delta_pct"] is not None
                and abs(r["delta_pct"]) >= floor):
            out["watch"] += 1
    whole = {p["label_seq"]: p["direction"] for p in truth.get("plants", [])
             if p["series"] == series and p.get("match") == "all" and p.get("mode") == "step"}
    for kk, k, seq in moved:  # a step of every kernel: each key at its label
        if seq in whole:
            out["whole_run_keys"] += 1
            out["whole_run_at_label"] += flags.get((kk, k, seq)) == whole[seq]
    run_wide = {r["label_seq"]: r for r in rows}
    out["labels"] = len(run_wide)
    out["watch_labels"] = sum(  # run-wide watch list: once per label, not per kernel
        r.get("run_wide_verdict") == "inconclusive" and r.get("run_wide_pct") is not None
        and abs(r["run_wide_pct"]) >= floor for r in run_wide.values())
    return out


def _cells(con, series: str) -> list:
    """The cells ``marts.kernel_trends`` judged for ``series``, rebuilt from
    ``staging.trend_points`` (run ids included, as the model passes them)."""
    from warehouse.modelling.verdicts import Cell

    cur = con.execute("""
        with lo as (select distinct label, label_seq from marts.kernel_trends where series = ?)
        select p.kernel_kind, p.kernel, p.label, lo.label_seq,
               list(p.value_us order by p.value_us, p.run_id),
               list(p.run_id order by p.value_us, p.run_id)
        from staging.trend_points p join lo on lo.label = p.label
        where p.series = ?
        group by all""", [series, series])
    return [Cell(k, key, lab, int(seq), list(v), list(r))
            for k, key, lab, seq, v, r in cur.fetchall()]


def newest_label_flags(cells: list, truth: dict, series: str, first: int = 2) -> dict:
    """What a CI gate reads: the history cut after each label t (t >= ``first``), judged by
    ``verdicts.judge_series`` as a build would, and the flags of label t — the newest — counted
    where nothing moved beyond the floor at t or the 3 labels before it (in that direction)."""
    from warehouse.modelling import stats, verdicts

    cfg = stats.VerdictConfig.from_env()
    excused: dict[tuple, str] = {}
    for e in truth["expected"]:
        if e["series"] == series and abs(e["expected_delta_pct"]) >= cfg.floor_pct:
            excused.update({(e["kernel_kind"], e["kernel"], s): e["direction"]
                            for s in range(e["label_seq"], e["label_seq"] + 4)})
    last = max((c.label_seq for c in cells), default=-1)
    out = {"newest_cells": 0, "newest_flags": 0, "newest_flag_list": []}
    for t in range(first, last + 1):
        rows = verdicts.judge_series([c for c in cells if c.label_seq <= t], cfg)
        for r in rows:
            if r["label_seq"] != t:
                continue
            out["newest_cells"] += 1
            if r["verdict"] in ("regressed", "improved") and \
                    excused.get((r["kind"], r["key"], t)) != r["verdict"]:
                out["newest_flags"] += 1
                out["newest_flag_list"].append(
                    f"{r['key']}@{t}: {r['verdict']} {r['delta_pct']:+.1f}% p={r['p_value']}")
    return out


def _spec(name: str, seed: int, labels: int | None):
    """The scenario's spec, cut to ``labels`` labels (what falls beyond is dropped)."""
    import dataclasses

    from warehouse import scenarios

    spec = scenarios.spec(name, seed)
    if labels is None:
        return spec
    return dataclasses.replace(
        spec, labels=labels, plants=tuple(p for p in spec.plants if p.label_seq < labels),
        spike_runs=tuple(x for x in spec.spike_runs if x[0] < labels))


def quality(seeds: list[int], work: Path, log, labels: int | None = None,
            names: list[str] | None = None, newest: bool = True) -> dict:
    from warehouse import db, scenarios, synth
    from warehouse.config import settings
    from warehouse.ingesting import loader
    from warehouse.modelling import models

    names = names or scenarios.names()
    results: dict[str, list[dict]] = {n: [] for n in names}
    build_s = []
    for seed in seeds:
        hist = work / f"hist_{seed}"
        truths = {}
        for name in names:
            truths[name] = synth.generate(hist / name, _spec(name, seed, labels))
        s = settings(work / f"wh_{seed}" / "warehouse.duckdb")
        files = [f for f in loader.expand([hist]) if f.name != synth.GROUND_TRUTH]
        t0 = time.perf_counter()
        res = loader.ingest_paths(s, files)
        bad = [r.message for r in res if r.status != "ingested"]
        if bad:
            raise RuntimeError(f"seed {seed}: {len(bad)} runs not ingested: {bad[0]}")
        log(f"  seed {seed}: {len(files)} runs ingested in {time.perf_counter() - t0:.0f} s")
        with db.writer(s.warehouse, quiet=True) as con:
            models.build(con, select=["marts.kernel_trends"])  # and what it reads
            t0 = time.perf_counter()
            models.build(con, select=["marts.kernel_trends"], full_refresh=True)
            build_s.append(time.perf_counter() - t0)
            for name in names:
                for fmt in ("tile", "audit"):
                    series = f"{name}-{fmt}"
                    sc = score_series(_rows(con, series), truths[name], series,
                                      scenarios.kind(name))
                    if newest and scenarios.kind(name) != "drift":
                        sc.update(newest_label_flags(_cells(con, series), truths[name], series))
                    results[name].append({"seed": seed, "format": fmt, **sc})
        log(f"  seed {seed}: marts.kernel_trends full rebuild {build_s[-1]:.1f} s")
        shutil.rmtree(hist, ignore_errors=True)
    return {"by_scenario": results, "trends_full_build_s": build_s, "seeds": seeds}


# ------------------------------------------------------------------ cost


def _old_judge(ref: str):
    """``judge_series`` of the verdict code at git ``ref``, returning rows with today's fields."""
    tmp = Path(tempfile.mkdtemp(prefix="pwh-old-stats-"))
    # since issue 10 the rules are in verdicts.py (loaded beside today's stats.py); before, in
    # stats.py alone
    name = "verdicts" if subprocess.run(
        ["git", "cat-file", "-e", f"{ref}:warehouse/modelling/verdicts.py"], cwd=ROOT,
        capture_output=True).returncode == 0 else "stats"
    src = subprocess.run(["git", "show", f"{ref}:warehouse/modelling/{name}.py"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    (tmp / f"old_{name}.py").write_text(src)
    spec = importlib.util.spec_from_file_location(f"pwh_old_{name}", tmp / f"old_{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"pwh_old_{name}"] = mod
    spec.loader.exec_module(mod)
    cfg = mod.VerdictConfig() if name == "stats" else None

    def judge(cells, _cfg=None):
        extra = {"min_detectable_pct": None, "runs_needed": None, "confirmed_by_label": None,
                 "run_factors": [], "kernel_delta_pct": None, "run_wide_pct": None,
                 "run_wide_verdict": "none"}
        return [{**extra, **r} for r in mod.judge_series(cells, cfg)]

    return judge


def cost(n_runs: int, adds: int, work: Path, log, old_ref: str = OLD_REF) -> dict:
    from warehouse import db, synth
    from warehouse.config import settings
    from warehouse.ingesting import loader
    from warehouse.modelling import models, verdicts

    labels = (n_runs + 2) // 3
    spec = synth.HistorySpec(seed=42, labels=labels + adds, repeats=3, single_repeat_every=0,
                             series=(synth.SeriesSpec("cost-audit", "conv_audit"),), plants=())
    hist = work / "cost_hist"
    synth.generate(hist, spec)
    files = sorted(f for f in loader.expand([hist]) if f.name != synth.GROUND_TRUTH)
    base_files, extra = files[:n_runs], files[n_runs:n_runs + adds]
    new_s = settings(work / "cost_new" / "warehouse.duckdb")
    t0 = time.perf_counter()
    for k in range(0, len(base_files), 200):
        loader.ingest_paths(new_s, base_files[k:k + 200])
    log(f"  cost: {len(base_files)} runs ingested in {time.perf_counter() - t0:.0f} s")
    with db.writer(new_s.warehouse, quiet=True) as con:
        models.build(con, select=["marts.kernel_trends"])  # and what it reads
        keys = con.execute("select count(distinct kernel_kind || kernel) from "
                           "marts.kernel_trends").fetchone()[0]
        full, full_cpu = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            models.build(con, select=["marts.kernel_trends"], full_refresh=True)
            full.append(time.perf_counter() - t0)
            full_cpu.append(time.process_time() - c0)
    old_s = settings(work / "cost_old" / "warehouse.duckdb")
    shutil.copytree(new_s.state_dir, old_s.state_dir, dirs_exist_ok=True)
    old_judge, new_judge = _old_judge(old_ref), verdicts.judge_series
    times: dict[str, list[float]] = {"new": [], "old": [], "new_cpu": [], "old_cpu": []}
    try:
        for j, f in enumerate(extra):
            order = (("new", new_s), ("old", old_s))[:: 1 if j % 2 else -1]
            for which, s in order:
                verdicts.judge_series = new_judge if which == "new" else old_judge
                loader.ingest_paths(s, [f])
                with db.writer(s.warehouse, quiet=True) as con:
                    models.build(con, select=["staging.trend_points"])
                    t0, c0 = time.perf_counter(), time.process_time()
                    models.build(con, select=["marts.kernel_trends"])
                    times[which].append(time.perf_counter() - t0)
                    times[which + "_cpu"].append(time.process_time() - c0)
    finally:
        verdicts.judge_series = new_judge
    return {"runs": n_runs, "keys": keys, "labels": labels, "full_rebuild_s": full,
            "full_rebuild_cpu_s": full_cpu, "incremental_new_s": times["new"],
            "incremental_old_s": times["old"], "incremental_new_cpu_s": times["new_cpu"],
            "incremental_old_cpu_s": times["old_cpu"], "load_average": os.getloadavg(),
            "old_ref": old_ref}


# ------------------------------------------------------------------ report


def table(q: dict) -> str:
    head = ("| scenario | planted ≥2×floor: at label / late / missed | false flags (max per "
            "series) | below-floor flagged | newest-label flags (every cut) | unchanged failing "
            "the equivalence rule / unchanged | watch list (cells) | run-wide watch list "
            "(labels) |")
    out = [head, "|---|---|---|---|---|---|---|---|"]
    for name, rs in q["by_scenario"].items():
        pl = sum(r["planted"] for r in rs)
        at, late = sum(r["at_label"] for r in rs), sum(r["late"] for r in rs)
        missed = sum(len(r["missed"]) for r in rs)
        cells = sum(r["cells"] for r in rs)
        ff = sum(r["false_flags"] for r in rs)
        worst = max(r["false_flags"] / r["cells"] for r in rs) * 100
        if rs and rs[0].get("first_drift_flag") is not None or name == "drift":
            firsts = [r["first_drift_flag"] for r in rs]
            ffs = f"drift: {sum(r['drift_flags'] for r in rs)} flags, first at labels {firsts}"
        else:
            ffs = f"{ff}/{cells} = {ff / cells * 100:.2f}% ({worst:.2f}%)"
        un = sum(r["unchanged"] for r in rs)
        unp = sum(r["unchanged_without_power"] for r in rs)
        unk = sum(r.get("unchanged_unchecked", 0) for r in rs)
        watch = sum(r["watch"] for r in rs)
        by4 = sum(r.get("by_4th", 0) for r in rs)
        plant = (f"{at} / {late} / {missed} of {pl}" + (f" ({by4} decided by the 4th label)"
                                                        if by4 != at else "")) if pl else "—"
        wk = sum(r.get("whole_run_keys", 0) for r in rs)
        if wk:
            plant += (f"; every kernel: {sum(r['whole_run_at_label'] for r in rs)} of {wk} "
                      "keys at its label")
        nc = sum(r.get("newest_cells", 0) for r in rs)
        newest = f"{sum(r.get('newest_flags', 0) for r in rs)}/{nc}" if nc else "—"
        out.append(f"| {name} | {plant} | {ffs} | {sum(r['below_floor_flagged'] for r in rs)} | "
                   f"{newest} | {unp} / {un}{f' ({unk} unchecked)' if unk else ''} | "
                   f"{watch / cells * 100:.1f}% | "
                   f"{sum(r.get('watch_labels', 0) for r in rs)}/"
                   f"{sum(r.get('labels', 0) for r in rs)} |")
    return "\n".join(out)


def cost_table(c: dict) -> str:
    med = statistics.median
    new, old = med(c["incremental_new_s"]), med(c["incremental_old_s"])
    newc, oldc = med(c["incremental_new_cpu_s"]), med(c["incremental_old_cpu_s"])
    return "\n".join([
        f"load average at the end: {[round(x, 1) for x in c['load_average']]} (2 cores)",
        "",
        "| metric | measured | reference | ratio | limit |",
        "|---|---|---|---|---|",
        f"| full rebuild of marts.kernel_trends, {c['runs']} runs × {c['keys']} keys "
        f"(median of {len(c['full_rebuild_s'])}), wall | {med(c['full_rebuild_s']):.2f} s | — "
        f"| — | 10 s |",
        f"| same, CPU time of the process (all threads) | {med(c['full_rebuild_cpu_s']):.2f} s "
        f"| — | — | — |",
        f"| incremental rebuild after one added run (median of {len(c['incremental_new_s'])}), "
        f"wall | {new:.2f} s | {old:.2f} s (verdict code of {c.get('old_ref', OLD_REF)}) | "
        f"{new / old:.2f}× | "
        f"1.5× |",
        f"| same, CPU time | {newc:.2f} s | {oldc:.2f} s | {newc / oldc:.2f}× | 1.5× |",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.verdicts", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    ap.add_argument("--seed-base", type=int, default=SEED_BASE,
                    help=f"first seed (default {SEED_BASE}: held out, the tests use others)")
    ap.add_argument("--scenarios", nargs="+", metavar="NAME",
                    help="only these scenarios (default: every `pwh synth --scenario`)")
    ap.add_argument("--no-newest", action="store_true",
                    help="skip the newest-label count (re-judges every cut of each series)")
    ap.add_argument("--cost-runs", type=int, default=1000, help="runs in the cost series")
    ap.add_argument("--adds", type=int, default=3, help="runs added one by one (cost)")
    ap.add_argument("--quick", action="store_true",
                    help="1 seed, 6 labels per scenario, a 60-run cost series (keeps it working; "
                         "its figures mean little)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["quality", "cost"])
    ap.add_argument("--old-ref", default=OLD_REF,
                    help=f"git ref whose verdict code the incremental rebuild is compared with "
                         f"(default {OLD_REF}, before issue 10)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args(argv)
    labels = None
    if a.quick:
        a.seeds, a.cost_runs, a.adds, labels = 1, 60, 2, 6

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    work = Path(tempfile.mkdtemp(prefix="pwh-bench-verdicts-"))
    res: dict = {"command": "python -m bench.verdicts " + " ".join(argv or sys.argv[1:]),
                 "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    try:
        if "quality" not in a.skip:
            res["quality"] = quality(list(range(a.seed_base, a.seed_base + a.seeds)), work, log,
                                     labels, a.scenarios, newest=not a.no_newest)
            print(table(res["quality"]))
            print(f"\nfull rebuild of marts.kernel_trends on each seed's scenarios: "
                  f"{[round(x, 1) for x in res['quality']['trends_full_build_s']]} s")
        if "cost" not in a.skip:
            res["cost"] = cost(a.cost_runs, a.adds, work, log, a.old_ref)
            print()
            print(cost_table(res["cost"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "verdicts.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
