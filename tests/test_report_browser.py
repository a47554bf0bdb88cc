"""The report in a real browser (issue 11): headless Chromium (Debian's /usr/bin/chromium via
Playwright's Python driver, as tests/test_browser.py) opens the pages from file:// with no
network: no console error, no page error, the plots drawn, verdict markers where verdicts are
and none on a one-label series, the log/linear toggle, hostile kernel names shown as text
without running anything. Screenshots go to artifacts/ (git-ignored)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.test_report import LONG, PLANTED, SCRIPT, history, page_data, write_hostile_pages
from warehouse.serving.report import build_report

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MARKERS = ("regressed", "improved", "inconclusive")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent: install the Debian package chromium")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport={"width": 1300, "height": 900}, offline=True)
        yield ctx
        ctx.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    s = history(tmp_path_factory)
    out = build_report(s, tmp_path_factory.mktemp("browser") / "report").out
    return out, write_hostile_pages(out)


class Tab:
    """One browser tab reused across pages (a new tab per page costs seconds on a busy box);
    console errors, page errors, dialogs and non-file requests are collected per page."""

    def __init__(self, ctx):
        self.page = ctx.new_page()
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.problems.append(m.text)
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: self.problems.append(f"request {r.url}")
                     if not r.url.startswith(("file:", "data:", "blob:")) else None)


@pytest.fixture(scope="module")
def tab(browser):
    return Tab(browser)


def open_page(tab: Tab, path: Path, shot: str | None):
    page = tab.page
    tab.problems.clear()
    tab.dialogs.clear()
    page.goto(path.as_uri())
    page.wait_for_function("window.pwhReport && window.pwhReport.ready", timeout=30_000)
    # draw every lazy plot: scroll through the page
    page.evaluate("""async () => { for (let y = 0; y < document.body.scrollHeight;
        y += 600) { window.scrollTo(0, y); await new Promise(r => setTimeout(r, 30)); }
        window.scrollTo(0, 0); }""")
    page.wait_for_function("""() => [...document.querySelectorAll('.plot, .spark')]
        .every(d => d.classList.contains('js-plotly-plot'))""", timeout=30_000)
    if shot:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"report-{shot}.png"))
    return page, tab.problems, tab.dialogs


def trace_names(page) -> list[list[str]]:
    return page.evaluate("""() => [...document.querySelectorAll('.kernel-plot')]
        .map(d => d.data.map(t => t.name || ''))""")


def test_index_and_series_pages_load_with_plots_and_no_errors(tab, report):
    out, _ = report
    page, problems, _ = open_page(tab, out / "index.html", "index")
    assert page.locator(".spark.js-plotly-plot").count() >= 1
    assert page.get_by_text(PLANTED).count() >= 1
    assert page.locator("a[href^='series/']").count() >= 3
    assert page.evaluate("window.pwhReport.errors") == [] and problems == []

    series = next((out / "series").glob("decoder-tile-*.html"))
    page, problems, _ = open_page(tab, series, "series")
    n = len(page_data(series)["kernels"])
    assert page.locator(".kernel-plot.js-plotly-plot").count() == n
    assert page.locator(".kernel-plot svg.main-svg").count() >= n
    names = trace_names(page)
    assert "regressed" in names[0] and {"runs", "label median"} <= set(names[0])
    page.get_by_role("button", name="log").click()
    assert page.evaluate("document.querySelector('.kernel-plot').layout.yaxis.type") == "log"
    assert problems == []


def test_label_and_run_pages(tab, report):
    out, _ = report
    label = sorted((out / "labels").glob("decoder-tile-*/*.html"))
    last = max(label, key=lambda p: page_data(p)["label_seq"])
    page, problems, _ = open_page(tab, last, None)
    assert page.locator(".bars.js-plotly-plot").count() == 1
    assert page.locator("tbody tr").count() == len(page_data(last)["rows"]["rows"])
    assert problems == []
    run = next((out / "runs").glob("*.html"))
    page, problems, _ = open_page(tab, run, None)
    assert page.locator("pre.sql").count() >= 2 and problems == []
    cell = page.locator("td.num[title^='select ']").first
    assert "from marts." in cell.get_attribute("title")


def test_one_label_series_shows_runs_without_verdict_markers(tab, report):
    out, _ = report
    path = next((out / "series").glob("one-label-*.html"))
    page, problems, _ = open_page(tab, path, "one-label")
    names = trace_names(page)
    assert names and all("runs" in n for n in names)
    assert not any(m in n for n in names for m in MARKERS)
    assert problems == []


def test_hostile_kernel_names_render_as_text(tab, report):
    _, paths = report
    for kind, path in paths.items():
        shot = "hostile-series" if kind == "series" else None
        page, problems, dialogs = open_page(tab, path, shot)
        assert dialogs == [] and problems == [], (kind, problems)
        text = page.evaluate("document.body.innerText")
        assert SCRIPT in text, kind
        assert page.evaluate("document.querySelectorAll('main script, main img').length") == 0
        # the 64 KB name is cut on screen and does not stretch the page
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400, kind
        assert LONG not in text
