"""What the LangChain and LlamaIndex adapters share: two embedders and an AlignedIndex, as numpy.

Spaces
------
``"raw"``      documents are the document-side model's raw embeddings (what an existing store
               already holds); a text query ``y`` becomes ``t Gᵀ``, its aligned embedding
               ``t = index.transform_text(y)`` mapped back by the query map G. Ranking raw unit
               documents by it is the candidate step of :func:`lfa_index.stores.search_unaligned`;
               :meth:`AlignedEmbedder.rerank` re-ranks candidates exactly, with the same function.
``"aligned"``  documents are ``index.transform(x)`` and queries ``t``: a store that ranks by
               cosine or inner product then returns the exact aligned top-k (re-index needed).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Sequence

import numpy as np

from ..arrays import MAPPINGS
from ..core.validation import as_real_array, check_choice, check_texts
from ..errors import DimensionMismatchError, InvalidParameterError, NonFiniteError, ShapeError
from ..index import AlignedIndex
from ..index.folding import rerank
from ..stores import FaissStore, VectorStore, prototype_dim, search_classes, write_prototypes

Space = Literal["raw", "aligned"]
Embed = Callable[[list[str]], Any]


def embed_function(embedder: Any, modality: Literal["text", "image"], role: str, query: bool) -> Embed:
    """A ``list[str] -> (n, d)`` function from an lfa-index source, a LangChain or LlamaIndex embedder or a callable."""
    if hasattr(embedder, "embed_texts") and hasattr(embedder, "embed_images"):  # an lfa-index EmbeddingSource
        return embedder.embed_texts if modality == "text" else embedder.embed_images
    if hasattr(embedder, "embed_documents") and hasattr(embedder, "embed_query"):  # LangChain Embeddings
        if query:
            return lambda texts: [embedder.embed_query(t) for t in texts]
        return embedder.embed_documents
    if hasattr(embedder, "get_text_embedding_batch") and hasattr(embedder, "get_query_embedding"):  # LlamaIndex
        if query:
            return lambda texts: [embedder.get_query_embedding(t) for t in texts]
        return embedder.get_text_embedding_batch
    if callable(embedder):
        return embedder
    raise InvalidParameterError(
        f"{role} must be an lfa-index EmbeddingSource, a LangChain Embeddings, a LlamaIndex embedding or a callable "
        f"list[str] -> (n, d) array; got {type(embedder).__name__}."
    )


class AlignedEmbedder:
    """Query-side and document-side embeddings of an :class:`AlignedIndex`, for framework adapters.

    Parameters
    ----------
    index : AlignedIndex
        A fitted index: image (document) side ``d_in``, text (query) side ``d_txt``.
    query_embedder : embedder
        Embeds query texts with the text model the index was fitted with (``d_txt``).
    document_embedder : embedder or None
        Embeds documents with the document-side model (``d_in``); ``document_modality`` picks
        ``embed_images`` or ``embed_texts`` of an lfa-index source. Needed to embed or re-score
        documents; a store already filled with raw embeddings can be queried without it.
    space : {"raw", "aligned"}, default="raw"
        What document vectors are (see the module docstring).
    mapping : {"task", "tt", "average"}, default="task"
        The index's map that aligns documents (as in ``search_unaligned``).
    """

    def __init__(
        self,
        index: AlignedIndex,
        query_embedder: Any,
        document_embedder: Any = None,
        *,
        space: Space = "raw",
        document_modality: Literal["text", "image"] = "image",
        mapping: str = "task",
    ):
        if not isinstance(index, AlignedIndex):
            raise InvalidParameterError(f"index must be a fitted AlignedIndex, got {type(index).__name__}.")
        check_choice(space, "space", ("raw", "aligned"))
        check_choice(document_modality, "document_modality", ("text", "image"))
        self.index = index
        self.space = space
        self.mapping = check_choice(mapping, "mapping", MAPPINGS)
        self._query_map = index.class_table_.query_map(self.mapping)  # also checks that the index is fitted
        self._queries = embed_function(query_embedder, "text", "query_embedder", query=True)
        self._documents = (
            None if document_embedder is None
            else embed_function(document_embedder, document_modality, "document_embedder", query=False)
        )

    @property
    def dim(self) -> int:
        """Width of the vectors given to the framework: ``d_in`` (raw) or the aligned dimension."""
        return self.index.n_features_in_ if self.space == "raw" else self._query_map.n_features_out

    def aligned_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Aligned, L2-normalised text queries ``t`` (n, d)."""
        texts = check_texts(texts, name="query texts", allow_empty=True)
        y = _matrix(self._queries(texts), "the query embedder's output", len(texts))
        expected = self.index.text_embeddings_.shape[1]
        if y.shape[1] != expected:
            raise DimensionMismatchError(
                f"the query embedder returns {y.shape[1]}-d vectors but the index was fitted on {expected}-d text "
                "embeddings; use the text model the index was fitted with."
            )
        return self.index.transform_text(y, "the query embedder's output")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors in this space: ``t Gᵀ`` (raw) or ``t`` (aligned), float32 (n, dim)."""
        t = self.aligned_queries(texts)
        return self._query_map.unalign(t) if self.space == "raw" else t

    def raw_documents(self, texts: Sequence[str]) -> np.ndarray:
        """The document-side model's embeddings (n, d_in)."""
        if self._documents is None:
            raise InvalidParameterError(
                "no document_embedder was given: pass the document-side model to embed or re-score documents."
            )
        texts = check_texts(texts, name="documents", allow_empty=True)
        if not texts:
            return np.empty((0, self.index.n_features_in_), dtype=np.float32)
        x = _matrix(self._documents(texts), "the document embedder's output", len(texts))
        if x.shape[1] != self.index.n_features_in_:
            raise DimensionMismatchError(
                f"the document embedder returns {x.shape[1]}-d vectors but the index aligns "
                f"{self.index.n_features_in_}-d embeddings; use the document-side model the index was fitted with."
            )
        return x

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Document vectors in this space: raw, or ``index.transform(x)`` (aligned), float32 (n, dim)."""
        x = self.raw_documents(texts)
        if self.space == "raw" or len(x) == 0:
            return x if self.space == "raw" else np.empty((0, self.dim), dtype=np.float32)
        return self.index.transform(x, self.mapping)

    def rerank(self, query: str, documents: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact aligned top-``k`` of candidate documents (re-embedded by the document side) for one
        query: ``(scores, positions in documents)``, each (min(k, m),), best first (ties: candidate order)."""
        if len(documents) == 0:
            return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)
        raw = self.raw_documents(documents)
        candidates = np.arange(len(documents), dtype=np.int64)[None]
        scores, positions = rerank(
            self.aligned_queries([query]), candidates, lambda rows: self.index.transform(raw[rows], self.mapping), k
        )
        return scores[0], positions[0]

    def classify(self, documents: Sequence[str], store: VectorStore | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Nearest class of each document by the folded prototypes: ``(labels, scores)``, each (n,).

        ``store`` holds ``write_prototypes(index, store)``; None builds an in-process FaissStore.
        Equals ``index.predict`` on the documents' raw embeddings.
        """
        if store is None:
            store = write_prototypes(self.index, FaissStore(dim=prototype_dim(self.index)))
        scores, labels = search_classes(self.index, store, self.raw_documents(documents), k=1)
        return labels[:, 0], scores[:, 0]


def python_value(value: Any) -> Any:
    """A numpy scalar as a plain Python value (framework metadata is JSON-like)."""
    return value.item() if isinstance(value, np.generic) else value


def _matrix(values: Any, name: str, n_texts: int) -> np.ndarray:
    """An embedder's answer for ``n_texts`` texts as float32 (n_texts, d): one finite row per text, or a typed
    error (a dropped row, ragged rows, strings or dicts would otherwise pair vectors with the wrong texts)."""
    arr = as_real_array(values, name)
    if arr.ndim != 2 or arr.shape[0] != n_texts or arr.shape[1] == 0:
        raise ShapeError(f"{name} must hold one embedding per text, ({n_texts}, d); got shape {arr.shape}.")
    arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        raise NonFiniteError(f"{name} holds NaN or infinite values (or values beyond float32).")
    return arr
