"""The models' parse cache: what :mod:`models` derives from a model's text by parsing it.

Parsing the 25 models with sqlglot costs ~1 s of every ``pwh build`` process. What loading
derives from a text (its dependencies; for an incremental model the narrowed SQL of
``models.scoped_sql``) is therefore kept per text: an entry is keyed by the SHA-256 of the text,
its incremental key, sqlglot's version and the bytes of ``models.py`` and this file
(:func:`salt`), is written by ``models`` only for a text that passed every check, and holds
derived strings only (JSON, never code). A missing, damaged or unwritable cache just means
parsing. ``$PWH_MODEL_CACHE`` names the folder (``off`` or empty: none); default
``$XDG_CACHE_HOME/pwh/models`` (``~/.cache/pwh/models``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import sqlglot

_MEMO: dict[str, dict] = {}  # this process's entries, read or written


@functools.cache
def salt() -> str:
    """What every key includes besides the text: the code that derives the entries."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(sqlglot.__version__.encode())
    for f in ("models.py", "parse_cache.py"):
        h.update((here / f).read_bytes())
    return h.hexdigest()


def folder() -> Path | None:
    d = os.environ.get("PWH_MODEL_CACHE")
    if d is not None:
        return None if d.strip() in ("", "off") else Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pwh" / "models"


def read(key: str) -> dict | None:
    """The entry of ``key`` (``{"key", "deps": [str], "scoped": str | None}``), or None when
    there is none or it is not exactly of that shape and key."""
    if key in _MEMO:
        return _MEMO[key]
    d = folder()
    if d is None:
        return None
    try:
        entry = json.loads((d / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(entry, dict) and entry.get("key") == key
            and isinstance(entry.get("deps"), list)
            and all(isinstance(x, str) for x in entry["deps"])
            and (entry.get("scoped") is None or isinstance(entry["scoped"], str))):
        return None
    _MEMO[key] = entry
    return entry


def write(key: str, entry: dict) -> None:
    """Keep ``entry`` under ``key``: the file is written whole (a rename) or not at all."""
    _MEMO[key] = entry
    d = folder()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, d / f"{key}.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # a read-only or full disk: the cache is an optimisation only
