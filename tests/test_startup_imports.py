"""What `pwh ingest` imports, and the reader it starts before importing anything heavy.

Each case runs the command in a fresh interpreter (the test process has imported everything
already) and reads back which modules it imported. `import great_expectations` costs seconds,
Dagster, Polars and pandas hundreds of milliseconds: none of them is on the ingest path, and
`--help` needs neither DuckDB nor PyArrow. A `.ncu-rep` named on the command line has its
isolated reader started before DuckDB, PyArrow and NumPy are imported, and that reader, not a
second one, answers the format (forking.prestart / claim_early).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from warehouse.ingesting import forking

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT.parent / "shared" / "samples" / "ncu_rep"
NEVER = ("great_expectations", "dagster", "polars", "pandas", "sqlalchemy", "sqlglot")
HEAVY = ("duckdb", "pyarrow", "numpy", "msgspec")


def _run(body: str, *args: str) -> dict:
    """Run ``body`` (which sets ``out``, a JSON-able dict) in a fresh interpreter."""
    code = textwrap.dedent(body) + "\nimport json, sys\nprint('@@' + json.dumps(out))\n"
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = [x for x in p.stdout.splitlines() if x.startswith("@@")]
    assert p.returncode == 0 and line, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(line[-1][2:])


MODULES = """
    import sys
    from warehouse.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    out = {"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}
"""


def test_ingest_help_imports_nothing_heavy():
    got = _run(MODULES, "ingest", "--help")
    assert got["code"] == 0
    assert not set(got["modules"]) & set(NEVER + HEAVY), got["modules"]


def test_ingest_of_small_files_imports_no_dagster_gx_polars_pandas(tmp_path):
    from warehouse.ingesting.formats import kineto_gen, ncu_gen

    trace = tmp_path / "runs" / "t.pt.trace.json"
    trace.parent.mkdir()
    kineto_gen.write_file(trace, steps=2, seed=3)
    export = tmp_path / "runs" / "n.csv"
    export.write_text(ncu_gen.details(ncu_gen.launches(3)))
    got = _run(MODULES, "--warehouse", str(tmp_path / "wh" / "w.duckdb"), "ingest", "-q",
               str(trace), str(export))
    assert got["code"] == 0
    assert "duckdb" in got["modules"]  # it did ingest
    assert not set(got["modules"]) & set(NEVER), got["modules"]


# ------------------------------------------------------------------ readers started ahead

ECHO = forking.Script(Path("/nonexistent"), b"PWHTEST\x00", ("json",))


def _echo(tmp_path: Path, body: str) -> forking.Script:
    script = tmp_path / "echo.py"
    script.write_text(body)
    return forking.Script(script, ECHO.magic, ECHO.modules, (("PWH_TEST_DEFAULT", "7"),))


def test_a_reader_started_ahead_is_claimed_by_the_same_bytes_only(tmp_path):
    script = _echo(tmp_path, "import os, sys\nd = open(sys.argv[1], 'rb').read()\n"
                   "sys.stdout.write(f\"{len(d)} {os.environ['PWH_TEST_DEFAULT']} "
                   "{os.environ['HOME'] == os.getcwd()}\")\n")
    f = tmp_path / "a.bin"
    f.write_bytes(script.magic + b"x" * 100)
    other = tmp_path / "b.bin"
    other.write_bytes(b"not this one")
    try:
        for first in (tmp_path, other):  # only the first path, and only a file it reads
            forking.prestart([first, f], scripts=(script,))
            assert not forking._early
        forking.prestart([f, other], scripts=(script,))
        assert len(forking._early) == 1
        assert forking.claim_early(script, script.magic + b"y" * 100) is None  # changed bytes
        assert forking.claim_early(ECHO, f.read_bytes()) is None  # another reader
        iso = forking.claim_early(script, f.read_bytes())
        assert iso is not None and not forking._early
        try:
            assert iso.wait(60) == 0
            assert not iso.answer_too_long()
            assert iso.answer() == b"108 7 True"
        finally:
            iso.close()
        assert not Path(iso.tmp).exists()
    finally:
        forking.drop_early()


def test_a_reader_nobody_claims_is_stopped_and_its_folder_removed(tmp_path):
    script = _echo(tmp_path, "import time\ntime.sleep(600)\n")
    f = tmp_path / "a.bin"
    f.write_bytes(script.magic)
    forking.prestart([f], scripts=(script,))
    (iso,) = forking._early
    pid, folder = iso.proc.pid, Path(iso.tmp)
    assert folder.is_dir()
    forking.drop_early()
    assert not forking._early and not folder.exists()
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)


def test_an_isolated_reader_is_stopped_at_its_time_limit(tmp_path):
    script = _echo(tmp_path, "import time\ntime.sleep(600)\n")
    iso = forking.Isolated(script, b"data")
    try:
        assert iso.wait(0.5) is None
        assert iso.proc.poll() is not None  # killed
    finally:
        iso.close()


@pytest.mark.skipif(not any(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else True,
                    reason=f"no .ncu-rep samples in {SAMPLES}")
def test_pwh_ingest_starts_the_ncu_reader_before_the_heavy_imports(tmp_path):
    from warehouse.ingesting.formats import ncu_rep

    if not ncu_rep.available():
        pytest.skip("ncu_report not installed")
    report = sorted(SAMPLES.glob("*.ncu-rep"))[0]
    got = _run("""
        import sys
        from warehouse.ingesting import forking
        HEAVY = sys.argv.pop(1).split(",")
        starts = []
        start = forking.Isolated._start
        def spy(self):
            starts.append(sorted(m for m in HEAVY if m in sys.modules))
            return start(self)
        forking.Isolated._start = spy
        from warehouse.cli import main
        code = main(sys.argv[1:])
        out = {"code": code, "starts": starts, "left": len(forking._early)}
    """, ",".join(HEAVY), "--warehouse", str(tmp_path / "w.duckdb"), "ingest", str(report))
    assert got["code"] == 0
    assert got["starts"] == [[]], got  # one reader, started before DuckDB/PyArrow/NumPy
    assert got["left"] == 0


@pytest.mark.skipif(not any(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else True,
                    reason=f"no .ncu-rep samples in {SAMPLES}")
@pytest.mark.parametrize("first", ["random", "truncated"])
def test_a_hostile_report_read_ahead_is_refused_and_the_batch_goes_on(tmp_path, capsys, first):
    """The reader started ahead for a hostile first report answers like any other (refused
    naming the file: the reader's own refusal, or the framing walk before it is even asked);
    the good report after it ingests, and no reader is left running."""
    from warehouse.cli import main
    from warehouse.ingesting.formats import ncu_rep

    if not ncu_rep.available():
        pytest.skip("ncu_report not installed")
    good = sorted(SAMPLES.glob("*.ncu-rep"))[0]
    bad = tmp_path / "runs" / f"{first}.ncu-rep"
    bad.parent.mkdir()
    data = good.read_bytes()
    bad.write_bytes(ncu_rep.MAGIC + os.urandom(4096) if first == "random"
                    else data[: len(data) // 2])
    starts = []
    real = forking.Isolated._start

    def spy(self):
        starts.append(bytes(self.data[:64]))
        return real(self)

    forking.Isolated._start = spy
    try:
        code = main(["--warehouse", str(tmp_path / "wh" / "w.duckdb"), "ingest", str(bad),
                     str(good)])
    finally:
        forking.Isolated._start = real
    out = capsys.readouterr()
    assert code == 1
    assert f"failed: {bad}" in out.err and "1 ingested" in out.out, out
    assert starts and starts[0] == bad.read_bytes()[:64]  # the bad one was read ahead
    assert not forking._early


# ------------------------------------------------------------------ NumPy: only where needed

CONSOLE = """
    import sys
    from warehouse.cli import main
    code = main(sys.argv[1:], freeze_imports=True, skip_numpy=True)  # as the console script
    out = {"code": code, "numpy": "numpy" in sys.modules and sys.modules["numpy"] is not None,
           "modules": sorted({m.split(".")[0] for m in sys.modules if sys.modules[m]})}
"""
HAS_REPORTS = any(SAMPLES.glob("*.ncu-rep")) if SAMPLES.is_dir() else False


def _reports_or_skip() -> list[Path]:
    from warehouse.ingesting.formats import ncu_rep

    if not HAS_REPORTS or not ncu_rep.available():
        pytest.skip(f"no .ncu-rep samples in {SAMPLES} or ncu_report not installed")
    return sorted(SAMPLES.glob("*.ncu-rep"))


def test_an_ingest_of_reports_only_never_imports_numpy(tmp_path):
    """`.ncu-rep` reports only: no NumPy (a third of the imports), and the runs ingest; a
    second `pwh ingest` of them finds them ingested (DuckDB's Arrow scan, the writer, the
    runs status, all without NumPy)."""
    reports = _reports_or_skip()[:2]
    args = ("--warehouse", str(tmp_path / "wh" / "w.duckdb"), "ingest", "-q", *map(str, reports))
    got = _run(CONSOLE, *args)
    assert got["code"] == 0, got
    assert not got["numpy"], got["modules"]
    assert {"duckdb", "pyarrow"} <= set(got["modules"])
    import duckdb

    con = duckdb.connect(str(tmp_path / "wh" / "w.duckdb"), read_only=True)
    try:
        assert con.execute("select count(*) from raw.ncu_runs").fetchone()[0] == len(reports)
        assert con.execute("select count(*) from raw.ncu_metrics").fetchone()[0] > 0
    finally:
        con.close()
    again = _run(CONSOLE, *args)
    assert again["code"] == 0 and not again["numpy"]


def test_numpy_is_imported_as_usual_for_any_other_file(tmp_path):
    """A report with a Kineto trace, or a folder (not sniffed ahead): NumPy as usual."""
    from warehouse.ingesting.formats import kineto_gen

    report = _reports_or_skip()[0]
    trace = tmp_path / "runs" / "t.pt.trace.json"
    trace.parent.mkdir()
    kineto_gen.write_file(trace, steps=2, seed=3)
    got = _run(CONSOLE, "--warehouse", str(tmp_path / "a" / "w.duckdb"), "ingest", "-q",
               str(report), str(trace))
    assert got["code"] == 0 and got["numpy"], got
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / report.name).write_bytes(report.read_bytes())
    got = _run(CONSOLE, "--warehouse", str(tmp_path / "b" / "w.duckdb"), "ingest", "-q",
               str(folder))
    assert got["code"] == 0 and got["numpy"], got


def test_a_report_that_became_another_file_is_refused_without_numpy(tmp_path):
    """NumPy was kept out because the file was a report when `pwh ingest` looked; it became a
    Kineto trace before it was read: refused naming the file and why, no crash."""
    from warehouse.ingesting.formats import kineto_gen

    report = _reports_or_skip()[0]
    f = tmp_path / "runs" / "r.ncu-rep"
    f.parent.mkdir()
    f.write_bytes(report.read_bytes())
    trace = tmp_path / "t.json"
    kineto_gen.write_file(trace, steps=2, seed=3)
    got = _run("""
        import sys, shutil
        from warehouse.ingesting import forking
        TRACE = sys.argv.pop(1)
        real = forking.hide_numpy
        def hide_then_change(paths, *a):
            hidden = real(paths, *a)
            shutil.copyfile(TRACE, paths[0])  # the report becomes a trace
            return hidden
        forking.hide_numpy = hide_then_change
        import contextlib, io
        from warehouse.cli import main
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(sys.argv[1:], skip_numpy=True)
        out = {"code": code, "numpy": sys.modules.get("numpy", 1) is not None,
               "err": err.getvalue()}
    """, str(trace), "--warehouse", str(tmp_path / "w.duckdb"), "ingest", str(f))
    assert got["code"] == 1 and not got["numpy"], got
    assert f"failed: {f}" in got["err"] and "has changed since" in got["err"], got["err"]


def test_hide_numpy_never_blocks_on_a_fifo_and_keeps_numpy(tmp_path):
    """A FIFO named on the command line is looked at without blocking (as ``prestart`` does):
    it is no report, so NumPy stays importable."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = _run("""
        import sys
        from warehouse.ingesting import forking
        out = {"hidden": forking.hide_numpy([sys.argv[1]]), "numpy": "numpy" in sys.modules}
    """, str(fifo))
    assert got == {"hidden": False, "numpy": False}, got
