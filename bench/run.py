"""The benchmark harness: every performance goal of issue 6, measured as a ratio in one run.

    python -m bench.run            # full size, for a person (make bench): ~15-25 min, ~15 GB disk
    python -m bench.run --quick    # tiny inputs, keeps the harness working (make bench-quick)

For each goal it prints a table: measured value, reference value, ratio, limit and pass/fail,
and it writes the figures to ``bench/out/results-<level>.json`` (git-ignored). References are
measured in the same run on the same file, interleaved with the measurement (median of
``--reps``), so a busy machine slows both sides. A goal whose code does not exist yet is reported
as ``n/a`` with the reason, never as a pass.

Inputs are generated deterministically (``bench/gen.py``) under ``bench/out/work`` and deleted at
the end (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
PY = sys.executable
PWH = str(Path(PY).with_name("pwh"))

LEVELS = {
    "quick": {
        "full_samples": 1500, "tenx_samples": 15000, "huge_samples": 0, "reps": 1,
        "history_points": (1, 3), "probes": 1, "big_profiles": 1, "query_reps": 3,
        "history_profile_samples": 40, "stream_threshold": 0, "warmup": False, "dagster": False,
    },
    "full": {
        "full_samples": 232_260, "tenx_samples": 2_322_600, "huge_samples": 3_600_000, "reps": 3,
        "history_points": (1, 10, 100, 1000), "probes": 5, "big_profiles": 10, "query_reps": 7,
        "history_profile_samples": 300, "stream_threshold": None, "warmup": True, "dagster": True,
    },
}


@dataclass
class Row:
    goal: str  # the goal this row belongs to
    metric: str
    measured: float | None
    unit: str
    reference: float | None = None
    reference_name: str = ""
    limit: float | None = None  # pass when ratio (or measured, without reference) <= limit
    status: str = "info"  # pass | FAIL | n/a | info
    note: str = ""
    ratio: float | None = None
    samples: list[float] = field(default_factory=list)

    def judge(self) -> Row:
        if self.measured is None:
            self.status = "n/a"
            return self
        if self.reference:
            self.ratio = self.measured / self.reference
        value = self.ratio if self.reference else self.measured
        if self.limit is not None and value is not None:
            self.status = "pass" if value <= self.limit else "FAIL"
        return self


# ---------------------------------------------------------------- measuring processes


def run_measured(cmd: list[str], *, env: dict | None = None,
                 stderr_out: list | None = None) -> tuple[float, int, str]:
    """Run ``cmd``; return (wall seconds, the process's own peak RSS in bytes, stdout).
    ``stderr_out``: a list that receives the process's stderr.

    The child is reaped with ``wait4``, whose resource usage is that one process's (not the
    running maximum over all children that ``getrusage`` gives). Raises on a non-zero exit."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT,
                             env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{stderr[-2000:]}")
    if stderr_out is not None:
        stderr_out.append(stderr)
    return wall, usage.ru_maxrss * 1024, stdout


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def machine() -> dict:
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import duckdb
    import msgspec
    import pyarrow

    return {"cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "cpu": cpu,
            "python": platform.python_version(), "duckdb": duckdb.__version__,
            "msgspec": msgspec.__version__, "pyarrow": pyarrow.__version__,
            "platform": platform.platform()}


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def warm(path: Path) -> float:
    """Read the file once (warm page cache); return the ``cat`` time (the I/O floor)."""
    t0 = time.perf_counter()
    with open(path, "rb") as fh, open(os.devnull, "wb") as null:
        shutil.copyfileobj(fh, null, 1 << 22)
    return time.perf_counter() - t0


