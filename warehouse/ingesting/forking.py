"""Forked parser processes, and the threads that must wait for them.

A reader may parse in a forked process (:class:`ParserProcess`): the parse and DuckDB's load
then really run in parallel, and the parser's memory is its own. A thread must never exist at a
fork, so work done in a thread while a file is read (:class:`Ahead`: the writer's connection
opening, ``pwh lake ingest``'s catalog) begins only through :func:`after_forks`, once the loader
calls :func:`forks_done` for the file.

This module is the bottom of ``warehouse.ingesting``'s own layers: it imports none of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from warehouse.errors import FormatError

_after_forks: list[Callable[[], None]] = []


def after_forks(fn: Callable[[], None]) -> None:
    """Run ``fn`` once the next ingest has forked its parser process, or is past the point
    where it could: a caller may then start threads (e.g. ``pwh lake ingest`` opening its
    catalog while the parse runs) without any of them existing at a fork."""
    _after_forks.append(fn)


def forks_done() -> None:
    """Called by the loader where no more parser process will be forked for this file (and by
    whoever registered :func:`after_forks` work, in case the loader returned before)."""
    while _after_forks:
        _after_forks.pop(0)()


class Ahead:
    """Work done in a thread while a file is parsed: begun (:meth:`begin`, e.g. through
    :func:`after_forks`) only where no parser process will be forked any more, since a thread
    must never exist at a fork. :meth:`get` joins it, or does the work here if it never began,
    and raises what the work raised. Subclasses define :meth:`work`, ``NAME`` and, if its thread
    needs the GIL handed over sooner than every 5 ms while it runs, ``SWITCH_S``."""

    NAME = "pwh-ahead"
    SWITCH_S: float | None = None

    def __init__(self):
        self.value = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._done = False
        self._interval: float | None = None  # the switch interval to restore
        self._lock = threading.Lock()  # get() may be called from two threads

    def work(self):
        raise NotImplementedError

    def begin(self) -> None:
        if self._thread is None and not self._done:
            self._thread = threading.Thread(target=self._run, name=self.NAME, daemon=True)
            if self.SWITCH_S is not None:
                self._interval = sys.getswitchinterval()
                sys.setswitchinterval(min(self._interval, self.SWITCH_S))
            self._thread.start()

    def _restore(self) -> None:
        if self._interval is not None:
            sys.setswitchinterval(self._interval)
            self._interval = None

    def _run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # noqa: BLE001 - raised by get(), in the caller's thread
            self.error = exc

    def get(self):
        with self._lock:
            if not self._done:
                with contextlib.suppress(ValueError):
                    _after_forks.remove(self.begin)
                if self._thread is None:
                    self._run()
                else:
                    try:
                        self._thread.join()
                    finally:
                        self._restore()
                self._done = True
        if self.error is not None:
            raise self.error
        return self.value

    def used(self) -> bool:
        """Begun, or its result asked for."""
        return self._thread is not None or self._done

    def abandon(self):
        """The result if it is ready by now, else ``None`` (e.g. on Ctrl-C: the thread, a
        daemon, is not waited for)."""
        if self._thread is not None and self._thread.is_alive():
            self._restore()
            return None
        try:
            return self.get()
        except BaseException:  # noqa: BLE001 - the caller is leaving already
            return None


# ------------------------------------------------------------------ parser processes

_HEAD = struct.Struct("<cIQ")  # message kind, name length, payload length


def _write_all(fd: int, data) -> None:
    with memoryview(data) as mv:
        pos = 0
        while pos < len(mv):
            pos += os.write(fd, mv[pos:])


def _read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    with memoryview(buf) as mv:
        pos = 0
        while pos < n:
            k = os.readv(fd, [mv[pos:]])
            if k == 0:
                raise EOFError("the parser process ended early")
            pos += k
    return buf


def fork_child(child: Callable[[int], None]) -> tuple[int, int]:
    """Fork a process that runs ``child(write_fd)`` and exits (0 if it returned, 1 if it
    raised); returns ``(pid, read_fd)`` of the pipe it writes to."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # Linux: bigger pipe, fewer calls
        import fcntl

        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            child(w)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def use_process() -> bool:
    """Parse in a forked process where the platform can (``PWH_STREAM_PROCESS=0``: never)."""
    return hasattr(os, "fork") and os.environ.get("PWH_STREAM_PROCESS", "1") != "0"


