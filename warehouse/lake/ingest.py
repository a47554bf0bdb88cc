"""``pwh lake ingest``: run files into the lake's raw tables, one exactly-once commit per run.

No parser of its own: each file goes through ``pwh ingest``'s loader into a private in-memory
DuckDB database (:mod:`warehouse.lake.stage`), so the lake gets the same formats (kernel traces
included, gzip undone, big profiles and traces streamed through the forked parser), identity
(SHA-256 of the file's own bytes = ``run_id``), run metadata (options, sidecar, defaults; a
trace's own clock when no time was given), errors and quarantine (bad files are copied to the
local quarantine folder with an ``.error.json`` record, and the batch goes on). DuckDB writes
each raw table's rows as one Parquet data file; the raw bytes are archived content-addressed
under ``<location>/archive/``. A run the lake already has is recognised by its SHA-256 before
any parsing (for the first file of a command: after it, since pyiceberg is imported and the
catalog opened in a thread while that file is parsed). Any number of processes or machines may ingest at once: see
:mod:`warehouse.lake.commit`. Jobs of many ranks as ``pwh ingest`` records them (``--job``, a
sidecar's job, the folder's job); a rank file is checked against the job's ranks in the lake,
before its bytes are archived and again in the commit turn (:mod:`warehouse.lake.ranks`)."""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from warehouse.config import Settings
from warehouse.errors import FormatError
from warehouse.ingesting import jobs, loader, runmeta
from warehouse.ingesting.loader import IngestResult
from warehouse.lake import ranks, stage
from warehouse.lake.catalog import LakeConfig, open_catalog


def prepare(cat) -> None:
    """The lake's raw and checks tables, created if missing (and its jobs' ranks indexed)."""
    from warehouse.lake import commit, schemas

    commit.create_tables(cat, schemas.source_schemas())
    ranks.backfill(cat)  # a lake from before the rank index: its jobs' ranks indexed


class CatalogAhead(loader.Ahead):
    """Import pyiceberg and open (and prepare) the catalog while the first file is parsed
    (begun through :func:`loader.after_forks` once its parser process is forked): about a second
    of imports and catalog round trips. :meth:`get` returns the catalog."""

    NAME = "pwh-lake-catalog"

    def __init__(self, cfg: LakeConfig):
        super().__init__()
        self.cfg = cfg

    def work(self):
        from warehouse.lake import commit, ledger  # noqa: F401  (imported here, in parallel)

        cat = open_catalog(self.cfg)
        prepare(cat)
        return cat


def ingest_file(settings: Settings, cat, cfg: LakeConfig, path: Path, *,
                series: str | None = None, label: str | None = None,
                captured_at: str | None = None, job: str | None = None,
                job_default: str | None = None, meta: runmeta.RunMeta | None = None,
                original_path: str | None = None,
                on_retry: Callable[[int, str], None] | None = None,
                hook: Callable[[str], None] | None = None,
                cat_ahead: CatalogAhead | None = None) -> IngestResult:
    """Ingest one file (``cat_ahead``: the catalog being opened meanwhile; ``cat`` is None).

    ``job`` / ``job_default``: as for :func:`warehouse.ingesting.loader.ingest_file` (``--job``;
    the folder's job). A rank file of a job is checked against the job's ranks the lake holds
    (:mod:`warehouse.lake.ranks`): a duplicated or foreign rank is refused and quarantined as
    ``pwh ingest`` refuses it."""
    t0 = time.perf_counter()
    ident = {"series": series, "label": label, "captured_at": captured_at, "job": job,
             "job_default": job_default, "meta": meta}
    if cat_ahead is not None:
        try:
            return _ingest_file(settings, None, cfg, path, ident, original_path=original_path,
                                on_retry=on_retry, hook=hook, cat_ahead=cat_ahead, t0=t0)
        finally:
            cat_ahead.get()  # joined whatever happened (its error, if any, wins)
    return _ingest_file(settings, cat, cfg, path, ident, original_path=original_path,
                        on_retry=on_retry, hook=hook, cat_ahead=None, t0=t0)


