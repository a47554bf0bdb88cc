"""`make demo`: a fresh warehouse from the bundled example runs, all models built, a summary.

Everything goes through the same code paths as the ``pwh`` CLI.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "runs"


def sh(*argv: str) -> int:
    from warehouse.cli import main

    print(f"\n$ pwh {' '.join(argv)}", flush=True)
    return main(list(argv))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--warehouse", default=".pwh/warehouse.duckdb")
    args = ap.parse_args()
    wh = Path(args.warehouse).resolve()
    # A fresh demo warehouse: only the demo's own state folder is removed.
    for p in (wh, wh.with_suffix(".duckdb.wal")):
        p.unlink(missing_ok=True)
    for sub in ("archive", "quarantine"):
        shutil.rmtree(wh.parent / sub, ignore_errors=True)
    w = ["--warehouse", str(wh)]
    if sh(*w, "ingest", str(EXAMPLES)) != 0:
        return 1
    if sh(*w, "build") != 0:
        return 1
    sh(*w, "runs")
    sh(*w, "sql", "SELECT 'raw.' || table_name AS raw_table, estimated_size AS row_count "
       "FROM duckdb_tables() WHERE schema_name = 'raw' ORDER BY 1")
    print(f"\nwarehouse: {wh}\nnext: .venv/bin/pwh --warehouse {wh} sql \"SELECT …\"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
