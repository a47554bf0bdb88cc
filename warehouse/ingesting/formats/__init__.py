"""Source formats: detect from content, parse strictly, return columnar tables.

Two families of format modules:

- JSON documents with their own raw tables (``FORMATS``: tile profile, conv audit): ``NAME``,
  ``PARSER_VERSION``, ``TABLES``, ``detect(top_keys)``, ``parse(data, path, run_id)``,
  ``rebuild(con, run_id)``.
- kernel-trace formats sharing the raw tables of :mod:`.trace` (``TRACE_FORMATS``): ``NAME``,
  ``PARSER_VERSION``, ``KIND`` (``json``, ``sqlite`` or ``text``), ``TABLES = trace.TABLES``,
  ``sniff(head, path)``, ``parse(data, path, run_id)``, ``rebuild(con, run_id)``.

Detection is by content only, never the file name: gzip is recognised by its magic bytes and
undone first (the parsers see the decompressed bytes; identity and the archive keep the file's
own bytes); then a file with the SQLite magic is offered to the ``sqlite`` trace formats, a
JSON document to the ``json`` trace formats and then to the documents' top-key detection, and
any other text to the ``text`` trace formats (CSV). To register a trace format, import its
module here and add it to ``TRACE_FORMATS``; tables several formats share are listed once in
``ALL_TABLES``.

- Nsight Compute formats with their own raw tables (``NCU_FORMATS``: :mod:`.ncu_rep`,
  :mod:`.ncu_csv`, tables in :mod:`.ncu`): the same interface as the trace formats (``KIND``,
  ``sniff``). A file starting with a binary magic of ``BINARY_MAGICS`` (the ``.ncu-rep``
  ``NVR\\0``) is of kind ``binary`` and offered to the ``binary`` formats only; an ncu CSV is
  ``text`` and offered after the trace CSV formats.
"""

from __future__ import annotations

import os
import zlib

import msgspec

from warehouse.errors import FormatError
from warehouse.ingesting import jsonstrict
from warehouse.ingesting.formats import (
    audit,
    kineto,
    ncu_csv,
    ncu_rep,
    nsys_csv,
    nsys_sqlite,
    nsys_trace_csv,
    profile,
    rocprof_csv,
    rocprof_db,
    rocprof_json,
    rocprof_sdk_json,
    rocprof_stats,
    trace,
)
from warehouse.ingesting.formats.base import Parsed, Table

FORMATS = (profile, audit)
# Kernel-trace formats, offered a file in this order (each sniff() must be specific).
# rocprof_json before kineto: a rocprof results.json is a Chrome trace too (its sniff is the
# narrower one); rocprof_db before nsys_sqlite (which takes, and refuses, any other SQLite
# file). CSVs: nsys_csv, nsys_trace_csv and rocprof_stats before rocprof_csv.
TRACE_FORMATS = (rocprof_json, rocprof_sdk_json, kineto, rocprof_db, nsys_sqlite, nsys_csv,
                 nsys_trace_csv, rocprof_stats, rocprof_csv)
# Nsight Compute (raw.ncu_* tables), offered a file after the trace formats of its kind.
NCU_FORMATS = (ncu_rep, ncu_csv)
SNIFFED = TRACE_FORMATS + NCU_FORMATS
ALL_FORMATS = FORMATS + TRACE_FORMATS + NCU_FORMATS
BY_NAME = {f.NAME: f for f in ALL_FORMATS}


def _unique_tables(mods) -> tuple[Table, ...]:
    seen: dict[str, Table] = {}
    for f in mods:
        for t in f.TABLES:
            if t.name in seen and seen[t.name] is not t:
                raise RuntimeError(f"two different definitions of raw.{t.name}")
            seen.setdefault(t.name, t)
    return tuple(seen.values())


ALL_TABLES: tuple[Table, ...] = _unique_tables(ALL_FORMATS)

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
# Binary files recognised by their first bytes (kind ``binary``): the Nsight Compute report.
BINARY_MAGICS = (ncu_rep.MAGIC,)
KINDS = ("json", "sqlite", "text", "binary")

# The most bytes a document read whole may have, gzip undone (``$PWH_WHOLE_MAX_BYTES``, default
# 128 MiB): its parse holds it several times over (a valid 200 MB conv audit peaked at 1.2 GiB),
# and any input must cost no more than 1 GiB of peak RSS. Bigger files are read by the
# streaming readers (Kineto traces, tile profiles: see readers.py) or refused naming this rule.
WHOLE_MAX = int(os.environ.get("PWH_WHOLE_MAX_BYTES", 128 << 20))


def too_big(path: str, what: str) -> FormatError:
    """The refusal of a document too big to read whole (``what``: how big it is)."""
    return FormatError(path, "$", f"a file of at most {WHOLE_MAX >> 20} MiB to read whole "
                       f"($PWH_WHOLE_MAX_BYTES; only Kineto traces, tile profiles and SQLite files "
                       f"are read past it); {what}", kind="too_large")


def inflated_over(path, cap: int) -> bool:
    """Does the gzip file at ``path`` inflate to more than ``cap`` bytes? Decompressed a MiB at
    a time and counted, never held (a corrupt stream answers ``False``: the whole-document path
    reports it)."""
    size = 0
    try:
        with open(path, "rb") as fh:
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            while block := fh.read(1 << 20):
                while block:
                    size += len(d.decompress(block, 1 << 22))
                    if size > cap:
                        return True
                    block = d.unconsumed_tail
                    if d.eof:  # the next member, if any
                        block = d.unused_data + block
                        if not block.startswith(GZIP_MAGIC):
                            return False
                        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
    except (OSError, zlib.error):
        return False
    return False

__all__ = ["WHOLE_MAX", "too_big", "inflated_over", "FORMATS", "TRACE_FORMATS", "NCU_FORMATS", "ALL_FORMATS", "BY_NAME", "ALL_TABLES",
           "Parsed",
           "detect", "detect_payload", "parse", "gunzip", "is_gzip", "formats_of_table"]


def formats_of_table(name: str) -> tuple[str, ...]:
    """The format names writing ``raw.<name>``."""
    return tuple(f.NAME for f in ALL_FORMATS if any(t.name == name for t in f.TABLES))


def is_gzip(data: bytes) -> bool:
    return data[:2] == GZIP_MAGIC


def gunzip(data: bytes, path: str, limit: int | None = None) -> bytes:
    """Every member of a gzip file, decompressed; a corrupt or truncated stream is refused, and
    so is one inflating past :data:`WHOLE_MAX` (never decompressed further).

    ``limit``: stop after that many decompressed bytes (a head for sniffing; no end check).
    """
    out = []
    size = 0
    pos = 0
    cap = WHOLE_MAX + 1 if limit is None else limit
    try:
        while pos < len(data):
            d = zlib.decompressobj(zlib.MAX_WBITS | 16)
            chunk = d.decompress(data[pos:], max(1, cap - size))
            out.append(chunk)
            size += len(chunk)
            if size >= cap:
                if limit is None:
                    out.clear()
                    raise too_big(path, f"this gzip file inflates past it (from {len(data)} "
                                  "bytes)")
                return b"".join(out)[:limit]
            if not d.eof:
                if limit is not None:
                    return b"".join(out)
                raise FormatError(path, f"byte {len(data)}", "a complete gzip stream, got a "
                                  "truncated one", kind="malformed")
            pos = len(data) - len(d.unused_data)
            if d.unused_data.strip(b"\0") == b"":
                break  # trailing zero padding (tape/block writers) ends the file
            if not d.unused_data.startswith(GZIP_MAGIC):
                raise FormatError(path, f"byte {pos}", "nothing after the gzip stream "
                                  "(trailing garbage)", kind="malformed")
    except zlib.error as exc:
        raise FormatError(path, f"byte {pos}", f"a valid gzip stream: {exc}",
                          kind="malformed") from None
    return b"".join(out)


def detect_payload(data: bytes, path: str):
    """``(format module, bytes to parse)`` for ``data``, judged by content only; a document
    past :data:`WHOLE_MAX` (gzip undone) is refused."""
    if len(data) > WHOLE_MAX:
        raise too_big(path, f"this one has {len(data)} bytes")
    payload = gunzip(data, path) if is_gzip(data) else data
    return _detect(payload, path, gz=is_gzip(data)), payload


def detect_head(head: bytes, path: str, *, gz: bool = False):
    """The trace format module ``head`` (the decompressed start of a file) belongs to, or
    ``None`` (then only the whole document can tell)."""
    kind = _kind(head)
    for fmt in SNIFFED:
        if fmt.KIND == kind and fmt.sniff(head[: trace.HEAD_BYTES], path):
            return fmt
    return None


