"""LangChain: aligned text -> document search in any LangChain vector store (``pip install 'lfa-index[langchain]'``).

:class:`LFAEmbeddings` is a ``langchain_core.embeddings.Embeddings``. Documents are embedded by the
document-side model (the raw embeddings an existing store already holds); queries by the text
model, mapped into the document space with the AlignedIndex's query map, so a store built for
one model answers text queries through the few-shot alignment. :func:`search_aligned_documents`
re-ranks a store's candidates exactly (as :func:`lfa_index.stores.search_unaligned`);
:func:`classify_documents` labels documents with the folded class prototypes.

Example
-------
>>> embeddings = LFAEmbeddings(index, query_embedder=minilm, document_embedder=clip)
>>> store = InMemoryVectorStore.from_texts(image_paths, embeddings)
>>> store.similarity_search("a striped texture", k=10)                       # candidates, raw ranking
>>> search_aligned_documents(store, embeddings, "a striped texture", k=10)   # exact aligned top-10

:class:`MappedEmbeddings` lets a store built with an old embedding model answer a new one through
an :class:`~lfa_index.EmbeddingAligner`: ``MappedEmbeddings(aligner, query_embedder=e5,
document_embedder=minilm)``; :func:`search_mapped_documents` re-ranks its candidates by the new
model's own cosine.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from ..core.validation import check_number
from ..extras import import_extra
from ..index import AlignedIndex, EmbeddingAligner
from ..stores import VectorStore
from ._common import AlignedEmbedder, Space, python_value
from ._mapped import MappedEmbedder

_embeddings = import_extra("langchain_core.embeddings", "langchain")
_documents = import_extra("langchain_core.documents", "langchain")

__all__ = ["LFAEmbeddings", "search_aligned_documents", "classify_documents", "MappedEmbeddings",
           "search_mapped_documents"]


class LFAEmbeddings(_embeddings.Embeddings):
    """LangChain embeddings that give a vector store aligned search through an :class:`AlignedIndex`.

    Parameters
    ----------
    index : AlignedIndex
        A fitted index (documents on its image side ``d_in``, queries on its text side).
    query_embedder : EmbeddingSource, Embeddings or callable
        Embeds query texts with the text model the index was fitted with.
    document_embedder : EmbeddingSource, Embeddings, callable or None, default=None
        Embeds documents (``page_content``: image paths, or texts) with the document-side model.
        Optional for querying a store that is already filled.
    space : {"raw", "aligned"}, default="raw"
        ``"raw"``: documents are raw embeddings and a query is ``t Gᵀ`` (no re-indexing; rank
        exactly with :func:`search_aligned_documents`). ``"aligned"``: documents are
        ``index.transform(x)`` and queries ``t``; the store's cosine ranking is then the exact
        aligned ranking.
    document_modality : {"image", "text"}, default="image"
        Which method of an lfa-index EmbeddingSource embeds documents.
    mapping : {"task", "tt", "average"}, default="task"
        The index's map that aligns documents.
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
        self.aligner = AlignedEmbedder(
            index, query_embedder, document_embedder, space=space, document_modality=document_modality, mapping=mapping
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Document vectors: raw embeddings, or aligned ones with ``space="aligned"``."""
        return self.aligner.embed_documents(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Query vector: the aligned text query mapped back (``t Gᵀ``), or ``t`` with ``space="aligned"``."""
        return self.aligner.embed_queries([text])[0].tolist()


def search_aligned_documents(
    vectorstore: Any, embeddings: LFAEmbeddings, query: str, k: int = 4, *, overfetch: int = 10, **search_kwargs: Any
) -> list[tuple[Any, float]]:
    """Exact aligned top-``k`` of a LangChain vector store: ``[(Document, aligned cosine)]``, best first.

    Fetches ``k · overfetch`` candidates with ``similarity_search_by_vector`` (``search_kwargs``,
    e.g. ``filter``, are passed on), re-embeds their ``page_content`` with the document side and
    re-ranks them by aligned cosine. On a store of unit-norm raw embeddings this equals
    ``search_unaligned(index, raw_store, y, k, overfetch=overfetch)``.
    """
    k = check_number(k, "k", low=1, integer=True)
    overfetch = check_number(overfetch, "overfetch", low=1, integer=True)
    query_vector = embeddings.embed_query(query)
    candidates = vectorstore.similarity_search_by_vector(query_vector, k=k * overfetch, **search_kwargs)
    scores, best = embeddings.aligner.rerank(query, [doc.page_content for doc in candidates], k)
    return [(candidates[i], float(score)) for i, score in zip(best, scores)]


def classify_documents(
    documents: Sequence[Any],
    embeddings: LFAEmbeddings,
    *,
    store: VectorStore | None = None,
    label_key: str = "lfa_label",
    score_key: str = "lfa_score",
) -> list[Any]:
    """Documents (or texts) labelled by the folded class prototypes: new ``Document`` objects whose
    metadata gains ``label_key`` (the class) and ``score_key`` (its aligned score).

    ``store`` is a vector store holding ``write_prototypes(index, store)`` (Milvus, Qdrant, ...);
    None classifies in process. The labels equal ``index.predict`` on the raw embeddings.
    """
    Document = _documents.Document
    docs = [d if isinstance(d, Document) else Document(page_content=d) for d in documents]
    labels, scores = embeddings.aligner.classify([d.page_content for d in docs], store)
    out = []
    for doc, label, score in zip(docs, labels, scores):
        metadata = {**doc.metadata, label_key: python_value(label), score_key: float(score)}
        out.append(Document(page_content=doc.page_content, metadata=metadata, id=doc.id))
    return out


class MappedEmbeddings(_embeddings.Embeddings):
    """LangChain embeddings that query a store built with an old model using a new one (no re-embedding).

    Parameters
    ----------
    aligner : EmbeddingAligner
        Fitted on rows of the new model (``X_new``) and the old one (``X_old``).
    query_embedder : EmbeddingSource, Embeddings or callable
        The new model, for queries; each is mapped into the old space by ``aligner.transform``.
    document_embedder : EmbeddingSource, Embeddings, callable or None, default=None
        The old model, for documents added to the store (None refuses to embed documents).
    rerank_embedder : EmbeddingSource, Embeddings, callable or None, default=None
        The new model embedding documents, for :func:`search_mapped_documents` (default
        ``query_embedder``; e5 wants its passage role, ``make_encoder("e5-small:passage")``).
    """

    def __init__(self, aligner: EmbeddingAligner, query_embedder: Any, document_embedder: Any = None,
                 rerank_embedder: Any = None):
        self.mapper = MappedEmbedder(aligner, query_embedder, document_embedder, rerank_embedder)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Documents embedded by the old model, as the store's rows were."""
        return self.mapper.embed_documents(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The new model's query embedding mapped into the old space."""
        return self.mapper.embed_queries([text])[0].tolist()


def search_mapped_documents(
    vectorstore: Any, embeddings: MappedEmbeddings, query: str, k: int = 4, *, overfetch: int = 10,
    **search_kwargs: Any,
) -> list[tuple[Any, float]]:
    """The new model's exact top-``k`` among a store's candidates: ``[(Document, new-model cosine)]``.

    Fetches ``k · overfetch`` candidates with the mapped query (``similarity_search_by_vector``;
    ``search_kwargs``, e.g. ``filter``, are passed on), embeds their ``page_content`` with the new
    model (``rerank_embedder``) and re-ranks them by its cosine with the query.
    """
    k = check_number(k, "k", low=1, integer=True)
    overfetch = check_number(overfetch, "overfetch", low=1, integer=True)
    candidates = vectorstore.similarity_search_by_vector(embeddings.embed_query(query), k=k * overfetch,
                                                         **search_kwargs)
    scores, best = embeddings.mapper.rerank(query, [doc.page_content for doc in candidates], k)
    return [(candidates[i], float(score)) for i, score in zip(best, scores)]
