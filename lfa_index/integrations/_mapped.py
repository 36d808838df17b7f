"""What the LangChain and LlamaIndex wrappers of an EmbeddingAligner share, as numpy.

A store built with the old model answers the new one: queries are embedded by the new model and
mapped into the old space (``aligner.transform``); documents added later are embedded by the old
model (``document_embedder``), as the store's rows were. Candidates whose texts are at hand can be
re-ranked exactly by the new model's own cosine (``rerank_embedder``: the new model in its
document role, e.g. ``e5-small:passage``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..arrays import l2_normalize
from ..core.validation import check_embeddings, check_is_fitted, check_texts
from ..errors import DimensionMismatchError, InvalidParameterError, ShapeError
from ..index import EmbeddingAligner
from ..index.folding import rerank
from ._common import embed_function


class MappedEmbedder:
    """New-model queries mapped into an old model's space, for framework wrappers.

    Parameters
    ----------
    aligner : EmbeddingAligner
        A fitted aligner (new model ``d_new`` -> old model ``d_old``).
    query_embedder : embedder
        The new model, embedding queries (an lfa-index source, a LangChain or LlamaIndex embedder,
        or a callable ``list[str] -> (n, d_new)``).
    document_embedder : embedder or None, default=None
        The old model, embedding documents added to the store; None refuses to embed documents.
    rerank_embedder : embedder or None, default=None
        The new model embedding candidate documents, for :meth:`rerank`; None: ``query_embedder``.
    """

    def __init__(self, aligner: EmbeddingAligner, query_embedder: Any, document_embedder: Any = None,
                 rerank_embedder: Any = None):
        if not isinstance(aligner, EmbeddingAligner):
            raise InvalidParameterError(f"aligner must be a fitted EmbeddingAligner, got {type(aligner).__name__}.")
        check_is_fitted(aligner)
        self.aligner = aligner
        self._queries = embed_function(query_embedder, "text", "query_embedder", query=True)
        self._documents = (None if document_embedder is None
                           else embed_function(document_embedder, "text", "document_embedder", query=False))
        self._candidates = embed_function(rerank_embedder if rerank_embedder is not None else query_embedder,
                                          "text", "rerank_embedder", query=False)

    @property
    def dim(self) -> int:
        """Width of the vectors given to the framework: the old model's."""
        return int(self.aligner.n_features_out_)

    def new_queries(self, texts: Sequence[str]) -> np.ndarray:
        """The new model's unit query embeddings (n, d_new)."""
        texts = check_texts(texts, name="query texts", allow_empty=True)
        return l2_normalize(self._new(self._queries, texts, "the query embedder"))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries in the old space: ``aligner.transform`` of the new model's embeddings (n, d_old)."""
        return self.aligner.transform(self.new_queries(texts))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Documents embedded by the old model (n, d_old), as the store's rows were."""
        if self._documents is None:
            raise InvalidParameterError(
                "no document_embedder was given: documents of a store built with the old model must be embedded "
                "by the old model; pass it as document_embedder (queries need only the new model)."
            )
        texts = check_texts(texts, name="documents", allow_empty=True)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        x = _rows(self._documents(texts), "the document embedder's output", len(texts))
        if x.shape[1] != self.dim:
            raise DimensionMismatchError(
                f"the document embedder returns {x.shape[1]}-d vectors but the store's old model is {self.dim}-d; "
                "pass the old model."
            )
        return x

    def rerank(self, query: str, documents: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The new model's exact top-``k`` of candidate documents for one query: ``(cosines, positions)``."""
        documents = check_texts(documents, name="documents", allow_empty=True)
        if not documents:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        rows = l2_normalize(self._new(self._candidates, documents, "the rerank embedder"))
        candidates = np.arange(len(documents), dtype=np.int64)[None]
        scores, positions = rerank(self.new_queries([query]), candidates, lambda ids: rows[ids], k)
        return scores[0], positions[0]

    def _new(self, embed: Any, texts: list[str], what: str) -> np.ndarray:
        x = _rows(embed(texts), f"{what}'s output", len(texts))
        if x.shape[1] != self.aligner.n_features_in_:
            raise DimensionMismatchError(
                f"{what} returns {x.shape[1]}-d vectors but the aligner maps {self.aligner.n_features_in_}-d rows of "
                "the new model; pass the model the aligner was fitted on."
            )
        return x


def _rows(values: Any, name: str, n_texts: int) -> np.ndarray:
    """An embedder's answer as float32 (n_texts, d): one finite, non-zero row per text, or a typed error."""
    rows = check_embeddings(values, name=name)
    if rows.shape[0] != n_texts:
        raise ShapeError(f"{name} must hold one embedding per text, ({n_texts}, d); got shape {rows.shape}.")
    return np.asarray(rows, dtype=np.float32)