def pwh_ingest(path: Path, wh_dir: Path, env: dict) -> tuple[float, int, float]:
    """``pwh ingest`` in its own process on a fresh warehouse: (wall s, peak RSS, in-process s).

    The peak RSS is the ``pwh`` process's plus, when the loader parsed in a forked process, that
    process's own peak (a sum of peaks: an upper bound, pages shared by the two count twice)."""
    shutil.rmtree(wh_dir, ignore_errors=True)
    err: list[str] = []
    wall, rss, out = run_measured([PWH, "--warehouse", str(wh_dir / "w.duckdb"), "ingest",
                                   str(path)], env={**env, "PWH_DEBUG_TIMING": "1"},
                                  stderr_out=err)
    inner = None
    for line in out.splitlines():
        if line.startswith("ok ") and line.endswith(" s)"):
            inner = float(line.rsplit("(", 1)[1].split()[0])
    if inner is None:
        raise RuntimeError(f"pwh ingest did not ingest {path}:\n{out}")
    m = re.search(r"parser process cpu [0-9.]+s, peak rss (\d+) KiB", err[0])
    if m:
        rss += int(m.group(1)) * 1024
    return wall, rss, inner


def stream_env(level: dict) -> dict:
    """The quick level's files are small: stream them anyway, so that path is exercised."""
    t = level["stream_threshold"]
    return {} if t is None else {"PWH_STREAM_MIN_BYTES": str(t)}


# ---------------------------------------------------------------- goals

# The msgspec floor, two ways. The goal compares like with like: `pwh ingest` is timed as a
# whole process, so is the floor (interpreter start, imports, read, decode, free, exit). The
# decode call alone (no start, no read, no free) is reported beside it as a stricter figure.
PROC_FLOOR = "msgspec parse-only, GC off, whole process"
DECODE_FLOOR = "msgspec decode call only, GC off"


class MsgspecFloor:
    """The msgspec parse-only floor of one file, measured once per repetition, both ways."""

    def __init__(self, f: Path):
        self.f = f
        self.decode: list[float] = []
        self.process: list[float] = []
        self.rss: list[int] = []

    def measure(self) -> None:
        wall, rss, out = run_measured([PY, "-m", "bench.refs", "msgspec", str(self.f)])
        self.decode.append(json.loads(out)["seconds"])
        self.process.append(wall)
        self.rss.append(rss)

    def wall_rows(self, g: str, wall: list[float]) -> list[Row]:
        """``pwh ingest`` against the whole-process floor (the goal) and the decode call."""
        return [
            Row(g, "pwh ingest wall (process, end to end)", median(wall), "s",
                median(self.process), PROC_FLOOR, 2.0, samples=wall).judge(),
            Row(g, "pwh ingest wall (process, end to end)", median(wall), "s",
                median(self.decode), DECODE_FLOOR, samples=wall).judge(),
        ]


def goal_full_size(work: Path, level: dict, log) -> list[Row]:
    from bench import gen

    n = level["full_samples"]
    f = work / "profile_full.json"
    info = gen.write_profile(f, n, seed=1)
    size = info["bytes"]
    log(f"full-size profile: {n} samples, {info['metadata_pairs']} pairs, {size / 1e6:.0f} MB")
    env = stream_env(level)
    floor = MsgspecFloor(f)
    cat, ddb, wall, rss, inner, ddb_rss = ([] for _ in range(6))
    for i in range(level["reps"]):
        cat.append(warm(f))
        floor.measure()
        db = work / "ref.duckdb"
        for x in (db, db.with_suffix(".duckdb.wal")):
            x.unlink(missing_ok=True)
        w, r, o = run_measured([PY, "-m", "bench.refs", "duckdb", str(f), str(db)])
        ddb.append(json.loads(o)["seconds"])
        ddb_rss.append(r)
        w, r, s = pwh_ingest(f, work / "wh_full", env)
        wall.append(w)
        rss.append(r)
        inner.append(s)
        log(f"  rep {i + 1}: msgspec {floor.decode[-1]:.2f} s (process "
            f"{floor.process[-1]:.2f} s), duckdb {ddb[-1]:.2f} s, pwh ingest {w:.2f} s "
            f"(in-process {s:.2f} s), rss {r / 2**20:.0f} MiB")
    shutil.rmtree(work / "wh_full", ignore_errors=True)
    g = f"full-size ingest ({n} samples, {size / 1e6:.0f} MB)"
    return [
        *floor.wall_rows(g, wall),
        Row(g, "pwh ingest wall (process, end to end)", median(wall), "s", median(ddb),
            "DuckDB read_json + UNNEST + checkpoint", 1.0, samples=ddb).judge(),
        Row(g, "pwh ingest peak RSS", median(rss), "bytes", size, "file size", 3.0,
            samples=rss).judge(),
        Row(g, "ingest_file in-process (no interpreter start)", median(inner), "s",
            median(floor.decode), DECODE_FLOOR, samples=inner).judge(),
        Row(g, "cat (I/O floor)", median(cat), "s", samples=cat).judge(),
        Row(g, "msgspec parse-only peak RSS", median(floor.rss), "bytes", size, "file size",
            samples=floor.rss).judge(),
        Row(g, "DuckDB read_json load peak RSS", median(ddb_rss), "bytes", size, "file size",
            samples=ddb_rss).judge(),
    ]


