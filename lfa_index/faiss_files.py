"""What a FAISS index file holds, read from its header before FAISS reads the file.

``faiss.read_index`` allocates what a file's header claims before it reads the data, and some
index types abort the process when asked for their vectors. So a flat index (``IndexFlat*``) or
an ``IndexIDMap``/``IndexIDMap2`` over one is recognised from its header, and its size is
checked against the header's dimension and row count first: a file of a few hundred bytes
cannot make a reader allocate gigabytes. Files of other index types are reported as such.

Example
-------
>>> faiss_layout("vectors.faiss")   # "flat", "idmap-flat" or "other"; ValueError for a flat file of the wrong size
'flat'
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

_FLAT = {b"IxFI", b"IxF2", b"IxFl"}  # IndexFlatIP, IndexFlatL2, IndexFlat (other metrics)
_IDMAP = {b"IxMp", b"IxM2"}  # IndexIDMap, IndexIDMap2
_HEADER = struct.Struct("<iqqq?i")  # d, ntotal, two unused int64, is_trained, metric_type (faiss's write_index_header)
_SIZE = struct.Struct("<Q")
_MAX_DIM = 1 << 20  # faiss's own limit when it reads a header  # the element count before a vector's data


def faiss_layout(path: str | os.PathLike) -> str:
    """``"flat"``, ``"idmap-flat"`` (an id map over a flat index) or ``"other"`` (any other index type).

    Raises :class:`ValueError` (saying what disagrees) when the header is one of the flat kinds but
    the file is not exactly the size that its dimension and row count give."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        fourcc = f.read(4)
        if fourcc in _FLAT:
            _flat(f)
            kind = "flat"
        elif fourcc in _IDMAP:
            d, ntotal, _ = _header(f)
            inner = f.read(4)
            if inner not in _FLAT:
                return "other"
            if _flat(f) != (d, ntotal):
                raise ValueError("the id map and its flat index disagree on the dimension or the row count")
            if _count(f, "ids") != ntotal:
                raise ValueError(f"the id map lists another number of ids than its {ntotal} rows")
            f.seek(8 * ntotal, os.SEEK_CUR)
            kind = "idmap-flat"
        else:
            return "other"
        if f.tell() != size:
            raise ValueError(f"the file has {size} bytes, but its header describes {f.tell()}")
    return kind


def _header(f: BinaryIO) -> tuple[int, int, int]:
    raw = f.read(_HEADER.size)
    if len(raw) != _HEADER.size:
        raise ValueError("the file ends inside the index header")
    d, ntotal, _, _, _, metric = _HEADER.unpack(raw)
    if not 1 <= d <= _MAX_DIM or ntotal < 0:
        raise ValueError(f"the header gives dimension {d} and {ntotal} rows")
    if metric > 1:  # faiss writes metric_arg after the metric of the other metrics
        f.seek(4, os.SEEK_CUR)
    return d, ntotal, metric


def _flat(f: BinaryIO) -> tuple[int, int]:
    """Read past a flat index's header and vectors: its ``(d, ntotal)``."""
    d, ntotal, _ = _header(f)
    if _count(f, "vectors") != d * ntotal:
        raise ValueError(f"the vectors do not hold {ntotal} rows of {d} floats")
    f.seek(4 * d * ntotal, os.SEEK_CUR)
    return d, ntotal


def _count(f: BinaryIO, what: str) -> int:
    raw = f.read(_SIZE.size)
    if len(raw) != _SIZE.size:
        raise ValueError(f"the file ends before its {what}")
    return _SIZE.unpack(raw)[0]
