"""Kept files: names that cannot collide, created complete and never over an existing file.

Every file the warehouse promises to keep (the warehouse a ``pwh import --replace`` replaced,
quarantined bad files and their error records, snapshots, export folders) is made through this
module, so that two commands in the same second, or in parallel, can never replace each
other's kept file:

* **Names** carry a UTC time to the microsecond plus a random suffix (:func:`tag`, e.g.
  ``20261201T143600.123456Z-3f9a1c2b``): they sort by time and do not collide.
* **Creation never replaces.** Contents are written to a hidden temporary file in the same
  folder (``.<name>.<nonce>.<pid>.tmp``), flushed and ``fsync``-ed, then given the final name by
  ``renameat2(RENAME_NOREPLACE)`` (or ``link`` where the file system lacks it), which fails
  instead of replacing a file that exists; the folder is ``fsync``-ed after. A killed process
  leaves at most a hidden temporary file (removed by :func:`remove_stale_temps`), never a
  partial file under a kept name.

Pure standard library: importable on every fast path.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import errno
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_renameat2 = None
if sys.platform.startswith("linux"):
    with contextlib.suppress(OSError, AttributeError):
        _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
        _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint]
        _renameat2.restype = ctypes.c_int


def tag(now: dt.datetime | None = None) -> str:
    """``<UTC time to the microsecond>-<8 random hex digits>``: sortable, collision-free."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%dT%H%M%S.%fZ}-{secrets.token_hex(4)}"


def fsync(path: Path) -> None:
    """Make a file's content, or a folder's entries (a new or renamed file), durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` (file or folder) to ``dst`` atomically, raising :class:`FileExistsError`
    instead of replacing anything at ``dst``."""
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst),
                      _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), str(dst))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(src), None, str(dst))
    # No renameat2 here (file system or platform): claim the name exclusively first.
    if Path(src).is_dir():
        os.mkdir(dst)  # FileExistsError if taken; the empty claim is then replaced atomically
        try:
            os.rename(src, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(dst)
            raise
    else:
        os.link(src, dst)  # FileExistsError if taken
        os.unlink(src)


def temp_name(final: Path) -> Path:
    """A hidden temporary name beside ``final``, unique to this process and call."""
    return final.with_name(f".{final.name}.{secrets.token_hex(4)}.{os.getpid()}{TMP_SUFFIX}")


def create_new(final: Path, content: bytes | Callable[[BinaryIO], None], *,
               sync_dir: bool = True) -> Path:
    """Write ``final`` completely or not at all; :class:`FileExistsError` if it exists.

    ``content``: the bytes, or a function writing them to the open file. ``sync_dir=False``:
    the caller ``fsync``-s the folder once after creating many files.
    """
    tmp = temp_name(final)
    try:
        with open(tmp, "xb") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        rename_noreplace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if sync_dir:
        fsync(final.parent)
    return final


def keep_new(folder: Path, name: Callable[[str], str],
             create: Callable[[Path], object], attempts: int = 20) -> Path:
    """Create a kept file under ``folder / name(tag())`` with ``create(path)`` (which must raise
    :class:`FileExistsError` rather than replace); a taken name is retried with a new tag."""
    for _ in range(attempts):
        path = folder / name(tag())
        try:
            create(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, f"no free name after {attempts} attempts",
                          str(folder / name("<tag>")))


def link_new(src: Path, dst: Path) -> Path:
    """A second name ``dst`` for the file ``src`` (hard link, never replacing), made durable."""
    os.link(src, dst)
    fsync(dst.parent)
    return dst


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: Path) -> int:
    """Delete this module's temporary files whose writer process is gone (killed)."""
    removed = 0
    if not folder.is_dir():
        return 0
    for tmp in folder.glob(f".*{TMP_SUFFIX}"):
        pid = tmp.name.removesuffix(TMP_SUFFIX).rpartition(".")[2]
        if not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed
