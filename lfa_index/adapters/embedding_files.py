"""Precomputed embeddings (and labels) from .npy / .npz / .safetensors / Parquet / FAISS files.

Never unpickles: ``np.load(..., allow_pickle=False)`` always.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import l2_normalize
from ..core.validation import check_array
from ..errors import FileFormatError, LFAIndexError, MissingFileError, NonFiniteError, ShapeError
from ..extras import import_extra
from ..faiss_files import faiss_layout

EMBEDDING_KEYS = ("embeddings", "embedding", "features", "X", "x")
LABEL_KEYS = ("labels", "label", "y", "targets", "target")
SUFFIXES = {
    ".npy": "numpy",
    ".npz": "numpy-archive",
    ".safetensors": "safetensors",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".faiss": "faiss",
    ".index": "faiss",
}


_FORMAT_NAMES = {
    "numpy": ".npy", "numpy-archive": ".npz", "safetensors": "safetensors", "parquet": "Parquet", "faiss": "FAISS index"
}


def decoding_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "these bytes are not the format the file claims", by category.

    ValueError covers numpy's short reads and pickle refusals, JSON and UTF-8 decoding errors and
    pyarrow's ArrowInvalid; EOFError an empty file; RecursionError absurdly nested JSON. The
    classes of safetensors and pyarrow are included once those libraries are imported.
    """
    kinds: list[type[BaseException]] = [ValueError, EOFError, zipfile.BadZipFile, RecursionError]
    for module, name in (("safetensors", "SafetensorError"), ("pyarrow.lib", "ArrowException")):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and issubclass(kind, BaseException):
            kinds.append(kind)
    return tuple(kinds)


def describe_error(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters), for one-line error messages."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else 'no details'}"


