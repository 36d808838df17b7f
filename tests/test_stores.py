"""The store suite: every behaviour of the store protocol, run against all five engines (FAISS, Milvus Lite,
Qdrant, Chroma, LanceDB; all embedded, no server) through the one ``stores`` fixture of conftest.py (test ids
``[faiss]``, ``[milvus]``, ...). The write-backs are in test_stores_writes.py (same fixture), what only one engine
has in test_stores_engines.py. A parameter is skipped only where the engine lacks the capability; the reason says
which."""

from __future__ import annotations

import socket
import sys

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)
from store_tasks import ENGINES, NAMES, check_support_from_store, fit_named, make_task, own_corpus_search, random_corpus

from lfa_index import LFA, AlignedIndex, DimensionMismatchError, InvalidInputError, InvalidParameterError
from lfa_index.stores import (
    ChromaStore,
    FaissStore,
    LanceDBStore,
    MilvusStore,
    MissingExtraError,
    QdrantStore,
    SchemaError,
    StoreUnavailableError,
    VectorStore,
    add_aligned,
    classify,
    open_store,
    prototype_dim,
    search_aligned,
    search_classes,
    search_unaligned,
    support_from_store,
    write_prototypes,
)

OPTIONS = dict(beta=0.5, steps=20, prototype_mix=0.0, device="cpu", random_state=0)  # the plain, unbiased layout
# class biases (discriminant mix), centred rows, trained prototypes, averaged maps: folded rows get d+1 coordinates
BIASED = dict(OPTIONS, prototype_mix=0.5, center=True, refine_prototypes=True, mapping="average")
CLASSES = {"milvus": MilvusStore, "qdrant": QdrantStore, "chroma": ChromaStore, "lancedb": LanceDBStore}

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


def only(*engines: str, reason: str):
    """The five engines, those outside ``engines`` skipped for ``reason`` (a capability they do not have)."""
    return pytest.mark.parametrize("engine", [
        e if e in engines else pytest.param(e, marks=pytest.mark.skip(reason=f"{e}: {reason}")) for e in ENGINES
    ], indirect=True)


@pytest.fixture(scope="module")
def task():
    return make_task(offset=2.0)  # a shared offset, as CLIP's: makes centring matter


@pytest.fixture(scope="module")
def index(task):
    return fit_named(task, OPTIONS)


def fit_nine(task, options) -> AlignedIndex:
    """An index of the first 9 classes (classes 9-11 are left to add from text)."""
    support, labels, text, _ = task
    return AlignedIndex(lfa=LFA(**options)).fit(support[labels < 9], labels[labels < 9], text[:9])


@pytest.fixture(scope="module")
def biased_index(task):
    index = fit_nine(task, BIASED)
    index.add_classes(task[2][9:])  # classes from text: their own map, scored apart
    return index


@pytest.fixture(scope="module")
def corpus():
    return random_corpus()


