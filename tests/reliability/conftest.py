"""Helpers for the fault-injection suite: real subprocesses, real SIGKILL, real file systems.

Random kill points come from ``random.Random(seed)``; the seed is printed in every assertion
message (and can be pinned with ``PWH_FAULT_SEED``) so that a failure can be replayed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.conftest import AUDIT_SEED, PROFILE_SEED, ROOT
from warehouse.config import Settings
from warehouse.ingesting.formats import audit, profile

RAW_CHILD_TABLES = (
    "profile_runs", "profile_groups", "profile_samples", "profile_sample_metadata",
    "audit_documents", "audit_rows", "audit_components", "audit_kernels",
)


def fault_seed() -> int:
    env = os.environ.get("PWH_FAULT_SEED")
    return int(env) if env else random.SystemRandom().randrange(1 << 30)


@pytest.fixture
def rng(request):
    seed = fault_seed()
    print(f"fault-injection seed for {request.node.name}: {seed} (PWH_FAULT_SEED={seed} replays)")
    r = random.Random(seed)
    r.seed_value = seed
    return r


def pwh_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "warehouse.cli", *argv]


def pwh(*argv: str, env: dict | None = None, input: str | None = None, timeout: float = 600
        ) -> subprocess.CompletedProcess:
    return subprocess.run(pwh_cmd(*argv), capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, input=input, timeout=timeout)


def spawn(argv: list[str], **kw) -> subprocess.Popen:
    """A child in its own process group, so that kill_hard() kills it and its children."""
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **kw)


def read_lines(proc: subprocess.Popen, n: int, timeout: float = 300) -> list[str]:
    """Up to ``n`` lines of the child's stdout: fewer if it exits or ``timeout`` passes (a
    reader thread, so that a silent child can never hang the test). The timeout only bounds a
    hang: a child's imports alone can take a minute with a second test suite on 2 cores."""
    import queue
    import threading

    q = getattr(proc, "_pwh_lines", None)
    if q is None:
        q = proc._pwh_lines = queue.Queue()

        def pump():
            for line in proc.stdout:
                q.put(line)
            q.put(None)

        threading.Thread(target=pump, daemon=True).start()
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        try:
            line = q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            q.put(None)  # stay at EOF for later calls
            break
        out.append(line)
    return out


def read_line(proc: subprocess.Popen, timeout: float = 300) -> str:
    lines = read_lines(proc, 1, timeout)
    return lines[0] if lines else ""


def kill_hard(proc: subprocess.Popen) -> None:
    """SIGKILL the whole process group (as the OOM killer or a power cut would)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def python_child(code: str, *args: str) -> subprocess.Popen:
    return spawn([sys.executable, "-c", code, *args])


def profile_variant(i: int, samples: int = 600) -> bytes:
    """A distinct, valid tile profile with ``samples`` samples (the seed's, repeated and shifted)."""
    d = json.loads(PROFILE_SEED.read_bytes())
    base = d["samples"]
    out = []
    for k in range(samples):
        s = json.loads(json.dumps(base[k % len(base)]))
        s["offset"] += k
        s["physicalTile"] = (s["physicalTile"] + k) % d["tileCount"]
        out.append(s)
    d["samples"] = out
    d["atOffset"] = i  # makes the bytes (and the SHA-256) unique
    return json.dumps(d, indent=1).encode()


def audit_variant(i: int) -> bytes:
    d = json.loads(AUDIT_SEED.read_bytes())
    d["scope"] = f"{d['scope']} (variant {i})"
    return json.dumps(d, indent=2).encode()


def write_runs(folder: Path, n: int, *, samples: int = 600) -> list[Path]:
    """``n`` distinct run files (alternating profiles and audits) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        data = profile_variant(i, samples) if i % 2 == 0 else audit_variant(i)
        p = folder / f"run_{i:03d}.json"
        p.write_bytes(data)
        paths.append(p)
    return paths


def ro(s: Settings | Path):
    path = s.warehouse if isinstance(s, Settings) else s
    return duckdb.connect(str(path), read_only=True)


def raw_state(path: Path) -> dict:
    """Everything in the raw layer, as comparable Python values (sorted rows per table)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for t in ("files", *RAW_CHILD_TABLES, "ingest_errors"):
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'raw' "
                "AND table_name = ? ORDER BY column_index", [t]).fetchall()]
            if t in ("files", "ingest_errors"):
                cols = [c for c in cols if c not in ("ingested_at", "occurred_at")]
            out[t] = sorted(con.execute(
                f"SELECT {', '.join(cols)} FROM raw.{t}").fetchall(), key=repr)
        return out
    finally:
        con.close()


