"""Atomic saves: durable writes, the all-at-once manifest replace, the save lock, and crash recovery.

A file is durable once it and its directory are fsync'ed; ``manifest.json`` is replaced with
``os.replace`` from a temporary file beside it, which is the commit of a save. What a crashed save
leaves behind is removed by the next one (:func:`remove_entries`).

Example
-------
>>> with hold_lock(Path("idx"), exclusive=True) as held:
...     replace_file(Path("idx/manifest.json"), b"{...}")
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ..errors import IndexPathError
from .layout import LOCK_FILE

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: saves are not serialised, see hold_lock
    fcntl = None  # type: ignore[assignment]

_UNLOCKED_GRACE_S = 3600.0  # without file locks, a younger stray data folder may be another save's


# ------------------------------------------------------------------------------ durable writes
def write_durable(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` and fsync it."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once: a temporary file beside it, fsync, ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_file(path: Path) -> None:
    """Flush a written file to disk."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk (where the platform can open directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ the lock
@contextlib.contextmanager
def hold_lock(directory: Path, *, exclusive: bool) -> Iterator[bool]:
    """Hold ``directory``'s lock file: exclusive for a save, shared for a read. Yields whether it is held.

    Where ``fcntl`` or the file system's locks are missing it yields False: saves then race, and the
    last one to commit wins.
    """
    if fcntl is None:
        yield False
        return
    lock = directory / LOCK_FILE
    nofollow = getattr(os, "O_NOFOLLOW", 0)  # a link there must not make a save create or lock its target
    try:
        if exclusive:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | nofollow, 0o644)
        else:
            fd = os.open(lock, os.O_RDONLY | nofollow)
    except OSError as err:
        if exclusive and err.errno == errno.ELOOP:
            raise IndexPathError(f"{lock} is a symbolic link; remove it (lfa-index writes a plain file).") from err
        if exclusive:
            raise
        yield False  # no lock file (e.g. a copied index): nobody saves here with locks
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            held = True
        except OSError:  # e.g. ENOLCK on some network file systems
            held = False
        yield held
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ crash recovery
def remove_entries(root: Path, names: list[str], *, young_too: bool) -> None:
    """Best-effort removal of lfa-index's own entries; a failure is retried by the next save."""
    for name in names:
        entry = root / name
        try:
            if not young_too and time.time() - entry.lstat().st_mtime < _UNLOCKED_GRACE_S:
                continue  # without a lock it may be another save's folder in progress
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            pass
    if names:
        fsync_dir(root)

