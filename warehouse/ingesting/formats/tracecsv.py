"""CSV reading shared by the CSV trace formats (``nsys stats`` summaries, rocprof CSVs).

Strict by design: the file must be UTF-8 (or UTF-16 with its byte-order mark, as Windows
PowerShell 5 redirects a console's output), the header is found by its column names (console
preamble lines before it are skipped and counted, never stored: they may hold paths; blank lines
between the header and the first row are skipped), every row has exactly the header's fields,
and time columns are exact integers of nanoseconds. A number that went through a spreadsheet
(``8.1097E+14``) lost digits: it is refused naming the rule, never read as a float or as zero.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from warehouse.errors import FormatError
from warehouse.ingesting.formats.trace import MAX_NAME

# Kernel names are quoted fields that can be kilobytes long; the csv module's default limit is
# 128 KiB. Fields up to 4 MiB are read, so a too-long name is refused by our own rule
# (trace.MAX_NAME) with its location rather than by the csv module.
csv.field_size_limit(max(csv.field_size_limit(), 4 << 20))

MAX_PREAMBLE_LINES = 64
# The longest line (16 MiB) of a CSV read: a longer one is refused naming its number before it
# is copied or parsed (a field may have at most 4 MiB), so a hostile line costs no more than
# the file's own text.
MAX_LINE = 16 << 20
# Line ends as io.StringIO(newline="") splits them (the csv module's reading), and as
# str.splitlines() does.
EOL = re.compile(r"\r\n|\r|\n")
SPLITLINES = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
INT64_MAX = 2**63 - 1

_INT = re.compile(r"[0-9]+")
_SCI = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+")
_DEC = re.compile(r"[+-]?[0-9]*\.[0-9]+|[+-]?[0-9]+\.")
_GROUPED = re.compile(r"[0-9]{1,3}(?:[,  ][0-9]{3})+")
_NAN = re.compile(r"[+-]?(?:nan|inf|infinity)", re.I)


def header_fields(line: str) -> list[str]:
    """The fields of one CSV line, stripped (``nsys`` pads some headers with spaces)."""
    try:
        row = next(csv.reader([line], strict=True), [])
    except csv.Error:
        return []
    return [f.strip() for f in row]


# Windows PowerShell 5 writes redirected output (``nsys stats ... --format csv > out.csv``) as
# UTF-16 with a byte-order mark: such a file is read as the same text
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def encoding_of(data: bytes) -> str:
    """``utf-16`` for text that starts with a UTF-16 byte-order mark, else ``utf-8``."""
    return "utf-16" if data.startswith(UTF16_BOMS) else "utf-8"


def decode(data: bytes) -> str:
    """The text of ``data`` (UTF-8, or UTF-16 with its byte-order mark), a UTF-8 byte-order
    mark dropped; raises ``UnicodeDecodeError``."""
    return data.decode(encoding_of(data)).removeprefix("\ufeff")


def text_of(data: bytes, path: str) -> str:
    """:func:`decode`, an invalid byte sequence refused naming its line."""
    encoding = encoding_of(data)
    try:
        return decode(data)
    except UnicodeDecodeError as exc:
        line = data[:exc.start].decode(encoding, errors="replace").count("\n") + 1
        raise FormatError(path, f"line {line}", f"{encoding.upper()} text (invalid byte "
                          "sequence)", kind="malformed") from None


def head_lines(head: bytes, limit: int = MAX_PREAMBLE_LINES + 1) -> list[str]:
    """The first lines of ``head`` (a file's first bytes) as text, for sniffing."""
    text = head.decode(encoding_of(head), errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.splitlines()[:limit]


def lines(text: str, path: str, pos: int = 0, lineno: int = 1, *, keepends: bool = True,
          eol: re.Pattern = EOL) -> Iterator[str]:
    """The lines of ``text`` from ``pos`` (line ``lineno``), one at a time (never all copied at
    once); a line longer than :data:`MAX_LINE` is refused naming its number."""
    for m in eol.finditer(text, pos):
        _line_ok(m.start() - pos, path, lineno)
        yield text[pos:m.end() if keepends else m.start()]
        pos, lineno = m.end(), lineno + 1
    if pos < len(text):
        _line_ok(len(text) - pos, path, lineno)
        yield text[pos:]


def _line_ok(length: int, path: str, lineno: int) -> None:
    if length > MAX_LINE:
        raise FormatError(path, f"line {lineno}", f"a CSV line of at most {MAX_LINE >> 20} MiB; "
                          f"found {length} characters", kind="malformed")


@dataclass
class CsvRows:
    """A parsed CSV table: header, data rows with their line numbers, and the preamble size."""

    header: list[str]
    rows: list[tuple[int, list[str]]]  # (1-based line number in the file, fields)
    preamble_lines: int
    header_line: int
    ended_at: int | None = None  # the line that ended the table before the file's end (``stop``)

    def index(self, *names: str) -> int | None:
        """The position of the first of ``names`` present in the header, else ``None``."""
        for n in names:
            if n in self.header:
                return self.header.index(n)
        return None


def read(data: bytes, path: str, is_header: Callable[[list[str]], bool], expected: str,
         *, unquoted: int | None = None, stop: re.Pattern | None = None) -> CsvRows:
    """Parse ``data`` as one CSV table whose header line satisfies ``is_header``.

    ``expected`` describes the header for the error when none is found. ``unquoted``: the
    position of a column whose text a writer left unquoted although it may hold commas (old
    rocprof ``--stats`` kernel names): a row with more fields than the header has its surplus
    joined back into that column, commas restored (every other column is checked as usual).
    ``stop``: a line (matched in full) that ends the table, the rest of the file unread (another
    report of the same console capture: nsys's ``Processing [...] with [...]...``); its number
    is ``ended_at``.
    """
    text = text_of(data, path)
    if not text or text.isspace():  # (no strip(): it would copy the text)
        raise FormatError(path, "line 1", f"a CSV table with {expected}, got an empty file",
                          kind="malformed")
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise FormatError(path, f"line {line}", "CSV text without NUL bytes", kind="malformed")
    offset = 0
    header: list[str] | None = None
    header_line = 0
    for lineno in range(1, MAX_PREAMBLE_LINES + 2):
        end = text.find("\n", offset)
        _line_ok((len(text) if end < 0 else end) - offset, path, lineno)
        line = text[offset:] if end < 0 else text[offset:end]
        fields = header_fields(line.rstrip("\r"))
        if fields and is_header(fields):
            header, header_line = fields, lineno
            offset = len(text) if end < 0 else end + 1
            break
        if end < 0:
            break
        offset = end + 1
    if header is None:
        first = header_fields(text[:text.find("\n") % (len(text) + 1)].rstrip("\r"))
        shown = ", ".join(repr(f) for f in first[:12]) or "no fields"
        raise FormatError(
            path, "header",
            f"a CSV header with {expected} within the first {MAX_PREAMBLE_LINES + 1} lines; "
            f"first line has {shown}", kind="schema")
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise FormatError(path, f"line {header_line}", f"unique column names; {dup!r} repeats",
                          kind="schema")
    rows: list[tuple[int, list[str]]] = []
    ended: list[int] = []

    def table_lines():
        for n, line in enumerate(lines(text, path, offset, header_line + 1), header_line + 1):
            if stop is not None and stop.fullmatch(line.rstrip("\r\n")):
                ended.append(n)
                return
            yield line

    reader = csv.reader(table_lines(), strict=True)
    blank_at = None
    try:
        for fields in reader:
            lineno = header_line + reader.line_num
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                if rows:  # a blank line right under the header (rocprofv2) ends nothing
                    blank_at = blank_at or lineno
                continue
            if blank_at is not None:
                raise FormatError(path, f"line {lineno}",
                                  f"one CSV table; more rows follow the blank line {blank_at}",
                                  kind="schema")
            if unquoted is not None and len(fields) > len(header):
                extra = len(fields) - len(header)
                fields[unquoted:unquoted + extra + 1] = [
                    ",".join(fields[unquoted:unquoted + extra + 1])]
            if len(fields) != len(header):
                raise FormatError(path, f"line {lineno}",
                                  f"{len(header)} fields as in the header (line {header_line}); "
                                  f"found {len(fields)}", kind="schema")
            rows.append((lineno, fields))
    except csv.Error as exc:
        raise FormatError(path, f"line {header_line + reader.line_num}",
                          f"well-formed CSV ({exc})", kind="malformed") from None
    return CsvRows(header, rows, header_line - 1, header_line, ended[0] if ended else None)


def where(line: int, column: str) -> str:
    return f"line {line}, column {column!r}"


def integer(value: str, path: str, line: int, column: str, *, what: str = "ns") -> int:
    """An exact non-negative integer (ns, counts) or :class:`FormatError` naming the rule."""
    if value.isdigit() and value.isascii() and len(value) < 19:  # the common case, fast
        return int(value)
    return exact_int(value, path, where(line, column), what=what)


def exact_int(value: str, path: str, loc: str, *, what: str = "ns") -> int:
    """``value`` as an exact non-negative int64, else :class:`FormatError` at ``loc``."""
    v = value.strip()
    if _INT.fullmatch(v):
        n = int(v)
        if n > INT64_MAX:
            raise FormatError(path, loc, f"an integer of {what} that fits in 64 bits; got {v}",
                              kind="schema")
        return n
    if not v:
        rule = f"an integer of {what}; the field is empty"
    elif _SCI.fullmatch(v):
        rule = (f"an exact integer of {what}; {v!r} is in scientific notation (the file went "
                "through a spreadsheet, which kept only a few digits): export it again")
    elif _NAN.fullmatch(v):
        rule = f"a finite, non-negative integer of {what}; got {v!r}"
    elif v.startswith("-"):
        rule = f"a non-negative integer of {what}; got {v!r}"
    elif _GROUPED.fullmatch(v):
        rule = f"an integer of {what} without thousands separators; got {v!r}"
    elif _DEC.fullmatch(v):
        rule = f"an integer of {what}; got the decimal {v!r}"
    else:
        rule = f"an integer of {what}; got {v[:40]!r}"
    raise FormatError(path, loc, rule, kind="schema")


def text(value: str, path: str, line: int, column: str) -> str:
    """A kernel name: non-empty, at most ``trace.MAX_NAME`` characters."""
    if len(value) > MAX_NAME:
        raise FormatError(path, where(line, column),
                          f"a name of at most {MAX_NAME} characters; got {len(value)}",
                          kind="schema")
    if not value.strip():
        raise FormatError(path, where(line, column), "a non-empty name", kind="schema")
    return value


def require(rows: CsvRows, path: str, columns: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Positions of required columns (each given by its accepted spellings), or refuse."""
    out = {}
    for key, names in columns.items():
        i = rows.index(*names)
        if i is None:
            raise FormatError(path, f"line {rows.header_line}",
                              f"a column {' or '.join(repr(n) for n in names)}; header has "
                              f"{', '.join(repr(h) for h in rows.header[:24])}", kind="schema")
        out[key] = i
    return out


def rebuild_rows(header: list[str], rows: Iterator[dict[str, str]]) -> str:
    """CSV text (header and rows, ``\\n`` line ends, minimal quoting) of rebuilt rows."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([r[h] for h in header])
    return buf.getvalue()
