"""Run identity: series (workload), label (build) and captured_at (UTC) of a raw file.

Precedence, field by field: explicit values (``pwh ingest --series/--label/--captured-at``),
then the sidecar ``<file>.meta.json``, then the defaults: series = parent folder name,
label = file stem, captured_at = the file's modification time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import msgspec

from .errors import FormatError

SIDECAR_SUFFIX = ".meta.json"
MAX_LEN = 256


class Sidecar(msgspec.Struct, forbid_unknown_fields=True):
    series: str | None = None
    label: str | None = None
    captured_at: str | None = None


@dataclass(frozen=True)
class RunMeta:
    series: str
    label: str
    captured_at: dt.datetime  # naive, UTC
    source: str  # cli | sidecar | default (the highest-precedence source used)


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


def _check_text(value: str, where: str, field: str) -> str:
    if not value or len(value) > MAX_LEN or any(ord(c) < 32 for c in value):
        raise FormatError(where, f"$.{field}",
                          f"a non-empty {field} of at most {MAX_LEN} printable characters")
    return value


def resolve(path: Path, *, series: str | None = None, label: str | None = None,
            captured_at: str | dt.datetime | None = None) -> RunMeta:
    side = Sidecar()
    sc = sidecar_path(path)
    if sc.exists():
        try:
            side = msgspec.json.decode(sc.read_bytes(), type=Sidecar)
        except msgspec.ValidationError as exc:
            raise FormatError(str(sc), "$", f"a sidecar with series/label/captured_at strings: {exc}"
                              ) from None
        except msgspec.DecodeError as exc:
            raise FormatError(str(sc), "$", f"well-formed JSON: {exc}", kind="malformed") from None
    source = "default"
    if side.series or side.label or side.captured_at:
        source = "sidecar"
    if series or label or captured_at:
        source = "cli"
    s = series or side.series or path.resolve().parent.name or "default"
    lab = label or side.label or path.stem
    if isinstance(captured_at, dt.datetime):
        t = captured_at
    elif captured_at:
        t = parse_time(captured_at, "--captured-at")
    elif side.captured_at:
        t = parse_time(side.captured_at, str(sc))
    else:
        t = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).replace(tzinfo=None)
    where = str(sc) if source == "sidecar" else str(path)
    return RunMeta(_check_text(s, where, "series"), _check_text(lab, where, "label"), t, source)
