"""Ctrl-C in a real pseudo-terminal: `pwh shell` stops the running query and keeps the session,
`pwh sql` exits 130 with one line, neither prints a traceback (issue 12).

The child is a session leader with the pty as its controlling terminal, so the ^C written to the
master is turned into SIGINT by the terminal driver, as when a person presses it. SIGINT is
reset to its default in the child: a process started from a non-interactive shell inherits it
ignored, and the test would then prove nothing."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import termios
import time

import pytest

from tests.conftest import ROOT

# A query that runs for hours unless interrupted (and that DuckDB checks for interrupts rarely).
ENDLESS = "select count(*) from range(1000000000000) a, range(1000) b"
# Every wait only bounds a hang: a second test suite beside this one on 2 cores can stretch an
# interpreter start, a query start or DuckDB noticing an interrupt to many seconds.
WAIT_S = 300


class Terminal:
    def __init__(self, argv: list[str]):
        self.master, slave = os.openpty()

        def child():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                                     preexec_fn=child, close_fds=True,
                                     env={**os.environ, "PWH_QUERY_TIMEOUT": "0"})
        os.close(slave)
        self.out = b""
        self.pos = 0

    def expect(self, text: str, timeout: float = WAIT_S) -> str:
        """Wait for ``text`` after what was already matched; returns the output up to it."""
        want = text.encode()
        deadline = time.monotonic() + timeout
        while want not in self.out[self.pos:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not seen; output so far:\n"
                                     f"{self.out.decode(errors='replace')}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"{text!r} not seen before exit; output:\n"
                                         f"{self.out.decode(errors='replace')}")
                self.out += chunk
        end = self.out.index(want, self.pos) + len(want)
        seen, self.pos = self.out[self.pos:end], end
        return seen.decode(errors="replace")

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_running(self) -> None:
        """Until the query is executing: its helper thread exists (no sleep-and-hope)."""
        deadline = time.monotonic() + WAIT_S
        task = f"/proc/{self.proc.pid}/task"
        while time.monotonic() < deadline:
            names = []
            for t in os.listdir(task):
                try:
                    with open(f"{task}/{t}/comm") as fh:
                        names.append(fh.read().strip())
                except OSError:
                    pass
            if "pwh-query" in names:
                time.sleep(0.3)  # well inside DuckDB by now; the query runs for hours
                return
            time.sleep(0.05)
        raise AssertionError("the query never started")

    def close(self) -> int:
        try:
            return self.proc.wait(WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            os.close(self.master)


@pytest.fixture
def snapshot_wh(wh, seeds):
    from warehouse.ingesting.loader import ingest_paths
    from warehouse.serving import snapshot

    ingest_paths(wh, seeds.values())
    snapshot.publish(wh)
    return wh


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_ctrl_c_in_the_shell_stops_the_query_and_keeps_the_session(snapshot_wh):
    term = Terminal([sys.executable, "-m", "warehouse.cli", "--warehouse",
                     str(snapshot_wh.warehouse), "shell"])
    try:
        term.expect("pwh> ")
        term.send(ENDLESS + ";\n")
        term.wait_running()
        term.send("\x03")
        said = term.expect("pwh> ")
        assert "interrupted" in said and "Traceback" not in said
        term.send("select 40 + 2 as answer;\n")
        assert "42" in term.expect("(1 row)")
        term.expect("pwh> ")
        term.send("\x04")  # Ctrl-D leaves
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert b"Traceback" not in term.out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_ctrl_c_in_pwh_sql_exits_130_with_one_line(snapshot_wh):
    term = Terminal([sys.executable, "-m", "warehouse.cli", "--warehouse",
                     str(snapshot_wh.warehouse), "sql", ENDLESS])
    term.wait_running()
    term.send("\x03")
    said = term.expect("interrupted")
    assert term.close() == 130
    assert "Traceback" not in said and b"Traceback" not in term.out
    assert "pwh sql: query interrupted" in term.out.decode()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_ctrl_d_at_the_continuation_prompt_never_runs_the_statement(snapshot_wh, tmp_path):
    """Issue 23: Ctrl-D at "...>" ran the unfinished statement. It is discarded, the session
    goes on, and a second Ctrl-D leaves. A COPY shows whether it ran: it would write a file."""
    target = snapshot_wh.export_dir / "must-not-exist.csv"
    term = Terminal([sys.executable, "-m", "warehouse.cli", "--warehouse",
                     str(snapshot_wh.warehouse), "shell"])
    try:
        term.expect("pwh> ")
        term.send("copy (select 42 as answer)\n")
        term.expect("...> ")
        term.send("to 'must-not-exist.csv'\n")
        term.expect("...> ")
        term.send("\x04")
        said = term.expect("pwh> ")
        assert "discarded" in said and "not run" in said
        assert not target.exists()
        term.send("select 6 * 7 as answer;\n")  # the session goes on
        assert "42" in term.expect("(1 row)")
        term.expect("pwh> ")
        term.send("\x04")
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert not target.exists() and b"Traceback" not in term.out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_a_syntax_error_takes_only_its_own_statement(snapshot_wh):
    """Issue 23: one syntax error aborted every statement on the line; each runs on its own
    and the error names its statement. Also: complete statements run at once, an unfinished
    one after them waits for its ';'."""
    term = Terminal([sys.executable, "-m", "warehouse.cli", "--warehouse",
                     str(snapshot_wh.warehouse), "shell"])
    try:
        term.expect("pwh> ")
        term.send("select 1 as first; selec 2; select 3 as third;\n")
        said = term.expect("pwh> ")
        assert "first" in said and "third" in said
        assert "error in statement 2 of 3 (selec 2;)" in said
        shown = said.split("\n", 1)[1]  # after the echoed line
        assert shown.index("first") < shown.index("statement 2") < shown.index("third")
        term.send("select 5 as fifth; select 6\n")
        said = term.expect("...> ")
        assert "fifth" in said and "(1 row)" in said
        term.send("as sixth;\n")
        assert "sixth" in term.expect("pwh> ")
        term.send("\x04")
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert b"Traceback" not in term.out