# ------------------------------------------------------------------------------ protocol
def test_rows_round_trip_with_int64_ids_fields_replacement_and_filters(stores):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    ids = (np.arange(40) * 7919 + 2**40).astype(np.int64)  # large, non-consecutive int64 ids
    labels = np.array(["café", "O'Brien \\ 'x'", "日本"] * 13 + ["b"])  # non-ASCII, quotes, backslash
    numbers = np.arange(40) % 4
    store = stores.open("rows", dim=8)
    assert isinstance(store, VectorStore) and store.metric == "IP" and store.dim == 8
    assert store.count() == 0
    store.add(x, ids, fields={"label": labels, "n": numbers})
    reference = FaissStore(dim=8).add(x, ids, fields={"label": labels, "n": numbers})
    assert store.count() == 40
    # get: in the order asked, repeats included
    wanted = ids[[5, 3, 39, 5, 0]]
    np.testing.assert_array_equal(store.get(wanted), x[[5, 3, 39, 5, 0]])
    # search with and without equality filters equals the exact FAISS store
    q = rng.standard_normal((6, 8)).astype(np.float32)
    for where in (None, {"label": "café"}, {"label": "O'Brien \\ 'x'"}, {"label": "日本"}, {"n": 3},
                  {"label": "café", "n": 0}, {"label": "nothing"}):
        scores, found = store.search(q, 5, where=where)
        expected_scores, expected = reference.search(q, 5, where=where)
        np.testing.assert_array_equal(found, expected, err_msg=str(where))
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)
    assert (store.search(q, 5, where={"label": "nothing"})[1] == -1).all()
    # add replaces a row whose id is held: vector and fields
    store.add(-x[:2], ids[:2], fields={"label": ["z", "z"], "n": [9, 9]})
    assert store.count() == 40
    np.testing.assert_array_equal(store.get(ids[:2]), -x[:2])
    assert set(store.search(q, 40, where={"label": "z"})[1].ravel()) - {-1} == set(ids[:2])
    # scan: every row once, in batches
    batches = list(store.scan(["label", "n"], batch_size=7))
    assert max(len(b[0]) for b in batches) <= 7
    got_ids = np.concatenate([b[0] for b in batches])
    got_vectors = np.concatenate([b[1] for b in batches])
    got_labels = np.concatenate([b[2]["label"] for b in batches])
    order = np.argsort(got_ids)
    np.testing.assert_array_equal(got_ids[order], np.sort(ids))
    position = np.argsort(ids)
    expected_vectors = np.concatenate([-x[:2], x[2:]])[position]
    np.testing.assert_array_equal(got_vectors[order], expected_vectors)
    np.testing.assert_array_equal(got_labels[order], np.concatenate([["z", "z"], labels[2:]])[position])
    store.clear()
    assert store.count() == 0


def test_add_replaces_held_ids_and_filters_by_field(stores):
    store = stores.open("replaced", dim=4)
    store.add(np.eye(4), ids=[0, 1, 2, 3], fields={"label": ["a", "b", "a", "b"]})
    store.add(-np.eye(4)[:1], ids=[0], fields={"label": ["b"]})
    assert store.count() == 4
    np.testing.assert_allclose(store.get([0]), -np.eye(4)[:1])
    _, ids = store.search(np.ones((1, 4)), k=4, where={"label": "a"})
    np.testing.assert_array_equal(ids, [[2, -1, -1, -1]])


def test_large_k_returns_unfilled_slots_as_minus_one(stores):
    store = stores.open("few", dim=4).add(np.eye(4), ids=[10, 11, 12, 13])
    scores, ids = store.search(np.ones((2, 4)), k=6)
    assert (ids[:, 4:] == -1).all() and np.isneginf(scores[:, 4:]).all()
    assert set(ids[0, :4]) == {10, 11, 12, 13}


def test_get_refuses_ids_that_are_not_integers(stores):
    store = stores.open("get_ids", dim=4).add(np.eye(4), ids=[0, 1, 2, 3])
    for bad in (["a"], [1.7], [1.0], [True], [None], [-1]):
        with pytest.raises(InvalidInputError, match="ids must be"):
            store.get(bad)
    np.testing.assert_array_equal(store.get([3, 1, 3]), np.eye(4)[[3, 1, 3]])
    np.testing.assert_array_equal(store.get(np.array([2], dtype=np.uint8)), np.eye(4)[[2]])


LABELS = ["café", 'say "hi"', "back\\slash", "it's", "two\nlines", "cr\rlf", "tab\there", "日本語", "bell\a", "\\u00e9"]


def test_where_matches_labels_with_any_characters(stores):
    vectors = np.eye(len(LABELS), dtype=np.float32)
    store = stores.open("labels_any_text", dim=len(LABELS))
    store.add(vectors, ids=np.arange(len(LABELS)) + 100, fields={"label": LABELS, "rank": list(range(len(LABELS)))})
    for i, label in enumerate(LABELS):
        _, ids = store.search(np.ones((1, len(LABELS))), k=3, where={"label": label})
        np.testing.assert_array_equal(ids, [[100 + i, -1, -1]], err_msg=repr(label))
    _, ids = store.search(np.ones((1, len(LABELS))), k=2, where={"label": LABELS[0], "rank": 0})
    np.testing.assert_array_equal(ids, [[100, -1]])


