"""Index directories on disk: JSON documents, safetensors arrays and FAISS indexes, with a manifest.

Layout (format version 1)::

    my_index/
      manifest.json        format, kind, versions, the data folder, and the sha256 and size of every file
      data-XXXXXXXX/       one file per part: *.json, *.safetensors, *.faiss
      .lfa-index.lock      serialises saves (``fcntl.flock``; saves are not serialised where locks are missing)

A save writes a new ``data-*`` folder, replaces ``manifest.json`` with ``os.replace`` (the commit)
and then removes the previous folder. A reader therefore sees the old or the new index, never a
mix; a crash at any step leaves one complete index, and the next save removes what the crashed one
left behind. A directory of another format version is refused (:class:`~lfa_index.errors.IndexVersionError`:
re-fit and re-save). A save never deletes a file that lfa-index did not write. Nothing is ever pickled.

One job per module:

``layout``   the format: names, the manifest and its checks, what a target directory holds, checksums
``atomic``   durable writes, the atomic manifest replace, the save lock, cleanup after crashed saves
``writer``   :func:`write_index_dir`
``reader``   :func:`read_index_dir`: verification, and reads that start over when a save commits

Example
-------
>>> write_index_dir("idx", kind="aligned-index", documents={"params.json": {"a": 1}},
...                 arrays={"arrays.safetensors": {"W": w}}, faiss_indexes={})
>>> docs, arrays, indexes = read_index_dir("idx", kind="aligned-index")
"""

from __future__ import annotations

from .layout import FORMAT_NAME, FORMAT_VERSION, LOCK_FILE, MANIFEST
from .reader import read_index_dir
from .writer import write_index_dir

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "LOCK_FILE", "MANIFEST", "read_index_dir", "write_index_dir"]
