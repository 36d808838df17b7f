"""On-disk embedding cache, keyed by model identity and input hash, so a rerun costs nothing.

Layout: ``<directory>/<sha256(identity)[:24]>/<sha256(keys)[:32]>.safetensors``. Each shard holds one
stored batch: ``keys`` (n, 32) uint8 SHA-256 digests of the inputs and ``embeddings`` (n, ...)
float32, with the identity string in the safetensors metadata. Shards are written to a temporary
file and moved into place with ``os.replace``, so a crash never leaves a half-written shard under
its final name; storing each batch as soon as it is computed lets an interrupted run resume.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..files import atomic_write

FORMAT = "lfa-index-embedding-cache/1"
SHARD_SUFFIX = ".safetensors"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")


def content_key(payload: bytes | str) -> bytes:
    """SHA-256 digest of an input (text as UTF-8, image file bytes, array bytes)."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    return hashlib.sha256(payload).digest()


def folder_fingerprint(path: Path) -> str:
    """Cheap identity of a local model folder: name, size and mtime of its weight files."""
    parts = []
    for f in sorted(path.rglob("*")):
        if f.is_file() and f.suffix in _WEIGHT_SUFFIXES:
            st = f.stat()
            parts.append(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}")
    return ",".join(parts)


def file_fingerprint(path: str | os.PathLike) -> str:
    """Cheap identity of a checkpoint file: absolute path, size and mtime."""
    p = Path(path).resolve()
    st = p.stat()
    return f"{p}:{st.st_size}:{st.st_mtime_ns}"


def weights_fingerprint(module: Any) -> str:
    """SHA-256 of a module's weights (identity of a randomly initialised model)."""
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().float().contiguous().numpy().tobytes())
    return h.hexdigest()


class EmbeddingCache:
    """Embeddings stored on disk as safetensors shards, looked up by (identity, input digest).

    Parameters
    ----------
    directory : folder of the cache; created on first write.

    Example
    -------
    >>> cache = EmbeddingCache("~/.cache/lfa-index")
    >>> keys = [content_key("a cat"), content_key("a dog")]
    >>> cache.put("my-model|text", keys, np.eye(2, 4, dtype=np.float32))
    >>> sorted(cache.get("my-model|text", keys)) == sorted(keys)
    True
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory).expanduser()
        self._tables: dict[str, dict[bytes, np.ndarray]] = {}

    def namespace_dir(self, identity: str) -> Path:
        """Folder holding the shards of one model identity."""
        return self.directory / hashlib.sha256(identity.encode("utf-8")).hexdigest()[:24]

    def get(self, identity: str, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """Cached embeddings of those ``keys`` that are present, as ``{key: row}``."""
        table = self._table(identity)
        return {k: table[k] for k in keys if k in table}

    def put(self, identity: str, keys: Sequence[bytes], embeddings: np.ndarray) -> None:
        """Store one batch (``embeddings[i]`` belongs to ``keys[i]``) as a new shard."""
        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        if len(keys) != embeddings.shape[0]:
            raise ValueError(f"{len(keys)} keys for {embeddings.shape[0]} embeddings.")
        table = self._table(identity)
        new = [i for i, k in enumerate(keys) if k not in table]
        if not new:
            return
        keys = [keys[i] for i in new]
        embeddings = embeddings[new]
        from safetensors.numpy import save

        key_array = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        data = save(
            {"keys": key_array, "embeddings": embeddings},
            metadata={"format": FORMAT, "identity": identity},
        )
        folder = self.namespace_dir(identity)
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key_array.tobytes()).hexdigest()[:32] + SHARD_SUFFIX
        atomic_write(folder / name, data)
        table.update(zip(keys, embeddings))

    def _table(self, identity: str) -> dict[bytes, np.ndarray]:
        if identity not in self._tables:
            self._tables[identity] = self._load(identity)
        return self._tables[identity]

    def _load(self, identity: str) -> dict[bytes, np.ndarray]:
        from safetensors import safe_open

        table: dict[bytes, np.ndarray] = {}
        folder = self.namespace_dir(identity)
        if not folder.is_dir():
            return table
        for shard in sorted(folder.glob("*" + SHARD_SUFFIX)):
            try:
                with safe_open(str(shard), framework="np") as f:
                    meta = f.metadata() or {}
                    if meta.get("format") != FORMAT or meta.get("identity") != identity:
                        continue
                    key_array = f.get_tensor("keys")
                    embeddings = f.get_tensor("embeddings")
                if key_array.ndim != 2 or key_array.shape != (embeddings.shape[0], 32):
                    raise ValueError("keys and embeddings disagree")
            except Exception as err:  # a damaged shard is recomputed, never trusted
                warnings.warn(
                    f"Ignoring unreadable cache shard {shard} ({err}); its inputs will be recomputed.",
                    stacklevel=3,
                )
                continue
            table.update(zip((row.tobytes() for row in key_array), embeddings))
        return table
