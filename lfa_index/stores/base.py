"""The store protocol: a collection of vectors with int64 ids and scalar fields, searched by inner product.

:class:`~lfa_index.stores.FaissStore` (in-process), :class:`~lfa_index.stores.MilvusStore`,
:class:`~lfa_index.stores.QdrantStore`, :class:`~lfa_index.stores.ChromaStore` and
:class:`~lfa_index.stores.LanceDBStore` (embedded or a server, by URI) implement it. The
functions of :mod:`lfa_index.stores.aligned` put an AlignedIndex's prototypes or corpora in any
of them.

Example
-------
>>> store = FaissStore(dim=512)
>>> store.add(vectors, ids=np.arange(len(vectors)), fields={"label": names})
>>> scores, ids = store.search(queries, k=10)
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core.validation import as_real_array, check_ids
from ..errors import DimensionMismatchError, InvalidInputError, ShapeError

Where = Mapping[str, "str | int"]
_INT64 = (-(2**63), 2**63 - 1)


@runtime_checkable
class VectorStore(Protocol):
    """What lfa-index needs from a vector store.

    ``search`` ranks by the store's ``metric`` ("IP": inner product, "COSINE"), highest first;
    missing slots are id -1 with score -inf; a ``where`` on a field no row holds matches nothing.
    ``add`` replaces rows whose id is already held. Field values are str, bool, int64 or finite
    floats, kept exactly (type and value); others are refused. Optional methods, which every
    store of lfa-index has:

    ``field_names()``
        The fields the rows hold.
    ``set_field(ids, name, values)``
        Write field ``name`` of held rows with the engine's partial update, leaving their vectors
        and other fields as they are (:func:`~lfa_index.stores.classify_rows` needs it).
    ``replace(vectors, ids, fields)``
        Make these rows the store's only rows, so that a concurrent search sees the old rows or
        the new ones, never an empty set (:func:`~lfa_index.stores.write_prototypes` uses it).
    """

    @property
    def dim(self) -> int:
        """Dimension of the stored vectors."""

    @property
    def metric(self) -> str:
        """"IP" or "COSINE"."""

    @property
    def location(self) -> str:
        """Where the store is, for messages (URI and collection)."""

    def count(self) -> int:
        """Number of rows held."""

    def add(
        self, vectors: np.ndarray, ids: np.ndarray, fields: Mapping[str, Sequence[Any]] | None = None
    ) -> "VectorStore":
        """Insert (or replace) rows: ``vectors`` (n, dim), ``ids`` (n,) int64, one value per row per field;
        returns the store."""

    def clear(self) -> None:
        """Remove every row."""

    def search(self, queries: np.ndarray, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows for each query: ``(scores, ids)``, each (n, k). ``where``: field == value filters."""

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of ``ids`` (n, dim), in the order of ``ids``."""

    def scan(
        self, fields: Sequence[str], batch_size: int = 4096
    ) -> Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
        """Every row, batch by batch: ``(ids, vectors, {field: values})``; values as stored (object arrays)."""


# ------------------------------------------------------------------------------ input checks
def check_store(store: Any, dim: int, holds: str, fix: str | None = None) -> None:
    """Raise a typed error unless ``store`` is a :class:`VectorStore` of ``dim``-d vectors (``holds``: what
    they are; ``fix``: how to get a matching store, default: a collection of that dimension)."""
    if not isinstance(store, VectorStore):
        raise InvalidInputError(f"store must implement lfa_index.stores.VectorStore, got {type(store).__name__}.")
    if store.dim != dim:
        raise DimensionMismatchError(f"{store.location} holds {store.dim}-d vectors but {holds} are {dim}-d; "
                                     f"{fix or f'use a collection created with dim={dim}.'}")


def check_vectors(vectors: Any, *, dim: int, location: str, name: str = "vectors") -> np.ndarray:
    """Convert to a C-contiguous float32 (n, dim) array with finite values."""
    arr = as_real_array(vectors, name)  # ragged lists and non-numbers: typed errors
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ShapeError(f"{name} must be a non-empty (n, {dim}) array, got shape {arr.shape}.")
    if arr.shape[1] != dim:
        raise DimensionMismatchError(
            f"{name} have {arr.shape[1]} dimensions but {location} holds {dim}-d vectors; "
            f"pass {dim}-d vectors or use a store created with dim={arr.shape[1]}."
        )
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        raise InvalidInputError(f"{name} hold NaN or infinite values; drop or repair those rows first.")
    return arr


def check_fields(
    fields: Mapping[str, Sequence[Any]] | None, n_rows: int, reserved: Sequence[str]
) -> dict[str, list[Any]]:
    """Scalar fields as plain Python lists (str, int, float, bool), one value per row."""
    out: dict[str, list[Any]] = {}
    for name, values in (fields or {}).items():
        if not isinstance(name, str) or not name.isidentifier() or name in reserved:
            raise InvalidInputError(f"field name {name!r} must be an identifier other than {list(reserved)}.")
        values = np.asarray(values).tolist() if isinstance(values, np.ndarray) else list(values)
        if len(values) != n_rows:
            raise ShapeError(f"field {name!r} has {len(values)} values for {n_rows} rows; pass one per row.")
        values = [v.item() if isinstance(v, np.generic) else v for v in values]
        for v in values:
            if not isinstance(v, (str, int, float, bool)):
                raise InvalidInputError(f"field {name!r} must hold str, int, float or bool values, got {v!r}.")
            if not exact_value(v):  # engines drop NaN or turn 2**70 into a float: refused, so values read back exactly
                raise InvalidInputError(
                    f"field {name!r} holds {v!r}, which vector stores cannot keep exactly; store finite floats and "
                    "integers within int64 (or the value as a str)."
                )
        out[name] = values
    return out


def exact_value(value: Any) -> bool:
    """Whether every store keeps ``value`` exactly: a str, a bool, an int within int64 or a finite float."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return _INT64[0] <= value <= _INT64[1]
    return isinstance(value, str)


def object_column(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a 1-D object array of the values themselves (``np.array`` would coerce ``[2020, "x"]`` to
    strings, ``[1, 2.5]`` to floats, equal-length lists to a matrix)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def check_field_update(
    ids: Any, name: Any, values: Any, reserved: Sequence[str]
) -> tuple[np.ndarray, list[Any]]:
    """``(ids, values)`` of a ``set_field``: distinct non-negative int64 ids and one checked value for each."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise InvalidInputError(f"values must be a sequence of one value per id, got {type(values).__name__}.")
    n_rows = len(values)
    return check_ids(ids, n_rows), check_fields({name: values}, n_rows, reserved)[name]


def check_where(where: Where | None) -> dict[str, str | int]:
    """Equality filters ``{field: value}`` on scalar fields."""
    if where is None:
        return {}
    out = {}
    for name, value in where.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidInputError(f"where: field name {name!r} must be an identifier.")
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InvalidInputError(f"where: {name} must equal a str or int, got {type(value).__name__}.")
        out[name] = value
    return out
