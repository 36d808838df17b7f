"""Index directories on disk: JSON documents, safetensors arrays and FAISS indexes, with a manifest.

Layout (format version 3)::

    my_index/
      manifest.json        format, kind, versions, the data folder, and the sha256 and size of every file
      data-XXXXXXXX/       one file per part: *.json, *.safetensors, *.faiss
      .lfa-index.lock      serialises saves (``fcntl.flock``; saves are not serialised where locks are missing)

A save writes a new ``data-*`` folder, replaces ``manifest.json`` with ``os.replace`` (the commit)
and then removes the previous folder. A reader therefore sees the old or the new index, never a
mix; a crash at any step leaves one complete index, and the next save removes what the crashed one
left behind. Versions 1 and 2 kept the files beside ``manifest.json``: they still load, and the
next save converts them. A save never deletes a file that lfa-index did not write. Nothing is
ever pickled.

Example
-------
>>> write_index_dir("idx", kind="aligned-index", documents={"params.json": {"a": 1}},
...                 arrays={"arrays.safetensors": {"W": w}}, faiss_indexes={})
>>> docs, arrays, indexes = read_index_dir("idx", kind="aligned-index")
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

import faiss
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from .errors import (  # IndexFormatError & co.: also importable from here, as before
    IndexFormatError,
    IndexNotFoundError,
    IndexPathError,
    IndexPermissionError,
    IndexVersionError,
    LFAIndexError,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: saves are not serialised, see _locked
    fcntl = None  # type: ignore[assignment]

FORMAT_NAME = "lfa-index"
# 3: the files sit in a data-* folder named by the manifest; 2: class biases, centring, hybrid and
# text prototypes. 1 and 2 still load.
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
LOCK_FILE = ".lfa-index.lock"
_SUFFIXES = {".json": "json", ".safetensors": "safetensors", ".faiss": "faiss"}
_DATA_DIR = re.compile(r"data-[a-z0-9_]{8}")  # tempfile.mkdtemp(prefix="data-")
_MANIFEST_TMP = re.compile(r"\.manifest\.json\.[a-z0-9_]{8}\.tmp")  # tempfile.mkstemp beside the manifest
_READ_ATTEMPTS = 4  # lock-free reads before a reader takes the shared lock
_UNLOCKED_GRACE_S = 3600.0  # without file locks, a younger stray data folder may be another save's


# --------------------------------------------------------------------------------------- writing
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
    An existing lfa-index or empty directory at ``path`` is replaced; a symbolic link is followed.
    A file, or a directory holding files lfa-index did not write, raises :class:`IndexPathError`;
    a target that cannot be written raises :class:`IndexPermissionError`.
    """
    given = Path(path)
    with _os_errors(given):
        target = _resolve(given)
        _inspect(target, given)  # refuse a file or foreign contents before writing anything
        target.mkdir(parents=True, exist_ok=True)
        with _locked(target, exclusive=True) as locked:
            state = _inspect(target, given)
            _remove_entries(target, state.stale, young_too=locked)
            data = Path(tempfile.mkdtemp(prefix="data-", dir=target))
            try:
                files = _write_parts(data, documents, arrays, faiss_indexes)
                legacy = sorted(name for name in state.legacy if _is_plain_file(target / name))
                manifest = {
                    "format": FORMAT_NAME,
                    "kind": kind,
                    "format_version": FORMAT_VERSION,
                    "library_version": _library_version(),
                    "data": data.name,
                    "files": files,
                    "legacy_files": legacy,
                }
                _replace_file(target / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
            except BaseException:
                if _committed_data(target) != data.name:  # an interrupt may land right after the commit
                    shutil.rmtree(data, ignore_errors=True)
                raise
            # Committed: what the previous index used is garbage now (a crash here is cleaned next time).
            previous = [state.data] if state.data and state.data != data.name else []
            _remove_entries(target, previous + legacy, young_too=True)
    _remove_sibling_leftovers(target)
    return given


@dataclass
class _State:
    """What a target directory holds, by lfa-index's own names."""

    data: str | None = None  # data folder of the current (format 3) index
    legacy: list[str] = field(default_factory=list)  # files of a format 1-2 index, or not yet removed
    stale: list[str] = field(default_factory=list)  # data folders and manifest copies of crashed saves


def _committed_data(target: Path) -> str | None:
    """The data folder that ``target``'s manifest names now, if it can be read."""
    try:
        return json.loads((target / MANIFEST).read_bytes()).get("data")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def _resolve(given: Path) -> Path:
    if not given.is_symlink():
        return given
    target = Path(os.path.realpath(given))
    if target.is_symlink():
        raise IndexPathError(f"{given} is a symbolic link that never reaches a directory (a loop); fix the link.")
    return target


def _inspect(target: Path, given: Path) -> _State:
    """Sort the target's entries into ours and foreign ones; refuse foreign ones and files."""
    if not target.exists():
        return _State()
    if not target.is_dir():
        raise IndexPathError(f"{given} exists and is a file, not an index directory; choose another path or remove it.")
    entries = sorted(os.listdir(target))
    if not entries:
        return _State()
    manifest = _own_manifest(target, given)
    state = _State()
    ours = {LOCK_FILE}
    if manifest is not None:
        ours.add(MANIFEST)
        if manifest["format_version"] >= 3:
            state.data = manifest["data"]
            state.legacy = list(manifest.get("legacy_files", []))
        else:
            state.legacy = list(manifest["files"])
    foreign = []
    for name in entries:
        try:
            mode = os.lstat(target / name).st_mode
        except FileNotFoundError:  # removed meanwhile by a save that holds the lock
            continue
        plain_dir, plain_file = stat.S_ISDIR(mode), stat.S_ISREG(mode)
        if name in ours or (name == state.data and plain_dir) or (name in state.legacy and plain_file):
            continue
        if (_DATA_DIR.fullmatch(name) and plain_dir) or (_MANIFEST_TMP.fullmatch(name) and plain_file):
            state.stale.append(name)
        else:
            foreign.append(name)
    if foreign and manifest is None:
        raise IndexPathError(
            f"{given} is a non-empty directory that is not an lfa-index (it holds {_listing(foreign)}); refusing "
            "to overwrite it. Save to a new or empty directory, or move its contents elsewhere first."
        )
    if foreign:
        raise IndexPathError(
            f"{given} holds an lfa-index and also files that lfa-index did not write ({_listing(foreign)}); "
            f"refusing to save over them. Move them out of {given}, or save to another path."
        )
    return state


def _own_manifest(root: Path, given: Path) -> dict[str, Any] | None:
    """The manifest of an lfa-index at ``root``; None when there is none or it is not ours."""
    try:
        raw = (root / MANIFEST).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        return _parse_manifest(root, raw)
    except IndexVersionError as err:
        raise IndexPathError(
            f"{given} holds an index written by a newer lfa-index ({err}); upgrade lfa-index, or save to another path."
        ) from err
    except IndexFormatError:
        return None


def _is_plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _write_parts(
    folder: Path,
    documents: Mapping[str, Any],
    arrays: Mapping[str, Mapping[str, np.ndarray]],
    faiss_indexes: Mapping[str, faiss.Index],
) -> dict[str, dict[str, Any]]:
    for name, doc in documents.items():
        _write_bytes(folder / _checked_name(name, "json"), json.dumps(doc, indent=1, sort_keys=True).encode())
    for name, tensors in arrays.items():
        contiguous = {key: np.ascontiguousarray(value) for key, value in tensors.items()}
        save_file(contiguous, str(folder / _checked_name(name, "safetensors")), metadata={"format": FORMAT_NAME})
        _fsync(folder / name)
    for name, index in faiss_indexes.items():
        faiss.write_index(index, str(folder / _checked_name(name, "faiss")))
        _fsync(folder / name)
    _fsync_dir(folder)
    return {
        name: {"sha256": _sha256(folder / name), "bytes": (folder / name).stat().st_size}
        for name in sorted(os.listdir(folder))
    }


def _remove_entries(root: Path, names: list[str], *, young_too: bool) -> None:
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
        _fsync_dir(root)


def _sibling_leftovers(target: Path) -> list[Path]:
    """Folders that lfa-index <= 0.1 left beside ``target`` when a save crashed (``.NAME.XXXXXXXX.tmp/.old``)."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.[a-z0-9_]{{8}}\.(tmp|old)")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    found = []
    for name in names:
        entry = target.parent / name
        if not pattern.fullmatch(name) or entry.is_symlink() or not entry.is_dir():
            continue
        try:
            parts = os.listdir(entry)
        except OSError:
            continue
        if all(p == MANIFEST or (Path(p).suffix in _SUFFIXES and (entry / p).is_file()) for p in parts):
            found.append(entry)
    return found


def _remove_sibling_leftovers(target: Path) -> None:
    for entry in _sibling_leftovers(target):
        shutil.rmtree(entry, ignore_errors=True)


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


@contextlib.contextmanager
def _locked(directory: Path, *, exclusive: bool) -> Iterator[bool]:
    """Hold ``directory``'s lock file: exclusive for a save, shared for a read. Yields whether it is held.

    Where ``fcntl`` or the file system's locks are missing it yields False: saves then race, and the
    last one to commit wins.
    """
    if fcntl is None:
        yield False
        return
    lock = directory / LOCK_FILE
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644) if exclusive else os.open(lock, os.O_RDONLY)
    except OSError:
        if exclusive:
            raise
        yield False  # no lock file (format 1-2, or a read-only copy): nobody saves here with locks
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


def _checked_name(name: str, kind: str) -> str:
    if Path(name).name != name or name == MANIFEST or _SUFFIXES.get(Path(name).suffix) != kind:
        raise ValueError(f"invalid {kind} part name {name!r}")  # a programming error, not user input
    return name


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _replace_file(path: Path, data: bytes) -> None:
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
    _fsync_dir(path.parent)


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
class _IndexChanged(Exception):
    """A save committed while this read was under way: read again."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def read_index_dir(
    path: str | os.PathLike, *, kind: str
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]], dict[str, faiss.Index]]:
    """Verify and read a directory written by :func:`write_index_dir`.

    Returns ``(documents, arrays, faiss_indexes)`` keyed by file name. Raises
    :class:`IndexFormatError` for a missing, foreign, corrupted or truncated directory and
    :class:`IndexVersionError` for one written by a newer format version. A save that commits
    while the read is under way makes the read start over, so it returns one complete index.
    """
    given = Path(path)
    root = given if given.exists() else (_restore_moved_index(given) or given)
    if not root.exists():
        raise IndexNotFoundError(f"no index directory at {given}; pass the directory given to save().")
    if not root.is_dir():
        raise IndexFormatError(f"{given} is a file, not an index directory; pass the directory given to save().")
    for _ in range(_READ_ATTEMPTS):
        try:
            return _read_once(root, kind)
        except _IndexChanged:
            continue
    with _locked(root, exclusive=False):  # saves cannot commit while it is held
        try:
            return _read_once(root, kind)
        except _IndexChanged as changed:  # saves without locks keep committing: give up
            if isinstance(changed.error, LFAIndexError):
                raise changed.error from None
            raise IndexFormatError(f"{given} kept changing while it was read ({changed.error}); retry.") from None


