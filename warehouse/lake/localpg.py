"""A throwaway PostgreSQL server for tests and benchmarks: Debian's ``postgresql`` binaries,
a cluster in a temporary folder, listening only on a Unix socket there (no TCP). Never used by
the warehouse itself; teams point ``--catalog`` at their own server."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


@contextlib.contextmanager
def server() -> Iterator[str]:
    """Start a server; yield a base URI ``postgresql://postgres@/postgres?host=SOCKET_DIR``;
    stop it and delete its folder at the end."""
    bins = bindir()
    if bins is None:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
    base = Path(tempfile.mkdtemp(prefix="pwh-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: use the package's user
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    started = False
    try:
        subprocess.run([*as_user, str(bins / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres", "-E", "UTF8", "--no-sync"], check=True,
                       capture_output=True, env=env)
        opts = f"-k {sock} -c listen_addresses='' -c fsync=off -c max_connections=60"
        subprocess.run([*as_user, str(bins / "pg_ctl"), "-D", str(data), "-o", opts,
                        "-l", str(base / "server.log"), "-w", "-t", "60", "start"], check=True,
                       capture_output=True, env=env)
        started = True
        yield f"postgresql://postgres@/postgres?host={sock}"
    finally:
        if started:
            subprocess.run([*as_user, str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate",
                            "-w", "stop"], capture_output=True, env=env)
        shutil.rmtree(base, ignore_errors=True)


def create_database(base_uri: str, name: str) -> str:
    """A new database on the server of ``base_uri``; returns its URI."""
    import psycopg

    with psycopg.connect(base_uri, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    return base_uri.replace("/postgres?", f"/{name}?")
