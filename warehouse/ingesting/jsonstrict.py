"""Strict JSON decoding shared by every source format.

msgspec already rejects what lenient parsers accept (trailing commas, ``NaN``/``Infinity``,
a BOM, trailing garbage, invalid UTF-8, numbers out of range, nesting too deep). Two gaps are
closed here: duplicate object keys (msgspec keeps the last one silently, which would lose data)
and error messages that name a byte offset rather than a line and column.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from warehouse.errors import FormatError

_PATH_RE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<path>[^`]*)`)?$", re.S)
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_WS_BEFORE_COLON = re.compile(rb'"[ \t\r\n]+:')
_BLANKS = (0x20, 0x09, 0x0D, 0x0A)
# From this size on, bytes are searched with numpy (a two-byte bytes.count or the regex above
# runs at ~0.5 GB/s; one numpy pass for the colons, then only the bytes before them, ~3x faster)
_BIG = 1 << 16


def _line_col(data: bytes, offset: int) -> str:
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}"


def decode(data: bytes, typ: type, path: str, *, part: Part | None = None):
    """Decode ``data`` into ``typ`` or raise :class:`FormatError` naming file, JSON path and rule.

    ``part`` says that ``data`` is a piece of a larger document (a chunk of a streamed array):
    error locations are then translated into the whole document's JSON path and line/column.
    """
    if part is None:
        if not data.strip():
            raise FormatError(path, "$", "a JSON document, got an empty file", kind="malformed")
        if data.startswith(b"\xef\xbb\xbf"):
            raise FormatError(path, "$", "JSON without a byte-order mark (file starts with a UTF-8 BOM)",
                              kind="malformed")
    try:
        if part is not None and part.decoder is not None:
            return part.decoder.decode(data)
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        m = _PATH_RE.match(str(exc))
        assert m is not None
        where = m.group("path") or "$"
        if part is not None:
            where = part.json_path(where)
        raise FormatError(path, where, m.group("msg"), kind="schema") from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        where = "$"
        b = _BYTE_RE.search(msg)
        if b:
            offset = int(b.group(1))
            if part is None:
                where = f"$ ({_line_col(data, offset)})"
            else:
                offset = part.byte_base + offset
                msg = _BYTE_RE.sub(f"(byte {offset})", msg)
                where = f"$ ({part.locate(offset)})" if part.locate else "$"
        if msg == "Input data was truncated" and data.rstrip().endswith((b"}", b"]")):
            msg = "JSON is malformed: an unterminated string or an invalid escape (e.g. a lone surrogate)"
        raise FormatError(path, where, f"well-formed JSON: {msg}", kind="malformed") from None
    except RecursionError:
        raise FormatError(path, "$", "JSON nested at most ~1000 levels deep", kind="malformed") from None


@dataclass
class Part:
    """Where a decoded piece sits in its document (see :func:`decode`).

    ``json_path`` maps the piece's JSON path (``$[3].duration``) to the document's
    (``$.samples[1003].duration``); ``byte_base`` is the document offset of the piece's byte 0
    (negative offsets point into bytes added around the piece); ``locate`` turns a document
    offset into "line L, column C".
    """

    json_path: Callable[[str], str]
    byte_base: int = 0
    locate: Callable[[int], str] | None = None
    decoder: msgspec.json.Decoder | None = None


def line_col_in_file(file: str, offset: int, block: int = 1 << 24) -> str:
    """``line L, column C`` of byte ``offset`` of a file, read in blocks (for huge documents)."""
    lines = 0
    last_nl = -1
    pos = 0
    with open(file, "rb") as fh:
        while pos < offset:
            buf = fh.read(min(block, offset - pos))
            if not buf:
                break
            lines += buf.count(b"\n")
            k = buf.rfind(b"\n")
            if k >= 0:
                last_nl = pos + k
            pos += len(buf)
    return f"line {lines + 1}, column {offset - last_nl}"


def approx_key_count(data: bytes) -> int:
    """Count object keys written as ``"key":`` (no blank before the colon).

    Inside a JSON string a quote is always escaped, so ``":`` there is always ``\\":``.
    """
    if len(data) < _BIG:
        return data.count(b'":') - data.count(b'\\":')
    return _key_count(data, *_colons(data))


def keys_counted(data: bytes) -> int | None:
    """:func:`approx_key_count`, or ``None`` when a key is written with a blank before its
    colon (``"key" :``) or ends in an escaped backslash (``"a\\\\":``), which that count does
    not see: one pass over big inputs for both."""
    import numpy as np

    if b'\\\\":' in data:  # a key ending in an escaped backslash, which the count misses
        return None
    if len(data) < _BIG:
        return None if _WS_BEFORE_COLON.search(data) else approx_key_count(data)
    a, at = _colons(data)
    if np.isin(a[at - 1], _BLANKS).any() and _WS_BEFORE_COLON.search(data):
        return None
    return _key_count(data, a, at)


def _colons(data: bytes):
    """The bytes of ``data`` as a numpy array, and the offsets of its colons (but a first
    byte)."""
    import numpy as np

    a = np.frombuffer(data, dtype=np.uint8)
    return a, np.flatnonzero(a[1:] == 0x3A) + 1


def _key_count(data: bytes, a, at) -> int:
    import numpy as np

    quoted = at[a[at - 1] == 0x22]
    n = len(quoted)
    if n and b"\\" in data:
        quoted = quoted[quoted >= 2]
        n -= int(np.count_nonzero(a[quoted - 2] == 0x5C))
    return n


def _keep(text: str) -> str:
    return text


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
    if keys_counted(data) == expected_keys:
        return
    find_duplicate_key(data, path)


def require_utf8(data: bytes, path: str, where: str = "$") -> str:
    """``data`` as text, or :class:`FormatError` unless it is UTF-8. msgspec checks the strings
    it decodes, not those inside a value kept verbatim (``msgspec.Raw``), which DuckDB would
    then refuse deep in a load."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(path, f"{where}, byte {exc.start}" if where != "$" else
                          f"byte {exc.start}", f"UTF-8 text, got the byte "
                          f"0x{data[exc.start]:02x} ({exc.reason})", kind="malformed") from None


def find_duplicate_key(data: bytes | str, path: str, where: str = "$") -> None:
    """Exact (slow) duplicate-key check with the standard library parser (``data``: bytes, or
    the text :func:`require_utf8` returned for them)."""
    if isinstance(data, bytes | bytearray):
        data = require_utf8(bytes(data), path, where)  # decoded once, for json.loads too
    try:  # numbers are not converted (Python refuses integers of over 4300 digits)
        json.loads(data, object_pairs_hook=_reject_duplicates, parse_int=_keep,
                   parse_float=_keep)
    except ValueError as exc:  # not JSON at all: the caller's decoder would have said so
        raise FormatError(path, where, f"well-formed JSON: {exc}", kind="malformed") from None
    except _Dup as exc:
        raise FormatError(path, where, f"unique object keys, got the key {exc.args[0]!r} twice",
                          kind="malformed") from None
