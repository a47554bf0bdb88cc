"""Relative file paths in analyst SQL name files in the export folder (``<state>/exports/``).

Analyst connections may read and write files only in the export folder (DuckDB's
``allowed_directories``), but DuckDB resolves a relative path against the process's working
directory, so ``COPY … TO 'trends.csv'`` was refused wherever the analyst happened to be. Here a
relative path in a file position is rewritten to the same path under the export folder before
DuckDB sees the statement:

* ``COPY … TO 'x'`` and ``EXPORT DATABASE 'x'``;
* the first argument of the file readers (``read_csv('x')``, ``read_parquet``, ``read_json``,
  ``read_text``, ``read_blob``, ``glob`` …);
* a file name after ``FROM`` / ``JOIN`` (``FROM 'x.parquet'``, DuckDB's replacement scan).

Absolute paths, ``~`` paths and URLs are left alone (DuckDB then refuses them unless they are in
the export folder). ``..`` is not special: ``'../x.csv'`` becomes ``<exports>/../x.csv``, which
DuckDB refuses like any path outside the folder. The text is spliced at the string literal's
position (sqlglot's DuckDB tokenizer finds it), never re-generated, so nothing else of the query
changes. This is a convenience, not a security layer: DuckDB's settings remain the boundary.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# Table functions whose first argument is a path (or a list of paths: only a plain string is
# rewritten).
FILE_FUNCTIONS = frozenset({
    "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "parquet_metadata",
    "parquet_schema", "parquet_file_metadata", "read_json", "read_json_auto",
    "read_json_objects", "read_ndjson", "read_ndjson_auto", "read_ndjson_objects", "read_text",
    "read_blob", "glob", "sniff_csv",
})
_FILE_EXT = re.compile(r"\.(csv|tsv|txt|parquet|json|jsonl|ndjson|gz|zst)$", re.I)
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.I)
# Cheap pre-filter: only statements that may name a file pay for the tokenizer.
_MAYBE = re.compile(r"\b(copy|export|from|join|read_\w+|parquet_\w+|glob|sniff_csv)\b", re.I)


def is_relative(path: str) -> bool:
    return bool(path) and not (path.startswith(("/", "~", "\\")) or _URL.match(path)
                               or re.match(r"^[a-z]:[\\/]", path, re.I))


def resolve(path: str, export_dir: Path) -> str:
    """``path`` under the export folder if it is relative; unchanged otherwise."""
    return os.path.join(str(export_dir), path) if is_relative(path) else path


def rewrite(sql: str, export_dir: Path) -> str:
    """``sql`` with every relative path in a file position moved under ``export_dir``."""
    if "'" not in sql or not _MAYBE.search(sql):
        return sql
    try:
        import sqlglot
        from sqlglot.tokens import TokenType

        tokens = sqlglot.tokenize(sql, read="duckdb")
    except Exception:  # noqa: BLE001 - DuckDB parses more than sqlglot: leave such text alone
        return sql
    edits: list[tuple[int, int, str]] = []
    in_copy = in_export = False
    depth = 0
    for i, tok in enumerate(tokens):
        kind = tok.token_type
        word = tok.text.lower()
        if kind == TokenType.SEMICOLON:
            in_copy = in_export = False
            depth = 0
            continue
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif kind == TokenType.COPY or (word == "copy" and i == 0):
            in_copy = True
        elif word == "export" and kind != TokenType.STRING:
            in_export = True
        if kind != TokenType.STRING or i == 0:
            continue
        prev = tokens[i - 1]
        before = tokens[i - 2] if i >= 2 else None
        prev_word = prev.text.lower()
        file_arg = (prev.token_type == TokenType.L_PAREN and before is not None
                    and before.text.lower() in FILE_FUNCTIONS)
        copy_to = in_copy and depth == 0 and prev_word == "to"
        export_to = in_export and prev_word == "database"
        scan = prev.token_type in (TokenType.FROM, TokenType.JOIN) and _FILE_EXT.search(tok.text)
        if (file_arg or copy_to or export_to or scan) and is_relative(tok.text):
            new = resolve(tok.text, export_dir).replace("'", "''")
            edits.append((tok.start, tok.end, f"'{new}'"))
    for start, end, text in reversed(edits):
        if sql[start] != "'" or sql[end] != "'":
            continue  # not a plain '…' literal (e.g. E'…'): leave it
        sql = sql[:start] + text + sql[end + 1:]
    return sql
