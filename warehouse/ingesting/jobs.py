"""Jobs of many ranks: the Kineto rank files of one distributed job, ingested as one job.

Each rank file stays its own run (its own SHA-256, manifest row and transaction); a job is
named within its series and label (``(series, label, job)`` is the job: the same name under the
next build's label is the next build's job, so a folder name reused label after label never
collides); a run that belongs to a job also gets a row in ``raw.trace_jobs`` (job, rank, world_size, where the job
name came from), written in the run's own transaction by :func:`join`, just before the
manifest row and COMMIT. The job name comes with the run identity (:mod:`.runmeta`):
``pwh ingest --job NAME``, a sidecar's ``"job"``, or by default the folder, when
:func:`folder_jobs` finds the folder's Kineto files to be rank files of one job (``pwh ingest``),
or, on the Dagster landing path, by :func:`folder_job` file by file (rank files settle one by one).

The rules (docs/formats.md, "Jobs of many ranks"); a file breaking one is refused naming the
file and the rule (quarantined like every bad file; the rest of the batch goes on), never
mixed into the job:

* a run of a job is a Kineto trace whose ``distributedInfo`` has integer ``rank`` and
  ``world_size`` with ``0 <= rank < world_size``;
* one run per rank: a second file claiming a rank the job holds is a *duplicated rank*;
* every rank file of a job has the job's ``world_size`` and the same ``distributedInfo`` apart
  from ``rank`` and ``pg_config`` (whose per-group rank lists differ from rank to rank):
  another is a *foreign rank* (another job's file);
A job may hold only some of its ranks (``world_size`` says how many there are).
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from warehouse.errors import FormatError

KINETO = "kineto_trace"
# distributedInfo keys that may differ between the ranks of one job
PER_RANK_KEYS = frozenset({"rank", "pg_config"})
HEAD_BYTES = 1 << 20  # distributedInfo is written before traceEvents (Kineto's own order)
FIRST_BYTES = 64 << 10  # read first; the rest of HEAD_BYTES only when traceEvents is not in it
_INFO_KEY = re.compile(r'"distributedInfo"[ \t\r\n]*:[ \t\r\n]*')
_EVENTS_KEY = re.compile(r'"traceEvents"[ \t\r\n]*:')
_FOLDER_HINT = ("the job is named after the file's folder: give each job's rank files a folder "
                "of their own, or name the job with --job or the sidecar's job (dropped "
                "again so, a refused landing file is ingested anew)")


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def rank_of(info: dict | None) -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of a distributedInfo object (``None`` where not an integer)."""
    info = info if isinstance(info, dict) else {}
    return _int(info.get("rank")), _int(info.get("world_size"))


def shared_part(info: dict) -> dict:
    """The part of a distributedInfo every rank of one job has alike."""
    return {k: v for k, v in info.items() if k not in PER_RANK_KEYS}


def join(con, run_id: str, meta, shown: str) -> tuple[int, int]:
    """Record run ``run_id`` (rows inserted, manifest row not yet) as a rank of ``meta.job``
    inside the open transaction on ``con``, or raise :class:`FormatError` naming the file and
    the rule it breaks (the caller rolls back and quarantines). Returns ``(rank, world_size)``."""
    job = repr(meta.job)  # as the errors name it
    row = con.execute("SELECT source_format, metadata FROM raw.trace_runs WHERE run_id = ?",
                      [run_id]).fetchall()
    if not row or row[0][0] != KINETO:
        raise FormatError(shown, "$", f"a PyTorch profiler (Kineto) trace: job {job} groups "
                          "the rank files of a distributed job, and only Kineto traces carry "
                          "their rank (distributedInfo)", kind="job")
    info = json.loads(row[0][1] or "{}").get("distributedInfo")
    rank, world = rank_of(info)
    if world is None or world < 1 or rank is None:
        raise FormatError(shown, "$.distributedInfo", f"a rank file of job {job}: "
                          "distributedInfo with integer rank and world_size, got "
                          f"{json.dumps(info)[:200] if info is not None else 'none'}", kind="job")
    if not 0 <= rank < world:
        raise FormatError(shown, "$.distributedInfo.rank", f"a rank file of job {job}: "
                          f"0 <= rank < world_size, got rank {rank} of world_size {world}",
                          kind="job")
    members = con.execute(
        "SELECT j.run_id, j.rank, j.world_size, f.file_name, t.metadata "
        "FROM raw.trace_jobs AS j JOIN raw.files AS f ON f.sha256 = j.run_id "
        "LEFT JOIN raw.trace_runs AS t ON t.run_id = j.run_id "
        "WHERE j.job = ? AND f.series = ? AND f.label = ? ORDER BY j.rank, j.run_id",
        [meta.job, meta.series, meta.label]).fetchall()
    job = f"{job} (series {meta.series!r}, label {meta.label!r})"
    if members:
        first_id, first_rank, first_world, first_file, first_meta = members[0]
        there = f"rank {first_rank} ({first_file}, run {first_id[:12]})"
        if world != first_world:
            raise FormatError(shown, "$.distributedInfo.world_size", f"a rank of job {job}, "
                              f"whose world_size is {first_world} as its {there} says; this file "
                              f"says {world}: a foreign rank (another job's file?) is not mixed "
                              "in", kind="job")
        theirs = shared_part(json.loads(first_meta or "{}").get("distributedInfo") or {})
        ours = shared_part(info)
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key) != ours.get(key):
                raise FormatError(
                    shown, f"$.distributedInfo.{key}", f"a rank of job {job}, with the "
                    "distributedInfo of its other ranks apart from rank and pg_config: "
                    f"{key} is {json.dumps(theirs.get(key))[:80]} in its {there}, "
                    f"{json.dumps(ours.get(key))[:80]} here: a foreign rank (another job's "
                    "file?) is not mixed in", kind="job")
        for other_id, other_rank, _, other_file, _ in members:
            if other_rank == rank:
                raise FormatError(shown, "$.distributedInfo.rank", f"one file per rank of job "
                                  f"{job}: rank {rank} is {other_file} (run {other_id[:12]}) "
                                  "already: a duplicated rank is not mixed in ("
                                  + (_FOLDER_HINT if meta.job_source == "folder" else
                                     "name another job with --job or the sidecar's job")
                                  + ")", kind="job")
    con.execute("INSERT INTO raw.trace_jobs VALUES (?, ?, ?, ?, ?)",
                [run_id, meta.job, rank, world, meta.job_source])
    return rank, world


