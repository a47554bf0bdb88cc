"""Review finding 2, on the report: a kernel-trace run page shows one rollup row per (device,
kernel); the SQL shown for every number (hover title) must return exactly that one number.
The page is rendered by its JavaScript in headless Chromium (as tests/test_report_browser.py),
and every title is run against the published snapshot."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import duckdb
import pytest

from tests.test_report_browser import CHROMIUM, FLAGS, WAIT_MS
from tests.test_trace_models import k
from warehouse.cli import main
from warehouse.config import settings
from warehouse.serving import snapshot
from warehouse.serving.report import build_report

# kernA on devices 0 and 1 and on no device, kernB on device 0 only
TRACE = {"schemaVersion": 1, "traceEvents": [
    k("kernA", 0, 60, device=0), k("kernA", 0, 50, device=1), k("kernB", 100, 100, device=0),
    {**k("kernA", 300, 7), "args": {"stream": 7}},
]}


def test_every_number_of_a_multi_device_run_page_has_sql_returning_it(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent: install the Debian package chromium")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "t.json").write_text(json.dumps(TRACE))
    w = ["--warehouse", str(tmp_path / "state" / "warehouse.duckdb")]
    assert main([*w, "ingest", str(tmp_path / "gpus"), "-q"]) == 0
    assert main([*w, "build"]) == 0
    s = settings(w[1])
    out = build_report(s, tmp_path / "report").out
    [run_page] = list((out / "runs").glob("*.html"))
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=FLAGS, offline=True)
        try:
            page = ctx.new_page()
            page.set_default_timeout(WAIT_MS)  # a loaded 2-core machine
            page.set_default_navigation_timeout(WAIT_MS)
            page.goto(Path(run_page).as_uri())
            page.wait_for_function("window.pwhReport && window.pwhReport.ready",
                                   timeout=WAIT_MS)
            assert page.evaluate("window.pwhReport.errors") == []
            cells = page.eval_on_selector_all(
                "td.num[title^='select ']", "els => els.map(e => [e.title, e.textContent])")
        finally:
            ctx.close()
    rollup = [c for c in cells if "kernel_run_rollup" in c[0]]
    assert len([c for c in rollup if " total_us from" in c[0]]) == 4  # one per (device, kernel)
    assert any("marts.run_summary" in c[0] for c in cells)
    con = duckdb.connect(str(snapshot.current(s)), read_only=True)
    try:
        for sql, text in cells:
            got = con.execute(sql).fetchall()
            assert len(got) == 1, (sql, got)  # exactly the number shown, not one per device
            if " total_us from marts.kernel_run_rollup" in sql:
                assert float(text.replace(",", "")) == pytest.approx(got[0][0]), sql
    finally:
        con.close()
