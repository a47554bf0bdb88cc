"""The writer is opened while the first file is parsed (``loader.WriterAhead``), and ``pwh``
exits without tearing the interpreter down (``warehouse.cli.entry``)."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import threading

import duckdb
import pytest

from tests.conftest import counts
from warehouse import db
from warehouse.db import WarehouseBusyError
from warehouse.errors import FormatError
from warehouse.ingesting import reading
from warehouse.ingesting.loader import ingest_file, ingest_paths


@pytest.fixture
def spied(monkeypatch):
    """Records (what, thread name) of each writer opening, each parse and each start of a
    thread opening the writer ahead."""
    from warehouse.ingesting.writer import WriterAhead

    seen: list[tuple[str, str]] = []
    real_connect, real_parse = db.connect_rw, reading.parse_document
    real_begin = WriterAhead.begin

    def begin(self):
        seen.append(("begin", threading.current_thread().name))
        return real_begin(self)

    def connect(*a, **kw):
        seen.append(("connect", threading.current_thread().name))
        return real_connect(*a, **kw)

    def parse(*a, **kw):
        seen.append(("parse", threading.current_thread().name))
        return real_parse(*a, **kw)

    monkeypatch.setattr(db, "connect_rw", connect)
    monkeypatch.setattr(reading, "parse_document", parse)
    monkeypatch.setattr(WriterAhead, "begin", begin)
    return seen


def test_a_batch_opens_its_writer_in_a_thread_while_the_first_file_is_parsed(wh, seeds, spied):
    results = ingest_paths(wh, seeds.values())
    assert [r.status for r in results] == ["ingested", "ingested"]
    # the opening thread is started before the first parse; when it gets the GIL to call
    # connect, before or during that parse, is the scheduler's choice on a loaded machine
    assert spied[0] == ("begin", "MainThread")
    assert [w for w in spied if w[0] == "connect"] == [("connect", "pwh-writer-open")]  # one
    assert [w for w in spied if w[0] == "parse"] == [("parse", "MainThread")] * 2
    assert counts(wh)["files"] == 2
    assert sys.getswitchinterval() == pytest.approx(0.005)  # restored after the opening


def test_a_single_file_opens_its_own_writer_aside_and_closes_it(wh, seeds, spied):
    r = ingest_file(wh, seeds["audit"])  # the Dagster path: no batch writer
    assert r.status == "ingested", r.message
    assert ("connect", "pwh-writer-open") in spied
    con = duckdb.connect(str(wh.warehouse))  # not held any more: a writer can open it
    con.close()


def test_a_known_file_is_already_ingested_even_when_its_parse_now_fails(wh, seeds, monkeypatch):
    """The first file of a batch is parsed before the warehouse is asked whether it has it: a
    file it has stays "already ingested" even if that parse fails (e.g. a stricter parser)."""
    ingest_paths(wh, [seeds["audit"]])

    def broken(data, shown, sha):
        raise FormatError(shown, "$", "a parse that no longer accepts this file")

    monkeypatch.setattr(reading, "parse_document", broken)
    for r in (ingest_paths(wh, [seeds["audit"]])[0], ingest_file(wh, seeds["audit"])):
        assert (r.status, r.message) == ("skipped", "already ingested")
    assert not wh.quarantine_dir.exists() or not list(wh.quarantine_dir.iterdir())
    bad = ingest_paths(wh, [seeds["profile"]])[0]  # a new file: its error is reported
    assert bad.status == "failed" and "no longer accepts" in bad.message


def test_a_busy_warehouse_stops_the_batch_and_quarantines_nothing(wh, seeds, monkeypatch):
    ingest_paths(wh, [seeds["audit"]])  # the warehouse exists
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(wh.warehouse)!r})
            print("holding", flush=True)
            sys.stdin.read()  # until the test is done, however slow the machine
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr(db, "connect_rw", functools.partial(db.connect_rw, timeout_s=0.5))
        with pytest.raises(WarehouseBusyError, match="still locked"):
            ingest_paths(wh, [seeds["profile"]])
    finally:
        holder.kill()
        holder.wait()
    assert not wh.quarantine_dir.exists() or not list(wh.quarantine_dir.iterdir())
    assert sys.getswitchinterval() == pytest.approx(0.005)
    assert counts(wh)["files"] == 1


_EXIT_SCRIPT = """
import atexit, gc, os, sys, threading, time
from warehouse.cli import entry

# the interpreter's own shutdown (skipped by os._exit) waits for threads, then calls these
threading._register_atexit(lambda: os.write(1, b"interpreter shut down\\n"))
atexit.register(lambda: print("exit handlers ran"))
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 1000))
def until_the_main_thread_ended():  # still running when the command returns, however slow
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    print("thread finished")
if sys.argv[1] == "thread":
    threading.Thread(target=until_the_main_thread_ended).start()
