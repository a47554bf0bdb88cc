"""The bytes a file is ingested as: its identity (SHA-256) and its archived copy are of these
bytes, whatever happens to the file meanwhile.

A file read whole is held in memory (:meth:`Snapshot.read`) and hashed at once. A file a reader
streams is first copied into the archive's temp file (:meth:`Snapshot.copy`, an in-kernel copy;
a file already in the archive, as the Dagster path stages it, is its own snapshot): every reader
then reads that private copy, a hasher thread hashes it (and fsyncs it) while the file is
parsed, and :meth:`Snapshot.archive` renames it into the archive once the load is good.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import shutil
import threading
from pathlib import Path

from warehouse.config import Settings

_BLOCK = 8 << 20


def sha256_file(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_path(settings: Settings, sha: str) -> Path:
    return settings.archive_dir / f"{sha}.json"


def archive_bytes(settings: Settings, sha: str, data: bytes) -> Path:
    """Write ``data`` to the content-addressed archive (tmp file + rename; no-op if present)."""
    dest = archive_path(settings, sha)
    if dest.exists() and dest.stat().st_size == len(data):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{sha}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, dest)
    return dest


def in_archive(settings: Settings, path: Path) -> bool:
    """``path`` already lives in the archive (the Dagster path stages files there)."""
    try:
        return path.resolve().parent == settings.archive_dir.resolve()
    except OSError:
        return False


def stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


class Halted(Exception):
    """The hasher was told to stop."""


class Snapshot:
    """See the module's docstring. ``file``: where a streaming reader reads the bytes;
    :meth:`bytes`: the whole content; :meth:`wait_sha`: the identity (``None`` if the hasher
    was halted or failed, see :attr:`hash_error`)."""

    def __init__(self, settings: Settings, path: Path):
        self.settings, self.path = settings, path
        self.data: bytes | None = None
        self.file = path
        self.tmp: Path | None = None  # our private copy, until archived
        self.size = 0
        self.sha: str | None = None
        self.hash_error: BaseException | None = None
        self._hasher: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def on_disk(self) -> bool:
        return self.data is None

    @classmethod
    def read(cls, settings: Settings, path: Path, before: tuple[int, int]) -> Snapshot | None:
        """The file's bytes in memory, hashed; ``None`` if it changed while read."""
        snap = cls(settings, path)
        data = path.read_bytes()
        if stat_key(path) != before:
            return None
        snap.data, snap.size, snap.sha = data, len(data), sha256_file(data)
        return snap

    @classmethod
    def copy(cls, settings: Settings, path: Path, before: tuple[int, int]) -> Snapshot | None:
        """A private copy of the file (hashed by :meth:`hash_aside`); ``None`` if it changed
        while copied."""
        snap = cls(settings, path)
        if not in_archive(settings, path):
            import uuid  # only here: not on the small files' path

            settings.archive_dir.mkdir(parents=True, exist_ok=True)
            snap.tmp = snap.file = settings.archive_dir / f".{uuid.uuid4().hex}.{os.getpid()}.tmp"
            try:
                shutil.copyfile(path, snap.tmp)
                if stat_key(path) != before:
                    snap.discard()
                    return None
            except BaseException:
                snap.discard()
                raise
        snap.size = snap.file.stat().st_size
        return snap

    # ---- identity

    def hash_aside(self) -> None:
        """Start hashing the copy in a thread (a no-op once the identity is known or coming)."""
        if self.sha is None and self._hasher is None and self.hash_error is None:
            self._hasher = threading.Thread(target=self._hash, name="pwh-hasher", daemon=True)
            self._hasher.start()

    def _hash(self) -> None:
        try:
            h = hashlib.sha256()
            with open(self.file, "rb") as fh, mmap.mmap(fh.fileno(), 0,
                                                         access=mmap.ACCESS_READ) as mm:
                size = len(mm)
                for off in range(0, size, _BLOCK):
                    if self._stop.is_set():
                        raise Halted
                    n = min(_BLOCK, size - off)
                    with memoryview(mm) as mv, mv[off: off + n] as block:
                        h.update(block)
                    mm.madvise(mmap.MADV_DONTNEED, off, n)  # keep RSS flat: the page cache has it
                if self.tmp is not None:
                    os.fsync(fh.fileno())  # archived by a rename: durable first
            self.sha = h.hexdigest()
        except BaseException as exc:  # noqa: BLE001 - reported by wait_sha's callers
            self.hash_error = exc

    def sha_ready(self) -> bool:
        return self.sha is not None or self.hash_error is not None

    def wait_sha(self, stop: threading.Event | None = None) -> str | None:
        """The identity, once hashed (``None``: the hash failed, or ``stop`` was set)."""
        if self.sha is None and self.hash_error is None:
            if self._hasher is None:
                self._hash()  # nobody started it: hash here
            else:
                while self._hasher.is_alive():
                    if stop is not None and stop.is_set():
                        return None
                    self._hasher.join(0.05)
        return self.sha

    # ---- the content

    def bytes(self) -> bytes:
        return self.data if self.data is not None else self.file.read_bytes()

    def keep_copy(self, dest: Path) -> Path:
        """Move the private copy to ``dest`` (the archive's name for these bytes; a copy
        already there is kept) and read from there on."""
        if self.tmp is not None:
            if dest.exists() and dest.stat().st_size == self.size:
                self.tmp.unlink()
            else:
                os.replace(self.tmp, dest)
            self.tmp = None
            self.file = dest
        return dest

    def discard(self) -> None:
        """Stop the hasher and remove a private copy never archived."""
        self._stop.set()
        if self._hasher is not None and self._hasher.is_alive():
            self._hasher.join()
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                self.tmp.unlink()
            self.tmp = None
