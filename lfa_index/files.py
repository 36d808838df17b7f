"""Atomic file writes: a temporary file in the target's folder, fsynced, then renamed over the target.

A reader never sees half a file, and a crash leaves the previous file (or none). Index
directories have their own writer (:mod:`lfa_index.persistence`).

Example
-------
>>> atomic_write("report/results.json", json.dumps(results))
>>> with atomic_file("cache/embeddings.npy") as f:
...     np.save(f, embeddings)
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

FILE_MODE = 0o644  # mkstemp creates 0600; results and caches are read by other users and tools


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write; it replaces ``path`` when the block ends without an error.

    The parent folder is created when missing. On an error the temporary file is removed and
    ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` at once; returns the path."""
    with atomic_file(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