sys.argv = ["pwh", "--warehouse", sys.argv[2], "runs"]
print("output before exit", end="")  # unflushed: the exit must flush it
entry()
"""


@pytest.mark.parametrize("mode", ["plain", "thread"])
def test_pwh_exits_quickly_after_flushing_and_the_exit_handlers(wh, mode):
    p = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, mode, str(wh.warehouse)],
                       capture_output=True, text=True, timeout=600)
    out = p.stdout
    assert "output before exit" in out and "exit handlers ran" in out, (out, p.stderr)
    assert "frozen True" in out  # the start-up imports were frozen out of the collector's way
    ran = subprocess.run([sys.executable, "-m", "warehouse.cli", "--warehouse",
                          str(wh.warehouse), "runs"], capture_output=True, text=True)
    assert p.returncode == ran.returncode  # the command's own exit code
    if mode == "plain":  # no interpreter shutdown
        assert "interpreter shut down" not in out
    else:  # a thread that is not a daemon is waited for: the normal exit
        assert "thread finished" in out and "interpreter shut down" in out


def test_main_in_process_leaves_the_collector_alone(wh):
    import gc

    from warehouse.cli import main

    before = gc.get_freeze_count()
    assert main(["--warehouse", str(wh.warehouse), "runs"]) in (0, 1)
    assert gc.get_freeze_count() == before and gc.isenabled()


@pytest.mark.parametrize("parts", [1, 2])
def test_a_streamed_trace_forks_its_parsers_before_the_writer_opens(wh, tmp_path, monkeypatch,
                                                                   spied, parts):
    """No thread of ours exists at a fork; the writer opens while the parsers run."""
    from warehouse.ingesting import forking, readers, trace_stream
    from warehouse.ingesting.formats import kineto_gen, kineto_stream

    monkeypatch.setattr(kineto_stream, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(readers, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(trace_stream, "SPLIT_MIN_BYTES", 0 if parts == 2 else 1 << 60)
    monkeypatch.setenv("PWH_TRACE_SPLIT", "1")
    real_fork = forking.fork_child

    def fork(child):  # our threads are all named pwh-… (other tests may leave theirs running)
        spied.append(("fork", ",".join(sorted(t.name for t in threading.enumerate()
                                              if t.name.startswith("pwh-")))))
        return real_fork(child)

    monkeypatch.setattr(forking, "fork_child", fork)
    f = tmp_path / "t.pt.trace.json"
    kineto_gen.write_file(f, steps=20, seed=5)
    r = ingest_paths(wh, [f])[0]
    assert r.status == "ingested", r.message
    assert [w for w in spied if w[0] == "fork"] == [("fork", "")] * parts  # no thread of ours
    order = [w[0] for w in spied if w[0] in ("fork", "connect")]
    assert order[:parts + 1] == ["fork"] * parts + ["connect"]


def test_debug_timing_says_how_long_opening_the_warehouse_and_its_status_took(
        wh, seeds, monkeypatch, capfd):
    """``PWH_DEBUG_TIMING=1``: whether the writer created or opened the warehouse, when it was
    ready, and the runs status and closing at the end of the batch."""
    monkeypatch.setenv("PWH_DEBUG_TIMING", "1")
    assert not wh.warehouse.exists()
    (r,) = ingest_paths(wh, [seeds["profile"]])
    assert r.status == "ingested", r.message
    err = capfd.readouterr().err
    assert "; warehouse created in " in err and "pwh timing: runs status " in err, err
    (r,) = ingest_paths(wh, [seeds["audit"]])
    assert r.status == "ingested", r.message
    err = capfd.readouterr().err
    assert "; warehouse opened in " in err and "closing the warehouse" in err, err


def test_switch_interval_leases_interleaved_across_threads_restore_the_original():
    """Openings in several threads lower the interpreter-wide switch interval and end in any
    order: the smallest live lease wins and the original comes back with the last one (each
    restoring what it saw left a lowered value in place for good)."""
    import sys

    from warehouse.ingesting import forking

    original = sys.getswitchinterval()

    def now(expected):  # the interpreter keeps microseconds: 0.0002 reads back as 0.000199...
        assert abs(sys.getswitchinterval() - expected) < 1e-9, (sys.getswitchinterval(), expected)

    a = forking.lower_switch_interval(0.0005)
    now(min(original, 0.0005))
    b = forking.lower_switch_interval(0.0002)
    now(0.0002)
    forking.restore_switch_interval(b)  # the later one ends first: back to the earlier lease's
    now(min(original, 0.0005))
    c = forking.lower_switch_interval(0.0002)
    forking.restore_switch_interval(a)  # the earlier one ends while a later one lives
    now(0.0002)
    forking.restore_switch_interval(c)
    now(original)
    forking.restore_switch_interval(c)  # ended already: nothing
    forking.restore_switch_interval(None)
    now(original)