# ------------------------------------------------------------------ the folder's default job


def _text(raw: bytes, gz: bool) -> str:
    """The first bytes of a file as text (a gzip member's start inflated, at most HEAD_BYTES)."""
    if gz:
        raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
    return raw.decode("utf-8", "replace")


def head_info(source: Path | bytes) -> dict | None:
    """The ``distributedInfo`` object at the head of a Kineto trace (plain or gzip), or None
    (none before ``traceEvents``, not a JSON object, unreadable). ``source``: the file, or its
    bytes (the landing path has them in memory already)."""
    try:
        with io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb") as fh:
            raw = fh.read(FIRST_BYTES)  # Kineto's header is small: usually enough
            gz = raw[:2] == b"\x1f\x8b"
            text = _text(raw, gz)
            if _EVENTS_KEY.search(text) is None and text.lstrip()[:1] in ("{", ""):
                raw += fh.read(HEAD_BYTES - len(raw))
                text = _text(raw, gz)
    except (OSError, zlib.error):
        return None
    if text.lstrip()[:1] != "{":
        return None
    m = _INFO_KEY.search(text)
    if m is None:
        return None
    ev = _EVENTS_KEY.search(text)
    if ev is not None and ev.start() < m.start():
        return None  # a key inside the events, not the document's
    try:
        info, _ = json.JSONDecoder().raw_decode(text, m.end())
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def folder_job(path: Path, info: dict | None) -> str | None:
    """The default job of one file known by itself: its folder's name when its
    ``distributedInfo`` (:func:`head_info`) makes it a rank file of a job of 2 or more ranks
    (integer ``rank`` and ``world_size >= 2``), else None.

    The Dagster landing path decides so, file by file (:func:`warehouse.ingesting.landing.stage`):
    the rank files of one job may settle over several sensor ticks, and each must join the same
    job whichever of its ranks came first. A folder :func:`folder_jobs` makes a job gets the same
    job this way; where it gives none because the folder mixes jobs or holds two files of one
    rank, the files that do not fit the job as the warehouse holds it by then are refused by
    :func:`join` (duplicated or foreign rank, or ``rank`` past ``world_size``), never mixed in."""
    rank, world = rank_of(info)
    if rank is None or world is None or world < 2:
        return None
    return path.parent.resolve().name  # as folder_jobs names a folder's job


def folder_jobs(files: Iterable[Path]) -> dict[Path, str]:
    """The default job of each file ingested together with other rank files of its folder.

    A folder's files form one job, named after the folder, when at least two of them are rank
    files of a job of 2 or more ranks (:func:`folder_job`: a ``distributedInfo`` at the head of
    the document with an integer ``rank`` and ``world_size >= 2``) and every such rank file
    agrees: the same ``world_size``, the same distributedInfo apart from ``rank`` and
    ``pg_config``, distinct ranks within ``0 <= rank < world_size``. Single-process traces
    (``world_size`` 1, or no rank) may share the folder: they stay their own runs, as on the
    Dagster landing path. Otherwise (a folder mixing jobs, two files of one rank) no default job
    is given: each file is its own run, as without jobs; ``--job`` or a sidecar names a job
    explicitly, and then every rule is enforced file by file (:func:`join`)."""
    by_folder: dict[Path, list[Path]] = defaultdict(list)
    for f in files:
        by_folder[f.parent].append(f)
    out: dict[Path, str] = {}
    for folder, members in by_folder.items():
        if len(members) < 2:
            continue
        infos = {f: i for f in members
                 if (i := head_info(f)) is not None and folder_job(f, i) is not None}
        if len(infos) < 2:
            continue
        ranks = [rank_of(i) for i in infos.values()]
        worlds = {w for _, w in ranks}
        shared = {json.dumps(shared_part(i), sort_keys=True) for i in infos.values()}
        rank_list = [r for r, _ in ranks]
        (world,) = worlds if len(worlds) == 1 else (None,)
        if (world is None or world < 2 or len(shared) != 1 or None in rank_list
                or len(set(rank_list)) != len(rank_list)
                or not all(0 <= r < world for r in rank_list)):
            continue
        for f in infos:
            out[f] = folder.resolve().name
    return out
