"""Strict JSON decoding shared by every source format.

msgspec already rejects what lenient parsers accept (trailing commas, ``NaN``/``Infinity``,
a BOM, trailing garbage, invalid UTF-8, numbers out of range, nesting too deep). Two gaps are
closed here: duplicate object keys (msgspec keeps the last one silently, which would lose data)
and error messages that name a byte offset rather than a line and column.
"""

from __future__ import annotations

import json
import re

import msgspec

from .errors import FormatError

_PATH_RE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<path>[^`]*)`)?$", re.S)
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_WS_BEFORE_COLON = re.compile(rb'"[ \t\r\n]+:')


def _line_col(data: bytes, offset: int) -> str:
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}"


def decode(data: bytes, typ: type, path: str):
    """Decode ``data`` into ``typ`` or raise :class:`FormatError` naming file, JSON path and rule."""
    if not data.strip():
        raise FormatError(path, "$", "a JSON document, got an empty file", kind="malformed")
    if data.startswith(b"\xef\xbb\xbf"):
        raise FormatError(path, "$", "JSON without a byte-order mark (file starts with a UTF-8 BOM)",
                          kind="malformed")
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        m = _PATH_RE.match(str(exc))
        assert m is not None
        raise FormatError(path, m.group("path") or "$", m.group("msg"), kind="schema") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        where = "$"
        b = _BYTE_RE.search(msg)
        if b:
            where = f"$ ({_line_col(data, int(b.group(1)))})"
        if msg == "Input data was truncated" and data.rstrip().endswith((b"}", b"]")):
            msg = "JSON is malformed: an unterminated string or an invalid escape (e.g. a lone surrogate)"
        raise FormatError(path, where, f"well-formed JSON: {msg}", kind="malformed") from None
    except RecursionError:
        raise FormatError(path, "$", "JSON nested at most ~1000 levels deep", kind="malformed") from None


def approx_key_count(data: bytes) -> int:
    """Count object keys written as ``"key":`` (no blank before the colon).

    Inside a JSON string a quote is always escaped, so ``":`` there is always ``\\":``.
    """
    return data.count(b'":') - data.count(b'\\":')


def _reject_duplicates(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _Dup(k)
        seen.add(k)
    return dict(pairs)


class _Dup(Exception):
    pass


def check_no_duplicate_keys(data: bytes, expected_keys: int, path: str) -> None:
    """Raise :class:`FormatError` if any object in ``data`` repeats a key.

    ``expected_keys`` is the number of keys the decoded document has (every field of the typed
    schema is required and unknown fields are forbidden, so a duplicate can only add keys).
    The fast path compares a byte count with it; anything unusual falls back to an exact parse.
    """
    if approx_key_count(data) == expected_keys and not _WS_BEFORE_COLON.search(data):
        return
    find_duplicate_key(data, path)


def find_duplicate_key(data: bytes | str, path: str, where: str = "$") -> None:
    """Exact (slow) duplicate-key check with the standard library parser."""
    try:
        json.loads(data, object_pairs_hook=_reject_duplicates)
    except _Dup as exc:
        raise FormatError(path, where, f"unique object keys, got the key {exc.args[0]!r} twice",
                          kind="malformed") from None
