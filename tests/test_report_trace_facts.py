"""pwh report shows the verdicts of the trace facts (issue 20, item 3): marts.trace_trends'
confirmed changes are changes in effect on the index (an operator's GPU time that regressed
behind a kernel swap, a slower step, more GPU idle), ranked by what they honestly add per run,
and the series page shows each changed fact key's verdict per label under the anchor the
index links to.

Two generated trace scenarios (warehouse/trace_scenarios.py), 6 labels x 2 jobs of 2 ranks,
planted from label #3 on: ``trace-kernel-swap`` (aten::mm launches another kernel, 15 %
slower: no kernel trend says so, only op_kernel_ns of aten::mm) and ``trace-idle-growth``
(the input pipeline stalls: step time and GPU idle share rise, no kernel slower)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import duckdb
import pytest

from warehouse import db
from warehouse import trace_scenarios as ts
from warehouse.config import Settings, settings
from warehouse.ingesting import loader
from warehouse.modelling import models
from warehouse.serving import snapshot
from warehouse.serving.report import build_report, pages

LABELS, PLANT = 6, 3
SWAP, IDLE = "trace-kernel-swap", "trace-idle-growth"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Settings, Path]:
    root = tmp_path_factory.mktemp("report-trace-facts")
    for name in (SWAP, IDLE):
        ts.generate(root / "hist" / name, ts.spec(name, seed=5, labels=LABELS, repeats=2,
                                                  ranks=2, steps=2, plant_at=PLANT))
    s = settings(root / "state" / "warehouse.duckdb")
    files = [f for f in loader.expand([root / "hist"]) if f.name != ts.GROUND_TRUTH]
    res = loader.ingest_paths(s, files)
    assert [r.status for r in res] == ["ingested"] * len(files), [r.message for r in res]
    with db.writer(s.warehouse, quiet=True) as con:
        models.build(con)
        snapshot.publish(s, con)
    return s, build_report(s, root / "report").out


def page_data(path: Path) -> dict:
    m = re.search(r'<script type="application/json" id="pwh-data">(.*?)</script>',
                  path.read_text(), re.S)
    assert m, path
    return json.loads(m.group(1))


def objs(t: dict) -> list[dict]:
    return [dict(zip(t["columns"], r, strict=True)) for r in t["rows"]]


def mart(s: Settings, sql: str, params=()) -> list[dict]:
    con = duckdb.connect(str(snapshot.current(s)), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def trend(s: Settings, series: str, fact: str, key: str) -> list[dict]:
    return mart(s, "select * from marts.trace_trends where series = ? and fact = ? and key = ? "
                   "order by label_seq", [series, fact, key])


def effect(out: Path) -> list[dict]:
    return objs(page_data(out / "index.html")["effect"])


def one(rows: list[dict], **match) -> dict:
    got = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(got) == 1, (match, [(r["series"], r["kind"], r["name"]) for r in rows])
    return got[0]


def run_total(s: Settings, series: str) -> float:
    latest = mart(s, "select arg_max(label, label_seq) as l from marts.kernel_trends "
                     "where series = ?", [series])[0]["l"]
    return statistics.median(r["total_us"] for r in mart(
        s, "select total_us from marts.run_summary where series = ? and label = ?",
        [series, latest]))


def test_an_operator_slower_behind_a_kernel_swap_is_a_change_in_effect(report):
    s, out = report
    rows = trend(s, SWAP, "op_kernel_ns", "aten::mm")
    began = next(r for r in rows if r["verdict"] == "regressed")
    assert began["label_seq"] == PLANT
    c = one(effect(out), series=SWAP, kind="op_kernel_ns", name="aten::mm")
    assert c["verdict"] == "regressed" and c["label"] == began["label"]
    assert c["delta_pct"] == pytest.approx(began["delta_pct"]) and 10 < c["delta_pct"] < 20
    # the level now: the median of the label medians since the change, vs the level before
    now = statistics.median(r["median"] for r in rows if r["label_seq"] >= began["label_seq"])
    assert c["now_pct"] == pytest.approx((now / began["baseline_median"] - 1) * 100)
    # GPU time per run: ns in the mart, µs on the page, its share of the run's kernel time
    assert c["adds_us"] == pytest.approx((now - began["baseline_median"]) / 1000)
    assert c["adds_share"] == pytest.approx(c["adds_us"] / run_total(s, SWAP))
    assert c["trail"] == [r["median"] for r in rows]
    # no kernel trend carries it: the kernel was swapped, the old trend ends
    assert not [r for r in effect(out) if r["series"] == SWAP and r["kind"] != "op_kernel_ns"]


def test_the_series_page_shows_the_fact_verdicts_where_the_index_links(report):
    s, out = report
    c = one(effect(out), series=SWAP, kind="op_kernel_ns", name="aten::mm")
    page = out / "series" / f"{c['slug']}.html"
    assert c["has_page"] and page.exists()
    d = page_data(page)
    keys = {(k["fact"], k["key"]): k for k in d["trace"]["keys"]}
    k = keys[("op_kernel_ns", "aten::mm")]
    assert k["anchor"] == c["anchor"] == pages.anchor("op_kernel_ns", "aten::mm", trace=True)
    assert k["changed"] is True
    began = next(r for r in trend(s, SWAP, "op_kernel_ns", "aten::mm")
                 if r["verdict"] == "regressed")
    assert k["change"]["label"] == began["label"] and k["change"]["verdict"] == "regressed"
    assert k["change"]["delta_pct"] == pytest.approx(began["delta_pct"])
    shown = objs(k["rows"])
    mrows = trend(s, SWAP, "op_kernel_ns", "aten::mm")
    assert [(r["label"], r["verdict"], r["median"], r["baseline_median"]) for r in shown] == \
        [(r["label"], r["verdict"], r["median"], r["baseline_median"]) for r in mrows]
    # every whole-run fact is shown too, unchanged or not; every key at the latest label
    assert {("step_time", "(run)"), ("gpu_idle_share", "(run)")} <= set(keys)
    latest = objs(d["trace"]["latest"])
    every = mart(s, "select distinct fact, key from marts.trace_trends where series = ?", [SWAP])
    assert {(r["fact"], r["key"]) for r in latest} == {(r["fact"], r["key"]) for r in every}


def test_a_slower_step_counts_as_the_run_and_idle_share_has_no_time(report):
    s, out = report
    e = effect(out)
    step = one(e, series=IDLE, kind="step_time", name="(run)")
    assert step["verdict"] == "regressed" and step["label_seq"] == PLANT
    # a step X % slower makes the run X % slower: no time per run, the share is the change
    assert step["adds_us"] is None
    assert step["adds_share"] == pytest.approx(step["now_pct"] / 100)
    idle = one(e, series=IDLE, kind="gpu_idle_share", name="(run)")
    assert idle["verdict"] == "regressed"
    assert idle["adds_us"] is None and idle["adds_share"] is None
    # ranked by impact: every change with a share of the run before those without
    shares = [r["adds_share"] is None for r in e]
    assert shares == sorted(shares)
    d = page_data(out / "series" / f"{step['slug']}.html")
    keys = {(k["fact"], k["key"]): k for k in d["trace"]["keys"]}
    assert keys[("step_time", "(run)")]["changed"] and keys[("gpu_idle_share", "(run)")]["changed"]
