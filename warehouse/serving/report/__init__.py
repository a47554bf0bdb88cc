"""``pwh report``: a static, self-contained HTML report of the published snapshot.

Pages (see docs/report.md): ``index.html`` (the changes in effect, ``effects.py``, and every
series), ``series/<series>.html`` (one plot per kernel: runs, label medians, baseline band,
verdicts, change points), ``labels/<series>/<label>.html`` (label vs baseline, the same rows as
``pwh compare``), ``runs/<run_id>.html`` (a run's rollup, with the SQL behind every number);
steps, GPU timeline, operators, metric trends and the trace facts' verdicts
(``marts.trace_trends``) where their marts exist (``facts.py``).
The plotting library (plotly.js, shipped inside the ``plotly`` package) and the report's own
script and stylesheet are written once, to ``assets/``. Pages open from disk, offline.

The report reads only the snapshot (an analyst connection): it never makes ingestion wait.
It is **incremental**: ``manifest.json`` keeps a content hash per series (over the mart and
staging rows its pages show) and per page; a series whose hash did not change is not read
again, and of a changed series only the pages whose content changed are rewritten. Each file
is written under a temporary name and renamed into place; the manifest is written last, so an
interrupted report leaves complete pages and is finished by the next one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.config import Settings
from warehouse.errors import PwhError
from warehouse.serving.report import data, effects, facts, pages, static, swaps

MANIFEST = "manifest.json"
LOCK = ".report.lock"
FORMAT = 1


class UnknownSeries(PwhError):
    """``--series`` named a series the snapshot does not have (a usage error)."""


@dataclass
class ReportResult:
    out: Path
    snapshot: str = ""
    series: list[str] = field(default_factory=list)
    series_rebuilt: list[str] = field(default_factory=list)
    pages_written: list[str] = field(default_factory=list)
    pages_unchanged: int = 0
    pages_removed: int = 0
    seconds: float = 0.0
    latest_changes: list[dict] = field(default_factory=list)
    in_effect: list[dict] = field(default_factory=list)

    @property
    def index(self) -> Path:
        return self.out / "index.html"

    def summary(self) -> str:
        return (f"report {self.index}: {len(self.series)} series "
                f"({len(self.series_rebuilt)} changed), {len(self.pages_written)} page(s) "
                f"written, {self.pages_unchanged} unchanged, {self.pages_removed} removed "
                f"[snapshot {self.snapshot or '-'}] ({self.seconds:.2f} s)")


def default_dir(settings: Settings) -> Path:
    """Where ``pwh report`` and the Dagster ``report`` asset write: ``<state>/report``."""
    return settings.state_dir / "report"


def plotly_js() -> Path:
    """plotly.min.js from the installed ``plotly`` package (without importing it)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise PwhError("the plotly package is not installed (a core dependency: pip install -e .)")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise PwhError(f"{path}: missing from the installed plotly package")
    return path


def _code_hash() -> str:
    h = hashlib.sha256(f"{FORMAT}".encode())
    here = Path(__file__).parent
    for path in sorted(here.glob("*.py")):
        if path.name != "__init__.py":
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _write(path: Path, text: str | bytes) -> None:
    """Write ``path`` whole or not at all (temporary name, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if isinstance(text, str):
            tmp.write_text(text, encoding="utf-8")
        else:
            tmp.write_bytes(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(out: Path):
    with open(out / LOCK, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise PwhError(f"{out}: not a folder (--out must name a folder for the report)")
    if out.is_dir() and not (out / MANIFEST).exists() and any(
            p.name != LOCK for p in out.iterdir()):
        raise PwhError(f"{out}: folder exists, is not empty and holds no pwh report "
                       f"({MANIFEST} missing); choose a new or empty folder")


def _load_manifest(out: Path) -> dict:
    try:
        m = json.loads((out / MANIFEST).read_text())
        if isinstance(m, dict) and m.get("format") == FORMAT:
            return m
    except (OSError, ValueError):
        pass
    return {}


def build_report(settings: Settings, out: str | os.PathLike[str] | None = None,
                 series: list[str] | None = None, *, progress=None) -> ReportResult:
    """Write (or bring up to date) the report of ``settings``' published snapshot in ``out``
    (default ``<state>/report``). ``series`` limits the work to those series (their pages and
    the index); other series' pages are left as they are."""
    t0 = time.perf_counter()
    out = Path(out) if out is not None else default_dir(settings)
    out = out.expanduser().resolve()
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / MANIFEST).exists():  # claim the folder first: a failed first run can resume
        _write(out / MANIFEST, json.dumps({"format": FORMAT}))
    res = ReportResult(out=out)
    with _locked(out):
        _build(settings, out, series, res, progress or (lambda _msg: None))
    res.seconds = time.perf_counter() - t0
    return res