def _kind(head: bytes) -> str:
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(BINARY_MAGICS):
        return "binary"
    first = head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    if first in (b"{", b"[", b""):  # an empty file is reported as an empty JSON document
        return "json"
    return "text"


def _detect(payload: bytes, path: str, *, gz: bool = False):
    found = detect_head(payload[: trace.HEAD_BYTES], path, gz=gz)
    if found is not None:
        return found
    kind = _kind(payload[:64])
    if kind == "text" or _bracketed_text(payload):
        # no text format claims it: name the formats it could have been, unless it is valid
        # JSON after all (a bare number, say: then the JSON rules below say what is wrong)
        try:
            jsonstrict.decode(payload, msgspec.Raw, path)
        except FormatError:
            raise FormatError(
                path, "$", "a known source format: a JSON document (tile profile, conv audit, "
                f"kernel trace) or a text file ({_names('text')}) with its header line; found "
                "a text file that is neither" + (" inside gzip" if gz else ""),
                kind="unknown_format") from None
    if kind in ("json", "text"):
        if payload.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] == b"[":
            _refuse_array(payload, path, gz)
        top = jsonstrict.decode(payload, dict[str, msgspec.Raw], path)
        keys = frozenset(top)
        for fmt in FORMATS:
            if fmt.detect(keys):
                return fmt
        shown = ", ".join(sorted(keys)[:12]) or "no keys"
        raise FormatError(
            path, "$",
            "a tile profile (keys clockHz, groups, samples) or a conv audit (keys rows, "
            "audit_sha256), or a kernel trace (" + _names("json") + "); found an object with "
            f"{shown}"
            + (" inside gzip" if gz else ""), kind="unknown_format")
    what = {"sqlite": "an SQLite database", "binary": "a binary file"}.get(kind, "a text file")
    raise FormatError(path, "$", f"a known source format ({_names(kind) or 'none'} for {what}); "
                      f"found {what} none of them recognises", kind="unknown_format")


def _refuse_array(payload: bytes, path: str, gz: bool) -> None:
    """A JSON array at the top: no source format is one. Named for what it likely is: a
    Chrome trace written as a bare array of events (the legacy ``torch.autograd.profiler``
    export: ``use_kineto=False`` or PyTorch before 1.8), whose kernels carry no correlation to
    their launches."""
    items = jsonstrict.decode(payload, list[msgspec.Raw], path)
    first = items[0] if items else None
    try:
        event = first is not None and "ph" in msgspec.json.decode(first, type=dict)
    except (msgspec.DecodeError, msgspec.ValidationError):
        event = False
    n = f"{len(items)} trace event{'s' if len(items) != 1 else ''}"
    what = (f"a JSON array of {n}: a Chrome trace written as a bare array "
            "(the legacy torch.autograd.profiler export, use_kineto=False or PyTorch before "
            "1.8), not read: record with torch.profiler (Kineto) instead") if event else (
            f"a JSON array of {len(items)} items")
    raise FormatError(path, "$", "a JSON object (tile profile, conv audit or kernel trace); "
                      f"found {what}" + (" inside gzip" if gz else ""), kind="unknown_format")


def _bracketed_text(payload: bytes) -> bool:
    """Is ``payload`` a text file that merely starts with "[" (a console capture of nsys:
    ``[6/8] Executing 'cuda_gpu_kern_sum' stats report``)? Its first line (4 KiB at most) is
    malformed JSON; a JSON array's first line is valid or merely cut short."""
    head = payload[:4096].lstrip(b" \t\r\n\xef\xbb\xbf")
    if head[:1] != b"[":
        return False
    try:
        msgspec.json.decode(head.split(b"\n", 1)[0])
    except msgspec.DecodeError as exc:
        return str(exc).startswith("JSON is malformed")
    except RecursionError:
        return False
    return False


def _names(kind: str) -> str:
    return ", ".join(f.NAME for f in SNIFFED if f.KIND == kind)


def detect(data: bytes, path: str):
    """The format module of ``data`` (gzip undone), judged by content only."""
    return detect_payload(data, path)[0]


def parse(data: bytes, path: str, run_id: str) -> Parsed:
    fmt, payload = detect_payload(data, path)
    return fmt.parse(payload, path, run_id)
