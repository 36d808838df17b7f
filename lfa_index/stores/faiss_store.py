"""FaissStore: the in-process store, a FAISS ``IndexIDMap2`` over an exact inner-product index.

It is what :class:`~lfa_index.AlignedIndex` does inside, behind the store protocol, so the same
code runs against FAISS in one process and against Milvus beyond it. :meth:`FaissStore.save`
writes it to a directory (``faiss.write_index`` of the vectors and ids, a safetensors file of the
row order, a JSON file of the fields, a sha256 manifest; never a pickle) and
:meth:`FaissStore.load` reads it back: the ``faiss:DIR`` store URI.

Example
-------
>>> store = FaissStore(dim=512)
>>> store.add(vectors, ids=np.arange(len(vectors)), fields={"label": labels})
>>> scores, ids = store.search(queries, k=5, where={"label": "cat"})
>>> store.save("vectors_faiss"); FaissStore.load("vectors_faiss").count()
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import faiss
import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import IndexFormatError, InvalidInputError, InvalidParameterError, SchemaError
from ..index.corpus import ReadWriteLock, check_factory
from ..persistence import read_index_dir, write_index_dir
from ._common import requested_ids
from .base import (
    Where,
    check_field_update,
    check_fields,
    check_vectors,
    check_where,
    exact_value,
    object_column,
)

STORE_KIND = "faiss-store"  # the manifest kind of a saved FaissStore (an AlignedIndex is "aligned-index")
_FILES = {"store": "store.json", "fields": "fields.json", "ids": "ids.safetensors", "vectors": "vectors.faiss"}


class FaissStore:
    """Vectors with int64 ids and scalar fields in process memory, searched exactly by inner product.

    Parameters
    ----------
    dim : int
        Dimension of the stored vectors.
    factory : str, default="Flat"
        FAISS factory string of the inner-product index under the id map. "Flat" is exact; an
        index that needs training (IVF) is trained on the first :meth:`add`.
    path : str, path or None, default=None
        Directory :meth:`save` writes to when given none (set by :meth:`load`). The store lives
        in memory: changes reach the directory only when :meth:`save` is called.

    Notes
    -----
    Fields need not be given with every :meth:`add`: a row added without a field the store
    holds, or held before a new field arrived, has no value for it (``None``); :meth:`scan`
    refuses to return a field that some row lacks, and a ``where`` never matches a missing value.
    Searches share a lock that writes (:meth:`add`, :meth:`replace`, :meth:`set_field`) hold
    alone, so a search sees the rows before a write or after it.

    Example
    -------
    >>> FaissStore(dim=64).add(x, ids=np.arange(len(x))).search(q, k=3)
    """

    def __init__(self, dim: int, factory: str = "Flat", *, path: str | os.PathLike | None = None):
        check_number(dim, "dim", low=1, integer=True)
        if not isinstance(factory, str):
            raise InvalidParameterError(f"factory must be a FAISS factory string, got {factory!r}.")
        check_factory(factory, int(dim), name="factory")
        self.factory = factory
        self.path = None if path is None else Path(path)
        self._index = self._new_index(int(dim))
        self._ids = np.empty(0, dtype=np.int64)
        self._fields: dict[str, np.ndarray] = {}
        self._lock = ReadWriteLock()  # searches share it; writes hold it alone, so no search sees half a write

    def _new_index(self, dim: int) -> faiss.Index:
        return faiss.IndexIDMap2(faiss.index_factory(dim, self.factory, faiss.METRIC_INNER_PRODUCT))

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def metric(self) -> str:
        return "IP"

    @property
    def location(self) -> str:
        if self.path is not None:
            return f"the FAISS store at {str(self.path)!r} ({self.factory})"
        return f"the in-process FAISS store ({self.factory})"

    def __repr__(self) -> str:
        path = "" if self.path is None else f", path={str(self.path)!r}"
        return f"FaissStore(dim={self.dim}, factory={self.factory!r}{path}, rows={self.count()})"

    def count(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "FaissStore":
        """Insert rows; a row whose id is already held is replaced (fields it is not given become None).
        Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        values = check_fields(fields, len(x), reserved=())
        with self._lock.write():
            held = np.isin(self._ids, new_ids)
            if held.any():
                self._index.remove_ids(faiss.IDSelectorBatch(self._ids[held]))
            if not self._index.is_trained:
                self._index.train(x)
            self._index.add_with_ids(x, new_ids)
            kept = int((~held).sum())
            self._ids = np.concatenate([self._ids[~held], new_ids])
            self._fields = {
                name: np.concatenate([
                    self._fields[name][~held] if name in self._fields else np.full(kept, None, dtype=object),
                    object_column(values[name]) if name in values else np.full(len(new_ids), None, dtype=object),
                ])
                for name in sorted(set(self._fields) | set(values))
            }
        return self

    def replace(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "FaissStore":
        """Make these the only rows, at once: a concurrent search sees all the old rows or all the new ones.
        Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        values = check_fields(fields, len(x), reserved=())
        index = self._new_index(self.dim)
        index.train(x)
        index.add_with_ids(x, new_ids)
        with self._lock.write():
            self._index, self._ids = index, new_ids
            self._fields = {name: object_column(v) for name, v in values.items()}
        return self

    def clear(self) -> None:
        with self._lock.write():
            self._index.reset()
            self._ids = np.empty(0, dtype=np.int64)
            self._fields = {}

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_number(k, "k", low=1, integer=True)
        filters = check_where(where)
        with self._lock.read():
            params = None
            if filters:
                keep = np.ones(len(self._ids), dtype=bool)
                for name, value in filters.items():  # a field no row holds matches nothing, as in every engine
                    keep &= self._fields[name] == value if name in self._fields else False
                params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(self._ids[keep]))
            scores, ids = self._index.search(q, k, params=params)
        scores[ids < 0] = -np.inf
        return scores, ids

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""
        wanted, _ = requested_ids(ids)
        with self._lock.read():
            missing = np.setdiff1d(wanted, self._ids)
            if len(missing):
                raise InvalidInputError(f"{self.location} holds no row with id(s) {missing[:5].tolist()}.")
            return self._index.reconstruct_batch(wanted)

    def scan(
        self, fields: Sequence[str], batch_size: int = 4096
    ) -> Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
        """Every row, ``batch_size`` at a time: ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, integer=True)
        with self._lock.read():
            unknown = sorted(set(fields) - set(self._fields))
            if unknown:
                raise SchemaError(
                    f"{self.location} holds fields {sorted(self._fields)}, not {unknown}; add rows with those fields "
                    "first."
                )
            lacking = sorted(f for f in set(fields) if any(v is None for v in self._fields[f]))
            if lacking:
                raise SchemaError(
                    f"rows of {self.location} lack field(s) {lacking}; store them for every row with "
                    "add(..., fields=...)."
                )
            all_ids, columns = self._ids, {f: self._fields[f] for f in fields}  # replaced, never changed in place
        for start in range(0, len(all_ids), batch_size):
            ids = all_ids[start : start + batch_size]
            yield ids, self.get(ids), {f: values[start : start + batch_size] for f, values in columns.items()}

    def field_names(self) -> list[str]:
        """Names of the fields the rows hold."""
        return sorted(self._fields)

    def set_field(self, ids: Any, name: str, values: Sequence[Any]) -> None:
        """Write field ``name`` of the held rows ``ids`` (one value each); vectors and other fields stay as they are.
        Rows not in ``ids`` keep their value (None: no value) of a new field."""
        ids, values = check_field_update(ids, name, values, reserved=())
        with self._lock.write():
            missing = ids[~np.isin(ids, self._ids)]
            if len(missing):
                raise InvalidInputError(f"{self.location} holds no row with id(s) {missing[:5].tolist()}.")
            order = np.argsort(self._ids)
            slots = order[np.searchsorted(self._ids, ids, sorter=order)]
            column = self._fields.get(name, np.full(len(self._ids), None, dtype=object)).copy()
            column[slots] = object_column(values)
            self._fields = {**self._fields, name: column}

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the store to directory ``path`` (default: :attr:`path`) atomically; returns the path.

        Layout: a sha256 manifest and ``store.json`` (dimension, factory), ``vectors.faiss``
        (``faiss.write_index``), ``ids.safetensors`` (row order), ``fields.json``. An existing
        saved store or empty directory is replaced; anything else raises
        :class:`~lfa_index.errors.IndexPathError`.
        """
        target = self.path if path is None else Path(path)
        if target is None:
            raise InvalidParameterError("this FaissStore has no path: pass save(path) (a directory).")
        with self._lock.read():
            fields = {name: values.tolist() for name, values in self._fields.items()}
            write_index_dir(
                target, kind=STORE_KIND,
                documents={_FILES["store"]: {"dim": self.dim, "factory": self.factory, "rows": self.count()},
                           _FILES["fields"]: fields},
                arrays={_FILES["ids"]: {"ids": self._ids}},
                faiss_indexes={_FILES["vectors"]: self._index},
            )
        self.path = target
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FaissStore":
        """The store :meth:`save` wrote to directory ``path``; raises :class:`~lfa_index.errors.IndexFormatError`
        for a missing, foreign or corrupted directory."""
        documents, arrays, indexes = read_index_dir(path, kind=STORE_KIND)
        try:
            meta, fields = documents[_FILES["store"]], documents[_FILES["fields"]]
            ids, index = arrays[_FILES["ids"]]["ids"], indexes[_FILES["vectors"]]
            store = cls(int(meta["dim"]), str(meta["factory"]), path=path)
            _check_saved(store, index, ids, fields, int(meta["rows"]))
        except (KeyError, TypeError, ValueError) as err:
            raise IndexFormatError(f"{path} is not a complete FAISS store ({err}); save it again.") from err
        store._index = index
        store._ids = ids.astype(np.int64)
        store._fields = {name: object_column(values) for name, values in fields.items()}
        return store

    def close(self) -> None:
        """Nothing to release (changes are not saved: call :meth:`save`)."""

    def __enter__(self) -> "FaissStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_saved(store: FaissStore, index: faiss.Index, ids: np.ndarray, fields: Any, rows: int) -> None:
    """Refuse a saved store whose parts disagree (the manifest's checksums match, the contents do not)."""
    if not isinstance(index, faiss.IndexIDMap2) or index.d != store.dim or index.ntotal != rows:
        raise ValueError(f"vectors.faiss holds {type(index).__name__} of {index.ntotal} {index.d}-d rows, "
                         f"not an id map of {rows} {store.dim}-d rows")
    held = np.sort(faiss.vector_to_array(index.id_map))
    if ids.ndim != 1 or len(ids) != rows or not np.array_equal(np.sort(ids), held):
        raise ValueError("ids.safetensors does not list the ids of vectors.faiss")
    if not isinstance(fields, dict) or not all(isinstance(v, list) and len(v) == rows for v in fields.values()):
        raise ValueError(f"fields.json must map field names to lists of {rows} values")
    odd = [name for name, values in fields.items() if not all(v is None or exact_value(v) for v in values)]
    if odd:
        raise ValueError(f"fields.json holds values other than str, bool, int64, finite floats or null in {odd[:5]}")