def _build(settings: Settings, out: Path, only: list[str] | None, res: ReportResult,
           progress) -> None:
    old = _load_manifest(out)
    code = _code_hash()
    old_pages: dict[str, str] = old.get("pages", {})  # content hashes: valid across code changes
    old_series: dict[str, dict] = old.get("series", {})
    new_pages: dict[str, str] = dict(old_pages)
    new_series: dict[str, dict] = dict(old_series)

    def put(rel: str, text: str) -> None:
        h = hashlib.sha256(text.encode()).hexdigest()[:20]
        if old_pages.get(rel) != h or not (out / rel).exists():
            _write(out / rel, text)
            res.pages_written.append(rel)
        new_pages[rel] = h

    def drop(rels) -> None:
        for rel in rels:
            new_pages.pop(rel, None)
            with contextlib.suppress(FileNotFoundError):
                (out / rel).unlink()
                res.pages_removed += 1

    _assets(out, old, new_pages, res)
    overview: list[dict] = []
    changes: list[dict] = []
    effect: list[dict] = []
    history: list[dict] = []
    trails: dict = {}
    swapped: dict = {}
    meta = {"generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")}
    if settings.warehouse.exists():
        from warehouse.serving.query import connect

        con = connect(settings)
        data.clear_cache()
        try:
            res.snapshot = con.version
            meta["snapshot"] = con.version
            if data.has_marts(con):
                known = data.series_names(con)
                if only:
                    missing = [s for s in only if s not in known]
                    if missing:
                        raise UnknownSeries(
                            f"unknown series {', '.join(map(repr, missing))}; known series: "
                            f"{', '.join(known) or '(none yet)'}")
                selected = list(dict.fromkeys(only)) if only else known
                res.series = selected
                fps = data.fingerprints(con, selected)
                have = facts.present(con)
                swapped = swaps.counts(con)  # kernels new / gone per (series, label)
                for s in selected:
                    # a series written by other report code is rewritten (whose content
                    # changed): its per-label and per-run states do not apply
                    prev = old_series.get(s, {})
                    prev = prev if prev.get("code") == code else {}
                    if prev.get("fp") == fps[s] and all(
                            (out / p).exists() for p in prev.get("pages", [])):
                        continue
                    progress(f"series {s}: reading")
                    state = _series(con, s, prev, out, put, have,
                                    {lab for ser, lab in swapped if ser == s})
                    drop(set(old_series.get(s, {}).get("pages", [])) - set(state["pages"]))
                    new_series[s] = {"fp": fps[s], "code": code, **state}
                    res.series_rebuilt.append(s)
                gone = [] if only else [s for s in old_series if s not in known]
                overview = data.overview(con)
                changes = data.latest_changes(con)
                effect, history = effects.changes(con)
                trails = effects.trails(con, {(c["series"], c["kind"], c["name"])
                                              for c in effect + history})
            else:
                gone = list(old_series)
        finally:
            con.close()
    else:
        gone = list(old_series)
    for s in gone:
        drop(new_series.pop(s, {}).get("pages", []))
    res.latest_changes = changes
    res.in_effect = effect
    put("index.html", pages.index_page(overview, effect, history, trails, set(new_series), meta,
                                       swapped))
    # unchanged: every page of the report not written this time, whether it was rendered and
    # found identical or belongs to a series whose data did not change (not rendered at all)
    written = set(res.pages_written)
    res.pages_unchanged = sum(1 for rel in new_pages if rel not in written)
    _write(out / MANIFEST, json.dumps({"format": FORMAT, "code": code, "series": new_series,
                                       "pages": new_pages, "assets": _asset_stamp()},
                                      indent=1, sort_keys=True))