def goal_tenx(work: Path, level: dict, log) -> list[Row]:
    from bench import gen

    n = level["tenx_samples"]
    f = work / "profile_10x.json"
    info = gen.write_profile(f, n, seed=2)
    size = info["bytes"]
    log(f"10x profile: {n} samples, {size / 1e9:.2f} GB")
    env = stream_env(level)
    floor = MsgspecFloor(f)
    wall, rss = [], []
    for i in range(level["reps"]):
        warm(f)
        floor.measure()
        w, r, s = pwh_ingest(f, work / "wh_10x", env)
        wall.append(w)
        rss.append(r)
        log(f"  rep {i + 1}: msgspec {floor.decode[-1]:.2f} s (process "
            f"{floor.process[-1]:.2f} s, {floor.rss[-1] / 2**30:.1f} GiB), pwh ingest {w:.2f} s, "
            f"rss {r / 2**20:.0f} MiB")
    shutil.rmtree(work / "wh_10x", ignore_errors=True)
    f.unlink()
    g = f"10x profile ({n} samples, {size / 1e9:.2f} GB)"
    return [
        *floor.wall_rows(g, wall),
        Row(g, "pwh ingest peak RSS", median(rss), "bytes", size, "file size", 1.5,
            samples=rss).judge(),
        Row(g, "msgspec parse-only peak RSS", median(floor.rss), "bytes", size, "file size",
            samples=floor.rss).judge(),
    ]


def goal_huge(work: Path, level: dict, log) -> list[Row]:
    g = "document over 4 GiB"
    n = level["huge_samples"]
    if not n:
        return [Row(g, "pwh ingest of a > 4 GiB profile", None, "s",
                    note="skipped at this level (needs ~10 GB of disk)").judge()]
    from bench import gen

    f = work / "profile_huge.json"
    info = gen.write_profile(f, n, seed=3)
    size = info["bytes"]
    log(f"huge profile: {n} samples, {size / 2**30:.2f} GiB")
    warm(f)
    try:
        w, r, s = pwh_ingest(f, work / "wh_huge", stream_env(level))
    finally:
        shutil.rmtree(work / "wh_huge", ignore_errors=True)
        f.unlink()
    note = "" if size > 4 * 2**30 else "the generated file is not over 4 GiB"
    return [
        Row(g, f"pwh ingest wall ({size / 2**30:.2f} GiB, {n} samples)", w, "s",
            note=note or "ingested (DuckDB read_json cannot: maximum_object_size is 32-bit)"
            ).judge(),
        Row(g, "pwh ingest peak RSS", r, "bytes", size, "file size", 1.5).judge(),
    ]


# ---------------------------------------------------------------- history


def _optional(module: str, attr: str):
    import importlib

    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


