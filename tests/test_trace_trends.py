"""marts.trace_trends: the CPU-side facts of Kineto runs judged by the verdict engine. A history
with an operator's kernel made slower from one label on is found at that label on that
operator (the operator keeps its trend under any kernel name), with no other flag."""

from __future__ import annotations

from warehouse import db
from warehouse.ingesting import loader
from warehouse.ingesting.formats import kineto_gen
from warehouse.modelling import models


def test_a_slower_kernel_is_found_on_its_operator_at_its_label(tmp_path):
    from warehouse.config import settings

    kineto_gen.write_history(tmp_path / "in", labels=8, repeats=3, plant_at=5, factor=1.3)
    s = settings(tmp_path / "state" / "warehouse.duckdb")
    files = sorted((tmp_path / "in").rglob("*.pt.trace.json"))
    results = loader.ingest_paths(s, files)
    assert [r.status for r in results] == ["ingested"] * len(files)
    with db.writer(s.warehouse) as con:
        models.build(con)
        flagged = con.execute(
            "select fact, key, label, verdict from marts.trace_trends "
            "where verdict in ('regressed', 'improved')").fetchall()
        facts = {f for (f,) in con.execute("select distinct fact from marts.trace_trends")
                 .fetchall()}
        rows = con.execute("select count(*) from marts.trace_trends").fetchone()[0]
    # KERNELS[1] (the planted kernel) is launched by aten::op_1; labels are k01..k08
    assert flagged == [("op_kernel_ns", "aten::op_1", "k06", "regressed")]
    assert facts == {"step_time", "gpu_idle_share", "communication_ns", "op_kernel_ns"}
    assert rows == 8 * (3 + len(kineto_gen.KERNELS))
