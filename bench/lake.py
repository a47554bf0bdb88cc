"""Benchmark goals of the lake (issue 14), measured as ratios in one run.

    python -m bench.run --only lake            # full size (~15-25 min on 2 cores)
    python -m bench.run --only lake --quick    # tiny inputs, keeps the harness working
    PWH_BENCH_LAKE=throughput python -m bench.run --only lake   # one part (~3 min): see below

``PWH_BENCH_LAKE`` selects parts (comma-separated; default all): ``throughput`` (1 vs 2
writers), ``race`` (4 racing writers, SQLite and PostgreSQL), ``cost`` (ingest cost),
``crossover`` (Spark vs DuckDB).

* throughput: the same runs ingested by 1 writer process and split between 2 writer processes
  (each on a fresh SQLite lake), interleaved (1, 2, 2, 1, 1, 2, …: a machine that gets busier
  or quieter during the run weighs on both sides alike): 2 writers' wall / 1 writer's wall
  <= 1/1.6. The 2 writers run with ``PWH_LAKE_THREADS=1`` (one core each, as documented for
  writers sharing a machine); the single writer with the default (every core);
* race: 4 writer processes racing on every run on SQLite and on PostgreSQL (started here on a
  Unix socket): runs lost or doubled = 0;
* ingest cost: ``pwh lake ingest`` of the full-size profile against ``pwh ingest`` of the same
  file into a fresh DuckDB warehouse, each in its own process, interleaved: <= 1.5;
* crossover: the models on Spark ``local[2]`` against DuckDB over the same lake at growing
  history sizes (warm Spark session): the size where Spark's time matches DuckDB's, or, when
  not reached, an extrapolation of both times (labelled as such).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

from bench.run import PWH, PY, ROOT, Row, median

LAKE_LEVELS = {
    "quick": {"writer_runs": 12, "race_runs": 8, "cost_reps": 1, "writer_reps": 2,
              "crossover_runs": (6, 12), "profile_samples": 40},
    "full": {"writer_runs": 60, "race_runs": 400, "cost_reps": 3, "writer_reps": 6,
             "crossover_runs": (25, 100, 200), "profile_samples": 300},
}


def _history(folder: Path, n: int, samples: int) -> list[Path]:
    from bench import gen

    gen.write_history(folder, n, profile_samples=samples)
    from warehouse.ingesting.loader import expand

    return list(expand([folder]))


def parts() -> set[str]:
    """The parts ``PWH_BENCH_LAKE`` selects (all when unset)."""
    allp = {"throughput", "race", "cost", "crossover"}
    raw = os.environ.get("PWH_BENCH_LAKE", "").strip()
    if not raw:
        return allp
    got = {p.strip() for p in raw.split(",") if p.strip()}
    if not got <= allp:
        raise SystemExit(f"PWH_BENCH_LAKE={raw!r}: unknown part(s) "
                         f"{', '.join(sorted(got - allp))}; known: {', '.join(sorted(allp))}")
    return got


def _ingest_procs(groups: list[list[Path]], uri: str, location: str,
                  env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([PWH, "lake", "ingest", "-q", *map(str, g), "--catalog", uri,
                               "--location", location], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})}) for g in groups]
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"pwh lake ingest failed:\n{out[-2000:]}\n{err[-2000:]}")
    return time.perf_counter() - t0


def _lost_or_doubled(uri: str, location: str, files: list[Path]) -> int:
    from collections import Counter

    from pyiceberg.catalog import load_catalog

    from warehouse.ingesting.loader import sha256_file

    want = Counter({sha256_file(f.read_bytes()) for f in files})
    cat = load_catalog("pwh", type="sql", uri=uri, warehouse=location)
    got = Counter(cat.load_table(("raw", "files")).scan().to_arrow().column("sha256").to_pylist())
    return sum(((want - got) + (got - want)).values())


def goal_throughput(work: Path, lv: dict, log) -> list[Row]:
    files = _history(work / "writers", lv["writer_runs"], lv["profile_samples"])
    g = f"lake writers ({len(files)} runs, SQLite catalog)"
    one, two = [], []
    for i in range(lv["writer_reps"]):
        order = ("1", "2") if i % 4 in (0, 3) else ("2", "1")
        for which in order:
            d = work / f"lake{which}_{i}"
            if which == "1":
                one.append(_ingest_procs([files], f"sqlite:///{d}/c.db", str(d / "w")))
            else:
                two.append(_ingest_procs([files[0::2], files[1::2]], f"sqlite:///{d}/c.db",
                                         str(d / "w"), env={"PWH_LAKE_THREADS": "1"}))
            shutil.rmtree(d, ignore_errors=True)
        log(f"  writers rep {i + 1}: 1 writer {one[-1]:.1f} s, 2 writers {two[-1]:.1f} s")
    return [Row(g, "2 writers' wall / 1 writer's wall (same runs)", median(two), "s",
                median(one), "1 writer", 1 / 1.6, samples=two,
                note=f"throughput x{median(one) / median(two):.2f}; pairs "
                     + ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(one, two, strict=True))
                ).judge()]


def goal_race(work: Path, lv: dict, log) -> list[Row]:
    from warehouse.lake import localpg
    from warehouse.lake.catalog import normalise_uri

    rows = []
    race = _history(work / "race", lv["race_runs"], lv["profile_samples"])
    targets = [("SQLite", f"sqlite:///{work}/race_sqlite/c.db", str(work / "race_sqlite/w"))]
    pg = None
    if localpg.bindir() is not None:
        pg = localpg.server()
        base = pg.__enter__()
        uri = normalise_uri(localpg.create_database(base, "race"))
        targets.append(("PostgreSQL", uri, str(work / "race_pg/w")))
    try:
        for name, uri, loc in targets:
            orders = []
            for k in range(4):
                o = race[:]
                random.Random(k).shuffle(o)
                orders.append(o)
            wall = _ingest_procs(orders, uri, loc)
            bad = _lost_or_doubled(uri, loc, race)
            log(f"  4 racing writers on {name}: {len(race)} runs in {wall:.1f} s, "
                f"{bad} lost or doubled")
            rows.append(Row(f"lake writers: 4 processes race on every one of {len(race)} runs",
                            f"runs lost or doubled ({name})", bad, "runs", limit=0,
                            note=f"{wall:.0f} s").judge())
    finally:
        if pg is not None:
            pg.__exit__(None, None, None)
    return rows


def goal_ingest_cost(work: Path, level: dict, lv: dict, log) -> list[Row]:
    from bench import gen

    n = level["full_samples"]
    f = work / "lake_profile.json"
    gen.write_profile(f, n, seed=3)
    g = f"lake ingest cost (profile of {n} samples, {f.stat().st_size / 1e6:.0f} MB)"
    duck, lake = [], []
    for i in range(lv["cost_reps"]):
        shutil.rmtree(work / "cost", ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run([PWH, "--warehouse", str(work / "cost/wh.duckdb"), "ingest", "-q",
                        str(f)], check=True, capture_output=True)
        duck.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run([PWH, "lake", "ingest", "-q", str(f), "--catalog",
                        f"sqlite:///{work}/cost/c.db", "--location", str(work / "cost/w")],
                       check=True, capture_output=True)
        lake.append(time.perf_counter() - t0)
        log(f"  cost rep {i + 1}: pwh ingest {duck[-1]:.2f} s, pwh lake ingest {lake[-1]:.2f} s")
    shutil.rmtree(work / "cost", ignore_errors=True)
    return [Row(g, "pwh lake ingest wall (process)", median(lake), "s", median(duck),
                "pwh ingest into a new DuckDB file (process)", 1.5, samples=lake).judge()]


def goal_crossover(work: Path, lv: dict, log) -> list[Row]:
    from warehouse.config import settings
    from warehouse.lake import duck, spark
    from warehouse.lake.catalog import LakeConfig, open_catalog
    from warehouse.lake.ingest import ingest_paths

    rows, points = [], []
    sp = spark.get_session("local[2]")
    try:
        for k, n in enumerate(lv["crossover_runs"]):
            d = work / f"cross{n}"
            files = _history(d / "runs", n, lv["profile_samples"])
            cfg = LakeConfig(f"sqlite:///{d}/c.db", str(d / "w"))
            ingest_paths(settings(d / "wh.duckdb"), cfg, files)
            cat = open_catalog(cfg)
            if k == 0:
                spark.build(sp, cat)  # warm-up: JVM, Python workers, UDF pickling
            t0 = time.perf_counter()
            duck.build(cat)
            td = time.perf_counter() - t0
            t0 = time.perf_counter()
            spark.build(sp, cat)
            ts = time.perf_counter() - t0
            rows_raw = sum(os.path.getsize(f) for f in files)
            points.append((rows_raw, td, ts))
            log(f"  crossover {n} runs ({rows_raw / 1e6:.1f} MB raw JSON): duckdb {td:.1f} s, "
                f"spark local[2] {ts:.1f} s")
            rows.append(Row(f"crossover: models over the lake, {n} runs "
                            f"({rows_raw / 1e6:.1f} MB of run files)",
                            "Spark local[2] build", ts, "s", td, "DuckDB build (same lake)",
                            samples=[ts]).judge())
            shutil.rmtree(d, ignore_errors=True)
    finally:
        sp.stop()
    rows.append(_extrapolate(points))
    return rows


def _extrapolate(points: list[tuple[int, float, float]]) -> Row:
    """Where Spark's time meets DuckDB's: measured if it happened, else the meeting point of
    straight lines fitted to each engine's times (fixed cost + cost per MB), stated as an
    extrapolation."""
    g = "crossover: size where Spark local[2] matches DuckDB"
    for size, td, ts in points:
        if ts <= td:
            return Row(g, "measured crossover size", size / 1e6, "MB", note="measured")
    if len(points) < 2:
        return Row(g, "crossover size", None, "MB", note="needs two sizes")

    def fit(ys):
        xs = [p[0] for p in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        return my - b * mx, b

    (ad, bd), (as_, bs) = fit([p[1] for p in points]), fit([p[2] for p in points])
    note = (f"DuckDB {ad:.1f} s + {bd * 1e6:.2f} s/MB, Spark {as_:.1f} s + {bs * 1e6:.2f} s/MB "
            f"(least squares over {len(points)} sizes)")
    if bs < 0 or bd <= bs:
        return Row(g, "extrapolated crossover size", None, "MB",
                   note="not determinable on this machine: " + note)
    x = (as_ - ad) / (bd - bs)
    return Row(g, "extrapolated crossover size (linear fit, NOT measured)", x / 1e6, "MB",
               note=note)


def goals(work: Path, level: dict, log) -> list[Row]:
    lv = LAKE_LEVELS[level["name"]]
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        return [Row("lake", "all lake goals", None, "", note="the [lake] extra is not installed")]
    want = parts()
    rows = []
    if "throughput" in want:
        rows += goal_throughput(work, lv, log)
    if "race" in want:
        rows += goal_race(work, lv, log)
    if "cost" in want:
        rows += goal_ingest_cost(work, level, lv, log)
    if "crossover" not in want:
        pass
    elif shutil.which("java") is None:
        rows.append(Row("crossover", "Spark local[2]", None, "s", note="Java is not installed"))
    else:
        rows += goal_crossover(work, lv, log)
    return rows


__all__ = ["goals", "PY"]