# ------------------------------------------------------------------------------ classification
@pytest.mark.parametrize("which", ["plain", "biased"])
def test_classification_through_the_store_equals_index_predict(which, index, biased_index, task, stores):
    ix = index if which == "plain" else biased_index
    queries = task[3]
    if which == "biased":
        assert ix.augmented_ and prototype_dim(ix) == ix.n_features_in_ + 1 and ix.is_new_class_.any()
    store = stores.open(f"prototypes_{which}", dim=prototype_dim(ix), persistent=True)
    write_prototypes(ix, store)
    assert store.count() == len(ix.classes_)
    np.testing.assert_array_equal(classify(ix, store, queries), ix.predict(queries))
    scores, labels = search_classes(ix, store, queries, k=4)
    expected_scores, expected_labels = ix.search(queries, k=4)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    write_prototypes(ix, store)  # rewriting replaces, never duplicates
    assert store.count() == len(ix.classes_)


@pytest.mark.parametrize("which", ["plain", "biased"])
def test_classes_added_from_text_are_scored_with_their_own_map(which, task, stores):
    queries = task[3]
    ix = fit_nine(task, OPTIONS if which == "plain" else BIASED)
    store = stores.open(f"mixed_maps_{which}", dim=prototype_dim(ix))
    write_prototypes(ix, store)
    np.testing.assert_array_equal(classify(ix, store, queries), ix.predict(queries))
    ix.add_classes(task[2][9:])
    write_prototypes(ix, store)  # replaces the 9 rows by 12
    assert store.count() == 12
    np.testing.assert_array_equal(classify(ix, store, queries), ix.predict(queries))
    scores, found = search_classes(ix, store, queries, k=4)
    expected_scores, expected = ix.search(queries, k=4)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_biased_prototypes_need_their_extra_coordinate(biased_index, stores):
    """Folded biased prototypes have d+1 coordinates: a store of d is refused."""
    with pytest.raises(DimensionMismatchError):
        write_prototypes(biased_index, stores.open("too_narrow", dim=biased_index.n_features_in_))


def test_prototypes_persist_and_reopen_by_location_alone(index, task, stores):
    queries = task[3]
    store = stores.open("persisted", dim=prototype_dim(index), persistent=True)
    write_prototypes(index, store)
    stores.persist(store)
    reopened = stores.open("persisted", persistent=True)  # no dim: the collection's own
    assert reopened.dim == prototype_dim(index) and reopened.count() == len(NAMES)
    np.testing.assert_array_equal(classify(index, reopened, queries), index.predict(queries))


def test_stale_prototypes_are_refused(index, task, stores):
    store = write_prototypes(index, stores.open("stale", dim=prototype_dim(index)))
    store.add(np.ones((1, index.n_features_in_)), ids=[99], fields={"label": ["extra"], "mapping": ["task"]})
    with pytest.raises(InvalidInputError, match="write_prototypes"):
        classify(index, store, task[3])


# ------------------------------------------------------------------------------ corpora
@pytest.mark.parametrize("which", ["plain", "biased"])
def test_aligned_corpus_top_10_equals_faiss_flat(which, index, biased_index, corpus, stores):
    ix = index if which == "plain" else biased_index
    images, text_queries = corpus
    ids = np.arange(len(images)) * 3 + 5  # arbitrary, non-consecutive ids
    d = ix.prototypes_.shape[1]
    store = add_aligned(ix, stores.open(f"aligned_{which}", dim=d), images, ids)
    faiss_store = add_aligned(ix, FaissStore(dim=d), images, ids)
    scores, found = search_aligned(ix, store, text_queries, k=10)
    expected_scores, expected = search_aligned(ix, faiss_store, text_queries, k=10)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    # and both equal an AlignedCorpus of the index
    _, own = own_corpus_search(ix, images, ids, text_queries, k=10)
    np.testing.assert_array_equal(found, own)