class History:
    """A warehouse grown run by run from a deterministic history (audits and small profiles)."""

    def __init__(self, work: Path, level: dict, log):
        from warehouse.config import settings

        self.work, self.level, self.log = work, level, log
        self.dir = work / "history"
        self.s = settings(work / "wh_history" / "warehouse.duckdb")
        shutil.rmtree(self.s.state_dir, ignore_errors=True)
        self.n = 0
        self.probe_seed = 10_000

    def grow_to(self, n: int) -> None:
        from bench import gen
        from warehouse.ingesting.loader import ingest_paths

        if n <= self.n:
            return
        files = gen.write_history(self.dir, n, profile_samples=self.level[
            "history_profile_samples"], start=self.n)
        t0 = time.perf_counter()
        for k in range(0, len(files), 200):
            res = ingest_paths(self.s, files[k:k + 200])
            bad = [r for r in res if r.status == "failed"]
            if bad:
                raise RuntimeError(f"history run failed: {bad[0].message}")
        self.n = n
        self.log(f"  history: {n} runs ({time.perf_counter() - t0:.1f} s to add "
                 f"{len(files)})")

    def probe_files(self, kind: str, k: int) -> list[Path]:
        """``k`` new runs of ``kind`` like the history's, not yet ingested."""
        from bench import gen

        out = []
        for _ in range(k):
            self.probe_seed += 1
            p = self.dir / "probes" / f"{kind}_{self.probe_seed}.json"
            if kind == "audit":
                gen.write_audit(p, self.probe_seed)
            else:
                gen.write_profile(p, self.level["history_profile_samples"], self.probe_seed)
            gen.write_sidecar(p, "probe_" + kind, f"probe-{self.probe_seed}",
                              dt.datetime(2027, 1, 1) + dt.timedelta(minutes=self.probe_seed))
            out.append(p)
        return out


def goal_history(work: Path, level: dict, log) -> tuple[list[Row], History]:
    """Adding run N+1 costs about what adding run 2 did: ingestion, marts, validation, snapshot."""
    from warehouse import db
    from warehouse.ingesting.loader import ingest_paths

    build = _optional("warehouse.modelling.models", "build")
    validate_run = _optional("warehouse.checks", "validate_run") or _optional(
        "warehouse.checks.runner", "validate_run")
    record = _optional("warehouse.checks", "record_results")
    publish = _optional("warehouse.serving.snapshot", "publish")
    h = History(work, level, log)
    points = level["history_points"]
    cost: dict[str, dict[int, float]] = {k: {} for k in (
        "ingest audit", "ingest profile", "marts build", "validation", "snapshot publish")}
    notes: dict[str, str] = {}
    def after_new_run(con, s, n: int, last: str, timed: bool, into: dict) -> None:
        for what, fn in (("marts build", lambda: build(con)),
                         ("validation", lambda: record(con, validate_run(con, last))),
                         ("snapshot publish", lambda: publish(s, con))):
            if what in notes:
                continue
            try:
                t0 = time.perf_counter()
                fn()
                if timed:
                    into.setdefault(what, []).append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                notes[what] = f"failed: {str(exc)[:300]}"

    for what, fn, where in ((("marts build", build, "warehouse.modelling.models.build"),
                             ("validation", validate_run and record,
                              "warehouse.checks.validate_run/record_results"),
                             ("snapshot publish", publish, "warehouse.serving.snapshot.publish"))):
        if fn is None:
            notes[what] = f"{where} not found"
    from warehouse.config import settings

    gen_first = None
    base_cost: dict[str, dict[int, float]] = {k: {} for k in cost}
    for i, n in enumerate(points):
        h.grow_to(n)
        if gen_first is None:
            gen_first = sorted(h.dir.rglob("run_*.json"))[0]
        # the reference: a warehouse holding one run, measured at the same moment (the shared
        # machine's load drifts over the minutes the history takes to grow)
        bs = settings(work / f"wh_base_{n}" / "warehouse.duckdb")
        if ingest_paths(bs, [gen_first])[0].status != "ingested":
            raise RuntimeError(f"{gen_first}: could not start the 1-run reference warehouse")
        if i == 0 and level["warmup"]:  # imports (Great Expectations: seconds), caches
            with db.writer(h.s.warehouse, quiet=True) as con:
                last = con.execute("select max(sha256) from raw.files").fetchone()[0]
                after_new_run(con, h.s, n, last, False, {})
        probes = {kind: h.probe_files(kind, level["probes"]) for kind in ("audit", "profile")}
        # runs N+1, N+2, …: ingested one at a time after the catch-up below, each followed by
        # the timed build, validation and publish (median over them)
        k_held = max(1, len(probes["profile"]) - 2)
        held_back = probes["profile"][-k_held:]
        del probes["profile"][-k_held:]
        times = {kind: ([], []) for kind in probes}

        def ingest_both(kind: str, k: int, p: Path, bs=bs, times=times) -> str:
            for target, into in ((h.s, times[kind][0]), (bs, times[kind][1]))[
                    :: 1 if k % 2 else -1]:
                t0 = time.perf_counter()
                r = ingest_paths(target, [p])[0]
                into.append(time.perf_counter() - t0)
                if r.status != "ingested":
                    raise RuntimeError(r.message)
            h.n += 1
            return r.sha256

        for kind, files in probes.items():
            for k, p in enumerate(files):
                ingest_both(kind, k, p)
        # catch up (untimed): models built and the snapshot published twice (current and the
        # spare hold the same version), so that the timed steps below cost what run N+1 adds
        for target in (h.s, bs):
            with db.writer(target.warehouse, quiet=True) as con:
                if "marts build" not in notes:
                    build(con)
                if "snapshot publish" not in notes:
                    publish(target, con)
                    publish(target, con)
        steps: tuple[dict, dict] = ({}, {})
        for j, p in enumerate(held_back):
            last = ingest_both("profile", len(probes["profile"]) + j, p)
            for target, into in ((h.s, steps[0]), (bs, steps[1]))[:: 1 if j % 2 else -1]:
                with db.writer(target.warehouse, quiet=True) as con:
                    after_new_run(con, target, n, last, True, into)
        for kind, (t, b) in times.items():
            cost[f"ingest {kind}"][n] = median(t)
            base_cost[f"ingest {kind}"][n] = median(b)
        for (into, by_what) in ((cost, steps[0]), (base_cost, steps[1])):
            for what, ts in by_what.items():
                into[what][n] = median(ts)
        shutil.rmtree(bs.state_dir, ignore_errors=True)
        log(f"  N={h.n}: " + ", ".join(
            f"{k} {v[n] * 1000:.0f} ms (1-run warehouse {base_cost[k].get(n, 0) * 1000:.0f})"
            for k, v in cost.items() if n in v))
    rows = []
    for what, by_n in cost.items():
        g = f"cost flat as history grows: {what}"
        if not by_n:
            rows.append(Row(g, "cost of adding a run", None, "s",
                            note=notes.get(what, "not measured")).judge())
            continue
        for n in points:
            if n not in by_n or n not in base_cost[what]:
                rows.append(Row(g, f"N={n}", None, "s", note=notes.get(what, "")).judge())
                continue
            note = ""
            if what == "marts build":
                note = "every model brought up to date after run N+1 (incremental)"
            rows.append(Row(g, f"add a run at N~{n}", by_n[n], "s", base_cost[what][n],
                            "same, 1-run warehouse, same moment", 1.5, note=note).judge())
    return rows, h


