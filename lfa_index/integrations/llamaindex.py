"""LlamaIndex: aligned text -> document retrieval in any LlamaIndex vector store (extra ``[llamaindex]``).

:class:`LFAEmbedding` is a ``llama_index.core`` ``BaseEmbedding``: nodes are embedded by the
document-side model (raw embeddings), queries by the text model mapped into the document space
with the AlignedIndex's query map. :func:`retrieve_aligned` re-ranks a retriever's candidates
exactly; :func:`classify_nodes` labels nodes with the folded class prototypes.

Example
-------
>>> embed_model = LFAEmbedding(index, query_embedder=minilm, document_embedder=clip)
>>> vector_index = VectorStoreIndex([TextNode(text=path) for path in image_paths], embed_model=embed_model)
>>> retrieve_aligned(vector_index, embed_model, "a striped texture", k=10)   # exact aligned top-10

:class:`MappedEmbedding` lets an index built with an old embedding model answer a new one through an
:class:`~lfa_index.EmbeddingAligner`; :func:`retrieve_mapped` re-ranks by the new model's cosine.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from ..core.validation import check_number, check_texts
from ..errors import InvalidParameterError
from ..extras import import_extra
from ..index import AlignedIndex, EmbeddingAligner
from ..stores import VectorStore
from ._common import AlignedEmbedder, Space, python_value
from ._mapped import MappedEmbedder

_embeddings = import_extra("llama_index.core.base.embeddings.base", "llamaindex")
_schema = import_extra("llama_index.core.schema", "llamaindex")
_bridge = import_extra("llama_index.core.bridge.pydantic", "llamaindex")

__all__ = ["LFAEmbedding", "retrieve_aligned", "classify_nodes", "MappedEmbedding", "retrieve_mapped"]


class LFAEmbedding(_embeddings.BaseEmbedding):
    """LlamaIndex embedding that gives a vector store aligned retrieval through an :class:`AlignedIndex`.

    Parameters are those of :class:`lfa_index.integrations.langchain.LFAEmbeddings`: ``index``,
    ``query_embedder``, ``document_embedder`` (optional for querying a filled store), ``space``
    ("raw": raw documents, queries ``t Gᵀ``; "aligned": ``index.transform(x)`` and ``t``, exact
    under cosine), ``document_modality`` and ``mapping``; other keyword arguments go to
    ``BaseEmbedding`` (e.g. ``embed_batch_size``). A node is embedded from
    ``node.get_content(metadata_mode=EMBED)``: exclude metadata keys that are not the document.
    """

    model_name: str = "lfa-index"
    _aligner: AlignedEmbedder = _bridge.PrivateAttr()

    def __init__(
        self,
        index: AlignedIndex,
        query_embedder: Any,
        document_embedder: Any = None,
        *,
        space: Space = "raw",
        document_modality: Literal["text", "image"] = "image",
        mapping: str = "task",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self._aligner = AlignedEmbedder(
            index, query_embedder, document_embedder, space=space, document_modality=document_modality, mapping=mapping
        )

    @classmethod
    def class_name(cls) -> str:
        return "LFAEmbedding"

    @property
    def aligner(self) -> AlignedEmbedder:
        """The numpy engine: spaces, exact aligned scores, classification."""
        return self._aligner

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._aligner.embed_queries([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._aligner.embed_documents([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._aligner.embed_documents(texts).tolist()

    def get_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        """Document vectors of a list of texts (checked first: LlamaIndex would embed a str character by character)."""
        texts = check_texts(texts, name="documents", allow_empty=True)
        return super().get_text_embedding_batch(texts, show_progress=show_progress, **kwargs)


def retrieve_aligned(
    vector_index: Any,
    embed_model: LFAEmbedding,
    query: str,
    k: int = 4,
    *,
    overfetch: int = 10,
    **retriever_kwargs: Any,
) -> list[Any]:
    """Exact aligned top-``k`` of a ``VectorStoreIndex`` built with ``embed_model``: ``NodeWithScore``
    objects, best first, scored by aligned cosine.

    Retrieves ``k · overfetch`` candidates (``retriever_kwargs``, e.g. ``filters``, go to
    ``as_retriever``), re-embeds their content with the document side and re-ranks them. Over
    unit-norm raw embeddings this equals ``search_unaligned(index, raw_store, y, k, overfetch=overfetch)``.
    """
    k = check_number(k, "k", low=1, integer=True)
    overfetch = check_number(overfetch, "overfetch", low=1, integer=True)
    if not isinstance(embed_model, LFAEmbedding):
        raise InvalidParameterError(f"embed_model must be an LFAEmbedding, got {type(embed_model).__name__}.")
    retriever = vector_index.as_retriever(similarity_top_k=k * overfetch, embed_model=embed_model, **retriever_kwargs)
    candidates = retriever.retrieve(query)
    contents = [c.node.get_content(metadata_mode=_schema.MetadataMode.EMBED) for c in candidates]
    scores, best = embed_model.aligner.rerank(query, contents, k)
    return [_schema.NodeWithScore(node=candidates[i].node, score=float(score)) for i, score in zip(best, scores)]


def classify_nodes(
    nodes: Sequence[Any],
    embed_model: LFAEmbedding,
    *,
    store: VectorStore | None = None,
    label_key: str = "lfa_label",
    score_key: str = "lfa_score",
) -> list[Any]:
    """Copies of ``nodes`` (or ``TextNode`` from texts) labelled by the folded class prototypes:
    metadata gains ``label_key`` and ``score_key``, excluded from embedding and LLM text.

    ``store`` holds ``write_prototypes(index, store)``; None classifies in process. The labels
    equal ``index.predict`` on the nodes' raw embeddings.
    """
    embed_mode = _schema.MetadataMode.EMBED
    nodes = [n if isinstance(n, _schema.BaseNode) else _schema.TextNode(text=n) for n in nodes]
    labels, scores = embed_model.aligner.classify([n.get_content(metadata_mode=embed_mode) for n in nodes], store)
    out = []
    for node, label, score in zip(nodes, labels, scores):
        copy = node.model_copy(deep=True)
        copy.metadata = {**copy.metadata, label_key: python_value(label), score_key: float(score)}
        copy.excluded_embed_metadata_keys = [*copy.excluded_embed_metadata_keys, label_key, score_key]
        copy.excluded_llm_metadata_keys = [*copy.excluded_llm_metadata_keys, label_key, score_key]
        out.append(copy)
    return out


class MappedEmbedding(_embeddings.BaseEmbedding):
    """LlamaIndex embedding that queries an index built with an old model using a new one (no re-embedding).

    Parameters are those of :class:`lfa_index.integrations.langchain.MappedEmbeddings`: ``aligner``,
    ``query_embedder`` (the new model), ``document_embedder`` (the old model, for nodes added
    later) and ``rerank_embedder`` (the new model on documents, for :func:`retrieve_mapped`); other
    keyword arguments go to ``BaseEmbedding``.
    """

    model_name: str = "lfa-index-mapped"
    _mapper: MappedEmbedder = _bridge.PrivateAttr()

    def __init__(self, aligner: EmbeddingAligner, query_embedder: Any, document_embedder: Any = None,
                 rerank_embedder: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._mapper = MappedEmbedder(aligner, query_embedder, document_embedder, rerank_embedder)

    @classmethod
    def class_name(cls) -> str:
        return "MappedEmbedding"

    @property
    def mapper(self) -> MappedEmbedder:
        """The numpy engine: mapped queries, old-model documents, the new model's re-rank."""
        return self._mapper

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._mapper.embed_queries([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._mapper.embed_documents([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._mapper.embed_documents(texts).tolist()


def retrieve_mapped(vector_index: Any, embed_model: MappedEmbedding, query: str, k: int = 4, *, overfetch: int = 10,
                    **retriever_kwargs: Any) -> list[Any]:
    """The new model's exact top-``k`` among an index's candidates: ``NodeWithScore``, best first.

    Retrieves ``k · overfetch`` candidates with the mapped query (``retriever_kwargs`` go to
    ``as_retriever``), embeds their content with the new model and re-ranks them by its cosine.
    """
    k = check_number(k, "k", low=1, integer=True)
    overfetch = check_number(overfetch, "overfetch", low=1, integer=True)
    if not isinstance(embed_model, MappedEmbedding):
        raise InvalidParameterError(f"embed_model must be a MappedEmbedding, got {type(embed_model).__name__}.")
    retriever = vector_index.as_retriever(similarity_top_k=k * overfetch, embed_model=embed_model, **retriever_kwargs)
    candidates = retriever.retrieve(query)
    contents = [c.node.get_content(metadata_mode=_schema.MetadataMode.EMBED) for c in candidates]
    scores, best = embed_model.mapper.rerank(query, contents, k)
    return [_schema.NodeWithScore(node=candidates[i].node, score=float(score)) for i, score in zip(best, scores)]
