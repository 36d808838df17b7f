"""AlignedIndex serves every LFA option exactly: class biases and centring as one extra coordinate,
the same answers after save/load, store-native exports, and format-1 indexes still load."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.stores import FaissStore, search_unaligned

OPTIONS = dict(steps=10, device="cpu", random_state=0)
# every option on, fixed: biases (discriminant mix), centring, trained prototypes, averaged maps
ALL_ON = dict(OPTIONS, prototype_mix=0.5, center=True, refine_prototypes=True, mapping="average")


pytestmark = pytest.mark.usefixtures("single_threaded")


def make_task(d_img=40, d_txt=24, n_classes=10, shots=4, seed=0):
    rng = np.random.default_rng(seed)
    text = rng.standard_normal((n_classes + 2, d_txt)).astype(np.float32)
    mix = rng.standard_normal((d_txt, d_img)).astype(np.float32)
    offset = 3.0 * rng.standard_normal(d_img).astype(np.float32)  # a shared offset, as CLIP's
    labels = np.repeat(np.arange(n_classes), shots)
    support = text[labels] @ mix + offset + rng.standard_normal((len(labels), d_img))
    query_labels = rng.integers(0, n_classes, 200)
    queries = text[query_labels] @ mix + offset + rng.standard_normal((200, d_img))
    corpus = rng.standard_normal((300, d_img)) + offset
    return (support.astype(np.float32), labels, text, queries.astype(np.float32), query_labels,
            corpus.astype(np.float32))


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def index(task):
    support, labels, text, _, _, _ = task
    ix = AlignedIndex(lfa=LFA(**ALL_ON)).fit(support, labels, text[:10])
    return ix.add_classes(text[10:])


@pytest.fixture(scope="module")
def aligned_corpus(task, index):
    return AlignedCorpus(index).add(task[5])


def test_an_index_with_biases_and_centring_answers_like_its_estimator(task, index):
    support, labels, text, queries, _, _ = task
    lfa = index.lfa_
    assert lfa.center_ and lfa.intercept_.any() and lfa.mapping_ == "average" and lfa.refine_prototypes_
    assert index.augmented_
    base = LFA(**ALL_ON).fit(support, labels, text[:10])
    np.testing.assert_allclose(index.decision_function(queries)[:, :10], base.decision_function(queries), atol=1e-5)
    expected = np.concatenate(
        [lfa.decision_function(queries), lfa.decision_function(queries, mapping="tt", text_emb=text[10:])], axis=1
    )
    np.testing.assert_allclose(index.decision_function(queries), expected, atol=1e-5)
    top = np.argsort(-expected, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(index.search(queries, 5)[1], top)
    np.testing.assert_array_equal(index.predict(queries), top[:, 0])


def test_exported_vectors_classify_in_a_plain_inner_product_store(task):
    support, labels, text, queries, _, _ = task
    ix = AlignedIndex(lfa=LFA(**ALL_ON)).fit(support, labels, text[:10])
    exported = ix.aligned_prototypes()
    assert exported.shape == (10, 41)  # d_in + the bias coordinate
    store = faiss.IndexFlatIP(41)
    store.add(exported)
    prepared = ix.prepare_queries(queries)
    np.testing.assert_array_equal(prepared[:, :-1], queries.astype(np.float32))  # [x, ||x||]
    np.testing.assert_allclose(prepared[:, -1], np.linalg.norm(queries, axis=1), rtol=1e-6)
    raw, ids = store.search(prepared, 3)
    np.testing.assert_array_equal(ids[:, 0], ix.predict(queries))
    scores = raw / ix.query_norms(queries)[:, None]
    np.testing.assert_allclose(scores, ix.search(queries, 3)[0], atol=1e-5)
    # the ranking is exact under the store's own normalisation of the augmented query too
    unit = prepared / np.linalg.norm(prepared, axis=1, keepdims=True)
    np.testing.assert_array_equal(store.search(unit, 3)[1], ids)


def test_centred_corpus_search_uses_the_affine_query_map(task, index, aligned_corpus):
    _, _, text, queries, _, corpus = task
    g, o = index.query_transform(), index.query_offset()
    assert o.any()
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    aligned = unit @ g + o
    aligned /= np.linalg.norm(aligned, axis=1, keepdims=True)
    np.testing.assert_allclose(aligned, index.lfa_.transform(corpus), atol=1e-5)
    t = index.lfa_.transform_text(text[:3])
    expected = np.argsort(-(t @ aligned.T), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(aligned_corpus.search_text(text[:3], 5)[1], expected)
    assert (aligned_corpus.search(corpus[:10], 1)[1][:, 0] == np.arange(10)).all()
    raw = FaissStore(dim=corpus.shape[1]).add(corpus, ids=np.arange(len(corpus)))
    found = search_unaligned(index, raw, text[:3], k=5, overfetch=60)[1]
    np.testing.assert_array_equal(found, expected)


def test_save_and_load_keep_biases_centring_and_the_options(index, task, tmp_path):
    _, _, text, queries, _, _ = task
    index.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    np.testing.assert_array_equal(loaded.decision_function(queries), index.decision_function(queries))
    np.testing.assert_array_equal(loaded.aligned_prototypes(), index.aligned_prototypes())
    np.testing.assert_array_equal(loaded.transform_text(text), index.transform_text(text))
    for name in ("center_", "prototype_mix_", "refine_prototypes_", "mapping_"):
        assert getattr(loaded.lfa_, name) == getattr(index.lfa_, name), name
    np.testing.assert_array_equal(loaded.lfa_.intercept_, index.lfa_.intercept_)
    np.testing.assert_array_equal(loaded.lfa_.feature_mean_, index.lfa_.feature_mean_)
    # a warm refit of the loaded index keeps the options it chose
    support, labels = task[0], task[1]
    loaded.partial_fit(support[:8], labels[:8])
    assert loaded.lfa_.center_ and loaded.lfa_.mapping_ == "average" and loaded.lfa_.prototype_mix_ == 0.5
    np.testing.assert_allclose(loaded.lfa_.feature_mean_, index.lfa_.feature_mean_)


def test_every_consumer_serves_the_estimators_own_query_map(index, aligned_corpus, task, tmp_path):
    _, _, _, queries, _, corpus = task
    for mapping in ("task", "tt", "average"):
        own = index.lfa_.query_map(mapping)
        np.testing.assert_array_equal(index.query_transform(mapping), own.matrix)
        np.testing.assert_array_equal(index.query_offset(mapping), own.offset)  # centred: o = −μ W
        np.testing.assert_array_equal(index.transform(queries, mapping), own.align(queries))
    np.testing.assert_array_equal(aligned_corpus.query_map.matrix, index.lfa_.query_map("task").matrix)  # a corpus too
    loaded = AlignedCorpus.load(aligned_corpus.save(tmp_path / "corpus"))
    # the corpus keeps the map its vectors were aligned with, across save and load
    np.testing.assert_array_equal(loaded.search(corpus[:20], 3)[1], aligned_corpus.search(corpus[:20], 3)[1])
    assert loaded.query_map.offset is not None
    np.testing.assert_array_equal(loaded.query_map.matrix, aligned_corpus.query_map.matrix)
