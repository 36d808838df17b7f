"""What a fitted AlignedIndex hands to other stores: folded prototypes, prepared queries, query maps.

An inner-product search of ``prepare_queries(x)`` over ``aligned_prototypes()`` is the index's
classification in any store; ``transform`` gives the aligned vectors a store of images holds, and
``query_transform`` / ``query_offset`` / ``query_linear_transform`` the map itself.

Example
-------
>>> store.add(index.aligned_prototypes()); store.search(index.prepare_queries(queries), 1)
"""

from __future__ import annotations

from typing import Any, Literal

import faiss
import numpy as np

from ..arrays import MAPPINGS, Mapping
from ..core.query_map import prepare_queries
from ..core.validation import check_choice, check_query_matrix
from . import folding
from .classes import ClassTable


class StoreExportMixin:
    """The store exports of :class:`~lfa_index.AlignedIndex`.

    The host class provides one attribute, ``class_table_``: its current :class:`ClassTable`
    (raising :class:`~lfa_index.errors.NotFittedError` before a fit). Each export reads it once, so
    it answers for one consistent set of classes while classes are added concurrently.
    """

    class_table_: ClassTable

    def aligned_prototypes(self, mapping: Literal["auto", "task", "tt", "average"] = "auto") -> np.ndarray:
        """Prototypes folded with the query map, (C, d_in), or (C, d_in + 1) when :attr:`augmented_`:
        ``argmax_c prepare_queries(x)·p_c`` is the aligned classification, in any inner-product store.

        "auto" folds each class with its own map (W for fitted classes, W_tt for added ones);
        pass a single map to rank classes of both kinds with one map.
        """
        table = self.class_table_
        check_choice(mapping, "mapping", ("auto",) + MAPPINGS)
        if mapping == "auto":
            return table.aligned_prototypes()
        folded = table.query_map(mapping).fold(table.prototypes, table.intercept)
        return folding.pad(folded, table.n_features + int(table.augmented))

    @property
    def augmented_(self) -> bool:
        """Whether class vectors carry a bias coordinate (queries: :meth:`prepare_queries`)."""
        return self.class_table_.augmented

    def prepare_queries(self, X: Any) -> np.ndarray:
        """Raw queries as :meth:`aligned_prototypes` expects them: float32 (n, d_in), or ``[x, ||x||]``."""
        table = self.class_table_
        return prepare_queries(_queries(table, X), table.augmented)

    def query_norms(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """``||x G + ||x|| o||`` (n,): divides inner products with folded prototypes into aligned scores."""
        table = self.class_table_
        return table.query_map(mapping).norms(_queries(table, X))

    def transform(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """Aligned unit image embeddings (n, d), ``normalize(x̂ @ G + o)``: what an aligned corpus stores."""
        table = self.class_table_
        return table.query_map(mapping).align(_queries(table, X))

    def query_offset(self, mapping: Mapping = "task") -> np.ndarray:
        """The offset o, (d,), of the affine query map ``normalize(x̂ @ G + o)``; zero without centring."""
        query_map = self.class_table_.query_map(mapping)
        return np.zeros(query_map.n_features_out, np.float32) if query_map.offset is None else query_map.offset.copy()

    def query_transform(self, mapping: Mapping = "task") -> np.ndarray:
        """The query map G = Rᵀ W, (d_in, d): the aligned embedding of ``x`` is ``normalize(x̂ @ G + o)``."""
        return self.class_table_.query_map(mapping).matrix.copy()

    def query_linear_transform(self, mapping: Mapping = "task") -> faiss.LinearTransform:
        """The query map as a ``faiss.LinearTransform`` (affine with centring; expects unit queries then).

        >>> chain = faiss.IndexPreTransform(index.query_linear_transform(), faiss.IndexFlatIP(d))
        """
        query_map = self.class_table_.query_map(mapping)
        g, offset = query_map.matrix, query_map.offset
        transform = faiss.LinearTransform(g.shape[0], g.shape[1], offset is not None)
        faiss.copy_array_to_vector(np.ascontiguousarray(g.T).ravel(), transform.A)
        if offset is not None:
            faiss.copy_array_to_vector(np.ascontiguousarray(offset, dtype=np.float32), transform.b)
        transform.is_trained = True
        return transform


def _queries(table: ClassTable, X: Any) -> np.ndarray:
    return check_query_matrix(X, name="X", dim=table.n_features)