@pytest.mark.parametrize("which", ["plain", "biased"])
def test_query_side_search_of_a_raw_store_is_exact_at_full_overfetch(which, index, biased_index, corpus, stores):
    ix = index if which == "plain" else biased_index
    images, text_queries = corpus
    ids = np.arange(len(images)) * 2 + 1
    options = {"ef_search": 2048} if stores.engine == "chroma" else {}  # exact HNSW: more beam than rows
    raw = stores.open(f"raw_{which}", dim=images.shape[1], **options).add(images, ids)
    _, exact = own_corpus_search(ix, images, ids, text_queries, k=10)
    _, full = search_unaligned(ix, raw, text_queries, k=10, overfetch=len(images))
    np.testing.assert_array_equal(full, exact)  # re-ranking every image is the exact search
    recall = {}
    for overfetch in (1, 5, 20):
        _, found = search_unaligned(ix, raw, text_queries, k=10, overfetch=overfetch)
        recall[overfetch] = _recall(found, exact)
    assert recall[1] <= recall[5] <= recall[20] <= 1.0
    assert recall[20] >= 0.9, recall
    # a partial over-fetch fetches the same candidates as the exact FAISS store, so it answers the same
    faiss_raw = FaissStore(dim=images.shape[1]).add(images, ids)
    scores, found = search_unaligned(ix, raw, text_queries, k=10, overfetch=5)
    expected_scores, expected = search_unaligned(ix, faiss_raw, text_queries, k=10, overfetch=5)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)]))


# ------------------------------------------------------------------------------ support sets
def test_support_pulled_from_the_store_by_label_fits_the_same_index(task, stores):
    check_support_from_store(stores.open("labelled", dim=task[0].shape[1]), task, OPTIONS)


def test_support_without_the_label_field_is_a_schema_error(stores):
    store = stores.open("unlabelled", dim=4)
    store.add(np.eye(4), ids=np.arange(4))
    with pytest.raises(SchemaError, match="label"):
        support_from_store(store, label_field="label")


# ------------------------------------------------------------------------------ schema errors
def test_collection_of_another_dimension_is_refused(stores, index):
    stores.persist(stores.open("dim_16", dim=16, persistent=True))
    with pytest.raises(DimensionMismatchError, match="holds 16-d vectors") as caught:
        stores.open("dim_16", dim=32, persistent=True)
    assert "dim_16" in str(caught.value)
    store = stores.open("dim_16", persistent=True)
    with pytest.raises(DimensionMismatchError, match="dim=32"):
        write_prototypes(index, store)
    with pytest.raises(DimensionMismatchError, match="16-d"):
        store.add(np.ones((2, 8)), ids=[0, 1])
    with pytest.raises(DimensionMismatchError):
        store.search(np.ones((1, 8)), k=1)


def foreign_collection(engine: str, location: str, name: str, dim: int, *, metric: str = "ip", vector: str = ""):
    """A collection made with the engine's own client, not lfa-index: ranked by ``metric`` ("ip", "l2",
    "cosine"), its vectors in a field named ``vector`` ("": the engine's default, which lfa-index uses)."""
    if engine == "milvus":
        import pymilvus

        client = pymilvus.MilvusClient(location)
        schema = client.create_schema()
        schema.add_field("id", pymilvus.DataType.INT64, is_primary=True)
        schema.add_field(vector or "embedding", pymilvus.DataType.FLOAT_VECTOR, dim=dim)
        index = client.prepare_index_params()  # exact, as lfa-index makes them: only the metric or field differs
        index.add_index(field_name=vector or "embedding", index_type="FLAT", metric_type=metric.upper())
        client.create_collection(name, schema=schema, index_params=index)
    elif engine == "qdrant":
        from qdrant_client import QdrantClient, models

        distance = {"ip": models.Distance.DOT, "l2": models.Distance.EUCLID, "cosine": models.Distance.COSINE}
        params = models.VectorParams(size=dim, distance=distance[metric])
        client = QdrantClient(path=location)
        client.create_collection(name, vectors_config={vector: params} if vector else params)
    elif engine == "chroma":
        import chromadb

        client = chromadb.PersistentClient(location, settings=chromadb.config.Settings(anonymized_telemetry=False))
        client.create_collection(name, embedding_function=None, configuration={"hnsw": {"space": metric}})
    else:
        import lancedb
        import pyarrow as pa

        client = lancedb.connect(location)
        columns = [pa.field("id", pa.int64()), pa.field(vector or "vector", pa.list_(pa.float32(), dim))]
        client.create_table(name, schema=pa.schema(columns))
    if hasattr(client, "close"):
        client.close()