# ---------------------------------------------------------------- analyst queries

QUERIES = {
    "trend for one kernel across all labels": ("""
        select label, label_seq, median_us, delta_pct, verdict, evidence
        from marts.kernel_trends
        where series = $series and kernel = $kernel
        order by label_seq
    """, 0.050),
    "latest-build regression list": ("""
        with latest as (
            select series, max(label_seq) as label_seq
            from marts.kernel_trends
            group by series
        )
        select t.series, t.kernel, t.label, t.delta_pct, t.evidence
        from marts.kernel_trends as t
        join latest using (series, label_seq)
        where t.verdict = 'regressed'
        order by t.delta_pct desc
    """, 0.200),
    "per-kernel duration percentiles over all samples": ("""
        select kernel, count(*) as samples,
               quantile_cont(duration_cycles, [0.5, 0.9, 0.99]) as p50_p90_p99
        from raw.profile_samples
        group by kernel
        order by kernel
    """, 0.200),
    "usefulCycles per kernel (long metadata join)": ("""
        select s.kernel, sum(try_cast(m.value as bigint)) as useful_cycles
        from raw.profile_samples as s
        join raw.profile_sample_metadata as m using (run_id, sample_idx)
        where m.name = 'usefulCycles'
        group by s.kernel
        order by s.kernel
    """, None),
}


