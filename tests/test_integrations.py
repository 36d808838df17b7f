"""LangChain and LlamaIndex: text -> image retrieval through the frameworks' own in-memory stores
returns stores.search_unaligned's top-k; documents classify as index.predict. Offline."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)

from lfa_index import LFA, AlignedIndex, DimensionMismatchError, InvalidInputError, InvalidParameterError, LFAIndexError
from lfa_index.stores import FaissStore, prototype_dim, search_unaligned, write_prototypes

OPTIONS = dict(beta=0.5, steps=20, device="cpu", random_state=0)
NAMES = [f"class_{i}" for i in range(10)]
K = 5

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


class Lookup:
    """A stand-in embedding model: names ("img_17", "query_3") -> fixed rows."""

    def __init__(self, rows: np.ndarray, prefix: str):
        self.rows, self.prefix = rows, prefix

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.rows[[int(t.removeprefix(self.prefix)) for t in texts]]


@pytest.fixture(scope="module")
def task():
    """Unit-norm raw images (as an EmbeddingSource returns them), text prototypes, text queries."""
    rng = np.random.default_rng(0)
    d_img, d_txt = 32, 24
    text = rng.standard_normal((len(NAMES), d_txt)).astype(np.float32)
    mix = rng.standard_normal((d_txt, d_img)).astype(np.float32)
    offset = 2.0 * rng.standard_normal(d_img)

    def images(labels):
        x = text[labels] @ mix + offset + 0.8 * rng.standard_normal((len(labels), d_img))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    labels = np.repeat(np.arange(len(NAMES)), 4)
    support = images(labels)
    corpus = images(rng.integers(0, len(NAMES), 400))
    queries = rng.standard_normal((8, d_txt)).astype(np.float32) + text[:8]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(NAMES)[labels], text, class_names=NAMES)
    raw = FaissStore(dim=d_img).add(corpus, ids=np.arange(len(corpus)))
    return index, corpus, queries, raw


@pytest.fixture(scope="module")
def embedders(task):
    _, corpus, queries, _ = task
    docs = [f"img_{i}" for i in range(len(corpus))]
    return Lookup(queries, "query_"), Lookup(corpus, "img_"), docs


def expected_ids(task, overfetch):
    index, corpus, queries, raw = task
    return search_unaligned(index, raw, queries, k=K, overfetch=overfetch)


# ------------------------------------------------------------------------------ LangChain
@pytest.fixture(scope="module")
def langchain():
    pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
    from langchain_core.vectorstores import InMemoryVectorStore

    from lfa_index.integrations import langchain as module

    return module, InMemoryVectorStore


def _doc_ids(docs):
    return [int(d.page_content.removeprefix("img_")) for d in docs]


def test_langchain_store_returns_search_unaligned_top_k(task, embedders, langchain):
    module, InMemoryVectorStore = langchain
    index = task[0]
    query_side, document_side, docs = embedders
    embeddings = module.LFAEmbeddings(index, query_side, document_side)
    store = InMemoryVectorStore(embeddings)
    store.add_texts(docs)
    one_scores, one = expected_ids(task, overfetch=1)
    exact_scores, exact = expected_ids(task, overfetch=len(docs))
    for q in range(len(one)):
        query = f"query_{q}"
        # the store's own ranking of raw documents: the candidate step, same set as overfetch=1
        assert set(_doc_ids(store.similarity_search(query, k=K))) == set(one[q])
        # re-ranked exactly: search_unaligned's answer at the same over-fetch, in order
        for overfetch, (scores, ids) in ((1, (one_scores, one)), (len(docs), (exact_scores, exact))):
            found = module.search_aligned_documents(store, embeddings, query, k=K, overfetch=overfetch)
            assert _doc_ids([d for d, _ in found]) == ids[q].tolist()
            np.testing.assert_allclose([s for _, s in found], scores[q], atol=1e-5)


def test_langchain_aligned_space_is_exact_under_the_stores_cosine(task, embedders, langchain):
    module, InMemoryVectorStore = langchain
    query_side, document_side, docs = embedders
    store = InMemoryVectorStore(module.LFAEmbeddings(task[0], query_side, document_side, space="aligned"))
    store.add_texts(docs)
    _, exact = expected_ids(task, overfetch=len(docs))
    for q in range(len(exact)):
        assert _doc_ids(store.similarity_search(f"query_{q}", k=K)) == exact[q].tolist()


def test_langchain_documents_classify_as_index_predict(task, embedders, langchain):
    module, _ = langchain
    index, corpus = task[0], task[1]
    query_side, document_side, docs = embedders
    embeddings = module.LFAEmbeddings(index, query_side, document_side)
    labelled = module.classify_documents(docs[:50], embeddings)
    assert [d.metadata["lfa_label"] for d in labelled] == index.predict(corpus[:50]).tolist()
    np.testing.assert_allclose([d.metadata["lfa_score"] for d in labelled], index.search(corpus[:50], 1)[0][:, 0],
                               atol=1e-5)
    # through a store of folded prototypes: the same labels
    store = write_prototypes(index, FaissStore(dim=prototype_dim(index)))
    assert [d.metadata["lfa_label"] for d in module.classify_documents(docs[:50], embeddings, store=store)] == [
        d.metadata["lfa_label"] for d in labelled
    ]


def test_langchain_embeddings_check_their_inputs(task, embedders, langchain):
    module, _ = langchain
    index = task[0]
    query_side, document_side, docs = embedders
    wrong = Lookup(np.ones((400, 7), dtype=np.float32), "img_")
    with pytest.raises(DimensionMismatchError, match="document embedder returns 7-d"):
        module.LFAEmbeddings(index, query_side, wrong).embed_documents(docs[:2])
    with pytest.raises(DimensionMismatchError, match="query embedder returns 32-d"):
        module.LFAEmbeddings(index, document_side, document_side).embed_query("img_0")
    with pytest.raises(InvalidParameterError, match="document_embedder"):
        module.LFAEmbeddings(index, query_side).embed_documents(docs[:2])
    with pytest.raises(InvalidParameterError, match="space"):
        module.LFAEmbeddings(index, query_side, space="both")
    with pytest.raises(InvalidParameterError, match="query_embedder"):
        module.LFAEmbeddings(index, 42)


# ------------------------------------------------------------------------------ LlamaIndex
@pytest.fixture(scope="module")
def llamaindex():
    pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode

    from lfa_index.integrations import llamaindex as module

    Settings.llm = MockLLM()  # nothing may reach a hosted model
    return module, VectorStoreIndex, TextNode


def _node_ids(found):
    return [int(n.node.get_content().removeprefix("img_")) for n in found]


@pytest.mark.parametrize("space", ["raw", "aligned"])
def test_llamaindex_retrieval_returns_search_unaligned_top_k(space, task, embedders, llamaindex):
    module, VectorStoreIndex, TextNode = llamaindex
    query_side, document_side, docs = embedders
    embed_model = module.LFAEmbedding(task[0], query_side, document_side, space=space)
    vector_index = VectorStoreIndex([TextNode(text=d, id_=d) for d in docs], embed_model=embed_model)
    retriever = vector_index.as_retriever(similarity_top_k=K)
    one_scores, one = expected_ids(task, overfetch=1)
    exact_scores, exact = expected_ids(task, overfetch=len(docs))
    for q in range(len(one)):
        query = f"query_{q}"
        plain = _node_ids(retriever.retrieve(query))
        if space == "raw":
            assert set(plain) == set(one[q])
        else:
            assert plain == exact[q].tolist()
        found = module.retrieve_aligned(vector_index, embed_model, query, k=K, overfetch=len(docs))
        assert _node_ids(found) == exact[q].tolist()
        np.testing.assert_allclose([n.score for n in found], exact_scores[q], atol=1e-5)
    if space == "raw":
        found = module.retrieve_aligned(vector_index, embed_model, "query_0", k=K, overfetch=1)
        assert _node_ids(found) == one[0].tolist()


def test_llamaindex_nodes_classify_as_index_predict(task, embedders, llamaindex):
    module, _, TextNode = llamaindex
    index, corpus = task[0], task[1]
    query_side, document_side, docs = embedders
    embed_model = module.LFAEmbedding(index, query_side, document_side)
    meta = dict(metadata={"source": "synthetic"}, excluded_embed_metadata_keys=["source"])
    nodes = [TextNode(text=d, **meta) for d in docs[:50]]
    labelled = module.classify_nodes(nodes, embed_model)
    assert [n.metadata["lfa_label"] for n in labelled] == index.predict(corpus[:50]).tolist()
    assert all(n.metadata["source"] == "synthetic" for n in labelled) and "lfa_label" not in nodes[0].metadata
    assert labelled[0].get_content(metadata_mode="embed") == docs[0]  # labels never leak into embedded text


# ------------------------------------------------------------------------------ what an embedder may answer
class Answers:
    """An embedder whose answer for ``n`` texts is ``kind``: one row each ("ok") or something else."""

    def __init__(self, kind: str, dim: int):
        self.kind, self.dim = kind, dim

    def __call__(self, texts):
        n, d = len(texts), self.dim
        return {
            "ok": np.ones((n, d)), "dropped": np.ones((n - 1, d)), "extra": np.ones((n + 1, d)),
            "ragged": [[1.0] * d] * (n - 1) + [[1.0] * (d - 1)] + [[1.0] * d], "strings": [["x"] * d] * n,
            "dicts": [{"v": 1.0}] * n, "nan": np.full((n, d), np.nan), "flat": np.ones(d), "none": None,
        }[self.kind]


def _embeddings(index, query_side, document_side):
    """``(embed_documents, embed_query)`` of each framework installed, over the same two embedders."""
    out = []
    if importlib.util.find_spec("langchain_core") is not None:
        from lfa_index.integrations.langchain import LFAEmbeddings

        emb = LFAEmbeddings(index, query_side, document_side)
        out.append((emb.embed_documents, emb.embed_query))
    if importlib.util.find_spec("llama_index") is not None:
        from lfa_index.integrations.llamaindex import LFAEmbedding

        emb = LFAEmbedding(index, query_side, document_side)
        out.append((emb.get_text_embedding_batch, emb.get_query_embedding))
    if not out:
        pytest.skip("needs the [langchain] or [llamaindex] extra")
    return out


@pytest.mark.parametrize("kind", ["dropped", "extra", "ragged", "strings", "dicts", "nan", "flat", "none"])
def test_every_embedder_answer_must_be_one_finite_row_per_text(task, kind):
    index = task[0]
    d_img, d_txt = index.n_features_in_, index.text_embeddings_.shape[1]
    for embed_documents, _ in _embeddings(index, Answers("ok", d_txt), Answers(kind, d_img)):
        with pytest.raises(LFAIndexError, match="document embedder"):
            embed_documents(["a", "b", "c"])
    for _, embed_query in _embeddings(index, Answers(kind, d_txt), Answers("ok", d_img)):
        with pytest.raises(LFAIndexError, match="query embedder"):
            embed_query("a")


def test_documents_that_are_not_a_list_of_texts_are_refused(task):
    index = task[0]
    sides = Answers("ok", index.text_embeddings_.shape[1]), Answers("ok", index.n_features_in_)
    for embed_documents, _ in _embeddings(index, *sides):
        for documents in (None, "one text", [1, 2], [None]):
            with pytest.raises(InvalidInputError, match="documents must be a list of strings"):
                embed_documents(documents)