def _series(con, s: str, prev: dict, out: Path, put, have: set[str],
            swap_labels: set[str]) -> dict:
    """Write the pages of series ``s`` whose content may have changed since ``prev`` (its
    manifest entry): the series page always, label and run pages whose own hash (or, for a
    label, its neighbours) changed or whose file is missing. ``swap_labels``: its labels with
    a kernel new or gone (swaps.counts). Returns its new manifest entry."""
    from warehouse.serving.report import compare

    ss = pages.slug(s)
    labels = pages.label_list(compare.labels_of(con, s))
    lfp = data.label_fingerprints(con, s)
    runs = data.runs_of(con, s)
    rfp = data.run_fingerprints(con, s)
    label_state, dirty = {}, set()
    for i, lab in enumerate(labels):
        rel = f"labels/{ss}/{lab['slug']}.html"
        # the previous label's content too: the kernels gone since it are on this page
        label_state[lab["label"]] = "|".join([
            lfp.get(lab["label"], ""), labels[i - 1]["slug"] if i else "",
            lfp.get(labels[i - 1]["label"], "") if i else "",
            labels[i + 1]["slug"] if i + 1 < len(labels) else ""])
        if prev.get("labels", {}).get(lab["label"]) != label_state[lab["label"]] \
                or not (out / rel).exists():
            dirty.add(lab["label"])
    latest = labels[-1]["label"] if labels else None
    by = compare.by_label(con, s, sorted(dirty | ({latest} if latest else set())))
    latest_rows = by.get(latest, [])
    shown = pages.shown_kernels(data.kernel_flags(con, s), {
        (r["kernel_kind"], r["kernel"]): r.get("share_of_run") for r in latest_rows})
    rel_series = f"series/{ss}.html"
    put(rel_series, pages.series_page(
        s, labels, data.trends(con, s, shown), data.points(con, s, shown), len(runs), shown,
        latest_rows, steps=facts.series_steps(con, s, have),
        metrics=facts.metric_trends(con, s, have), trace=facts.trace_trends(con, s, have)))
    run_ids: dict[str, list[str]] = {}
    for r in runs:
        run_ids.setdefault(r["label"], []).append(r["run_id"])
    all_pages = [rel_series]
    moved = facts.label_changes(con, s, have) if dirty else {}
    swapped = swaps.by_label(con, s, sorted(dirty & swap_labels)) if dirty & swap_labels else {}
    for i, lab in enumerate(labels):
        rel = f"labels/{ss}/{lab['slug']}.html"
        all_pages.append(rel)
        if lab["label"] in dirty:
            put(rel, pages.label_page(s, labels, i, by.get(lab["label"], []),
                                      run_ids.get(lab["label"], []),
                                      facts=moved.get(lab["label"], []),
                                      swaps=swapped.get(lab["label"]),
                                      swap_sql=swaps.sql(s, lab["label"])
                                      if swapped.get(lab["label"]) else None))
    slugs = {lab["label"]: lab["slug"] for lab in labels}
    todo = [r for r in runs if prev.get("runs", {}).get(r["run_id"]) != rfp.get(r["run_id"])
            or not (out / f"runs/{r['run_id']}.html").exists()]
    ids = [r["run_id"] for r in todo]
    rolls, cats = data.rollups(con, s, ids), data.categories(con, s, ids)
    more = facts.run_facts(con, ids, have)
    for r in todo:
        put(f"runs/{r['run_id']}.html", pages.run_page(
            r, rolls.get(r["run_id"], []), cats.get(r["run_id"], []), slugs.get(r["label"]),
            facts=more.get(r["run_id"])))
    all_pages += [f"runs/{r['run_id']}.html" for r in runs]
    return {"pages": sorted(all_pages), "labels": label_state,
            "runs": {r["run_id"]: rfp.get(r["run_id"], "") for r in runs}}


def _asset_stamp() -> dict:
    js = plotly_js()
    st = js.stat()
    return {"plotly": f"{st.st_size}:{int(st.st_mtime)}",
            "report": hashlib.sha256((static.JS + static.CSS).encode()).hexdigest()[:16]}


def _assets(out: Path, old: dict, new_pages: dict, res: ReportResult) -> None:
    """plotly.min.js, report.js and report.css, written once per folder (again only when the
    installed plotly or the report's own assets change)."""
    stamp = _asset_stamp()
    prev = old.get("assets", {})
    a = out / "assets"
    if prev.get("plotly") != stamp["plotly"] or not (a / "plotly.min.js").exists():
        _write(a / "plotly.min.js", plotly_js().read_bytes())
        res.pages_written.append("assets/plotly.min.js")
    if prev.get("report") != stamp["report"] or not (a / "report.js").exists() \
            or not (a / "report.css").exists():
        _write(a / "report.js", static.JS)
        _write(a / "report.css", static.CSS)
        res.pages_written += ["assets/report.js", "assets/report.css"]