def load_embeddings(
    path: str | os.PathLike,
    *,
    embeddings_key: str | None = None,
    labels_key: str | None = None,
    normalize: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Load embeddings, and labels where the file has them.

    Parameters
    ----------
    path : ``.npy`` (one array), ``.npz`` / ``.safetensors`` (named arrays), ``.parquet`` (a list
        column of vectors, one row per item) or a flat FAISS index (``.faiss`` / ``.index``: an
        ``IndexFlat`` or an ``IndexIDMap`` over one, checked from its header before FAISS reads it;
        other index types are refused).
    embeddings_key : array / column name; default the first of ``embeddings, embedding, features,
        X, x`` present (or the only array).
    labels_key : array / column of labels; default the first of ``labels, label, y, targets,
        target`` present, else no labels. Named explicitly, it must exist.
    normalize : L2-normalise the rows (default True, like every source).

    Returns
    -------
    embeddings : (N, d) or (N, V, d) float32.
    labels : (N,) integer or string array, or None.

    Example
    -------
    >>> X, y = load_embeddings("support.npz")           # arrays "embeddings" and "labels"
    """
    path = Path(path)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise FileFormatError(
            f"Unknown embeddings file type {path.suffix!r} ({path.name}); supported: {', '.join(sorted(SUFFIXES))}."
        )
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "missing"
        raise MissingFileError(f"No embeddings file at {path} ({what}); check the path.")
    try:
        if kind == "numpy":
            embeddings, labels = _read_npy(path, embeddings_key, labels_key), None
        elif kind in ("numpy-archive", "safetensors"):
            embeddings, labels = _read_named_arrays(path, kind, embeddings_key, labels_key)
        elif kind == "parquet":
            embeddings, labels = _read_parquet(path, embeddings_key, labels_key)
        else:
            embeddings, labels = _read_faiss(path, embeddings_key, labels_key), None
    except LFAIndexError:
        raise
    except PermissionError as err:
        raise FileFormatError(f"{path} cannot be read ({describe_error(err)}); check its permissions.") from err
    except (*decoding_errors(), OSError) as err:  # pyarrow reports a damaged Parquet file as an OSError
        raise FileFormatError(
            f"{path} is not a readable {_FORMAT_NAMES[kind]} file ({describe_error(err)}); it may be empty, "
            "truncated or of another format: write it again."
        ) from err
    return _checked(embeddings, labels, path, normalize)


def _checked(
    embeddings: Any, labels: Any, path: Path, normalize: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    arr = np.asarray(embeddings)
    if arr.dtype.kind not in "fiu":
        raise FileFormatError(f"The embeddings in {path.name} have dtype {arr.dtype}; expected numbers.")
    if not arr.flags.writeable:  # Arrow buffers are read-only; torch warns on those
        arr = arr.copy()
    x = check_array(arr, name=f"embeddings in {path.name}", ndims=(2, 3))
    if labels is not None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.shape[0] != x.shape[0]:
            raise ShapeError(
                f"The labels in {path.name} have shape {labels.shape}; expected ({x.shape[0]},), one per embedding row."
            )
        if labels.dtype.kind not in "iuUSb":
            raise FileFormatError(
                f"The labels in {path.name} have dtype {labels.dtype}; expected integers or strings (class names)."
            )
        if labels.dtype.kind == "S":
            labels = labels.astype(str)
    if normalize:
        return l2_normalize(x), labels
    # check_array rescales huge and tiny rows (all that LFA needs); raw means raw here
    with np.errstate(over="ignore"):
        raw = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(raw).all():
        raise NonFiniteError(
            f"The embeddings in {path.name} hold values beyond float32's range (±3.4e38); load them with "
            "normalize=True, or scale them first."
        )
    return raw, labels


def _pick(
    available: list[str], requested: str | None, defaults: tuple[str, ...], what: str, path: Path
) -> str | None:
    if requested is not None:
        if requested not in available:
            raise FileFormatError(f"{path.name} has no {what} {requested!r}; it holds {available}.")
        return requested
    return next((k for k in defaults if k in available), None)


def _read_npy(path: Path, embeddings_key: str | None, labels_key: str | None) -> np.ndarray:
    if embeddings_key is not None or labels_key is not None:
        raise FileFormatError(
            f"{path.name} is a single .npy array: it has no named keys (and no labels); use .npz for both."
        )
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        if "pickle" not in str(err):
            raise  # a short or garbled file: reported by load_embeddings
        raise FileFormatError(
            f"{path.name} is not a plain numeric .npy array (pickled objects are refused): {err}"
        ) from err


def _read_named_arrays(path: Path, kind: str, embeddings_key: str | None, labels_key: str | None):
    if kind == "numpy-archive":
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except ValueError as err:
            if "pickle" not in str(err):
                raise  # a short or garbled file: reported by load_embeddings
            raise FileFormatError(f"{path.name} holds pickled objects, which are refused: {err}") from err
    else:
        from safetensors.numpy import load_file

        arrays = load_file(str(path))
    names = sorted(arrays)
    key = _pick(names, embeddings_key, EMBEDDING_KEYS, "array", path)
    label_key = _pick(names, labels_key, LABEL_KEYS, "labels array", path)
    if key is None:
        others = [n for n in names if n != label_key]
        if len(others) != 1:
            raise FileFormatError(
                f"{path.name} holds arrays {names} and none is called {list(EMBEDDING_KEYS)}; "
                "name the embeddings with embeddings_key=..."
            )
        key = others[0]
    return arrays[key], (arrays[label_key] if label_key is not None else None)


def _read_parquet(path: Path, embeddings_key: str | None, labels_key: str | None):
    pq = import_extra("pyarrow.parquet", extra="files", package="pyarrow")
    pa = import_extra("pyarrow", extra="files")
    columns = pq.read_schema(path).names
    key = _pick(columns, embeddings_key, EMBEDDING_KEYS, "column", path)
    if key is None:
        raise FileFormatError(
            f"{path.name} has columns {columns} and none is called {list(EMBEDDING_KEYS)}; "
            "name the vector column with embeddings_key=..."
        )
    label_key = _pick(columns, labels_key, LABEL_KEYS, "labels column", path)
    table = pq.read_table(path, columns=[key] + ([label_key] if label_key else []))
    column = table.column(key).combine_chunks()
    if not (
        pa.types.is_list(column.type)
        or pa.types.is_large_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
    ):
        raise FileFormatError(
            f"Column {key!r} of {path.name} has type {column.type}; expected a list of floats per row."
        )
    if column.null_count:
        raise FileFormatError(f"Column {key!r} of {path.name} has {column.null_count} empty (null) rows.")
    lengths = np.asarray(
        import_extra("pyarrow.compute", extra="files", package="pyarrow").list_value_length(column)
    )
    if len(lengths) and (lengths != lengths[0]).any():
        raise ShapeError(
            f"Rows of column {key!r} in {path.name} have different lengths ({lengths.min()}..{lengths.max()}); "
            "every embedding must have the same dimension."
        )
    values = column.flatten().to_numpy(zero_copy_only=False)
    embeddings = values.reshape(len(column), int(lengths[0]) if len(lengths) else 0)
    labels = table.column(label_key).to_numpy(zero_copy_only=False) if label_key else None
    if labels is not None and labels.dtype == object:
        if not all(isinstance(v, str) for v in labels):
            raise FileFormatError(
                f"Labels column {label_key!r} of {path.name} must hold integers or strings, without nulls."
            )
        labels = labels.astype(str)
    return embeddings, labels


def _read_faiss(path: Path, embeddings_key: str | None, labels_key: str | None) -> np.ndarray:
    if embeddings_key is not None or labels_key is not None:
        raise FileFormatError(
            f"{path.name} is a FAISS index: it holds vectors only, no named keys or labels."
        )
    faiss = import_extra("faiss", extra="files", package="faiss-cpu")
    # the type and size come from the header before FAISS reads the file: other index types can abort the
    # process when asked for their vectors, and a forged header would make FAISS allocate what it claims
    try:
        layout = faiss_layout(path)
    except ValueError as err:
        raise FileFormatError(f"{path.name} is not a complete flat FAISS index ({err}); write it again.") from err
    if layout == "other":
        raise FileFormatError(
            f"{path.name} is not a flat FAISS index: an embeddings file may be an IndexFlat (IP or L2) or an "
            "IndexIDMap over one, whose vectors are stored as they are; save the embeddings as .npy or "
            "reconstruct them into an IndexFlat first."
        )
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as err:
        raise FileFormatError(f"{path.name} is not a readable FAISS index: {err}") from err
    inner = faiss.downcast_index(index.index) if hasattr(index, "id_map") else index
    return faiss.rev_swig_ptr(inner.get_xb(), inner.ntotal * inner.d).reshape(inner.ntotal, inner.d).copy()