def goal_queries(work: Path, level: dict, log, h: History) -> list[Row]:
    import duckdb

    from bench import gen
    from warehouse import db
    from warehouse.ingesting.loader import ingest_paths

    g = "analyst queries, 1,000-run warehouse" if level["name"] == "full" else \
        "analyst queries (quick level: small warehouse)"
    target = level["history_points"][-1]
    h.grow_to(target)
    big = []
    for i in range(level["big_profiles"]):
        p = work / "big" / f"full_{i}.json"
        gen.write_profile(p, level["full_samples"], seed=100 + i)
        gen.write_sidecar(p, "tile_attention_full", f"build-{i:04d}",
                          dt.datetime(2026, 6, 1) + dt.timedelta(hours=i))
        r = ingest_paths(h.s, [p])[0]
        if r.status != "ingested":
            raise RuntimeError(r.message)
        p.unlink()
        big.append(r)
    build = _optional("warehouse.modelling.models", "build")
    rows = []
    build_note = ""
    with db.writer(h.s.warehouse, quiet=True) as con:
        runs = con.execute("select count(*) from raw.files").fetchone()[0]
        nsamp = con.execute("select count(*) from raw.profile_samples").fetchone()[0]
        if build is not None:
            try:
                t0 = time.perf_counter()
                build(con)
                rows.append(Row(g, f"full model build ({runs} runs, {nsamp} samples)",
                                time.perf_counter() - t0, "s").judge())
            except Exception as exc:  # noqa: BLE001
                build_note = f"model build failed: {str(exc)[:200]}"
        else:
            build_note = "warehouse.modelling.models.build not found"
        con.execute("checkpoint")
    log(f"  warehouse: {runs} runs, {nsamp} samples")
    con = duckdb.connect(str(h.s.warehouse), read_only=True)
    try:
        have = {r[0] for r in con.execute(
            "select table_schema || '.' || table_name from information_schema.tables"
        ).fetchall()}
        params = {}
        if "marts.kernel_trends" in have:
            row = con.execute("select series, kernel from marts.kernel_trends "
                              "group by series, kernel order by count(*) desc, series, kernel "
                              "limit 1").fetchone()
            params = {"series": row[0], "kernel": row[1]} if row else {}
        for name, (sql, limit) in QUERIES.items():
            metric = f"{name} (warm median)"
            if "marts.kernel_trends" in sql and "marts.kernel_trends" not in have:
                rows.append(Row(g, metric, None, "s", note=build_note or
                                "marts.kernel_trends missing").judge())
                continue
            p = {k: v for k, v in params.items() if f"${k}" in sql}
            con.execute(sql, p).fetchall()  # warm-up
            times = []
            for _ in range(level["query_reps"]):
                t0 = time.perf_counter()
                con.execute(sql, p).fetchall()
                times.append(time.perf_counter() - t0)
            note = f"over {nsamp} samples" if "samples" in sql else ""
            rows.append(Row(g, metric, median(times), "s", limit=limit, note=note,
                            samples=times).judge())
    finally:
        con.close()
    return rows


