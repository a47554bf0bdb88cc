"""Reader processes: forked parser processes, the threads that must wait for them, and
isolated reader scripts.

A reader may parse in a forked process (:class:`ParserProcess`): the parse and DuckDB's load
then really run in parallel, and the parser's memory is its own. A thread must never exist at a
fork, so work done in a thread while a file is read (:class:`Ahead`: the writer's connection
opening, ``pwh lake ingest``'s catalog) begins only through :func:`after_forks`, once the loader
calls :func:`forks_done` for the file.

A native reader that may crash, hang or eat memory on a hostile file runs as a script in a fresh
interpreter (:class:`Isolated`, :class:`Script`: the Nsight Compute report reader). Such a
reader may be started before the ingesting process imports anything heavy (:func:`prestart`,
called by ``pwh ingest`` right after reading its arguments): its start and work then overlap
the imports, and the format's reader claims it (:func:`claim_early`) when the bytes it was
given are the file's bytes still.

This module is the bottom of ``warehouse.ingesting``'s own layers: it imports none of them, and
nothing heavy (PyArrow is imported where a parser process sends or receives a table), since
``pwh ingest`` imports it first.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from warehouse.errors import FormatError

_after_forks: list[Callable[[], None]] = []

# the interpreter-wide switch interval, lowered while some thread needs the GIL handed over
# sooner: one lease per user, the smallest asked for wins, the original comes back when the
# last lease ends (threads' save-and-restore pairs interleave: each restoring what it saw
# could leave another's lowered value in place for good)
_switch_lock = threading.Lock()
_switch_leases: dict[int, float] = {}
_switch_base: float | None = None
_switch_next = 0


def lower_switch_interval(seconds: float) -> int:
    """Lower the switch interval to at most ``seconds`` until :func:`restore_switch_interval`
    is called with the returned lease."""
    global _switch_base, _switch_next
    with _switch_lock:
        if not _switch_leases:
            _switch_base = sys.getswitchinterval()
        _switch_next += 1
        _switch_leases[_switch_next] = seconds
        sys.setswitchinterval(min(_switch_base, *_switch_leases.values()))
        return _switch_next


def restore_switch_interval(lease: int | None) -> None:
    """End a lease of :func:`lower_switch_interval` (``None`` and an ended lease: nothing)."""
    global _switch_base
    with _switch_lock:
        if _switch_leases.pop(lease, None) is None:
            return
        sys.setswitchinterval(min([_switch_base, *_switch_leases.values()]))
        if not _switch_leases:
            _switch_base = None


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
        self._lease: int | None = None  # of a lowered switch interval
        self._lock = threading.Lock()  # get() may be called from two threads

    def work(self):
        raise NotImplementedError

    def begin(self) -> None:
        if self._thread is None and not self._done:
            self._thread = threading.Thread(target=self._run, name=self.NAME, daemon=True)
            if self.SWITCH_S is not None:
                self._lease = lower_switch_interval(self.SWITCH_S)
            self._thread.start()

    def _restore(self) -> None:
        lease, self._lease = self._lease, None
        restore_switch_interval(lease)

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

    def _send_table(self, fd: int, name: str, table) -> None:
        import pyarrow as pa

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
        import pyarrow as pa

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


# ------------------------------------------------------------------ isolated reader scripts


@dataclass(frozen=True)
class Script:
    """A reader run as a script in a fresh interpreter (:class:`Isolated`). It reads the file
    named by its one argument (a private copy of the bytes, in a private folder that is its
    ``HOME``, ``TMPDIR`` and working directory), writes its answer to stdout and a reason to
    stderr, and limits its own memory and CPU time (from ``env``: defaults of its environment).
    It runs as ``python -I -S``: no ``site`` (a start ~20 ms quicker), the installed packages
    ``modules`` found where this process finds them (``PWH_READER_PATH``, folders joined by
    ``os.pathsep``). Its answer may be at most ``max_answer`` bytes long (RLIMIT_FSIZE of the
    file it goes to). ``magic``: what the files it reads start with (for :func:`prestart`)."""

    path: Path
    magic: bytes
    modules: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    max_answer: int = 128 << 20


# The Nsight Compute report reader (``formats/ncu_rep.py`` runs it): declared here, so that
# ``pwh ingest`` can start it (prestart) before it imports the formats.
NCU_REPORT = Script(Path(__file__).parent / "formats" / "ncu_rep_read.py", b"NVR\x00",
                    ("ncu_report", "msgspec"), (("PWH_NCU_MEM_MB", "1024"),))
EARLY_SCRIPTS = (NCU_REPORT,)


def _package_dirs(modules: tuple[str, ...]) -> list[str] | None:
    """The ``sys.path`` folders ``modules`` are imported from; ``None`` if one is missing."""
    import importlib.util

    out: list[str] = []
    for m in modules:
        spec = importlib.util.find_spec(m)
        if spec is None or spec.origin is None:
            return None
        d = os.path.dirname(os.path.dirname(spec.origin)) if spec.submodule_search_locations \
            else os.path.dirname(spec.origin)
        if d not in out:
            out.append(d)
    return out


class Isolated:
    """One run of ``script`` on ``data``, started at once. :meth:`wait` (within a time limit
    counted from the start), then :meth:`answer_too_long`, :meth:`answer`, :meth:`reason`;
    :meth:`close` always (kills it if it still runs, removes its folder)."""

    def __init__(self, script: Script, data) -> None:
        self.script, self.data = script, data
        self.proc: subprocess.Popen | None = None
        self.pidfd: int | None = None
        self.out = self.err = None
        self.returncode: int | None = None
        self.tmp = tempfile.mkdtemp(prefix="pwh-reader-")
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        tmp = self.tmp
        inp = os.path.join(tmp, "input")
        fd = os.open(inp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.data)
        env = dict(self.script.env)
        env.update(os.environ)
        env.update(HOME=tmp, TMPDIR=tmp,
                   PWH_READER_PATH=os.pathsep.join(_package_dirs(self.script.modules) or ()))
        self.out = open(os.path.join(tmp, "answer"), "w+b")  # noqa: SIM115 - closed by close()
        self.err = open(os.path.join(tmp, "err"), "w+b")  # noqa: SIM115
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(self.script.path), inp], env=env, cwd=tmp,
            stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err, start_new_session=True)
        limit = self.script.max_answer
        with contextlib.suppress(OSError):  # set before the interpreter has started
            import resource

            resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
        with contextlib.suppress(OSError, AttributeError):  # Linux >= 5.3: wait without polling
            self.pidfd = os.pidfd_open(self.proc.pid)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status (negative: the signal it died by), or ``None`` if it did not end
        within ``timeout_s`` of its start (it is killed then)."""
        left = max(0.0, self.started + timeout_s - time.monotonic())
        try:
            if self.pidfd is not None:
                import select

                ready, _, _ = select.select([self.pidfd], [], [], left)
                if not ready:
                    raise subprocess.TimeoutExpired(self.proc.args, timeout_s)
                self.returncode = self.proc.wait()
            else:
                self.returncode = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        return self.returncode

    def answer_too_long(self) -> bool:
        import signal

        return (self.returncode == -signal.SIGXFSZ
                or os.fstat(self.out.fileno()).st_size >= self.script.max_answer)

    def answer(self) -> bytes:
        self.out.seek(0)
        return self.out.read()

    def reason(self, limit: int = 64 << 10) -> bytes:
        """The end of what it wrote to stderr (at most ``limit`` bytes)."""
        self.err.seek(max(0, os.fstat(self.err.fileno()).st_size - limit))
        return self.err.read()

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for f in (self.out, self.err):
            if f is not None:
                f.close()
        self.out = self.err = None
        self.data = None
        shutil.rmtree(self.tmp, ignore_errors=True)


