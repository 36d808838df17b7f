"""Saving an index directory: a new data folder, then the manifest replaced in one step (the commit).

Example
-------
>>> write_index_dir("idx", kind="aligned-index", documents={"params.json": {"a": 1}},
...                 arrays={"arrays.safetensors": {"W": w}}, faiss_indexes={})
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import faiss
import numpy as np
from safetensors.numpy import save_file

from ..errors import IndexPathError, IndexPermissionError, LFAIndexError
from .atomic import (
    fsync_dir,
    fsync_file,
    hold_lock,
    remove_entries,
    replace_file,
    write_durable,
)
from .layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    check_part_name,
    committed_data,
    file_sha256,
    inspect_target,
    library_version,
)


def write_index_dir(
    path: str | os.PathLike,
    *,
    kind: str,
    documents: Mapping[str, Any],
    arrays: Mapping[str, Mapping[str, np.ndarray]],
    faiss_indexes: Mapping[str, faiss.Index],
) -> Path:
    """Write every part under ``path`` atomically and return ``path``.

    ``documents`` maps file names to JSON-serialisable objects, ``arrays`` file names to dicts of
    numpy arrays (one safetensors file each), ``faiss_indexes`` file names to CPU FAISS indexes.
    An existing lfa-index of the same ``kind`` or an empty directory at ``path`` is replaced; a symbolic
    link at ``path`` is followed, links inside it are refused. A file, a directory holding files
    lfa-index did not write, or an lfa-index of another kind raises :class:`IndexPathError`;
    a target that cannot be written raises :class:`IndexPermissionError`.
    """
    given = Path(path)
    with _os_errors(given):
        target = _resolve(given)
        inspect_target(target, given, kind)  # refuse a file, foreign contents or another kind before writing anything
        target.mkdir(parents=True, exist_ok=True)
        with hold_lock(target, exclusive=True) as locked:
            state = inspect_target(target, given, kind)
            remove_entries(target, state.stale, young_too=locked)
            data = Path(tempfile.mkdtemp(prefix="data-", dir=target))
            try:
                files = _write_parts(data, documents, arrays, faiss_indexes)
                manifest = {
                    "format": FORMAT_NAME,
                    "kind": kind,
                    "format_version": FORMAT_VERSION,
                    "library_version": library_version(),
                    "data": data.name,
                    "files": files,
                }
                replace_file(target / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
            except BaseException:
                if committed_data(target) != data.name:  # an interrupt may land right after the commit
                    shutil.rmtree(data, ignore_errors=True)
                raise
            # Committed: what the previous index used is garbage now (a crash here is cleaned next time).
            previous = [state.data] if state.data and state.data != data.name else []
            remove_entries(target, previous, young_too=True)
    return given


def _resolve(given: Path) -> Path:
    if not given.is_symlink():
        return given
    target = Path(os.path.realpath(given))
    if target.is_symlink():
        raise IndexPathError(f"{given} is a symbolic link that never reaches a directory (a loop); fix the link.")
    return target


def _write_parts(
    folder: Path,
    documents: Mapping[str, Any],
    arrays: Mapping[str, Mapping[str, np.ndarray]],
    faiss_indexes: Mapping[str, faiss.Index],
) -> dict[str, dict[str, Any]]:
    for name, doc in documents.items():
        write_durable(folder / check_part_name(name, "json"), json.dumps(doc, indent=1, sort_keys=True).encode())
    for name, tensors in arrays.items():
        contiguous = {key: np.ascontiguousarray(value) for key, value in tensors.items()}
        save_file(contiguous, str(folder / check_part_name(name, "safetensors")), metadata={"format": FORMAT_NAME})
        fsync_file(folder / name)
    for name, index in faiss_indexes.items():
        faiss.write_index(index, str(folder / check_part_name(name, "faiss")))
        fsync_file(folder / name)
    fsync_dir(folder)
    return {
        name: {"sha256": file_sha256(folder / name), "bytes": (folder / name).stat().st_size}
        for name in sorted(os.listdir(folder))
    }


@contextlib.contextmanager
def _os_errors(given: Path) -> Iterator[None]:
    """Name the path the user gave, not a temporary one, when the file system refuses a save."""
    try:
        yield
    except LFAIndexError:
        raise
    except PermissionError as err:
        raise IndexPermissionError(
            f"cannot write the index to {given}: permission denied ({err.strerror or err}); save to a directory "
            "you can write to, or fix its permissions."
        ) from err
    except OSError as err:
        if err.errno == errno.EROFS:
            raise IndexPermissionError(
                f"cannot write the index to {given}: the file system is read-only; save to a writable directory."
            ) from err
        if isinstance(err, (NotADirectoryError, FileExistsError)):
            raise IndexPathError(
                f"cannot save the index to {given}: a part of that path is a file, not a directory ({err.strerror}); "
                "choose another path."
            ) from err
        raise
