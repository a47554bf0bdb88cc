"""The ``pwh`` command line. One module per command; heavy imports stay inside ``run``.

Exit codes: 0 ok; 1 a file, check or query failed; 2 usage error.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys
import threading

from warehouse.errors import PwhError

# Every module of this package that sets ``COMMAND = (order, name, one-line help)`` is a
# subcommand. It defines ``add_arguments(parser)`` and ``run(args, settings) -> int`` and keeps
# heavy imports (Dagster, Great Expectations) inside ``run``; ``IMPORTS``, the modules its run
# always needs, are imported before it (for the console script with the cyclic collector paused,
# then frozen: see ``main``).


def _commands() -> list[tuple[int, str, str, str]]:
    import pkgutil

    out = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        m = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(m, "COMMAND"):
            order, name, help_ = m.COMMAND
            out.append((order, name, info.name, help_))
    return sorted(out)


EPILOG = """\
warehouse location: --warehouse PATH, else $PWH_WAREHOUSE, else ./.pwh/warehouse.duckdb
(git-ignored). Archive, quarantine, landing and snapshot folders live beside it.

exit codes: 0 ok; 1 a file, check or query failed; 2 usage error. A command whose reader leaves
(`pwh compare ... | head`) runs to its end and keeps its own exit code.
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``pwh`` parser; ``only``: the command about to run (found by :func:`_command_of`),
    whose module alone is imported and set up (the other dozen cost ~10 ms per start)."""
    p = argparse.ArgumentParser(
        prog="pwh", description="Profile Warehouse: profiling runs in DuckDB.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warehouse", metavar="PATH", help="warehouse file (default: see below)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    found = _module_of(only) if only else None
    for _, name, mod, help_ in [found] if found else _commands():
        m = importlib.import_module(f"{__name__}.{mod}")
        sp = sub.add_parser(name, help=help_, description=(m.__doc__ or help_).strip(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("--warehouse", metavar="PATH", default=argparse.SUPPRESS,
                        help="warehouse file (default: $PWH_WAREHOUSE or ./.pwh/warehouse.duckdb)")
        m.add_arguments(sp)
        sp.set_defaults(_module=m)
    return p


def _command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (the first word that is not ``--warehouse`` or its value),
    or ``None`` when there is none or an option comes first (``--help``: every command)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--warehouse":
            i += 2
        elif a.startswith("--warehouse="):
            i += 1
        else:
            return None if a.startswith("-") else a
    return None


def _module_of(name: str) -> tuple[int, str, str, str] | None:
    """``_commands()``'s row of command ``name``, from its module (``<name>.py`` or
    ``<name>_cmd.py``) alone; ``None`` if neither declares it."""
    for mod in (name, f"{name}_cmd"):
        if not mod.isidentifier() or mod.startswith("_"):
            return None
        try:
            m = importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{mod}":
                raise
            continue
        if getattr(m, "COMMAND", (None, None))[1] == name:
            order, _, help_ = m.COMMAND
            return order, name, mod, help_
    return None


# Commands whose ``paths`` are files to read: a file read by an isolated reader script (a
# ``.ncu-rep``: ``forking.EARLY_SCRIPTS``) has its reader started right after the arguments are
# read, before the command's imports (~0.3 s of DuckDB, PyArrow, NumPy), which its interpreter
# start and its work then overlap; the format's reader claims it (same bytes) or it is stopped.
READS_AHEAD = frozenset({"ingest"})


def main(argv: list[str] | None = None, *, freeze_imports: bool = False,
         skip_numpy: bool = False) -> int:
    """Run one ``pwh`` command; its exit code. ``freeze_imports`` (the console script): the
    start-up imports, and a command's ``IMPORTS`` (NumPy, PyArrow, DuckDB …), are made with the
    cyclic collector paused, then frozen out of its reach (``gc.freeze``): they live as long as
    the process, and collecting over them costs ~12-15 ms of each `pwh ingest`. Not for a
    long-lived caller (tests): whatever else is tracked by then would be frozen too.
    ``skip_numpy`` (the console script): a ``pwh ingest`` of ``.ncu-rep`` files only never
    imports NumPy (:func:`forking.hide_numpy`: for the rest of the process, so not for a
    long-lived caller either)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderMayLeave(sys.stdout), _ReaderMayLeave(sys.stderr)
    try:
        return _main(argv, freeze_imports, skip_numpy, streams[0])
    finally:
        sys.stdout, sys.stderr = streams
        early = sys.modules.get("warehouse.ingesting.forking")
        if early is not None:
            early.drop_early()  # a reader started ahead that nobody claimed


def _main(argv: list[str] | None, freeze_imports: bool, skip_numpy: bool,
          stdout) -> int:
    gc_was = gc.isenabled()
    if freeze_imports:
        gc.disable()
    try:
        from warehouse.config import settings

        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(_command_of(argv)).parse_args(argv)
        if args.command in READS_AHEAD:  # before the imports: see READS_AHEAD
            from warehouse.ingesting import forking

            forking.prestart(args.paths)
            if skip_numpy:  # a batch of .ncu-rep reports only: see forking.hide_numpy
                forking.hide_numpy(args.paths)
        for name in getattr(args._module, "IMPORTS", ()):
            importlib.import_module(name)
        if freeze_imports:
            gc.freeze()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if freeze_imports and gc_was:
            gc.enable()
    try:
        return int(args._module.run(args, settings(args.warehouse)) or 0)
    except PwhError as exc:
        print(f"pwh {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # a write that bypassed the streams below: the outcome is unknown
        _to_devnull(stdout)
        return EXIT_OUTPUT_CUT


# Exit status when a command was cut short by its reader leaving before it decided (a write
# that did not go through ``sys.stdout``): 128 + SIGPIPE, as a shell reports such a process.
# Never 0: the command did not finish, so it cannot claim success.
EXIT_OUTPUT_CUT = 141


class _ReaderMayLeave:
    """``sys.stdout`` / ``sys.stderr`` while a command runs: when the reader leaves (``pwh
    compare … | head -3``, a closed pipe), the stream is pointed at /dev/null and the command
    goes on to its end, so its exit status is the one it decided (a failing gate exits 1
    whatever happens to its output), never a 0 made up by the broken pipe."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _to_devnull(self._stream)
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            _to_devnull(self._stream)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _to_devnull(stream) -> None:
    """Send what ``stream`` still holds, and all it gets from now on, to /dev/null (the reader
    left). A stream without a file descriptor (a test's capture) is left alone."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
    try:
        stream.flush()
    except (BrokenPipeError, ValueError):
        pass


def entry() -> None:
    """The ``pwh`` console script (and ``python -m warehouse.cli``): :func:`main`, then a quick
    exit. Once the command returned, the exit handlers ran and the output is flushed, the
    process ends without tearing the interpreter down: freeing every module (NumPy, PyArrow,
    DuckDB …) one by one takes ~50 ms that nobody waits for. Every file and connection is
    closed by then (a DuckDB writer checkpoints when closed, not at exit). A thread that is
    not a daemon still running gets the normal exit, which waits for it."""
    code = main(freeze_imports=True, skip_numpy=True)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        _flush()
        sys.exit(code)
    atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def _flush() -> None:
    """Flush the output; if the reader left, drop it (the exit status stays the command's)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            _to_devnull(stream)
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    entry()
