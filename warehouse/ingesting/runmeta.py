"""Run identity: series (workload), label (build) and captured_at (UTC) of a raw file.

Precedence, field by field: explicit values (``pwh ingest --series/--label/--captured-at/--job``),
then the sidecar ``<file>.meta.json``, then the defaults: series = parent folder name,
label = file stem, captured_at = the file's own clock where its format has one (see
``RunMeta.with_file_clock``), else its modification time; job = none, or the folder's name
when the loader found the folder's Kineto files to be the rank files of one job
(``jobs.folder_jobs``). A run of a job (``job`` set) takes the job's name as its default
label: every rank file of a job has the same label (docs/formats.md, "Jobs of many ranks").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from warehouse.errors import FormatError

SIDECAR_SUFFIX = ".meta.json"
MAX_LEN = 256


class Sidecar(msgspec.Struct, forbid_unknown_fields=True):
    series: str | None = None
    label: str | None = None
    captured_at: str | None = None
    job: str | None = None


@dataclass(frozen=True)
class RunMeta:
    series: str
    label: str
    captured_at: dt.datetime  # naive, UTC
    source: str  # cli | sidecar | default (the highest-precedence source used)
    # True when captured_at is the file's mtime fallback: the loader replaces it with the file's
    # own clock where the format has one (nsys session start, Kineto baseTimeNanoseconds).
    captured_default: bool = False
    job: str | None = None  # the distributed job this run is one rank file of
    job_source: str | None = None  # cli | sidecar | folder

    def with_file_clock(self, clock: dt.datetime | None) -> RunMeta:
        if clock is None or not self.captured_default:
            return self
        return dataclasses.replace(self, captured_at=clock, captured_default=False)


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def parse_time(value: str, where: str, field: str = "captured_at") -> dt.datetime:
    """ISO 8601 -> naive UTC. A value without offset is taken as UTC."""
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(where, f"$.{field}", f"an ISO 8601 time, got {value!r}") from None
    if t.tzinfo is not None:
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    return t


# Series and labels show up in paths, reports and dashboards: letters, digits and . _ : + @ / = , #
# - and inner spaces, no ".." path segment, no quotes, no control characters.
_SAFE = re.compile(r"[A-Za-z0-9._:+@/=,#-]+(?: [A-Za-z0-9._:+@/=,#-]+)*")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._:+@/=,# -]")


def check_name(value: str, where: str, field: str) -> str:
    """Refuse an explicit series/label that is not a plain name (a clear error, nothing stored)."""
    ok = bool(value) and len(value) <= MAX_LEN and _SAFE.fullmatch(value) is not None
    if not ok or ".." in value.split("/") or value.startswith("/"):
        raise FormatError(
            where, f"$.{field}",
            f"a {field} of 1-{MAX_LEN} characters from letters, digits, inner spaces and "
            f"._:+@/=,#- without '..' segments or a leading '/'; got {value[:80]!r}")
    return value


def _default_text(value: str) -> str:
    """A default series/label derived from a file or folder name, made safe instead of refused."""
    cleaned = _UNSAFE_CHARS.sub("_", value).strip(" /").replace("..", "_")[:MAX_LEN]
    return " ".join(cleaned.split()) or "default"


def resolve(path: Path, *, series: str | None = None, label: str | None = None,
            captured_at: str | dt.datetime | None = None, job: str | None = None,
            job_default: str | None = None) -> RunMeta:
    """The run identity of ``path``. ``job``: given on the command line; ``job_default``: the
    folder's job (a default, below the sidecar's)."""
    side = Sidecar()
    sc = sidecar_path(path)
    if sc.exists():
        try:
            side = msgspec.json.decode(sc.read_bytes(), type=Sidecar)
        except msgspec.ValidationError as exc:
            raise FormatError(str(sc), "$", "a sidecar with series/label/captured_at/job "
                              f"strings: {exc}") from None
        except msgspec.DecodeError as exc:
            raise FormatError(str(sc), "$", f"well-formed JSON: {exc}", kind="malformed") from None
    source = "default"
    if side.series or side.label or side.captured_at or side.job:
        source = "sidecar"
    if series or label or captured_at or job:
        source = "cli"
    where = str(sc) if side.series or side.label or side.job else str(path)
    if job:
        j, j_source = check_name(job, f"{path} (--job)", "job"), "cli"
    elif side.job:
        j, j_source = check_name(side.job, where, "job"), "sidecar"
    elif job_default:
        j, j_source = _default_text(job_default), "folder"
    else:
        j, j_source = None, None
    if series:
        s = check_name(series, f"{path} (--series)", "series")
    elif side.series:
        s = check_name(side.series, where, "series")
    else:
        s = _default_text(path.resolve().parent.name)
    if label:
        lab = check_name(label, f"{path} (--label)", "label")
    elif side.label:
        lab = check_name(side.label, where, "label")
    elif j is not None:
        lab = _default_text(j)  # one label for every rank file of the job
    else:
        lab = _default_text(path.stem)
    if isinstance(captured_at, dt.datetime):
        t = captured_at
    elif captured_at:
        t = parse_time(captured_at, "--captured-at")
    elif side.captured_at:
        t = parse_time(side.captured_at, str(sc))
    else:
        t = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).replace(tzinfo=None)
        return RunMeta(s, lab, t, source, True, j, j_source)
    return RunMeta(s, lab, t, source, False, j, j_source)
