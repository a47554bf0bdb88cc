"""`make demo`: a fresh warehouse from the bundled seeds plus a generated history, every model
built, and the regression verdicts it found (checked against what the generator planted).

Steps, all through the warehouse's own code paths:

1. ingest the two example runs (examples/runs);
2. ``pwh synth`` a reproducible history (3 series x 24 labels, repeats, planted changes) into
   ``<state>/demo-history`` and ingest it (the sidecars set series/label/captured_at), plus a
   small generated PyTorch-profiler (Kineto) trace history (``kineto_gen.write_history``: 10
   labels x 3 runs, one planted regression) so trends and verdicts show a trace series too;
3. ``pwh build`` every model (staging -> marts) and publish the analysts' snapshot;
4. print the verdicts of ``marts.kernel_trends`` and compare them with the ground truth.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "runs"
sys.path.insert(0, str(ROOT))

VERDICTS_SQL = """
select series, kernel_kind, kernel, label, label_seq, round(delta_pct, 1) as delta_pct, verdict,
       method, evidence
from marts.kernel_trends
where verdict in ('regressed', 'improved')
order by series, label_seq, abs(delta_pct) desc
"""

LATEST_SQL = """
with latest as (
    select series, max(label_seq) as label_seq from marts.kernel_trends group by series
)
select t.series, t.label, count(*) as kernels,
       count(*) filter (where verdict = 'regressed') as regressed,
       count(*) filter (where verdict = 'improved') as improved,
       count(*) filter (where verdict = 'unchanged') as unchanged,
       count(*) filter (where verdict = 'inconclusive') as inconclusive
from marts.kernel_trends t join latest using (series, label_seq)
group by t.series, t.label
order by t.series
"""


def _say(quiet: bool, *args) -> None:
    if not quiet:
        print(*args, flush=True)


def fresh(wh: Path) -> None:
    """Remove the demo's own state only: the warehouse file, its WAL and its folders."""
    for p in (wh, wh.with_name(wh.name + ".wal")):
        p.unlink(missing_ok=True)
    for sub in ("archive", "quarantine", "snapshots", "demo-history"):
        shutil.rmtree(wh.parent / sub, ignore_errors=True)


def ingest(settings, folder: Path, quiet: bool) -> int:
    """Ingest every file under ``folder`` through the loader, on one connection."""
    from warehouse import db
    from warehouse.ingesting import loader

    _say(quiet, f"\n$ pwh ingest {folder}")
    t0 = time.perf_counter()
    n = {"ingested": 0, "skipped": 0, "failed": 0}
    with db.writer(settings.warehouse) as con:
        for p in loader.expand([folder]):
            r = loader.ingest_file(settings, p, con=con)
            n[r.status] += 1
            if r.status == "failed":
                print(f"FAIL {r.path}: {r.message}", file=sys.stderr)
        con.execute("CHECKPOINT")
    _say(quiet, f"{sum(n.values())} file(s): {n['ingested']} ingested, {n['skipped']} already "
                f"ingested, {n['failed']} failed ({time.perf_counter() - t0:.1f} s)")
    return n["failed"]


def build_demo(warehouse: Path, *, seed: int = 1, quiet: bool = False) -> dict:
    """Build the demo warehouse at ``warehouse`` from scratch. Returns the ground truth."""
    from warehouse import synth
    from warehouse.cli import main as pwh
    from warehouse.config import settings

    wh = Path(warehouse).resolve()
    fresh(wh)
    s = settings(wh)
    if ingest(s, EXAMPLES, quiet):
        raise SystemExit("demo: the example runs failed to ingest")
    history = wh.parent / "demo-history"
    _say(quiet, f"\n$ pwh synth {history} --seed {seed}")
    truth = synth.generate(history, synth.HistorySpec(seed=seed))
    for p in truth["plants"]:
        _say(quiet, f"  planted {p['direction']}: {p['series']} {p['kernel']} x{p['factor']:g} "
                    f"at label {p['label']} (#{p['label_seq']})")
    if ingest(s, history / "runs", quiet):
        raise SystemExit("demo: the generated history failed to ingest")
    from warehouse.ingesting.formats import kineto_gen

    traces = history / "kineto"
    _say(quiet, f"\n$ python -m warehouse.ingesting.formats.kineto_gen ... into {traces}")
    kt = kineto_gen.write_history(traces, seed=seed)
    for p in kt["plants"]:
        _say(quiet, f"  planted {p['direction']}: {p['series']} {p['kernel']} x{p['factor']:g} "
                    f"at label {p['label']} (#{p['label_seq']})")
    truth = {**truth, "plants": [*truth["plants"], *kt["plants"]],
             "expected": [*truth["expected"], *kt["expected"]]}
    if ingest(s, traces, quiet):
        raise SystemExit("demo: the generated Kineto history failed to ingest")
    _say(quiet, "\n$ pwh build")
    argv = ["--warehouse", str(wh), "build"]
    if quiet:
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            rc = pwh(argv)
    else:
        rc = pwh(argv)
    if rc != 0:
        raise SystemExit("demo: pwh build failed")
    return truth


def report(warehouse: Path, truth: dict) -> int:
    """Print the verdicts found and how they compare with what was planted."""
    import duckdb

    from warehouse.modelling.stats import VerdictConfig
    from warehouse.serving.query import format_result

    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        cur = con.execute(LATEST_SQL)
        print("\nlatest label of each series: verdicts over its kernels")
        print(format_result([d[0] for d in cur.description], cur.fetchall()))
        cur = con.execute(VERDICTS_SQL)
        cols = [d[0] for d in cur.description]
        flagged = cur.fetchall()
        print(f"\nverdicts found: {len(flagged)} (kernel, label) rows regressed or improved")
        print(format_result(cols, flagged))
        floor = VerdictConfig.from_env().floor_pct
        print(f"\nplanted changes (ground truth: {warehouse.parent / 'demo-history'}"
              "/ground_truth.json):")
        missed = 0
        for e in truth["expected"]:
            if abs(e["expected_delta_pct"]) < 2 * floor:
                continue  # too small to promise a verdict: see docs/analyst-guide.md
            got = con.execute(
                "select verdict, round(delta_pct, 1) from marts.kernel_trends where series = ? "
                "and kernel_kind = ? and kernel = ? and label = ?",
                [e["series"], e["kernel_kind"], e["kernel"], e["label"]]).fetchone()
            ok = got is not None and got[0] == e["direction"]
            missed += not ok
            print(f"  {'found ' if ok else 'MISSED'} {e['series']} {e['kernel']} at label "
                  f"{e['label']}: planted {e['expected_delta_pct']:+.1f}%, verdict "
                  f"{got[0] if got else 'none'} ({got[1] if got else '-'}%)")
    finally:
        con.close()
    example = "\"SELECT * FROM marts.kernel_trends WHERE verdict = 'regressed'\""
    print(f"\nwarehouse: {warehouse}")
    print(f"next: .venv/bin/pwh --warehouse {warehouse} sql {example}")
    print("      analyst guide and cookbook: docs/analyst-guide.md")
    return 1 if missed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", default=".pwh/warehouse.duckdb")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated history")
    args = ap.parse_args()
    wh = Path(args.warehouse).resolve()
    truth = build_demo(wh, seed=args.seed)
    return report(wh, truth)


if __name__ == "__main__":
    sys.exit(main())
