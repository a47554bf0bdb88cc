"""The ``pwh`` command line. One module per command; heavy imports stay inside ``run``.

Exit codes: 0 ok; 1 a file, check or query failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import PwhError

# (command, module under warehouse.cli, one-line help). Each module defines
# ``add_arguments(parser)`` and ``run(args, settings) -> int``.
COMMANDS = [
    ("ingest", "ingest", "ingest raw profile/audit JSON files or folders into the warehouse"),
    ("runs", "runs", "list ingested runs (and failed files with --errors)"),
    ("sql", "sql", "run a read-only SQL query"),
    ("build", "build", "build the SQL models under sql/ (staging, marts)"),
]

EPILOG = """\
warehouse location: --warehouse PATH, else $PWH_WAREHOUSE, else ./.pwh/warehouse.duckdb
(git-ignored). Archive, quarantine, landing and snapshot folders live beside it.

exit codes: 0 ok; 1 a file, check or query failed; 2 usage error.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pwh", description="Profile Warehouse: profiling runs in DuckDB.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warehouse", metavar="PATH", help="warehouse file (default: see below)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, mod, help_ in COMMANDS:
        m = importlib.import_module(f"{__name__}.{mod}")
        sp = sub.add_parser(name, help=help_, description=(m.__doc__ or help_).strip(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("--warehouse", metavar="PATH", default=argparse.SUPPRESS,
                        help="warehouse file (default: $PWH_WAREHOUSE or ./.pwh/warehouse.duckdb)")
        m.add_arguments(sp)
        sp.set_defaults(_module=m)
    return p


def main(argv: list[str] | None = None) -> int:
    from ..config import settings

    args = build_parser().parse_args(argv)
    try:
        return int(args._module.run(args, settings(args.warehouse)) or 0)
    except PwhError as exc:
        print(f"pwh {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
