"""The ``report`` asset: the static HTML trend report (``pwh report``, docs/report.md), brought
up to date after the analysts' snapshot is published.

It reads the snapshot only (no writer pool, never waits for ingestion) and writes
``<state>/report/`` (only the series whose data changed are rewritten). Its metadata gives the
report's location and the latest regressions and improvements. It sits in the ``snapshot``
group so the jobs that publish the snapshot (``refresh_models``, ``full_validation``) refresh it
too.
"""

import dagster as dg

from pipelines.resources import WarehouseResource
from pipelines.snapshot import SNAPSHOT_KEY
from warehouse.serving.report import build_report

REPORT_KEY = dg.AssetKey(["report"])


def _changes_md(changes: list[dict], limit: int = 20) -> str:
    if not changes:
        return "No regression or improvement at the latest label of any series."

    def cell(v) -> str:
        s = " ".join(str(v).split())
        s = s if len(s) <= 100 else s[:99] + "…"
        return s.replace("|", "&#124;").replace("<", "&lt;").replace(">", "&gt;")

    out = ["| verdict | series | label | kernel | delta | q |", "|---|---|---|---|--:|--:|"]
    for c in changes[:limit]:
        delta = "" if c.get("delta_pct") is None else f"{c['delta_pct']:+.1f}%"
        q = "" if c.get("q_value") is None else f"{c['q_value']:.2g}"
        out.append(f"| {c['verdict']} | {cell(c['series'])} | {cell(c['label'])} | "
                   f"{cell(c['kernel'])} | {delta} | {q} |")
    if len(changes) > limit:
        out.append(f"\n… and {len(changes) - limit} more in the report")
    return "\n".join(out)


@dg.asset(
    key=REPORT_KEY,
    deps=[SNAPSHOT_KEY],
    group_name="snapshot",
    kinds={"html", "python"},
    description="Static HTML trend report of the published snapshot (`pwh report`): kernel "
    "trends across builds, verdicts, label vs baseline, run rollups. Open "
    "`<state>/report/index.html` from disk.",
)
def report(context: dg.AssetExecutionContext, warehouse: WarehouseResource
           ) -> dg.MaterializeResult:
    res = build_report(warehouse.settings, progress=context.log.debug)
    context.log.info(res.summary())
    regressed = [c for c in res.latest_changes if c.get("verdict") == "regressed"]
    return dg.MaterializeResult(metadata={
        "index": dg.MetadataValue.path(str(res.index)),
        "url": dg.MetadataValue.url(res.index.as_uri()),
        "snapshot": res.snapshot,
        "series_rewritten": dg.MetadataValue.int(len(res.series_rebuilt)),
        "pages_written": dg.MetadataValue.int(len(res.pages_written)),
        "latest_regressions": dg.MetadataValue.int(len(regressed)),
        "latest_changes": dg.MetadataValue.md(_changes_md(res.latest_changes)),
        "seconds": dg.MetadataValue.float(round(res.seconds, 3)),
    })