_early: list[Isolated] = []
EARLY_MAX_BYTES = 64 << 20  # a larger file is not read ahead (it would be held twice)


def prestart(paths: Iterable, scripts: tuple[Script, ...] = EARLY_SCRIPTS) -> None:
    """Start the reader script of the first of ``paths`` if it is a file (not a folder) that one
    of ``scripts`` reads (by its first bytes). Called before the caller imports anything heavy:
    the reader's interpreter start and its work overlap those imports, and nothing else (a
    later file's reader would run beside the files before it, their memory added up). The
    format's reader claims the process (:func:`claim_early`) if it gets the same bytes; one
    never claimed is stopped by :func:`drop_early` (at exit at the latest). Never raises: what
    cannot be read here is left to the loader."""
    for p in paths:
        try:
            if stat.S_ISREG(os.stat(p).st_mode):
                _prestart(p, scripts)
        except Exception:  # noqa: BLE001 - a shortcut only: the loader reads the file itself
            pass
        return


def _open_head(p):
    """``p`` opened for reading without blocking (a FIFO or a device never waits here)."""
    return open(os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb")


def _script_of(head: bytes, scripts: tuple[Script, ...]) -> Script | None:
    """The script that reads a file starting with ``head`` (its magic), if any."""
    return next((s for s in scripts if head.startswith(s.magic)), None)


def _prestart(p, scripts: tuple[Script, ...]) -> None:
    with _open_head(p) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > EARLY_MAX_BYTES:
            return
        head = f.read(16)
        script = _script_of(head, scripts)
        if script is None or _package_dirs(script.modules) is None:
            return  # not such a file, or its reader is not installed (the format says so)
        data = head + f.read(EARLY_MAX_BYTES)
    if not _early:
        atexit.register(drop_early)
    _early.append(Isolated(script, data))


def _read_by_script(p, scripts: tuple[Script, ...]) -> bool:
    with _open_head(p) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return False
        return _script_of(f.read(16), scripts) is not None


def hide_numpy(paths: Iterable, scripts: tuple[Script, ...] = EARLY_SCRIPTS) -> bool:
    """Keep NumPy out of this process when every one of ``paths`` is a file (not a folder) that
    one of ``scripts`` reads (by its first bytes: a batch of ``.ncu-rep`` reports): their tables
    are built without NumPy (``formats.base.to_arrow``), and PyArrow, which imports NumPy when
    it can, then does not (a third of ``pwh ingest``'s imports, ~0.15 s CPU). Only before
    PyArrow is imported, and for the rest of the process (PyArrow initialises its NumPy support
    at its import or never): only the console script, which ends with its command, asks. A file
    whose content changed since is refused by the loader (:func:`numpy_hidden`). ``True`` if
    NumPy is hidden now."""
    if "numpy" in sys.modules or "pyarrow" in sys.modules:
        return numpy_hidden()
    paths = list(paths)
    try:
        if not paths or not all(_read_by_script(p, scripts) for p in paths):
            return False
    except OSError:
        return False
    sys.modules["numpy"] = None  # `import numpy` raises ImportError: PyArrow goes without
    return True


def numpy_hidden() -> bool:
    """Did :func:`hide_numpy` keep NumPy out of this process?"""
    return "numpy" in sys.modules and sys.modules["numpy"] is None


def claim_early(script: Script, data) -> Isolated | None:
    """The process :func:`prestart` started with ``script`` on exactly these bytes, now the
    caller's to wait for and close; ``None`` if there is none."""
    for i, iso in enumerate(_early):
        if iso.script == script and iso.data is not None and len(iso.data) == len(data) \
                and iso.data == data:
            iso.data = None  # the caller holds the same bytes
            return _early.pop(i)
    return None


def drop_early() -> None:
    """Stop and forget every process :func:`prestart` started that nobody claimed."""
    while _early:
        _early.pop().close()
