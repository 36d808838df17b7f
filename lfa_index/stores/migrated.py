"""A store of old-model embeddings searched with new-model queries, through an EmbeddingAligner.

:func:`search_mapped` maps the queries into the old space (one GEMV each) and searches the store
as it is: nothing is re-embedded. :func:`search_mapped_exact` then re-ranks ``k · overfetch``
candidates by the new model's own cosine, for callers that can embed the candidates with the new
model (their texts are at hand): among the candidates, the ranking of a full re-index.

Example
-------
>>> aligner = EmbeddingAligner.load("e5_to_minilm")
>>> scores, ids = search_mapped(aligner, open_store("milvus:./docs.db#minilm"), e5.embed_texts(["a query"]), k=10)
>>> search_mapped_exact(aligner, store, queries, lambda ids: e5_passage.embed_texts(texts_of(ids)), k=10)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..arrays import l2_normalize
from ..core.validation import check_embeddings, check_number
from ..errors import EmptyIndexError, InvalidInputError
from ..index import EmbeddingAligner
from ..index.folding import rerank
from .base import VectorStore, Where, check_store


def search_mapped(
    aligner: EmbeddingAligner, store: VectorStore, X_new: Any, k: int = 10, *, where: Where | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of a store of old-model embeddings for new-model queries: ``(scores, ids)``, (n, k).

    The queries are ``aligner.transform(X_new)`` (unit rows in the old space); scores are the
    store's own (inner product or cosine with the stored rows). ``where`` filters as the store does.
    """
    k = check_number(k, "k", low=1, integer=True)
    queries = aligner.transform(X_new)
    check_store(store, aligner.n_features_out_, "the aligner's outputs",
                "use the aligner fitted on this store's model.")
    return store.search(queries, k, where=where)


def search_mapped_exact(
    aligner: EmbeddingAligner,
    store: VectorStore,
    X_new: Any,
    embed_candidates: Callable[[np.ndarray], Any],
    k: int = 10,
    *,
    overfetch: int = 10,
    where: Where | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`search_mapped` for ``k · overfetch`` candidates, re-ranked by the new model's cosine.

    ``embed_candidates(ids)`` returns the new model's embeddings (m, d_new) of the rows with those
    sorted distinct int64 ids (e.g. their texts, embedded). Returns ``(scores, ids)``, each (n, k),
    best first, scores the new model's cosines; unfilled slots are id -1, score -inf.
    """
    k = check_number(k, "k", low=1, integer=True)
    check_number(overfetch, "overfetch", low=1, integer=True)
    queries = l2_normalize(check_embeddings(X_new, name="X_new"))
    check_store(store, aligner.n_features_out_, "the aligner's outputs",
                "use the aligner fitted on this store's model.")
    held = store.count()
    if held == 0:
        raise EmptyIndexError(f"{store.location} is empty: it holds no old-model rows to search.")
    _, candidates = store.search(aligner.transform(queries), min(k * int(overfetch), held), where=where)

    def new_rows(ids: np.ndarray) -> np.ndarray:
        rows = check_embeddings(embed_candidates(ids), name="embed_candidates(ids)")
        if rows.shape != (len(ids), aligner.n_features_in_):
            raise InvalidInputError(
                f"embed_candidates returned shape {rows.shape} for {len(ids)} ids; return one new-model row "
                f"({aligner.n_features_in_}-d) per id, in the order of the ids."
            )
        return l2_normalize(rows)

    return rerank(queries, candidates, new_rows, k)