def _ingest_file(settings: Settings, cat, cfg: LakeConfig, path: Path, ident: dict, *,
                 original_path, on_retry, hook, cat_ahead: CatalogAhead | None,
                 t0: float) -> IngestResult:
    shown = original_path or str(path.resolve())
    try:
        if loader.still_being_written(path):
            return IngestResult(shown, "skipped", message=loader.STILL_WRITING,
                                seconds=time.perf_counter() - t0)
        # a run the lake has is not parsed again (known once the catalog is open)
        sha = stage.file_sha256(path) if cat_ahead is None else None
    except OSError as exc:
        return IngestResult(shown, "failed", message=f"{shown}: {exc.strerror or exc}",
                            seconds=time.perf_counter() - t0)
    if cat_ahead is None:
        from warehouse.lake import ledger

        if ledger.committed(cat.engine, cat.name, [sha]):
            return _skipped(shown, sha, t0)
    else:
        loader.after_forks(cat_ahead.begin)
    marks = [("hashed", time.perf_counter())]
    with stage.load_private(settings, cfg.location, path, shown=shown, **ident) as run:
        marks.append(("loaded", time.perf_counter()))
        res = run.result
        if res.status != "ingested":  # failed (quarantined, as pwh ingest does) or skipped
            res.seconds = time.perf_counter() - t0
            return res
        sha = res.sha256  # the loader's own hash of the bytes it parsed
        if cat_ahead is not None:
            cat = cat_ahead.get()
        from warehouse.lake import commit, ledger

        if ledger.committed(cat.engine, cat.name, [sha]):
            return _skipped(shown, sha, t0)
        names = sorted(run.counts())
        loaded = commit.load_tables(cat, names)
        mine = ranks.claim(run.con)  # a rank of a job: checked against the lake's ranks
        try:
            if mine is not None:
                ranks.check(cat, mine, shown)  # early: a refused rank leaves no file behind
            stage.archive(cat, cfg.location, run, sha)
            files = stage.data_files(run, loaded, sha)
            marks.append(("parquet", time.perf_counter()))
            # the tables are loaded again in the writer's commit turn, just before the
            # snapshots are staged (commit.commit_turn): no other writer of the catalog
            # commits in between; a rank is checked again there, on those very tables
            done = commit.commit_files(cat, sha, res.source_format, files, on_retry=on_retry,
                                       hook=hook, check=ranks.checker(cat, mine, shown),
                                       also=ranks.row(cat, mine))
        except FormatError as exc:  # a duplicated or foreign rank: refused as pwh ingest does
            exc.sha256 = sha
            return loader.record_failure(settings, path, shown, sha, exc, t0, run.con)
    marks.append(("committed", time.perf_counter()))
    if os.environ.get("PWH_DEBUG_TIMING"):
        print("pwh lake timing: " + ", ".join(f"{n} {t - t0:.2f}s" for n, t in marks),
              file=sys.stderr)
    if not done:
        return _skipped(shown, sha, t0)
    res.seconds = time.perf_counter() - t0
    return res


def _skipped(shown: str, sha: str, t0: float) -> IngestResult:
    return IngestResult(shown, "skipped", sha, message="already ingested",
                        seconds=time.perf_counter() - t0)


def ingest_paths(settings: Settings, cfg: LakeConfig, paths: Iterable[str | os.PathLike[str]],
                 *, progress: Callable[[IngestResult], None] | None = None,
                 **meta_kw) -> list[IngestResult]:
    """Ingest files and folders into the lake; keep going past bad files. Without ``job``,
    the Kineto rank files of one job in one folder form a job named after the folder
    (:func:`warehouse.ingesting.jobs.folder_jobs`), as ``pwh ingest`` does."""
    stage.limit_arrow_threads()
    files = list(loader.expand(paths))
    defaults = {} if meta_kw.get("job") else jobs.folder_jobs(files)
    cat = None
    if not files:
        cat = open_catalog(cfg)
        prepare(cat)
    results = []
    for i, p in enumerate(files):
        ahead = CatalogAhead(cfg) if i == 0 else None
        r = ingest_file(settings, cat, cfg, p, cat_ahead=ahead, job_default=defaults.get(p),
                        **meta_kw)
        if ahead is not None:
            cat = ahead.get()
        results.append(r)
        if progress:
            progress(r)
    return results


def ingest_staged(settings: Settings, cat, cfg: LakeConfig, sha: str, **kw) -> IngestResult:
    """Ingest a file the landing sensor staged (by SHA-256), with the identity it recorded."""
    import json

    from warehouse.ingesting import landing

    path = landing.staged_path(settings, sha)
    meta_file = landing.staged_meta_path(settings, sha)
    info = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    if "error" in info:
        shown = info.get("original_path") or str(path)
        return IngestResult(shown, "failed", sha, message=f"{shown}: run identity: {info['error']}")
    meta = None
    if "series" in info:
        meta = runmeta.RunMeta(info["series"], info["label"],
                               dt.datetime.fromisoformat(info["captured_at"]), info["source"],
                               info.get("captured_default", False), info.get("job"),
                               info.get("job_source"))
    return ingest_file(settings, cat, cfg, path, meta=meta,
                       original_path=info.get("original_path"), **kw)