@only("milvus", "qdrant", "lancedb",
      reason="a collection holds one unnamed vector per row (FaissStore, Chroma): no embedding field to miss")
def test_collection_without_the_embedding_field_is_a_schema_error(stores):
    name = stores.name("foreign")
    foreign_collection(stores.engine, stores.location(), name, 8, vector="vec")
    named = {"milvus": "'vec'", "qdrant": "'vec'", "lancedb": "'vector'"}[stores.engine]  # what it found or lacks
    with pytest.raises(SchemaError, match=named):
        stores.open("foreign", persistent=True)
    option = {"milvus": "embedding_field", "qdrant": "vector_name", "lancedb": "vector_field"}[stores.engine]
    assert stores.open("foreign", persistent=True, **{option: "vec"}).dim == 8


@only("milvus", "qdrant", "chroma",
      reason="no metric to choose: a FaissStore is always inner product, a LanceDB search asks for 'dot' itself")
def test_collection_with_another_metric_is_a_schema_error(stores, index):
    """An existing L2 collection is refused; a cosine one opens but cannot hold folded prototypes."""
    for metric in ("l2", "cosine"):
        foreign_collection(stores.engine, stores.location(), stores.name(f"{metric}-space".replace("-", "_")),
                           prototype_dim(index), metric=metric)
    with pytest.raises(SchemaError, match="IP|Dot|'ip'"):
        stores.open("l2_space", persistent=True)
    store = stores.open("cosine_space", dim=prototype_dim(index), persistent=True)
    assert store.metric == "COSINE"
    with pytest.raises(SchemaError, match="metric IP"):
        write_prototypes(index, store)


# ------------------------------------------------------------------------------ bad names, no engine
BAD_NAMES = {
    "faiss": ["", "../x", "/abs", "a/b", ".hidden", "has space", "x" * 256, "café"],
    "milvus": ["", "c" * 256, "c" * 300, "1starts_with_a_digit", "café", "has-dash", "a/b", "has space"],
    "qdrant": ["", "a/b", "has space", ".hidden", "x" * 256, "café"],
    "chroma": ["ab", "a/b", "has space", "a..b", "-ab", "192.168.0.1", "café"],
    "lancedb": ["", "a/b", "has space", "café", "x" * 256],
}


def test_bad_collection_names_are_refused_before_the_engine_is_called(engine, tmp_path, monkeypatch):
    target = tmp_path / "db"
    if engine == "faiss":  # faiss is imported with lfa_index: check that nothing is made instead
        def opened(name):
            return open_store(f"faiss:{target}", name, dim=4)
    else:  # the client cannot even be imported: the name check must come first
        monkeypatch.setitem(sys.modules, ENGINES[engine], None)

        def opened(name):
            return CLASSES[engine](str(target), name, dim=4)
    for name in BAD_NAMES[engine]:
        with pytest.raises(InvalidParameterError, match="collection|table|store name") as caught:
            opened(name)
        assert isinstance(caught.value, ValueError)
    assert not target.exists()


@only("milvus", "qdrant", "chroma", "lancedb", reason="FAISS runs in process: it has no server to be unreachable")
def test_unreachable_server_names_the_uri(engine):
    port = _closed_port()
    if engine == "lancedb":
        uri, options = "db://lfa-test", dict(api_key="not-a-key", host_override=f"http://127.0.0.1:{port}")
    else:
        uri, options = f"http://127.0.0.1:{port}", {}
    with pytest.raises(StoreUnavailableError, match=uri.replace(".", r"\.")) as caught:
        CLASSES[engine](uri, "anything", dim=8, timeout=2, **options)
    assert isinstance(caught.value, ConnectionError)


def _closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@only("milvus", "qdrant", "chroma", "lancedb", reason="faiss is a core dependency of lfa-index: no extra to name")
def test_missing_client_names_the_extra(engine, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, ENGINES[engine], None)
    with pytest.raises(MissingExtraError, match=rf"lfa-index\[{engine}\]"):
        CLASSES[engine](str(tmp_path / "db"), "anything", dim=4)
