"""Atomic file writes: a temporary file in the target's folder, fsynced, then renamed over the target.

A reader never sees half a file, and a crash leaves the previous file (or none). Index
directories have their own writer (:mod:`lfa_index.persistence`). :func:`check_output_path` keeps
every writer (commands, batch jobs) off its own inputs.

Example
-------
>>> atomic_write("report/results.json", json.dumps(results))
>>> with atomic_file("cache/embeddings.npy") as f:
...     np.save(f, embeddings)
>>> check_output_path("labels.csv", {"--queries": "queries.npy"}, name="-o")
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping

from .errors import OutputPathError

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


def check_output_path(output: Any, inputs: Mapping[str, Any], *, name: str) -> None:
    """Raise :class:`~lfa_index.errors.OutputPathError` when ``output`` is one of ``inputs`` (``{what: path or
    list of paths}``), lies inside one or holds one; links and ``~`` are resolved, URIs (``s3://...``) compared
    as text. ``name`` says what ``output`` is in messages (a flag, a parameter)."""
    if not output:
        return
    for what, given in inputs.items():
        for source in given if isinstance(given, (list, tuple)) else [given]:
            if source and _overlap(str(output), str(source)):
                raise OutputPathError(
                    f"{name} {output} would overwrite an input ({what} {source}); an output never replaces what "
                    "a call reads: write it to another path."
                )


def _overlap(a: str, b: str) -> bool:
    """Whether paths (or URIs) ``a`` and ``b`` are the same, or one lies inside the other."""
    if "://" in a or "://" in b:
        x, y = a.rstrip("/") + "/", b.rstrip("/") + "/"
        return x.startswith(y) or y.startswith(x)
    x, y = Path(os.path.realpath(os.path.expanduser(a))), Path(os.path.realpath(os.path.expanduser(b)))
    if x == y or x.is_relative_to(y) or y.is_relative_to(x):
        return True
    try:
        return os.path.samefile(x, y)  # hard links
    except OSError:
        return False
