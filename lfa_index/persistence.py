"""Index directories on disk: JSON documents, safetensors arrays and FAISS indexes, with a manifest.

A directory written here holds one file per part (``*.json``, ``*.safetensors``, ``*.faiss``) and
a ``manifest.json`` naming the format, its version and the sha256 and size of every file. Writes
go to a temporary sibling directory that is renamed into place, so a reader never sees half an
index. Nothing is ever pickled.

Example
-------
>>> write_index_dir("idx", kind="aligned-index", documents={"params.json": {"a": 1}},
...                 arrays={"arrays.safetensors": {"W": w}}, faiss_indexes={})
>>> docs, arrays, indexes = read_index_dir("idx", kind="aligned-index")
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import faiss
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from .core.errors import LFAIndexError

FORMAT_NAME = "lfa-index"
FORMAT_VERSION = 2  # 2: class biases, centring, hybrid and text prototypes (1 still loads)
MANIFEST = "manifest.json"
_SUFFIXES = {".json": "json", ".safetensors": "safetensors", ".faiss": "faiss"}


class IndexFormatError(LFAIndexError, ValueError):
    """A directory is not a readable lfa-index: missing, foreign, corrupted or truncated."""


class IndexVersionError(IndexFormatError):
    """An index was written by a newer on-disk format than this library reads."""


class IndexPathError(LFAIndexError, FileExistsError):
    """The save target exists and is not an lfa-index (a file, or a non-empty foreign directory)."""


# --------------------------------------------------------------------------------------- writing
def write_index_dir(
    path: str | os.PathLike,
    *,
    kind: str,
    documents: Mapping[str, Any],
    arrays: Mapping[str, Mapping[str, np.ndarray]],
    faiss_indexes: Mapping[str, faiss.Index],
) -> Path:
    """Write every part under ``path`` atomically and return the path.

    ``documents`` maps file names to JSON-serialisable objects, ``arrays`` file names to dicts of
    numpy arrays (one safetensors file each), ``faiss_indexes`` file names to CPU FAISS indexes.
    An existing lfa-index or empty directory at ``path`` is replaced; anything else raises
    :class:`IndexPathError`.
    """
    target = Path(path)
    _check_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        for name, doc in documents.items():
            _write_bytes(tmp / _checked_name(name, "json"), json.dumps(doc, indent=1, sort_keys=True).encode())
        for name, tensors in arrays.items():
            contiguous = {key: np.ascontiguousarray(value) for key, value in tensors.items()}
            save_file(contiguous, str(tmp / _checked_name(name, "safetensors")), metadata={"format": FORMAT_NAME})
            _fsync(tmp / name)
        for name, index in faiss_indexes.items():
            faiss.write_index(index, str(tmp / _checked_name(name, "faiss")))
            _fsync(tmp / name)
        files = sorted(p.name for p in tmp.iterdir())
        manifest = {
            "format": FORMAT_NAME,
            "kind": kind,
            "format_version": FORMAT_VERSION,
            "library_version": _library_version(),
            "files": {name: {"sha256": _sha256(tmp / name), "bytes": (tmp / name).stat().st_size} for name in files},
        }
        _write_bytes(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        _fsync_dir(tmp)
        _move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(target.parent)
    return target


def _check_target(target: Path) -> None:
    if not target.exists():
        return
    if not target.is_dir():
        raise IndexPathError(
            f"{target} exists and is a file, not an index directory; choose another path or remove it."
        )
    if any(target.iterdir()) and not _is_index_dir(target):
        raise IndexPathError(
            f"{target} is a non-empty directory that is not an lfa-index; refusing to overwrite it. "
            "Save to a new or empty directory, or remove its contents first."
        )


def _is_index_dir(path: Path) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME


def _move_into_place(tmp: Path, target: Path) -> None:
    if not target.exists() or not any(target.iterdir()):
        os.replace(tmp, target)  # rename(2) also replaces an empty directory
        return
    # An existing index: at every instant one complete index sits under `target` or `old`.
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _checked_name(name: str, kind: str) -> str:
    if Path(name).name != name or name == MANIFEST or _SUFFIXES.get(Path(name).suffix) != kind:
        raise ValueError(f"invalid {kind} part name {name!r}")  # a programming error, not user input
    return name


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _library_version() -> str:
    try:
        return metadata.version("lfa-index")
    except metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------------------- reading
def read_index_dir(
    path: str | os.PathLike, *, kind: str
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], dict[str, faiss.Index]]:
    """Verify and read a directory written by :func:`write_index_dir`.

    Returns ``(documents, arrays, faiss_indexes)`` keyed by file name. Raises
    :class:`IndexFormatError` for a missing, foreign, corrupted or truncated directory and
    :class:`IndexVersionError` for one written by a newer format version.
    """
    root = Path(path)
    if not root.is_dir():
        raise IndexFormatError(f"no index directory at {root}; pass the directory given to save().")
    manifest = _read_manifest(root, kind)
    documents: dict[str, Any] = {}
    arrays: dict[str, dict[str, np.ndarray]] = {}
    indexes: dict[str, faiss.Index] = {}
    for name, entry in manifest["files"].items():
        file = root / name
        _verify_file(file, entry)
        part = _SUFFIXES[Path(name).suffix]
        try:
            if part == "json":
                documents[name] = json.loads(file.read_text())
            elif part == "safetensors":
                arrays[name] = load_file(str(file))
            else:
                indexes[name] = faiss.read_index(str(file))
        except (ValueError, OSError, RuntimeError, SafetensorError) as err:
            raise IndexFormatError(f"{file} could not be read although its checksum matches: {err}") from err
    return documents, arrays, indexes


def _read_manifest(root: Path, kind: str) -> dict[str, Any]:
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise IndexFormatError(
            f"{root} is not an lfa-index directory (no {MANIFEST}); pass a directory written by save()."
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (ValueError, OSError) as err:
        raise IndexFormatError(f"{manifest_path} is corrupted ({err}); re-save the index.") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise IndexFormatError(
            f"{root} holds a foreign {MANIFEST}, not an lfa-index; pass a directory written by save()."
        )
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise IndexFormatError(f"{manifest_path} has an invalid format_version {version!r}; re-save the index.")
    if version > FORMAT_VERSION:
        raise IndexVersionError(
            f"{root} was written with on-disk format version {version} (lfa-index "
            f"{manifest.get('library_version', '?')}), but this library reads versions up to {FORMAT_VERSION}; "
            "upgrade lfa-index to load it."
        )
    if manifest.get("kind") != kind:
        raise IndexFormatError(f"{root} holds an lfa-index of kind {manifest.get('kind')!r}, not {kind!r}.")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise IndexFormatError(f"{manifest_path} lists no files; the index is incomplete, re-save it.")
    for name, entry in files.items():
        if (
            not isinstance(name, str) or Path(name).name != name or Path(name).suffix not in _SUFFIXES
            or not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str)
            or not isinstance(entry.get("bytes"), int)
        ):
            raise IndexFormatError(f"{manifest_path} has an invalid entry for {name!r}; re-save the index.")
    return manifest


def _verify_file(file: Path, entry: Mapping[str, Any]) -> None:
    if not file.is_file():
        raise IndexFormatError(f"{file} is listed in the manifest but missing; the index is incomplete, re-save it.")
    size = file.stat().st_size
    if size != entry["bytes"]:
        raise IndexFormatError(
            f"{file} has {size} bytes but the manifest says {entry['bytes']}: the file is truncated or was "
            "replaced; re-save the index."
        )
    if _sha256(file) != entry["sha256"]:
        raise IndexFormatError(f"{file} does not match its sha256 in the manifest: it is corrupted; re-save the index.")