def goal_dagster(work: Path, level: dict, log) -> list[Row]:
    """A burst of files dropped into the landing folder under the real ``make ui`` (daemon,
    landing sensor, run launcher), timed to queryable marts, against ``pwh ingest`` + ``pwh
    check`` + ``pwh build`` of the same files as whole processes; then one file on the idle
    system (``bench/dagster_flow.py``)."""
    g = "Dagster path (issue 12)"
    n = int(os.environ.get("PWH_BENCH_BURST_FILES", "100"))
    if not level["dagster"]:
        return [Row(g, f"burst of {n} files to queryable marts, via the daemon", None, "s",
                    note="skipped at this level (starts `make ui` and takes minutes; "
                    "python -m bench.run --only dagster measures it)").judge()]
    try:
        _, _, out = run_measured([PY, "-m", "bench.dagster_flow", str(work / "dagster_flow"),
                                  "--files", str(n)])
        r = json.loads(out.strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - report, keep the other goals
        return [Row(g, f"burst of {n} files to queryable marts, via the daemon", None, "s",
                    note=f"could not run: {str(exc)[-300:]}").judge()]
    log(f"  CLI {r['cli']}, burst {r['burst_seconds']:.1f} s, one file "
        f"{r['one_file_seconds']:.1f} s, runs {r['runs']}")
    cli = r["cli_seconds"]
    target = 2 * cli + 60
    burst = Row(g, f"burst of {r['files']} files dropped into landing/ under `make ui`, to the "
                "marts in the analysts' snapshot", r["burst_seconds"], "s", cli,
                "pwh ingest + check + build, whole processes",
                note=f"target <= 2x CLI + 60 s = {target:.0f} s; ingest runs launched: "
                f"{sum(r['runs_after_burst'].get('ingest_file', {}).values())}",
                samples=[r["burst_seconds"]]).judge()
    burst.status = "pass" if r["burst_seconds"] <= target else "FAIL"
    one = Row(g, "one file dropped on the idle system, to the marts in the snapshot",
              r["one_file_seconds"], "s", limit=60.0, samples=[r["one_file_seconds"]]).judge()
    return [burst, one]


# ---------------------------------------------------------------- report


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "bytes":
        return f"{v / 2**20:,.0f} MiB"
    if unit == "s":
        return f"{v * 1000:,.1f} ms" if v < 1 else f"{v:,.2f} s"
    return f"{v:g} {unit}"


def table(rows: list[Row]) -> str:
    out = []
    by_goal: dict[str, list[Row]] = {}
    for r in rows:
        by_goal.setdefault(r.goal, []).append(r)
    for goal, rs in by_goal.items():
        out.append(f"\n## {goal}\n")
        out.append("| metric | measured | reference | ratio | limit | result |")
        out.append("|---|---|---|---|---|---|")
        for r in rs:
            ref = f"{fmt_value(r.reference, r.unit)} ({r.reference_name})" if r.reference else "-"
            ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
            lim = "-" if r.limit is None else (f"<= {r.limit:g}x" if r.reference else
                                               f"< {fmt_value(r.limit, r.unit)}")
            res = r.status + (f" — {r.note}" if r.note else "")
            out.append(f"| {r.metric} | {fmt_value(r.measured, r.unit)} | {ref} | {ratio} | "
                       f"{lim} | {res} |")
    return "\n".join(out)


GOALS = ("full", "10x", "huge", "history", "queries", "dagster", "report", "kineto",
         "ncu", "verdicts", "lake")
# The lake goals (issue 14) need the [lake] extra, Java and PostgreSQL and take ~30 min on 2
# cores: run them by name, `python -m bench.run --only lake`.
# The Nsight Compute goals (issue 21, bench/ncu.py) at full size build a 1,000-report history
# of 20 million metric values: run them by name too, `python -m bench.run --only ncu`.
DEFAULT_GOALS = tuple(g for g in GOALS if g not in ("lake", "ncu"))


def goal_verdicts(work: Path, level: dict, log) -> list[Row]:
    """Issue 10: verdict quality per scenario and the cost of kernel_trends (bench/verdicts.py,
    which prints the full per-scenario table; here its headline figures as rows)."""
    from bench import verdicts

    quick = level["name"] == "quick"
    seeds = [verdicts.SEED_BASE + k for k in range(1 if quick else 3)]  # held out from tests
    q = verdicts.quality(seeds, work / "verdicts", log,
                         labels=6 if quick else None)
    rows = []
    for name, rs in q["by_scenario"].items():
        pl = sum(r["planted"] for r in rs)
        missed = sum(len(r["missed"]) + r["late"] for r in rs)
        worst = max(r["false_flags"] / r["cells"] for r in rs) * 100
        noflag = verdicts.scenarios_kind(name) == "drift"
        rows.append(Row("verdicts: planted steps not found at their label", name,
                        float(missed) if pl else None, "steps", limit=0,
                        note=f"of {pl}" if pl else "nothing planted").judge())
        rows.append(Row("verdicts: false flags, worst series", name,
                        None if noflag else worst, "%", limit=0.5,
                        note="drift: everything moves" if noflag else "").judge())
        rows.append(Row("verdicts: unchanged failing the equivalence rule", name,
                        float(sum(r["unchanged_without_power"] for r in rs)), "cells",
                        limit=0).judge())
        if verdicts.scenarios_kind(name) != "drift":
            rows.append(Row("verdicts: newest-label flags (every cut)", name,
                            float(sum(r.get("newest_flags", 0) for r in rs)), "cells",
                            limit=0).judge())
    c = verdicts.cost(60 if quick else 1000, 2 if quick else 3, work / "verdicts_cost", log)
    rows.append(Row("verdicts: cost", f"full rebuild, {c['runs']} runs x {c['keys']} keys",
                    statistics.median(c["full_rebuild_s"]), "s", limit=10).judge())
    rows.append(Row("verdicts: cost", "incremental rebuild after one run",
                    statistics.median(c["incremental_new_s"]), "s",
                    statistics.median(c["incremental_old_s"]),
                    f"verdict code of {verdicts.OLD_REF}", 1.5).judge())
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny inputs (CI keeps the harness "
                    "working with this; its timings mean nothing)")
    ap.add_argument("--out", type=Path, default=OUT, help="output folder (default bench/out)")
    ap.add_argument("--reps", type=int, help="repetitions of each ingest measurement")
    ap.add_argument("--only", nargs="+", choices=GOALS, help="run only these goals")
    ap.add_argument("--skip", nargs="+", choices=GOALS, default=[], help="skip these goals")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    ap.add_argument("--report", nargs="+", type=Path, metavar="JSON",
                    help="print the tables of earlier results files (no measurement)")
    a = ap.parse_args(argv)
    if a.report:
        for f in a.report:
            res = json.loads(f.read_text())
            m = res["machine"]
            print(f"# {f.name}: level {res['level']}, started {res['started_utc']} UTC, "
                  f"{res['seconds']:.0f} s; {m['cores']} cores, {m['memory_gib']} GiB, {m['cpu']}; "
                  f"load average at start {res.get('load_average_start')}, at end "
                  f"{res['load_average_end']}")
            print(table([Row(**r) for r in res["rows"]]))
        return 0
    name = "quick" if a.quick else "full"
    level = {**LEVELS[name], "name": name}
    if a.reps:
        level["reps"] = a.reps
    goals = [g for g in (a.only or DEFAULT_GOALS) if g not in a.skip]
    if name == "quick" and not a.only:  # ingests ~1,700 runs even when quick: ask for it by name
        goals = [g for g in goals if g != "verdicts"]
    work = a.out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = dt.datetime.now(dt.UTC)
    load_start = loadavg()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"bench level {name}: goals {', '.join(goals)}; load average {loadavg()}")
    rows: list[Row] = []
    h = None
    try:
        if "full" in goals:
            rows += goal_full_size(work, level, log)
        if "10x" in goals:
            rows += goal_tenx(work, level, log)
        if "huge" in goals:
            rows += goal_huge(work, level, log)
        if "history" in goals or "queries" in goals:
            hist_rows, h = goal_history(work, level, log)
            if "history" in goals:
                rows += hist_rows
        if "queries" in goals:
            rows += goal_queries(work, level, log, h)
        if "dagster" in goals:
            rows += goal_dagster(work, level, log)
        if "report" in goals:  # issue 11: bench/report.py
            from bench.report import goal_report

            rows += goal_report(work, level, log, Row, median, PWH)
        if "kineto" in goals:  # issue 13: bench/kineto.py
            from bench import kineto

            rows += kineto.goals(work, level, log)
        if "ncu" in goals:  # issue 21: bench/ncu.py (PWH_BENCH_NCU=rep,history)
            from bench import ncu

            rows += ncu.goals(work, level, log)
        if "verdicts" in goals:
            rows += goal_verdicts(work, level, log)
        if "lake" in goals:  # issue 14: bench/lake.py
            from bench import lake

            rows += lake.goals(work, level, log)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "level": name,
        "command": "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started_utc": started.isoformat(timespec="seconds"),
        "seconds": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
        "machine": machine(),
        "load_average_start": load_start,
        "load_average_end": loadavg(),
        "rows": [asdict(r) for r in rows],
    }
    a.out.mkdir(parents=True, exist_ok=True)
    dest = a.out / f"results-{name}.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(f"# bench ({name}) — {result['started_utc']}, {result['machine']['cores']} cores, "
          f"{result['machine']['memory_gib']} GiB, load average at end "
          f"{result['load_average_end']}")
    if name == "quick":
        print("\nQUICK LEVEL: tiny inputs that only keep the harness working; its timings and "
              "pass/fail mean nothing. Run `make bench` for the real figures.")
    print(table(rows))
    print(f"\nfigures: {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