class ParserProcess:
    """A parser run in a forked process, its batches sent back through a pipe.

    Each message is ``(kind, name, payload)``: ``T`` an Arrow IPC table named ``name``, ``E`` a
    :class:`FormatError` (its fields as JSON, rebuilt here), ``X`` any other error of the child
    (its repr); the subclass adds its own kinds (the end with its counts, "not streamable" …).
    The child runs :meth:`_child` with :meth:`_send`, :meth:`_send_table`, :meth:`_send_error`;
    the parent reads :meth:`_messages`. The child reads only the snapshot of the file and
    writes nothing but the pipe; it is killed if the load stops."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.fd: int | None = None
        self.cpu = 0.0
        self.peak_rss = 0
        self.blocked = 0.0  # in the child: seconds spent waiting for the pipe

    def start(self) -> None:
        self.pid, self.fd = fork_child(self._child)

    def _child(self, fd: int) -> None:
        raise NotImplementedError

    # ---- the child's side

    def _send(self, fd: int, kind: bytes, name: bytes = b"", payload=b"") -> None:
        t = time.perf_counter()
        _write_all(fd, _HEAD.pack(kind, len(name), len(payload)) + name)
        if len(payload):
            _write_all(fd, payload)
        self.blocked += time.perf_counter() - t

    def _send_table(self, fd: int, name: str, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)
        del table
        self._send(fd, b"T", name.encode(), sink.getvalue())

    def _send_error(self, fd: int, exc: BaseException) -> None:
        if isinstance(exc, FormatError):
            self._send(fd, b"E", payload=json.dumps(
                [exc.path, exc.json_path, exc.expected, exc.kind]).encode())
        else:
            self._send(fd, b"X", payload=f"parser process: {exc!r}"[:4000].encode())

    # ---- the parent's side

    def _messages(self) -> Iterator[tuple[bytes, str, object]]:
        """``(kind, name, payload)`` until the caller stops reading; a ``T`` payload is the
        table; ``E`` and ``X`` raise (:class:`FormatError`, ``RuntimeError``)."""
        while True:
            kind, nlen, plen = _HEAD.unpack(_read_exact(self.fd, _HEAD.size))
            name = bytes(_read_exact(self.fd, nlen)).decode() if nlen else ""
            payload = _read_exact(self.fd, plen) if plen else b""
            if kind == b"T":
                yield kind, name, pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
            elif kind == b"E":
                p, where, expected, k = json.loads(bytes(payload))
                raise FormatError(p, where, expected, kind=k)
            elif kind == b"X":
                raise RuntimeError(bytes(payload).decode(errors="replace"))
            else:
                yield kind, name, bytes(payload)

    def kill(self) -> None:
        """End the process now (a thread reading its pipe then sees the end of it)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            self.kill()  # a no-op when it already ended
            pid, self.pid = self.pid, None
            _, _, usage = os.wait4(pid, 0)
            self.cpu = usage.ru_utime + usage.ru_stime
            self.peak_rss = usage.ru_maxrss


class MallocKeep:
    """glibc only: while streaming, serve the per-chunk temporary arrays (a few MB each) from
    the heap and keep freed memory for the next chunk, instead of a fresh mmap per array (whose
    page faults cost as much as the work on the array). Restored, and memory handed back, at
    the end. A no-op where glibc's ``mallopt`` is not available."""

    _M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

    def __init__(self):
        try:
            import ctypes

            self.libc = ctypes.CDLL("libc.so.6")
            ok = (self.libc.mallopt(self._M_MMAP_THRESHOLD, 32 << 20)
                  and self.libc.mallopt(self._M_TRIM_THRESHOLD, 1 << 30))
            if not ok:
                self.restore()
        except (OSError, AttributeError):
            self.libc = None

    def restore(self) -> None:
        if self.libc is not None:
            self.libc.mallopt(self._M_TRIM_THRESHOLD, 128 << 10)  # glibc's defaults
            self.libc.mallopt(self._M_MMAP_THRESHOLD, 128 << 10)
            self.libc.malloc_trim(0)
            self.libc = None
