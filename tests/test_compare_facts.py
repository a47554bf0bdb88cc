"""pwh compare beyond kernels (issues 20 and 21): a Kineto series is judged on its trace facts
(step time, GPU idle share, communication, GPU time per operator: marts.trace_trends) and an
Nsight Compute series on every metric of every kernel (marts.metric_trends), in the table, JSON
and markdown, and the gate decides on every fact: a slower step fails it with no kernel slower,
an operator's regression fails it, noise passes it, and a metric whose direction is not
documented (a throughput that fell) is shown but never fails it."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from warehouse import db
from warehouse.cli import main
from warehouse.config import Settings, settings
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen, ncu_gen
from warehouse.modelling import models
from warehouse.serving import snapshot

LABELS, REPEATS, PLANT_AT = 8, 3, 5
STEP = re.compile(r'("name": "ProfilerStep#\d+", "pid": 4242, "tid": 4242,\s*"ts": [\d.]+, '
                  r'"dur": )(\d+)\.(\d{3})')


def _slower_steps(path: Path, factor: float) -> None:
    """Every ProfilerStep annotation of a generated trace ``factor`` times as long (the CPU
    side got slower; no kernel did). Text edits: the times stay exact ns."""
    text, n = STEP.subn(lambda m: m.group(1) + _us(round(
        (int(m.group(2)) * 1000 + int(m.group(3))) * factor)), path.read_text())
    assert n == 3, path  # three steps per generated trace
    path.write_text(text)


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _sidecar(f: Path, series: str, label: str, when: str) -> None:
    (f.parent / (f.name + ".meta.json")).write_text(json.dumps(
        {"series": series, "label": label, "captured_at": when}))


def _step_history(folder: Path, series: str, factor: float) -> None:
    """Kineto traces whose steps are ``factor`` times as long from label PLANT_AT on."""
    for i in range(LABELS):
        for r in range(REPEATS):
            f = folder / series / f"s{i + 1:02d}-{r}.pt.trace.json"
            kineto_gen.write_file(f, steps=3, seed=500 + i * 10 + r, noise=0.01)
            if i >= PLANT_AT:
                _slower_steps(f, factor)
            _sidecar(f, series, f"s{i + 1:02d}", f"2026-09-{i + 1:02d}T{8 + r:02d}:00:00Z")


def _throughput_history(folder: Path, series: str) -> None:
    """ncu exports whose first kernel's SM throughput falls to 0.8x from label PLANT_AT on,
    nothing else changed."""
    for i in range(LABELS):
        plants = ({(ncu_gen.KERNELS[0], "sm__throughput.avg.pct_of_peak_sustained_elapsed"):
                   0.8} if i >= PLANT_AT else {})
        for r in range(REPEATS):
            f = folder / series / f"t{i + 1:02d}-{r}.csv"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(ncu_gen.details(ncu_gen.launches(77 + i * 10 + r, plants=plants)))
            _sidecar(f, series, f"t{i + 1:02d}", f"2026-08-{i + 1:02d}T{8 + r:02d}:00:00Z")


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Settings:
    root = tmp_path_factory.mktemp("compare-facts")
    src = root / "in"
    kineto_gen.write_history(src, series="train-op", labels=LABELS, repeats=REPEATS,
                             plant_at=PLANT_AT, factor=1.3)
    _step_history(src, "train-step", 1.5)
    ncu_gen.write_history(src, series="gemm-ncu", labels=LABELS, repeats=REPEATS,
                          plant_at=PLANT_AT, factor=1.3)
    _throughput_history(src, "sm-ncu")
    s = settings(root / "state" / "warehouse.duckdb")
    files = sorted(p for p in src.rglob("*") if p.is_file() and not p.name.endswith(".json")
                   or p.name.endswith(".pt.trace.json"))
    res = loader.ingest_paths(s, files)
    assert [r.status for r in res] == ["ingested"] * len(files), [r.message for r in res]
    with db.writer(s.warehouse, quiet=True) as con:
        models.build(con)
        snapshot.publish(s, con)
    return s


def pwh(capsys, s: Settings, *args) -> tuple[int, str, str]:
    rc = main(["compare", "--warehouse", str(s.warehouse), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def strict(text: str):
    def refuse(name):
        raise ValueError(f"bare {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def as_json(capsys, s: Settings, *args) -> tuple[int, dict]:
    rc, out, err = pwh(capsys, s, *args, "--format", "json")
    assert rc in (0, 1), err
    return rc, strict(out)


def mart(s: Settings, sql: str, params=()) -> list[dict]:
    import duckdb

    con = duckdb.connect(str(snapshot.current(s)), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def label(prefix: str, i: int) -> str:
    return f"{prefix}{i + 1:02d}"


def gating_regressions(d: dict) -> list[tuple]:
    return [(r["fact"], r["name"]) for r in d["rows"]
            if r["gates"] and r["verdict"] == "regressed"]


def test_a_slower_step_fails_the_gate_with_no_kernel_slower(wh, capsys):
    at = label("s", PLANT_AT)
    rc, d = as_json(capsys, wh, "--series", "train-step", "--label", at)
    assert rc == 1 and d["failed"] is True
    assert gating_regressions(d) == [("step_time", "(run)")]
    kernels = [r for r in d["rows"] if r["fact"] == "kernel"]
    assert kernels and all(r["verdict"] != "regressed" for r in kernels)
    step = next(r for r in d["rows"] if r["fact"] == "step_time")
    assert step["delta_pct"] > 40 and step["unit"] == "ns" and step["mart"] == "trace_trends"
    # the rows are the mart's, for every fact of the label
    want = {(r["fact"], r["key"]): r for r in mart(
        wh, "select * from marts.trace_trends where series = 'train-step' and label = ?", [at])}
    got = {(r["fact"], r["name"]): r for r in d["rows"] if r["mart"] == "trace_trends"}
    assert set(got) == set(want)
    for k, r in got.items():
        for col in ("median", "baseline_median", "delta_pct", "verdict", "evidence"):
            assert r[col] == want[k][col], (k, col)
    assert d["facts"]["step_time"] == 1 and d["facts"]["kernel"] == len(kineto_gen.KERNELS)
    # the same through --fail-on never, and the table says it
    assert pwh(capsys, wh, "--series", "train-step", "--label", at, "--fail-on", "never")[0] == 0
    rc, out, _ = pwh(capsys, wh, "--series", "train-step", "--label", at)
    assert rc == 1 and out.splitlines()[-1].startswith("FAIL: 1 regressed")
    header = out.splitlines()[1].split()
    assert header[:2] == ["verdict", "fact"] and "unit" in header and "median" in header
    first = out.splitlines()[3].split()
    assert first[:2] == ["regressed", "step_time"] and "(run)" in first  # run-wide first


def test_an_operator_regression_fails_the_gate_and_noise_passes(wh, capsys):
    rc, d = as_json(capsys, wh, "--series", "train-op", "--label", label("k", PLANT_AT))
    assert rc == 1
    assert ("op_kernel_ns", "aten::op_1") in gating_regressions(d)
    assert {f for f, _ in gating_regressions(d)} <= {"op_kernel_ns", "kernel"}
    # the labels before the plant: noise, nothing regressed, the gate passes
    for i in range(1, PLANT_AT):
        rc, d = as_json(capsys, wh, "--series", "train-op", "--label", label("k", i))
        assert rc == 0 and not gating_regressions(d) and d["failed"] is False
        assert {r["fact"] for r in d["rows"]} == {"step_time", "gpu_idle_share",
                                                  "communication_ns", "op_kernel_ns", "kernel"}
    # the order: run-wide facts, operators, kernels; by |delta| within each
    facts = [r["fact"] for r in d["rows"]]
    assert facts == sorted(facts, key=["step_time", "gpu_idle_share", "communication_ns",
                                       "op_kernel_ns", "kernel"].index)
    ops = [abs(r["delta_pct"]) for r in d["rows"] if r["fact"] == "op_kernel_ns"]
    assert ops == sorted(ops, reverse=True)


def test_inconclusive_trace_facts_fail_an_inconclusive_gate(wh, capsys):
    """--fail-on inconclusive decides on the trace facts as on kernels."""
    first = label("k", 0)  # no baseline: every fact is inconclusive
    rc, d = as_json(capsys, wh, "--series", "train-op", "--label", first,
                    "--fail-on", "inconclusive")
    assert rc == 1 and d["counts"]["inconclusive"] == len(d["rows"])
    # a label whose kernels are all unchanged but whose trace facts are not all unchanged
    for i in range(2, LABELS):
        _, d = as_json(capsys, wh, "--series", "train-op", "--label", label("k", i),
                       "--fail-on", "never")
        kern = {r["verdict"] for r in d["rows"] if r["fact"] == "kernel"}
        trace = {r["verdict"] for r in d["rows"] if r["mart"] == "trace_trends"}
        if kern == {"unchanged"} and trace == {"unchanged", "inconclusive"}:
            rc, _ = as_json(capsys, wh, "--series", "train-op", "--label", label("k", i),
                            "--fail-on", "inconclusive")
            assert rc == 1
            break
    else:
        pytest.fail("no label with only trace facts inconclusive")


def test_a_metric_regresses_only_where_its_direction_is_known(wh, capsys):
    at = label("n", PLANT_AT)
    rc, d = as_json(capsys, wh, "--series", "gemm-ncu", "--label", at)
    assert rc == 1
    gemm = ncu_gen.KERNELS[0]
    regressed = {(r["fact"], r.get("metric")) for r in d["rows"]
                 if r["verdict"] == "regressed" and r["name"] == gemm}
    assert regressed == {("kernel", None), ("metric", "gpu__time_duration.sum"),
                         ("metric", "Duration"), ("metric", "sm__cycles_elapsed.avg")}
    sm = next(r for r in d["rows"] if r.get("metric", "").startswith("sm__throughput")
              and r["name"] == gemm)
    assert sm["verdict"] == "decreased" and sm["engine_verdict"] == "improved"
    assert sm["gates"] is False and sm["lower_is_better"] is False
    assert d["counts"]["decreased"] == 1 and d["gating_rows"] == sum(
        r["gates"] for r in d["rows"])
    # every metric of every kernel is there, as the mart has it
    want = mart(wh, "select kernel, metric, unit, verdict, median from marts.metric_trends "
                    "where series = 'gemm-ncu' and label = ?", [at])
    got = {(r["name"], r["metric"], r["unit"]): r for r in d["rows"] if r["fact"] == "metric"}
    assert len(got) == len(want) == 8 * len(ncu_gen.KERNELS)
    for w in want:
        r = got[(w["kernel"], w["metric"], w["unit"])]
        assert (r["verdict"], r["median"]) == (w["verdict"], w["median"])
    # the few that matter first (durations, throughputs, occupancy, DRAM bytes), then the rest
    from warehouse.serving.report.compare import key_metric

    keys = [key_metric(r["metric"]) for r in d["rows"] if r["fact"] == "metric"]
    assert keys == sorted(keys, reverse=True) and 0 < sum(keys) < len(keys)
    assert not key_metric("launch__registers_per_thread") and key_metric("dram__bytes.sum")


def test_a_fallen_throughput_alone_never_fails_the_gate(wh, capsys):
    at = label("t", PLANT_AT)
    rc, d = as_json(capsys, wh, "--series", "sm-ncu", "--label", at)
    moved = [(r["name"], r["metric"], r["verdict"]) for r in d["rows"]
             if r["verdict"] in ("increased", "decreased", "regressed", "improved")]
    assert moved == [(ncu_gen.KERNELS[0], "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                      "decreased")]
    assert rc == 0 and d["failed"] is False
    # the rule itself: a metric of unknown direction does not gate, whatever its verdict
    from warehouse.serving.report.compare import Comparison

    def row(verdict, gates):
        return {"fact": "metric", "mart": "metric_trends", "verdict": verdict, "gates": gates}

    c = Comparison("s", "l", 1, None, "verdict baseline", [row("inconclusive", False)])
    assert not c.fails("inconclusive") and c.worst() is None
    c.rows.append(row("inconclusive", True))
    assert c.fails("inconclusive") and not c.fails("regressed")
    c.rows.append({"fact": "step_time", "mart": "trace_trends", "verdict": "regressed",
                   "gates": True})
    assert c.fails("regressed") and c.worst() == "regressed"


def test_baseline_label_rejudges_the_facts_by_the_same_engine(wh, capsys):
    at, base = label("k", LABELS - 1), label("k", 0)
    rc, d = as_json(capsys, wh, "--series", "train-op", "--label", at, "--baseline", base,
                    "--fail-on", "never")
    assert rc == 0 and d["baseline"] == base
    vals = {(r["fact"], r["key"], r["label"]): r["run_values"] for r in mart(
        wh, "select fact, key, label, run_values from marts.trace_trends "
            "where series = 'train-op'")}
    trace = [r for r in d["rows"] if r["mart"] == "trace_trends"]
    assert len(trace) == 3 + len(kineto_gen.KERNELS)
    for r in trace:
        mine, theirs = vals[(r["fact"], r["name"], at)], vals[(r["fact"], r["name"], base)]
        assert r["median"] == pytest.approx(statistics.median(mine))
        assert r["baseline_median"] == pytest.approx(statistics.median(theirs))
        assert r["delta_pct"] == pytest.approx(
            100 * (statistics.median(mine) / statistics.median(theirs) - 1))
        assert r["baseline_labels"] == 1 and r["baseline_runs"] == len(theirs)
        assert r["baseline_from_label"] == base
    op = next(r for r in trace if r["name"] == "aten::op_1")
    assert op["delta_pct"] > 25 and op["verdict"] in ("regressed", "inconclusive")
    # 3 vs 3 runs cannot reach the confirmation level: the gate on inconclusive fails
    assert pwh(capsys, wh, "--series", "train-op", "--label", at, "--baseline", base,
               "--fail-on", "inconclusive")[0] == 1
    # metrics: re-judged, and the direction rule applied to the engine's new verdict
    rc, d = as_json(capsys, wh, "--series", "sm-ncu", "--label", label("t", LABELS - 1),
                    "--baseline", label("t", 0), "--fail-on", "never")
    sm = next(r for r in d["rows"] if r.get("metric", "").startswith("sm__throughput")
              and r["name"] == ncu_gen.KERNELS[0])
    assert sm["delta_pct"] < -15 and sm["baseline_runs"] == REPEATS
    assert sm["verdict"] in ("decreased", "inconclusive") and sm["gates"] is False
    assert sm["engine_verdict"] in ("improved", "inconclusive")
    assert all(r["verdict"] not in ("increased", "decreased") for r in d["rows"]
               if r["fact"] == "metric" and r["gates"])


def test_markdown_puts_the_changed_facts_first_and_folds_the_rest(wh, capsys):
    rc, md, _ = pwh(capsys, wh, "--series", "train-step", "--label", label("s", PLANT_AT),
                    "--format", "markdown")
    assert rc == 1 and len(md) < 65_536
    changed = md[:md.index("<details>")]
    assert "**Changed: 1 of" in changed and "rows**" in changed
    rows = [x for x in changed.splitlines() if x.startswith("| 🔴")]
    assert len(rows) == 1 and "| step\\_time | (run) |" in rows[0] and " ns |" in rows[0]
    assert md.count("<details>") == md.count("</details>") >= 1
    header = next(x for x in md.splitlines() if x.startswith("| verdict |"))
    every = [x for x in md.splitlines() if x.startswith("| ") and not x.startswith(
        ("| verdict |", "|---"))]
    assert all(x.count("|") == header.count("|") for x in every)
    _, d = as_json(capsys, wh, "--series", "train-step", "--label", label("s", PLANT_AT))
    assert len(every) == len(d["rows"])
    # an Nsight Compute series: the metrics of unknown direction that moved in their own fold
    rc, md, _ = pwh(capsys, wh, "--series", "gemm-ncu", "--label", label("n", PLANT_AT),
                    "--format", "markdown")
    changed, folded = md.split("<details>", 1)
    assert "gpu\\_\\_time\\_duration.sum of void gemm\\_tn\\_kernel" in changed
    assert "sm\\_\\_throughput" not in changed
    assert "<summary>1 metric of unknown direction increased or decreased" in md
    moved = folded.split("</details>")[0]
    assert "| decreased | metric | sm\\_\\_throughput" in moved
    assert "metric rows of unknown direction never gate" in md


def test_markdown_of_facts_stays_under_the_limit(wh):
    from warehouse.cli.compare import markdown
    from warehouse.serving.query import connect
    from warehouse.serving.report import compare as cmpmod

    con = connect(wh)
    try:
        c = cmpmod.compare(con, "gemm-ncu", label("n", PLANT_AT))
    finally:
        con.close()
    full = markdown(c, "head", "status")
    for limit in (len(full) - 1, len(full) // 2, 3000):
        md = markdown(c, "head", "status", limit=limit)
        assert len(md) + 1 <= limit
        cut = [int(m.group(1)) for m in re.finditer(r"\*(\d+) more [\w ]+? rows? not shown",
                                                     md)]
        rows = [x for x in md.splitlines() if x.startswith("| ")
                and not x.startswith(("| verdict |", "|---"))]
        assert cut and sum(cut) + len(rows) == len(c.rows)
        assert md.count("<details>") == md.count("</details>")


def test_the_real_process_exits_1_on_a_slower_step(wh):
    exe = [sys.executable, "-m", "warehouse.cli", "compare", "--warehouse", str(wh.warehouse),
           "--series", "train-step", "--label", label("s", PLANT_AT)]
    assert subprocess.run(exe, capture_output=True).returncode == 1
    p = subprocess.run([*exe, "--label", label("s", PLANT_AT - 1)], capture_output=True,
                       text=True)
    assert p.returncode == 0 and p.stdout.splitlines()[-1].startswith("ok: 0 regressed"), p.stdout