def assert_consistent(s: Settings, context: str = "") -> set[str]:
    """Every run in raw.files is complete and rebuilds its archived bytes exactly; no table has
    rows of a run missing from raw.files (nothing partial). Returns the set of run ids."""
    con = ro(s)
    try:
        files = con.execute("SELECT sha256, source_format, archive_path FROM raw.files").fetchall()
        shas = {f[0] for f in files}
        assert len(shas) == len(files), f"{context}: a run is recorded twice"
        for t in RAW_CHILD_TABLES:
            orphans = con.execute(
                f"SELECT DISTINCT run_id FROM raw.{t} WHERE run_id NOT IN "
                "(SELECT sha256 FROM raw.files)").fetchall()
            assert not orphans, f"{context}: raw.{t} has rows of unrecorded runs {orphans}"
        for sha, fmt, arch in files:
            doc = json.loads(Path(arch).read_bytes())
            rebuilt = (profile if fmt == profile.NAME else audit).rebuild(con, sha)
            assert rebuilt == doc, f"{context}: run {sha[:12]} is not complete in the raw tables"
        return shas
    finally:
        con.close()


def wait_for(pred, timeout: float = 60, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# --------------------------------------------------------------------------- small file systems


def can_mount() -> bool:
    if os.geteuid() != 0 or sys.platform != "linux":
        return False
    probe = Path(f"/tmp/.pwh-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                           capture_output=True)
        if r.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], capture_output=True)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


@pytest.fixture
def small_fs(tmp_path):
    """Factory: mount a tmpfs of the given size (bytes) at a fresh folder; unmounted at teardown.
    Skips when the machine does not allow mounting (not root / no CAP_SYS_ADMIN)."""
    if not can_mount():
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the injected-"
                    "OSError tests cover the same code paths")
    mounts = []

    def make(size: int, name: str = "fs") -> Path:
        d = tmp_path / name
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                       check=True)
        mounts.append(d)
        return d

    yield make
    for d in reversed(mounts):
        r = subprocess.run(["umount", str(d)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


def remount(d: Path, opts: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{opts}", str(d)], check=True)


def fill_disk(d: Path, leave: int = 0) -> Path:
    """Fill the file system of ``d`` until at most ``leave`` bytes are free."""
    filler = d / "filler.bin"
    with open(filler, "ab") as fh:
        while True:
            free = os.statvfs(d).f_bavail * os.statvfs(d).f_frsize
            if free <= leave:
                break
            try:
                fh.write(b"\0" * min(1 << 20, max(4096, free - leave)))
                fh.flush()
            except OSError:
                break
    return filler


OPEN_CHILD = """
import sys, duckdb
try:
    duckdb.connect(sys.argv[1]).close()
    print("opened")
except duckdb.IOException as exc:
    print("locked" if "lock" in str(exc).lower() else f"error {exc}")
"""


def other_process_opens(path) -> str:
    """``opened`` when another process can open the warehouse read-write, ``locked`` when a
    DuckDB instance of this process still holds it (else the child's error)."""
    r = subprocess.run([sys.executable, "-c", OPEN_CHILD, str(path)], capture_output=True,
                       text=True, timeout=300)
    return r.stdout.strip() or r.stderr


def error_paths(path) -> list[str]:
    """``original_path`` of every row of ``raw.ingest_errors`` in the warehouse at ``path``
    (read-only, sorted): what the creation tests' children wrote."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(r[0] for r in con.execute(
            "SELECT original_path FROM raw.ingest_errors").fetchall())
    finally:
        con.close()
