"""Generate the raw-table reference in ``docs/formats.md`` from the code that defines the tables.

``python -m warehouse.docs_gen`` rewrites the section between the markers; a test fails when the
committed doc and the code disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

from warehouse.db import ERRORS_DDL, MANIFEST_DDL
from warehouse.ingesting.formats import ALL_TABLES, formats_of_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "formats.md"
BEGIN, END = "<!-- BEGIN GENERATED: raw tables -->", "<!-- END GENERATED: raw tables -->"


def _ddl_table(name: str, ddl: str) -> str:
    rows = []
    for line in ddl.splitlines():
        m = re.match(r"\s+(\w+)\s+([A-Z]+(?:\s+PRIMARY KEY)?)[^-]*--\s*(.*)$", line)
        if m:
            rows.append(f"| `{m.group(1)}` | {m.group(2).split()[0]} | {m.group(3)} |")
    return f"### `{name}`\n\n| column | type | meaning |\n|---|---|---|\n" + "\n".join(rows)


def raw_tables_md() -> str:
    parts = [_ddl_table("raw.files", MANIFEST_DDL) + "\n\nOne row per ingested file (primary key "
             "`sha256`).", _ddl_table("raw.ingest_errors", ERRORS_DDL) +
             "\n\nOne row per failed ingestion attempt."]
    for t in ALL_TABLES:  # a table shared by several formats (raw.trace_*) is listed once
        rows = "\n".join(f"| `{c}` | {ty} | {d} |" for c, ty, d in t.columns)
        parts.append(
            f"### `raw.{t.name}` ({', '.join(formats_of_table(t.name))})\n\n"
            f"{t.doc[0].upper() + t.doc[1:]}; primary key "
            f"({', '.join(t.primary_key)}).\n\n| column | type | meaning |\n|---|---|---|\n{rows}")
    return "\n\n".join(parts)


def render(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{raw_tables_md()}\n{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
    print(f"wrote {DOC}")
