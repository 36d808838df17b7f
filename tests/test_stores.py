"""Vector stores: folded prototypes and aligned corpora in FAISS and Milvus Lite give the index's answers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import faiss
import numpy as np
import pytest
from store_tasks import NAMES, check_support_from_store, fit_named, make_task, own_corpus_search, random_corpus

from lfa_index import LFA, AlignedIndex, DimensionMismatchError, InvalidInputError, InvalidParameterError
from lfa_index.stores import (
    FaissStore,
    MissingExtraError,
    SchemaError,
    StoreUnavailableError,
    VectorStore,
    add_aligned,
    classify,
    prototype_dim,
    search_aligned,
    search_classes,
    search_unaligned,
    support_from_store,
    write_prototypes,
)

pymilvus = pytest.importorskip("pymilvus", reason="needs the [milvus] extra")
from lfa_index.stores import MilvusStore  # noqa: E402

OPTIONS = dict(beta=0.5, steps=5, prototype_mix=0.0, device="cpu", random_state=0)  # the plain, unbiased layout


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def index(task):
    return fit_named(task, OPTIONS)


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory):
    """One Milvus Lite database for the module (each file starts an embedded server)."""
    return str(tmp_path_factory.mktemp("milvus") / "stores.db")


@pytest.fixture(scope="module")
def corpus():
    return random_corpus()


# ------------------------------------------------------------------------------ classification
def test_both_stores_implement_the_protocol(milvus_uri):
    with MilvusStore(milvus_uri, "protocol_check", dim=8) as milvus:
        assert isinstance(milvus, VectorStore)
    assert isinstance(FaissStore(dim=8), VectorStore)


def test_faiss_store_classification_equals_index_predict_and_search(index, task):
    queries = task[3]
    store = write_prototypes(index, FaissStore(dim=index.n_features_in_))
    np.testing.assert_array_equal(classify(index, store, queries), index.predict(queries))
    scores, labels = search_classes(index, store, queries, k=3)
    expected_scores, expected_labels = index.search(queries, k=3)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_milvus_prototypes_round_trip_predicts_as_the_faiss_backend(index, task, milvus_uri):
    queries = task[3]
    faiss_store = write_prototypes(index, FaissStore(dim=index.n_features_in_))
    with MilvusStore(milvus_uri, "prototypes", dim=index.n_features_in_) as milvus:
        write_prototypes(index, milvus)
        assert milvus.count() == len(NAMES)
        np.testing.assert_array_equal(classify(index, milvus, queries), classify(index, faiss_store, queries))
        scores, labels = search_classes(index, milvus, queries, k=5)
    # reopened by URI alone: the collection, its dimension and its rows persist
    with MilvusStore(milvus_uri, "prototypes") as reopened:
        assert reopened.dim == index.n_features_in_
        np.testing.assert_array_equal(classify(index, reopened, queries), index.predict(queries))
    expected_scores, expected_labels = search_classes(index, faiss_store, queries, k=5)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_classes_added_from_text_are_scored_with_their_own_map_in_milvus(task, milvus_uri):
    support, labels, text, queries = task
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[labels < 9], labels[labels < 9], text[:9])
    with MilvusStore(milvus_uri, "mixed_maps", dim=index.n_features_in_) as milvus:
        write_prototypes(index, milvus)
        index.add_classes(text[9:])
        write_prototypes(index, milvus)  # replaces the 9 rows by 12
        assert milvus.count() == 12
        np.testing.assert_array_equal(classify(index, milvus, queries), index.predict(queries))
        scores, found = search_classes(index, milvus, queries, k=4)
    expected_scores, expected = index.search(queries, k=4)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_biased_centred_classifier_is_exact_in_faiss_and_milvus_stores(task, corpus, milvus_uri, tmp_path):
    """With class biases and centred rows the folded prototypes gain a coordinate; stores stay exact."""
    support, labels, text, queries = task
    options = dict(OPTIONS, prototype_mix=0.5, center=True, refine_prototypes=True, mapping="average")
    index = AlignedIndex(lfa=LFA(**options)).fit(support[labels < 9], labels[labels < 9], text[:9])
    assert index.augmented_ and prototype_dim(index) == index.n_features_in_ + 1
    for store in (FaissStore(dim=prototype_dim(index)), MilvusStore(milvus_uri, "biased", dim=prototype_dim(index))):
        write_prototypes(index, store)
        np.testing.assert_array_equal(classify(index, store, queries), index.predict(queries))
        index_with_new = AlignedIndex.load(index.save(tmp_path / f"copy_{store.location[:5]}"))
        index_with_new.add_classes(text[9:])
        write_prototypes(index_with_new, store)
        np.testing.assert_array_equal(classify(index_with_new, store, queries), index_with_new.predict(queries))
        scores, found = search_classes(index_with_new, store, queries, k=4)
        expected_scores, expected = index_with_new.search(queries, k=4)
        np.testing.assert_array_equal(found, expected)
        np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    with pytest.raises(DimensionMismatchError):
        write_prototypes(index, FaissStore(dim=index.n_features_in_))
    # corpora: the aligned store holds index.transform(x), searched as the index's own corpus
    images, text_queries = corpus
    ids = np.arange(len(images))
    _, own = own_corpus_search(index, images, ids, text_queries, k=10, path=tmp_path / "own")
    aligned = add_aligned(index, FaissStore(dim=index.prototypes_.shape[1]), images, ids)
    np.testing.assert_array_equal(search_aligned(index, aligned, text_queries, k=10)[1], own)
    raw = FaissStore(dim=images.shape[1]).add(images, ids=ids)
    np.testing.assert_array_equal(search_unaligned(index, raw, text_queries, k=10, overfetch=len(images))[1], own)


def test_stale_prototypes_are_refused(index, task):
    store = FaissStore(dim=index.n_features_in_)
    write_prototypes(index, store)
    store.add(np.ones((1, index.n_features_in_)), ids=[99], fields={"label": ["extra"], "mapping": ["task"]})
    with pytest.raises(InvalidInputError, match="write_prototypes"):
        classify(index, store, task[3])


# ------------------------------------------------------------------------------ corpora
def test_reindexed_corpus_in_milvus_returns_the_faiss_top_k(index, corpus, milvus_uri, tmp_path):
    images, text_queries = corpus
    ids = np.arange(len(images)) * 3 + 5  # arbitrary, non-consecutive ids
    d = index.prototypes_.shape[1]
    faiss_store = add_aligned(index, FaissStore(dim=d), images, ids)
    with MilvusStore(milvus_uri, "corpus_aligned", dim=d) as milvus:
        add_aligned(index, milvus, images, ids)
        scores, found = search_aligned(index, milvus, text_queries, k=10)
    expected_scores, expected = search_aligned(index, faiss_store, text_queries, k=10)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    # and both equal the index's own aligned corpus
    _, own = own_corpus_search(index, images, ids, text_queries, k=10, path=tmp_path / "own")
    np.testing.assert_array_equal(found, own)


def test_query_side_milvus_search_reports_recall_at_10_and_is_exact_with_full_overfetch(
    index, corpus, milvus_uri, tmp_path
):
    images, text_queries = corpus
    ids = np.arange(len(images))
    _, exact = own_corpus_search(index, images, ids, text_queries, k=10, path=tmp_path / "own")
    with MilvusStore(milvus_uri, "corpus_raw", dim=index.n_features_in_) as raw:
        raw.add(images, ids=ids)
        recall = {}
        for overfetch in (1, 5, 20):
            _, found = search_unaligned(index, raw, text_queries, k=10, overfetch=overfetch)
            recall[overfetch] = _recall(found, exact)
        _, full = search_unaligned(index, raw, text_queries, k=10, overfetch=len(images))
    print(f"\nquery-side Milvus path, recall@10 vs exact aligned search: {recall}")
    np.testing.assert_array_equal(full, exact)  # re-ranking every image is the exact search
    assert recall[1] <= recall[5] <= recall[20] <= 1.0
    assert recall[20] >= 0.9, recall


def test_query_side_search_in_faiss_store_equals_search_unaligned(index, corpus):
    images, text_queries = corpus
    raw_index = faiss.IndexIDMap2(faiss.IndexFlatIP(images.shape[1]))
    raw_index.add_with_ids(images, np.arange(len(images)))
    store = FaissStore(dim=images.shape[1]).add(images, ids=np.arange(len(images)))
    scores, found = search_unaligned(index, store, text_queries, k=10, overfetch=5)
    expected_scores, expected = index.search_unaligned(raw_index, text_queries, k=10, overfetch=5)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)]))


# ------------------------------------------------------------------------------ support sets
def test_support_pulled_from_milvus_by_label_fits_the_same_index(task, milvus_uri):
    with MilvusStore(milvus_uri, "labelled", dim=task[0].shape[1]) as store:
        check_support_from_store(store, task, OPTIONS)


def test_faiss_store_add_replaces_held_ids_and_filters_by_field():
    store = FaissStore(dim=4)
    store.add(np.eye(4), ids=[0, 1, 2, 3], fields={"label": ["a", "b", "a", "b"]})
    store.add(-np.eye(4)[:1], ids=[0], fields={"label": ["b"]})
    assert store.count() == 4
    np.testing.assert_allclose(store.get([0]), -np.eye(4)[:1])
    _, ids = store.search(np.ones((1, 4)), k=4, where={"label": "a"})
    np.testing.assert_array_equal(ids, [[2, -1, -1, -1]])


# ------------------------------------------------------------------------------ bad input
def test_unreachable_milvus_names_the_uri():
    uri = "http://127.0.0.1:9"  # discard port on loopback: nothing listens
    with pytest.raises(StoreUnavailableError, match="127.0.0.1:9") as caught:
        MilvusStore(uri, "anything", dim=8, timeout=5)
    assert isinstance(caught.value, ConnectionError)


def test_collection_of_another_dimension_is_refused(milvus_uri, index):
    with MilvusStore(milvus_uri, "dim_16", dim=16):
        pass
    with pytest.raises(DimensionMismatchError, match="holds 16-d vectors"):
        MilvusStore(milvus_uri, "dim_16", dim=32)
    with MilvusStore(milvus_uri, "dim_16") as store, pytest.raises(DimensionMismatchError, match="dim=32"):
        write_prototypes(index, store)


def test_collection_without_the_embedding_field_is_a_schema_error(milvus_uri):
    client = pymilvus.MilvusClient(milvus_uri)
    client.create_collection("foreign", dimension=8, vector_field_name="vec", metric_type="IP")
    client.close()
    with pytest.raises(SchemaError, match="'vec'"):
        MilvusStore(milvus_uri, "foreign")
    with MilvusStore(milvus_uri, "foreign", embedding_field="vec") as store:
        assert store.dim == 8


def test_cosine_collection_cannot_hold_folded_prototypes(milvus_uri, index):
    client = pymilvus.MilvusClient(milvus_uri)
    client.create_collection(
        "cosine", dimension=index.n_features_in_, vector_field_name="embedding", metric_type="COSINE"
    )
    client.close()
    with MilvusStore(milvus_uri, "cosine") as store, pytest.raises(SchemaError, match="metric IP"):
        write_prototypes(index, store)


def test_support_without_the_label_field_is_a_schema_error(milvus_uri):
    with MilvusStore(milvus_uri, "unlabelled", dim=4) as store:
        store.add(np.eye(4), ids=np.arange(4))
        with pytest.raises(SchemaError, match="label"):
            support_from_store(store, label_field="label")
    with pytest.raises(SchemaError, match="label"):
        support_from_store(FaissStore(dim=4).add(np.eye(4), ids=np.arange(4)), label_field="label")


def test_missing_pymilvus_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymilvus", None)
    with pytest.raises(MissingExtraError, match=r"lfa-index\[milvus\]"):
        MilvusStore("vectors.db", "anything", dim=4)


LABELS = ["café", 'say "hi"', "back\\slash", "it's", "two\nlines", "cr\rlf", "tab\there", "日本語", "bell\a", "\\u00e9"]


def test_where_matches_labels_with_any_characters_in_milvus(milvus_uri):
    vectors = np.eye(len(LABELS), dtype=np.float32)
    with MilvusStore(milvus_uri, "labels_any_text", dim=len(LABELS)) as store:
        store.add(vectors, ids=np.arange(len(LABELS)) + 100, fields={"label": LABELS, "rank": list(range(len(LABELS)))})
        for i, label in enumerate(LABELS):
            _, ids = store.search(np.ones((1, len(LABELS))), k=3, where={"label": label})
            np.testing.assert_array_equal(ids, [[100 + i, -1, -1]], err_msg=repr(label))
        _, ids = store.search(np.ones((1, len(LABELS))), k=2, where={"label": LABELS[0], "rank": 0})
        np.testing.assert_array_equal(ids, [[100, -1]])


def test_collection_names_follow_milvus_rules(milvus_uri):
    for name in ("c" * 256, "c" * 300, "1starts_with_a_digit", "café", "has-dash", ""):
        with pytest.raises(InvalidParameterError, match="255 letters, digits or '_'"):
            MilvusStore(milvus_uri, name, dim=4)
    with MilvusStore(milvus_uri, "_" + "c" * 254, dim=4) as store:
        assert store.count() == 0


def test_get_refuses_ids_that_are_not_integers(milvus_uri):
    with MilvusStore(milvus_uri, "get_ids", dim=4) as store:
        store.add(np.eye(4), ids=[0, 1, 2, 3])
        for bad in (["a"], [1.7], [1.0], [True], [None], [-1]):
            with pytest.raises(InvalidInputError, match="ids must be"):
                store.get(bad)
        np.testing.assert_array_equal(store.get([3, 1, 3]), np.eye(4)[[3, 1, 3]])
        np.testing.assert_array_equal(store.get(np.array([2], dtype=np.uint8)), np.eye(4)[[2]])


def test_a_milvus_lite_file_held_by_another_process_is_named_as_such(tmp_path):
    uri = str(tmp_path / "held.db")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, pymilvus
            client = pymilvus.MilvusClient({uri!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreUnavailableError, match="open in another process.*LOCK") as caught:
            MilvusStore(uri, "anything", dim=4, timeout=20)
        assert "server is running" not in str(caught.value)
    finally:
        holder.stdin.close()
        holder.wait(60)


def test_an_existing_milvus_collection_with_an_approximate_index_warns_when_opened(milvus_uri):
    from lfa_index.errors import ApproximateIndexWarning

    store = MilvusStore(milvus_uri, "approximate", dim=4)
    client, field = store._client, store.embedding_field
    client.release_collection("approximate")
    client.drop_index("approximate", index_name=client.list_indexes("approximate")[0])
    params = client.prepare_index_params()
    params.add_index(field_name=field, index_type="IVF_FLAT", metric_type="IP", params={"nlist": 4})
    client.create_index("approximate", params)
    with pytest.warns(ApproximateIndexWarning, match="IVF_FLAT"):
        MilvusStore(milvus_uri, "approximate")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ApproximateIndexWarning)
        MilvusStore(milvus_uri, "exact", dim=4)  # what lfa-index creates: FLAT