def _restore_moved_index(target: Path) -> Path | None:
    """Where an index lies that lfa-index <= 0.1 moved aside (``.NAME.XXXXXXXX.old``) and crashed.

    It is moved back to ``target`` when possible, else read where it is.
    """
    moved = [p for p in _sibling_leftovers(target) if p.name.endswith(".old") and (p / MANIFEST).is_file()]
    if not moved:
        return None
    newest = max(moved, key=lambda p: p.stat().st_mtime_ns)
    try:
        os.rename(newest, target)
    except OSError:
        return target if target.is_dir() else newest
    _fsync_dir(target.parent)
    return target


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
    manifest = _parse_manifest(root, raw, kind)
    folder = root / manifest["data"] if manifest["format_version"] >= 3 else root
    try:
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
        part = _SUFFIXES[Path(name).suffix]
        try:
            if part == "json":
                documents[name] = json.loads(file.read_bytes())
            elif part == "safetensors":
                arrays[name] = load_file(str(file))
            else:
                indexes[name] = faiss.read_index(str(file))
        except (ValueError, OSError, RuntimeError, RecursionError, SafetensorError) as err:
            raise IndexFormatError(f"{file} could not be read although its checksum matches: {err}") from err
    return documents, arrays, indexes


def _parse_manifest(root: Path, raw: bytes, kind: str | None = None) -> dict[str, Any]:
    """The checked manifest of ``root``; ``kind`` None accepts any kind."""
    manifest_path = root / MANIFEST
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as err:  # RecursionError: absurdly nested JSON
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise IndexFormatError(f"{manifest_path} is corrupted ({reason}); re-save the index.") from err
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
    if kind is not None and manifest.get("kind") != kind:
        raise IndexFormatError(f"{root} holds an lfa-index of kind {manifest.get('kind')!r}, not {kind!r}.")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise IndexFormatError(f"{manifest_path} lists no files; the index is incomplete, re-save it.")
    for name, entry in files.items():
        if (
            not _is_part_name(name)
            or not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str)
            or not isinstance(entry.get("bytes"), int)
        ):
            raise IndexFormatError(f"{manifest_path} has an invalid entry for {name!r}; re-save the index.")
    if version >= 3:
        data, legacy = manifest.get("data"), manifest.get("legacy_files", [])
        if not isinstance(data, str) or not _DATA_DIR.fullmatch(data):
            raise IndexFormatError(f"{manifest_path} names an invalid data folder {data!r}; re-save the index.")
        if not isinstance(legacy, list) or not all(_is_part_name(name) for name in legacy):
            raise IndexFormatError(f"{manifest_path} has an invalid legacy_files list; re-save the index.")
    return manifest


def _is_part_name(name: Any) -> bool:
    return isinstance(name, str) and name != MANIFEST and Path(name).name == name and Path(name).suffix in _SUFFIXES


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
