"""Real concurrent processes: two ingesters on one landing folder, an analyst who keeps a
connection open while ingestion and publishing go on, and a file that is still being written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time

from tests.conftest import PROFILE_SEED
from tests.reliability.conftest import (
    assert_consistent,
    pwh,
    pwh_cmd,
    read_line,
    ro,
    spawn,
    write_runs,
)
from warehouse.ingesting.loader import ingest_file, ingest_paths
from warehouse.serving import snapshot
from warehouse.serving.query import connect


def test_two_ingest_processes_on_one_folder_load_each_file_exactly_once(wh, tmp_path):
    n = 16
    folder = tmp_path / "landing"
    runs = write_runs(folder, n, samples=400)
    w = str(wh.warehouse)
    procs = [spawn(pwh_cmd("--warehouse", w, "ingest", str(folder))) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
        # the only thing a user may see about the other process is "busy, retrying"
        for line in err.splitlines():
            assert "busy" in line and "retrying" in line, line
    ok_lines = [ln for out, _ in outs for ln in out.splitlines() if ln.startswith("ok ")]
    assert len(ok_lines) == n  # each file ingested by exactly one of the two
    summaries = [re.search(r"(\d+) ingested, (\d+) already ingested, (\d+) failed", out)
                 for out, _ in outs]
    assert sum(int(m.group(1)) for m in summaries) == n
    assert all(int(m.group(1)) + int(m.group(2)) == n and m.group(3) == "0" for m in summaries)
    shas = assert_consistent(wh)
    assert len(shas) == n
    con = ro(wh)
    try:
        assert con.execute("SELECT count(*) FROM raw.ingest_errors").fetchone() == (0,)
        assert sorted(r[0] for r in con.execute("SELECT file_name FROM raw.files").fetchall()) \
            == sorted(p.name for p in runs)
    finally:
        con.close()


def test_analyst_holding_a_connection_never_blocks_ingestion_or_publishing(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 4, samples=100)
    ingest_paths(wh, runs[:1])
    snapshot.publish(wh)
    # an analyst in another process: connection open, a transaction open, a result pending
    analyst = spawn([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        import warehouse
        con = warehouse.connect(sys.argv[1])
        con.execute("BEGIN")
        print(con.execute("SELECT count(*) FROM raw.files").fetchone()[0], flush=True)
        con.execute("SELECT * FROM raw.profile_samples")
        con.fetchmany(1)
        sys.stdin.readline()  # "hours" later
        print(con.execute("SELECT count(*) FROM raw.files").fetchone()[0], flush=True)
    """), str(wh.warehouse)], stdin=subprocess.PIPE)
    try:
        assert read_line(analyst).strip() == "1"
        w = str(wh.warehouse)
        for path in runs[1:]:
            r = pwh("--warehouse", w, "ingest", str(path))
            assert r.returncode == 0, r.stderr
            assert "busy" not in r.stderr  # never had to wait
            r = pwh("--warehouse", w, "snapshot")
            assert r.returncode == 0, r.stderr
            assert "busy" not in r.stderr and "waiting" not in r.stderr
        with connect(wh) as con:
            assert con.execute("SELECT count(*) FROM raw.files").fetchone() == (4,)
        # the analyst still sees the snapshot it opened
        analyst.stdin.write("\n")
        analyst.stdin.flush()
        assert read_line(analyst).strip() == "1"
    finally:
        analyst.kill()
        analyst.wait()


def test_analyst_keeps_its_version_across_publishes(wh, tmp_path):
    runs = write_runs(tmp_path / "in", 3, samples=50)
    ingest_paths(wh, runs[:1])
    child = spawn([sys.executable, "-c", textwrap.dedent("""
        import sys
        import warehouse
        con = warehouse.connect(sys.argv[1])
        for line in sys.stdin:
            print(con.version, con.execute("SELECT count(*) FROM raw.files").fetchone()[0],
                  flush=True)
    """), str(wh.warehouse)], stdin=subprocess.PIPE)
    try:
        seen = []
        for path in runs[1:]:
            child.stdin.write("\n")
            child.stdin.flush()
            seen.append(read_line(child).split())
            ingest_file(wh, path)
            snapshot.publish(wh)
        assert len({tuple(s) for s in seen}) == 1 and seen[0][1] == "1"
    finally:
        child.kill()
        child.wait()


GROWER = textwrap.dedent("""
    import sys, time
    data = open(sys.argv[1], "rb").read()
    out, chunks, pause = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    tail = sys.argv[5].encode() if len(sys.argv) > 5 else b""
    step = len(data) // chunks + 1
    with open(out, "wb") as fh:
        for i in range(0, len(data), step):
            fh.write(data[i:i + step])
            fh.flush()
            print("wrote", i + step, flush=True)
            time.sleep(pause)
        if tail:  # e.g. a trailing newline written after the document itself
            time.sleep(pause)
            fh.write(tail)
            fh.flush()
    print("done", flush=True)
""")


def _grow(src, dest, chunks: int, pause: float, tail: str = ""):
    return spawn([sys.executable, "-c", GROWER, str(src), str(dest), str(chunks), str(pause),
                  *([tail] if tail else [])])


def test_a_growing_file_is_never_ingested_partially(wh, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    final = PROFILE_SEED.read_bytes()
    dest = folder / "growing.json"
    proc = _grow(PROFILE_SEED, dest, chunks=8, pause=0.15)
    try:
        while proc.poll() is None:
            ingest_paths(wh, [folder])  # the scheduled ingest keeps firing meanwhile
            time.sleep(0.05)
    finally:
        proc.wait()
    ingest_paths(wh, [folder])
    con = ro(wh)
    try:
        rows = con.execute("SELECT sha256, byte_size FROM raw.files").fetchall()
    finally:
        con.close()
    import hashlib

    assert rows == [(hashlib.sha256(final).hexdigest(), len(final))]
    assert_consistent(wh)


def test_a_growing_file_is_skipped_until_complete_not_ingested_twice_or_quarantined(wh, tmp_path):
    folder = tmp_path / "landing"
    folder.mkdir()
    doc = json.loads(PROFILE_SEED.read_bytes())
    src = tmp_path / "compact.json"
    src.write_bytes(json.dumps(doc).encode())  # written as a writer would: doc, then "\n"
    proc = _grow(src, folder / "run.json", chunks=4, pause=0.3, tail="\n")
    results = []
    try:
        while proc.poll() is None:
            results += ingest_paths(wh, [folder])
            time.sleep(0.05)
    finally:
        proc.wait()
    results += ingest_paths(wh, [folder])
    con = ro(wh)
    try:
        n_runs = con.execute("SELECT count(*) FROM raw.files").fetchone()[0]
    finally:
        con.close()
    assert n_runs == 1, "one file, one run"
    assert not [r for r in results if r.status == "failed"], [r.message for r in results]
    assert not list(wh.quarantine_dir.glob("*.json"))
