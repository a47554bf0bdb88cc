"""The trace scenarios of ``pwh synth --scenario trace-…`` (issue 20, item 6), built small in one
warehouse: each plant is found by marts.trace_trends at its label on the right fact, and no
other fact is flagged. The ground truth (computed noise-free by the generator) says which facts
a plant moves; these tests also say so in words, so that a generator or model change that moves
the wrong fact fails here."""

from __future__ import annotations

import io
import json

import pytest

from warehouse import db
from warehouse import trace_scenarios as ts
from warehouse.cli import main as pwh
from warehouse.config import settings
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen
from warehouse.modelling import models

LABELS, PLANT = 7, 3
RANKS = {"trace-kernel-swap": 2, "trace-idle-growth": 2, "trace-straggler": 3,
         "trace-slow-collective": 2}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every planted trace scenario, 7 labels x 3 jobs (2 or 3 ranks, 2 steps), one warehouse."""
    root = tmp_path_factory.mktemp("trace-scenarios")
    truths = {}
    for name, ranks in RANKS.items():
        spec = ts.spec(name, seed=3, labels=LABELS, ranks=ranks, steps=2, plant_at=PLANT)
        truths[name] = ts.generate(root / "hist" / name, spec)
    s = settings(root / "state" / "warehouse.duckdb")
    files = [f for f in loader.expand([root / "hist"]) if f.name != ts.GROUND_TRUTH]
    results = loader.ingest_paths(s, files)
    assert [r.status for r in results] == ["ingested"] * len(files)
    rows, kernel_labels = {}, {}
    with db.writer(s.warehouse) as con:
        models.build(con)
        cur = con.execute("select series, fact, key, label_seq, verdict, delta_pct "
                          "from marts.trace_trends order by all")
        cols = [d[0] for d in cur.description]
        for r in cur.fetchall():
            d = dict(zip(cols, r, strict=True))
            rows.setdefault(d["series"], []).append(d)
        for kernel, lo, hi in con.execute(
                "select kernel, min(label_seq), max(label_seq) from marts.kernel_trends "
                "where series = 'trace-kernel-swap' and kernel like '%sgemm%' "
                "group by kernel").fetchall():
            kernel_labels[kernel] = (lo, hi)
    return truths, rows, kernel_labels


def _flags(rows: list[dict]) -> set[tuple[str, str, int, str]]:
    return {(r["fact"], r["key"], r["label_seq"], r["verdict"]) for r in rows
            if r["verdict"] in ("regressed", "improved")}


def _check(built, name: str, want: set[tuple[str, str]]) -> None:
    truths, rows, _ = built
    truth, got = truths[name], rows[name]
    planted = {(e["fact"], e["key"]) for e in truth["expected"]
               if round(abs(e["expected_delta_pct"]), 1) >= 10}
    assert planted == want, truth["expected"]
    sc = ts.score(got, truth)
    assert sc["planted"] == len(want) and sc["at_label"] == len(want), sc
    assert sc["false_flags"] == [], sc
    # every flag is a planted fact at the plant label, in its direction, and nothing else
    assert _flags(got) == {(f, k, PLANT, "regressed") for f, k in want}


def test_kernel_swap_is_found_on_its_operator(built):
    _check(built, "trace-kernel-swap", {("op_kernel_ns", "aten::mm")})
    _, _, kernel_labels = built
    # the old kernel's trend ends where the new one's begins: only the operator carries it
    assert kernel_labels == {kineto_gen.STEP_OPS[1][1]: (0, PLANT - 1),
                             ts.SWAP_KERNEL: (PLANT, LABELS - 1)}


def test_idle_growth_is_found_on_idle_share_and_step_time_not_on_operators(built):
    _check(built, "trace-idle-growth", {("gpu_idle_share", "(run)"), ("step_time", "(run)"),
                                        ("step_time", "rank 0"), ("step_time", "rank 1")})


def test_straggler_is_found_on_its_rank_only(built):
    _check(built, "trace-straggler", {("step_time", "rank 2")})
    truths, rows, _ = built
    keys = {r["key"] for r in rows["trace-straggler"] if r["fact"] == "step_time"}
    assert keys == {"(run)", "rank 0", "rank 1", "rank 2"}


def test_slow_collective_is_found_on_communication(built):
    _check(built, "trace-slow-collective", {("communication_ns", "(run)"),
                                            ("op_kernel_ns", "nccl:all_reduce")})


def test_single_rank_series_have_no_rank_keys(tmp_path):
    """A series of one rank keeps step_time under '(run)' alone (no duplicate 'rank 0' trend)."""
    kineto_gen.write_history(tmp_path / "in", labels=2, repeats=1, plant_at=1)
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    loader.ingest_paths(s, sorted((tmp_path / "in").rglob("*.pt.trace.json")))
    with db.writer(s.warehouse) as con:
        models.build(con, select=["marts.trace_trends"])
        keys = con.execute("select distinct key from marts.trace_trends "
                           "where fact = 'step_time'").fetchall()
    assert keys == [("(run)",)]


def test_generator_separates_the_facts_noise_free():
    """write_training's own figures: a swap or slower collective moves neither the step, the
    span nor the busy time; a stall adds idle; a straggler dilates every figure."""
    def facts(**kw):
        t = kineto_gen.write_training(io.BytesIO(), steps=3, noise=0, run_noise=0,
                                      cpu_jitter_ns=0, **kw)
        return t["step_ns"], t["span_ns"], t["busy_ns"], t["communication_ns"]

    base = facts()
    assert facts(factors={"aten::mm": 1.15}, swap={"aten::mm": ts.SWAP_KERNEL})[:3] == base[:3]
    coll = facts(factors={"nccl:all_reduce": 1.2})
    assert coll[:3] == base[:3] and coll[3] == pytest.approx(base[3] * 1.2, rel=1e-6)
    stall = facts(stall_ns=15_000)
    assert stall[0] == base[0] + 15_000 and stall[2] == base[2]
    slow = facts(slowdown=1.1)
    assert [round(b / a, 2) for a, b in zip(base, slow, strict=True)] == [1.1] * 4


def test_cli_writes_a_trace_scenario_with_ground_truth(tmp_path, capsys):
    out = tmp_path / "h"
    rc = pwh(["--warehouse", str(tmp_path / "wh.duckdb"), "synth", str(out), "--scenario",
              "trace-straggler", "--labels", "4", "--repeats", "1", "--ranks", "3"])
    assert rc == 0
    truth = json.loads((out / ts.GROUND_TRUTH).read_text())
    assert len(truth["files"]) == 4 * 3
    assert [(e["fact"], e["key"], e["label_seq"]) for e in truth["expected"]] == [
        ("step_time", "rank 2", 2)]
    assert "expected regressed: trace-straggler step_time rank 2" in capsys.readouterr().out
    rc = pwh(["synth", str(tmp_path / "x"), "--scenario", "trace-straggler", "--ranks", "2"])
    assert rc == 2 and "at least 3 ranks" in capsys.readouterr().err
