"""The on-disk format of an index directory: its names, the manifest and what a target directory holds.

``manifest.json`` holds ``format``, ``kind``, ``format_version``, ``library_version``, ``data``
(the ``data-XXXXXXXX`` folder of the current files) and ``files`` (the sha256 and size of each).
A directory of any other format version is refused with :class:`IndexVersionError`.

Example
-------
>>> state = inspect_target(Path("idx"), Path("idx"), "aligned-index")  # IndexPathError: a file, foreign contents
>>> manifest = parse_manifest(Path("idx"), Path("idx/manifest.json").read_bytes(), "aligned-index")
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import IndexFormatError, IndexPathError, IndexVersionError

FORMAT_NAME = "lfa-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LOCK_FILE = ".lfa-index.lock"
PART_SUFFIXES = {".json": "json", ".safetensors": "safetensors", ".faiss": "faiss"}  # file suffix -> part kind
_DATA_DIR = re.compile(r"data-[a-z0-9_]{8}")  # tempfile.mkdtemp(prefix="data-")
_MANIFEST_TMP = re.compile(r"\.manifest\.json\.[a-z0-9_]{8}\.tmp")  # tempfile.mkstemp beside the manifest


# ------------------------------------------------------------------------------ the target directory
@dataclass
class TargetState:
    """What a target directory holds, by lfa-index's own names."""

    data: str | None = None  # data folder of the current index
    stale: list[str] = field(default_factory=list)  # data folders and manifest copies of crashed saves


def committed_data(target: Path) -> str | None:
    """The data folder that ``target``'s manifest names now, if it can be read."""
    try:
        return json.loads((target / MANIFEST).read_bytes()).get("data")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def inspect_target(target: Path, given: Path, kind: str) -> TargetState:
    """Sort the target's entries into ours and foreign ones; refuse foreign ones, files, links where lfa-index
    keeps its own entries, and an lfa-index directory of another ``kind`` (a FAISS store is no AlignedIndex)."""
    if not target.exists():
        return TargetState()
    if not target.is_dir():
        raise IndexPathError(f"{given} exists and is a file, not an index directory; choose another path or remove it.")
    entries = sorted(os.listdir(target))
    if not entries:
        return TargetState()
    manifest = _own_manifest(target, given)
    if manifest is not None and manifest.get("kind") != kind:
        raise IndexPathError(
            f"{given} holds an lfa-index of kind {manifest.get('kind')!r}, not {kind!r}; a save replaces only "
            "its own kind: save to another path, or remove that directory first."
        )
    state = TargetState()
    ours = {LOCK_FILE}
    if manifest is not None:
        ours.add(MANIFEST)
        state.data = manifest["data"]
    foreign = []
    for name in entries:
        try:
            mode = os.lstat(target / name).st_mode
        except FileNotFoundError:  # removed meanwhile by a save that holds the lock
            continue
        plain_dir, plain_file = stat.S_ISDIR(mode), stat.S_ISREG(mode)
        if name in ours and not plain_file:  # a link or folder where the lock or manifest goes
            raise IndexPathError(
                f"{given / name} is not a plain file (a symbolic link or a folder); lfa-index writes only plain "
                f"files there. Remove it, or save to another path."
            )
        if name in ours or (name == state.data and plain_dir):
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
        return parse_manifest(root, raw)
    except IndexVersionError as err:
        raise IndexPathError(
            f"{given} holds an index of another on-disk format ({err}); save to another path, or remove that "
            "directory first."
        ) from err
    except IndexFormatError:
        return None


def _listing(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ------------------------------------------------------------------------------ the manifest
def parse_manifest(root: Path, raw: bytes, kind: str | None = None) -> dict[str, Any]:
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
    if not isinstance(version, int) or isinstance(version, bool):
        raise IndexFormatError(f"{manifest_path} has an invalid format_version {version!r}; re-save the index.")
    if version != FORMAT_VERSION:
        raise IndexVersionError(
            f"{root} was written with on-disk format version {version} (lfa-index "
            f"{manifest.get('library_version', '?')}), but this library reads only version {FORMAT_VERSION}: "
            "re-fit the model and re-save it with this lfa-index (or load it with the lfa-index that wrote it)."
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
    data = manifest.get("data")
    if not isinstance(data, str) or not _DATA_DIR.fullmatch(data):
        raise IndexFormatError(f"{manifest_path} names an invalid data folder {data!r}; re-save the index.")
    return manifest


def _is_part_name(name: Any) -> bool:
    return isinstance(name, str) and name != MANIFEST and Path(name).name == name and Path(name).suffix in PART_SUFFIXES


def check_part_name(name: str, kind: str) -> str:
    """``name`` when it is a plain file name with the suffix of ``kind`` ("json", "safetensors", "faiss")."""
    if Path(name).name != name or name == MANIFEST or PART_SUFFIXES.get(Path(name).suffix) != kind:
        raise ValueError(f"invalid {kind} part name {name!r}")  # a programming error, not user input
    return name


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def library_version() -> str:
    """The installed lfa-index version, or "unknown" when running from a source tree."""
    try:
        return metadata.version("lfa-index")
    except metadata.PackageNotFoundError:
        return "unknown"
