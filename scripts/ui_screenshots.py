"""Regenerate the README's Dagster screenshots (docs/img/*.png) from a real ``make ui``.

    .venv/bin/python scripts/ui_screenshots.py [--out docs/img] [--work /tmp/pwh-shots]

Starts ``scripts/ui.py`` (automation on) on a throw-away DAGSTER_HOME and warehouse, drops a
small generated history and one truncated file into its landing folder, waits for the landing
sensor's ingest run (which fails for the bad file after ingesting the others) and the refresh it
requests, then photographs with headless Chromium (``/usr/bin/chromium``): the upstream lineage
of ``marts.kernel_trends``, a mart's columns with their lineage, the failed run (its short
error) and the rejected file's partition (failed, linked to that run).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _runs(ui, job: str) -> list[dict]:
    rs = ui.graphql("""{ runsOrError(limit: 100) { ... on Runs { results { runId jobName
        status } } } }""")["runsOrError"]["results"]
    return [r for r in rs if r["jobName"] == job]


def main(argv: list[str] | None = None) -> int:
    import os

    from playwright.sync_api import sync_playwright

    from bench import gen
    from bench.dagster_flow import UI, drop

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "pwh-shots")
    a = ap.parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    src = a.work / "files"
    files = gen.write_history(src, 12, profile_samples=200)
    bad = src / "vae_decoder" / "truncated_run.json"
    bad.write_bytes(files[0].read_bytes()[:700])
    os.environ["PWH_LANDING_SETTLE_S"] = "2"
    ui = UI(a.work).start()
    try:
        ui.wait("the code location", lambda: bool(ui.location()))
        ui.wait("a tick of the landing sensor", ui.sensor_ticked)
        drop([*files, bad], src, ui.landing)
        ui.wait("the ingest run", lambda: any(r["status"] == "FAILURE"
                                               for r in _runs(ui, "ingest_file")))
        ui.wait("the refresh", lambda: any(r["status"] == "SUCCESS"
                                            for r in _runs(ui, "refresh_models")))
        failed = next(r for r in _runs(ui, "ingest_file") if r["status"] == "FAILURE")
        url = f"http://127.0.0.1:{ui.port}"
        a.out.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
            browser = p.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1500, "height": 900}, device_scale_factor=1)
            try:
                page = browser.new_page()
                page.set_default_timeout(120_000)
                page.set_viewport_size({"width": 1000, "height": 1100})
                page.goto(f"{url}/assets/marts/kernel_trends?view=lineage"
                          "&lineageScope=upstream&lineageDepth=4")
                page.locator("svg").get_by_text("trend_points").first.wait_for()
                time.sleep(20)  # until every node has its status (slower on a busy machine)
                page.screenshot(path=str(a.out / "lineage.png"))
                page.set_viewport_size({"width": 1500, "height": 900})
                page.goto(f"{url}/assets/marts/kernel_run_rollup")
                row = page.locator("tr", has=page.get_by_text("share_of_run", exact=True)).first
                row.scroll_into_view_if_needed()
                time.sleep(1)
                page.screenshot(path=str(a.out / "column-lineage.png"))
                page.goto(f"{url}/runs/{failed['runId']}")
                page.get_by_text("RUN_FAILURE").first.wait_for()
                page.get_by_text("could not be ingested").first.wait_for()
                time.sleep(2)
                page.screenshot(path=str(a.out / "failed-run.png"))
                page.goto(f"{url}/assets/raw/files?view=partitions")
                page.get_by_text("truncated_run-").first.click()
                page.get_by_text("did not materialize this asset").first.wait_for()
                time.sleep(1)
                page.screenshot(path=str(a.out / "failed-partition.png"))
            finally:
                browser.close()
    finally:
        ui.stop()
    print(f"screenshots in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
