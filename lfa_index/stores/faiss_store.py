"""FaissStore: the in-process store, a FAISS ``IndexIDMap2`` over an exact inner-product index.

It is what :class:`~lfa_index.AlignedIndex` does inside, behind the store protocol, so the same
code runs against FAISS in one process and against Milvus beyond it.

Example
-------
>>> store = FaissStore(dim=512)
>>> store.add(vectors, ids=np.arange(len(vectors)), fields={"label": labels})
>>> scores, ids = store.search(queries, k=5, where={"label": "cat"})
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import faiss
import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import InvalidInputError, InvalidParameterError, SchemaError
from .base import Where, check_fields, check_k, check_vectors, check_where


class FaissStore:
    """Vectors with int64 ids and scalar fields in process memory, searched exactly by inner product.

    Parameters
    ----------
    dim : int
        Dimension of the stored vectors.
    factory : str, default="Flat"
        FAISS factory string of the inner-product index under the id map. "Flat" is exact; an
        index that needs training (IVF) is trained on the first :meth:`add`.

    Example
    -------
    >>> FaissStore(dim=64).add(x, ids=np.arange(len(x))).search(q, k=3)
    """

    def __init__(self, dim: int, factory: str = "Flat"):
        check_number(dim, "dim", low=1, integer=True)
        try:
            inner = faiss.index_factory(int(dim), factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as err:
            raise InvalidParameterError(
                f"factory={factory!r} cannot index {dim}-d vectors; use e.g. 'Flat' (exact) or 'HNSW32'."
            ) from err
        self.factory = factory
        self._index = faiss.IndexIDMap2(inner)
        self._ids = np.empty(0, dtype=np.int64)
        self._fields: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self._index.d)

    @property
    def metric(self) -> str:
        return "IP"

    @property
    def location(self) -> str:
        return f"the in-process FAISS store ({self.factory})"

    def __repr__(self) -> str:
        return f"FaissStore(dim={self.dim}, factory={self.factory!r}, rows={self.count()})"

    def count(self) -> int:
        return int(self._index.ntotal)

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "FaissStore":
        """Insert rows; a row whose id is already held is replaced. Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        values = check_fields(fields, len(x), reserved=())
        if self.count() and set(values) != set(self._fields):
            raise InvalidInputError(
                f"fields {sorted(values)} differ from the fields already held {sorted(self._fields)}; "
                "pass the same fields."
            )
        held = np.isin(self._ids, new_ids)
        if held.any():
            self._index.remove_ids(faiss.IDSelectorBatch(self._ids[held]))
        if not self._index.is_trained:
            self._index.train(x)
        self._index.add_with_ids(x, new_ids)
        self._ids = np.concatenate([self._ids[~held], new_ids])
        self._fields = {
            name: np.concatenate([self._fields.get(name, np.empty(0, dtype=object))[~held], np.array(v, dtype=object)])
            for name, v in values.items()
        }
        return self

    def clear(self) -> None:
        self._index.reset()
        self._ids = np.empty(0, dtype=np.int64)
        self._fields = {}

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_k(k)
        params = None
        filters = check_where(where)
        if filters:
            keep = np.ones(len(self._ids), dtype=bool)
            for name, value in filters.items():
                if name not in self._fields:
                    raise SchemaError(
                        f"where names field {name!r}, but {self.location} holds fields {sorted(self._fields)}."
                    )
                keep &= self._fields[name] == value
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(self._ids[keep]))
        scores, ids = self._index.search(q, k, params=params)
        scores[ids < 0] = -np.inf
        return scores, ids

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""
        wanted = np.asarray(ids, dtype=np.int64).ravel()
        missing = np.setdiff1d(wanted, self._ids)
        if len(missing):
            raise InvalidInputError(f"{self.location} holds no row with id(s) {missing[:5].tolist()}.")
        return self._index.reconstruct_batch(wanted)

    def scan(
        self, fields: Sequence[str], batch_size: int = 4096
    ) -> Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
        """Every row, ``batch_size`` at a time: ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, integer=True)
        unknown = sorted(set(fields) - set(self._fields))
        if unknown:
            raise SchemaError(
                f"{self.location} holds fields {sorted(self._fields)}, not {unknown}; add rows with those fields first."
            )
        for start in range(0, len(self._ids), batch_size):
            ids = self._ids[start : start + batch_size]
            values = {f: self._fields[f][start : start + batch_size] for f in fields}
            yield ids, self._index.reconstruct_batch(ids), values
