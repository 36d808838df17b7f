"""Reading an index directory: the manifest checked, every file verified against its sha256 and size.

A save that commits while a read is under way makes the read start over (lock-free a few times,
then under the shared lock), so a read returns one complete index.

Example
-------
>>> docs, arrays, indexes = read_index_dir("idx", kind="aligned-index")
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import faiss
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from ..errors import IndexFormatError, IndexNotFoundError, LFAIndexError
from ..faiss_files import faiss_layout
from .atomic import hold_lock
from .layout import MANIFEST, PART_SUFFIXES, file_sha256, parse_manifest

_READ_ATTEMPTS = 4  # lock-free reads before a reader takes the shared lock


class _IndexChanged(Exception):
    """A save committed while this read was under way: read again."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def read_index_dir(
    path: str | os.PathLike, *, kind: str
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], dict[str, faiss.Index]]:
    """Verify and read a directory written by :func:`~lfa_index.persistence.write_index_dir`.

    Returns ``(documents, arrays, faiss_indexes)`` keyed by file name. Raises
    :class:`IndexFormatError` for a missing, foreign, corrupted or truncated directory and
    :class:`IndexVersionError` for one written in another format version. A save that commits
    while the read is under way makes the read start over, so it returns one complete index.
    """
    root = Path(path)
    if not root.exists():
        raise IndexNotFoundError(f"no index directory at {root}; pass the directory given to save().")
    if not root.is_dir():
        raise IndexFormatError(f"{root} is a file, not an index directory; pass the directory given to save().")
    for _ in range(_READ_ATTEMPTS):
        try:
            return _read_once(root, kind)
        except _IndexChanged:
            continue
    with hold_lock(root, exclusive=False):  # saves cannot commit while it is held
        try:
            return _read_once(root, kind)
        except _IndexChanged as changed:  # saves without locks keep committing: give up
            if isinstance(changed.error, LFAIndexError):
                raise changed.error from None
            raise IndexFormatError(f"{root} kept changing while it was read ({changed.error}); retry.") from None


def _read_once(
    root: Path, kind: str
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], dict[str, faiss.Index]]:
    manifest_path = root / MANIFEST
    try:
        raw = manifest_path.read_bytes()
    except (FileNotFoundError, IsADirectoryError) as err:
        raise IndexFormatError(
            f"{root} is not an lfa-index directory (no {MANIFEST}); pass a directory written by save()."
        ) from err
    except OSError as err:
        raise IndexFormatError(f"{manifest_path} cannot be read ({err.strerror or err}).") from err
    manifest = parse_manifest(root, raw, kind)
    folder = root / manifest["data"]
    try:
        if folder.is_symlink():  # save refuses links inside an index: so does load
            raise IndexFormatError(
                f"{folder} is a symbolic link; an index keeps its files inside its directory: re-save the index."
            )
        return _read_files(folder, manifest["files"])
    except (IndexFormatError, OSError) as err:
        try:
            now = manifest_path.read_bytes()
        except OSError:
            now = None
        if now != raw:
            raise _IndexChanged(err) from err
        if isinstance(err, LFAIndexError):
            raise
        raise IndexFormatError(f"{folder} could not be read ({err}); re-save the index.") from err


def _read_files(
    folder: Path, files: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], dict[str, faiss.Index]]:
    documents: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    indexes: dict[str, faiss.Index] = {}
    for name, entry in files.items():
        file = folder / name
        _verify_file(file, entry)
        file_kind = PART_SUFFIXES[Path(name).suffix]
        try:
            if file_kind == "json":
                documents[name] = json.loads(file.read_bytes())
            elif file_kind == "safetensors":
                arrays[name] = load_file(str(file))
            else:
                faiss_layout(file)  # a flat index of the wrong size: refused before FAISS allocates what it claims
                indexes[name] = faiss.read_index(str(file))
        except (ValueError, OSError, RuntimeError, RecursionError, SafetensorError) as err:
            raise IndexFormatError(f"{file} could not be read although its checksum matches: {err}") from err
    return documents, arrays, indexes


def _verify_file(file: Path, entry: Mapping[str, Any]) -> None:
    if file.is_symlink():
        raise IndexFormatError(f"{file} is a symbolic link, not a file of the index; re-save the index.")
    if not file.is_file():
        raise IndexFormatError(f"{file} is listed in the manifest but missing; the index is incomplete, re-save it.")
    size = file.stat().st_size
    if size != entry["bytes"]:
        raise IndexFormatError(
            f"{file} has {size} bytes but the manifest says {entry['bytes']}: the file is truncated or was "
            "replaced; re-save the index."
        )
    if file_sha256(file) != entry["sha256"]:
        raise IndexFormatError(f"{file} does not match its sha256 in the manifest: it is corrupted; re-save the index.")
