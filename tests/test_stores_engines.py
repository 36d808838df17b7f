"""Qdrant, Chroma and LanceDB stores (embedded engines, no server) give the index's answers through stores.aligned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)
from store_tasks import NAMES, check_support_from_store, fit_named, make_task, own_corpus_search, random_corpus

from lfa_index import LFA, AlignedIndex, DimensionMismatchError, InvalidParameterError
from lfa_index.stores import (
    ChromaStore,
    FaissStore,
    LanceDBStore,
    MissingExtraError,
    QdrantStore,
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

ENGINES = {  # engine -> (client module, extra)
    "qdrant": ("qdrant_client", "qdrant"),
    "chroma": ("chromadb", "chroma"),
    "lancedb": ("lancedb", "lancedb"),
}
OPTIONS = dict(beta=0.5, steps=20, prototype_mix=0.0, device="cpu", random_state=0)  # the plain, unbiased layout
# class biases (discriminant mix), centred rows, trained prototypes, averaged maps: folded rows get d+1 coordinates
BIASED = dict(OPTIONS, prototype_mix=0.5, center=True, refine_prototypes=True, mapping="average")

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


@pytest.fixture(scope="module")
def task():
    return make_task(offset=2.0)  # a shared offset, as CLIP's: makes centring matter


@pytest.fixture(scope="module")
def index(task):
    return fit_named(task, OPTIONS)


@pytest.fixture(scope="module")
def biased_index(task):
    support, labels, text, _ = task
    index = AlignedIndex(lfa=LFA(**BIASED)).fit(support[labels < 9], labels[labels < 9], text[:9])
    index.add_classes(text[9:])  # classes from text: their own map, scored apart
    return index


@pytest.fixture(scope="module")
def corpus():
    return random_corpus()


@pytest.fixture(params=list(ENGINES))
def engine(request):
    pytest.importorskip(ENGINES[request.param][0], reason=f"needs the [{ENGINES[request.param][1]}] extra")
    return request.param


@pytest.fixture
def open_store(engine, tmp_path):
    """``open_store(name, dim=None, persistent=False, **options)``: a store of this engine under tmp_path.

    Qdrant's local directory mode commits each point to SQLite on its own, so only the small
    persistent checks use a directory; the others use ``":memory:"``."""
    opened = []

    def make(name, dim=None, persistent=False, **options):
        if engine == "qdrant":
            store = QdrantStore(str(tmp_path / "qdrant") if persistent else ":memory:", name, dim, **options)
        elif engine == "chroma":
            store = ChromaStore(tmp_path / "chroma", name, dim, **options)
        else:
            store = LanceDBStore(tmp_path / "lancedb", name, dim, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# ------------------------------------------------------------------------------ protocol
def test_rows_round_trip_with_int64_ids_fields_replacement_and_filters(open_store):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    ids = (np.arange(40) * 7919 + 2**40).astype(np.int64)  # large, non-consecutive int64 ids
    labels = np.array(["café", "O'Brien \\ 'x'", "日本"] * 13 + ["b"])  # non-ASCII, quotes, backslash
    numbers = np.arange(40) % 4
    store = open_store("rows", dim=8)
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


def test_large_k_returns_unfilled_slots_as_minus_one(open_store):
    store = open_store("few", dim=4).add(np.eye(4), ids=[10, 11, 12, 13])
    scores, ids = store.search(np.ones((2, 4)), k=6)
    assert (ids[:, 4:] == -1).all() and np.isneginf(scores[:, 4:]).all()
    assert set(ids[0, :4]) == {10, 11, 12, 13}


# ------------------------------------------------------------------------------ classification
@pytest.mark.parametrize("which", ["plain", "biased"])
def test_classification_through_the_store_equals_index_predict(which, index, biased_index, task, open_store):
    ix = index if which == "plain" else biased_index
    queries = task[3]
    if which == "biased":
        assert ix.augmented_ and prototype_dim(ix) == ix.n_features_in_ + 1 and ix.is_new_class_.any()
    store = open_store(f"prototypes_{which}", dim=prototype_dim(ix), persistent=True)
    write_prototypes(ix, store)
    assert store.count() == len(ix.classes_)
    np.testing.assert_array_equal(classify(ix, store, queries), ix.predict(queries))
    scores, labels = search_classes(ix, store, queries, k=4)
    expected_scores, expected_labels = ix.search(queries, k=4)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    write_prototypes(ix, store)  # rewriting replaces, never duplicates
    assert store.count() == len(ix.classes_)


def test_prototypes_persist_and_reopen_by_location_alone(index, task, open_store, engine):
    queries = task[3]
    store = open_store("persisted", dim=prototype_dim(index), persistent=True)
    write_prototypes(index, store)
    store.close()
    reopened = open_store("persisted", persistent=True)  # no dim: the collection's own
    assert reopened.dim == prototype_dim(index) and reopened.count() == len(NAMES)
    np.testing.assert_array_equal(classify(index, reopened, queries), index.predict(queries))


# ------------------------------------------------------------------------------ corpora
@pytest.mark.parametrize("which", ["plain", "biased"])
def test_aligned_corpus_top_10_equals_faiss_flat(which, index, biased_index, corpus, open_store, tmp_path):
    ix = index if which == "plain" else biased_index
    images, text_queries = corpus
    ids = np.arange(len(images)) * 3 + 5
    d = ix.prototypes_.shape[1]
    store = add_aligned(ix, open_store(f"aligned_{which}", dim=d), images, ids)
    faiss_store = add_aligned(ix, FaissStore(dim=d), images, ids)
    scores, found = search_aligned(ix, store, text_queries, k=10)
    expected_scores, expected = search_aligned(ix, faiss_store, text_queries, k=10)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    _, own = own_corpus_search(ix, images, ids, text_queries, k=10, path=tmp_path / "own")
    np.testing.assert_array_equal(found, own)


def test_query_side_search_of_a_raw_store_equals_reindexing_at_full_overfetch(
    index, corpus, open_store, engine, tmp_path
):
    images, text_queries = corpus
    ids = np.arange(len(images)) * 2 + 1
    options = {"ef_search": 2048} if engine == "chroma" else {}  # exact HNSW: more beam than rows
    raw = open_store("raw", dim=images.shape[1], **options).add(images, ids)
    _, exact = own_corpus_search(index, images, ids, text_queries, k=10, path=tmp_path / "own")
    _, full = search_unaligned(index, raw, text_queries, k=10, overfetch=len(images))
    np.testing.assert_array_equal(full, exact)
    # a partial over-fetch fetches the same candidates as the exact FAISS store, so it answers the same
    faiss_raw = FaissStore(dim=images.shape[1]).add(images, ids)
    scores, found = search_unaligned(index, raw, text_queries, k=10, overfetch=5)
    expected_scores, expected = search_unaligned(index, faiss_raw, text_queries, k=10, overfetch=5)
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


# ------------------------------------------------------------------------------ support sets
def test_support_pulled_from_the_store_by_label_fits_the_same_index(task, open_store):
    check_support_from_store(open_store("labelled", dim=task[0].shape[1]), task, OPTIONS)


def test_support_without_the_label_field_is_a_schema_error(open_store):
    store = open_store("unlabelled", dim=4)
    store.add(np.eye(4), ids=np.arange(4))
    with pytest.raises(SchemaError, match="label"):
        support_from_store(store, label_field="label")


# ------------------------------------------------------------------------------ errors
def test_collection_of_another_dimension_is_refused(open_store, index):
    open_store("dim_16", dim=16, persistent=True).close()
    with pytest.raises(DimensionMismatchError, match="holds 16-d vectors") as caught:
        open_store("dim_16", dim=32, persistent=True)
    assert "dim_16" in str(caught.value)
    store = open_store("dim_16", persistent=True)
    with pytest.raises(DimensionMismatchError, match="dim=32"):
        write_prototypes(index, store)
    with pytest.raises(DimensionMismatchError, match="16-d"):
        store.add(np.ones((2, 8)), ids=[0, 1])
    with pytest.raises(DimensionMismatchError):
        store.search(np.ones((1, 8)), k=1)


BAD_NAMES = {
    "qdrant": ["", "a/b", "has space", ".hidden", "x" * 256, "café"],
    "chroma": ["ab", "a/b", "has space", "a..b", "-ab", "192.168.0.1", "café"],
    "lancedb": ["", "a/b", "has space", "café", "x" * 256],
}


def test_bad_collection_names_are_refused_before_the_engine_is_called(engine, tmp_path, monkeypatch):
    # the client cannot even be imported: the name check must come first
    monkeypatch.setitem(sys.modules, ENGINES[engine][0], None)
    store = {"qdrant": QdrantStore, "chroma": ChromaStore, "lancedb": LanceDBStore}[engine]
    for name in BAD_NAMES[engine]:
        with pytest.raises(InvalidParameterError, match="collection|table") as caught:
            store(tmp_path / "db", name, dim=4)
        assert isinstance(caught.value, ValueError)


def test_unreachable_server_names_the_uri(engine):
    port = _closed_port()
    if engine == "lancedb":
        uri, options = "db://lfa-test", dict(api_key="not-a-key", host_override=f"http://127.0.0.1:{port}")
        cls = LanceDBStore
    else:
        uri, options = f"http://127.0.0.1:{port}", {}
        cls = QdrantStore if engine == "qdrant" else ChromaStore
    with pytest.raises(StoreUnavailableError, match=uri.replace(".", r"\.")) as caught:
        cls(uri, "anything", dim=8, timeout=2, **options)
    assert isinstance(caught.value, ConnectionError)


def _closed_port() -> int:
    """A localhost port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("engine", ["qdrant", "chroma"])  # LanceDB tables carry no metric: searches ask for "dot"
def test_collection_with_another_metric_is_a_schema_error(engine, tmp_path, index):
    """An existing L2 collection is refused; a cosine one opens but cannot hold folded prototypes."""
    pytest.importorskip(ENGINES[engine][0], reason=f"needs the [{ENGINES[engine][1]}] extra")
    if engine == "qdrant":
        from qdrant_client import QdrantClient, models

        client = QdrantClient(path=str(tmp_path / "qdrant"))
        for name, distance in (("euclid", models.Distance.EUCLID), ("cosine", models.Distance.COSINE)):
            params = models.VectorParams(size=prototype_dim(index), distance=distance)
            client.create_collection(name, vectors_config=params)
        client.close()
        uri = str(tmp_path / "qdrant")
        l2, cosine, cls = "euclid", "cosine", QdrantStore
    elif engine == "chroma":
        import chromadb

        settings = chromadb.config.Settings(anonymized_telemetry=False)
        client = chromadb.PersistentClient(str(tmp_path / "chroma"), settings=settings)
        for space in ("l2", "cosine"):
            config = {"hnsw": {"space": space}}
            client.create_collection(f"{space}-space", embedding_function=None, configuration=config)
        client.close()
        uri, l2, cosine, cls = tmp_path / "chroma", "l2-space", "cosine-space", ChromaStore
    with pytest.raises(SchemaError, match="Dot|'ip'"):
        cls(uri, l2)
    with cls(uri, cosine, dim=prototype_dim(index)) as store:
        assert store.metric == "COSINE"
        with pytest.raises(SchemaError, match="metric IP"):
            write_prototypes(index, store)


def test_lancedb_table_without_a_vector_column_is_a_schema_error(tmp_path):
    lancedb = pytest.importorskip("lancedb", reason="needs the [lancedb] extra")
    import pyarrow as pa

    db = lancedb.connect(tmp_path / "lancedb")
    vector = pa.field("vector", pa.list_(pa.float32(), 4))
    db.create_table("foreign", schema=pa.schema([pa.field("id", pa.int64()), pa.field("emb", pa.list_(pa.float32()))]))
    db.create_table("string_ids", schema=pa.schema([pa.field("id", pa.string()), vector]))
    with pytest.raises(SchemaError, match="'vector'"):
        LanceDBStore(tmp_path / "lancedb", "foreign")
    with pytest.raises(SchemaError, match="integer column 'id'"):
        LanceDBStore(tmp_path / "lancedb", "string_ids")
    with LanceDBStore(tmp_path / "lancedb", "typed", dim=4) as store:
        store.add(np.eye(4), ids=np.arange(4), fields={"label": ["a", "b", "c", "d"]})
        with pytest.raises(SchemaError, match="'label'"):
            store.add(np.eye(4)[:1], ids=[9], fields={"label": [1.5]})
        assert (store.search(np.ones((1, 4)), 1, where={"nope": 1})[1] == -1).all()  # as in every engine


def test_chroma_scores_are_exact_inner_products_not_one_minus_distance(tmp_path, monkeypatch):
    pytest.importorskip("chromadb", reason="needs the [chroma] extra")
    from lfa_index.stores import chroma

    monkeypatch.setattr(chroma, "EXACT_ROWS", 0)  # through HNSW's candidates, as a large collection
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((200, 16)) * 30).astype(np.float32)  # large scores: 1 - d would round
    q = rng.standard_normal((10, 16)).astype(np.float32)
    with ChromaStore(tmp_path / "chroma", "scores", dim=16) as store:
        store.add(x, ids=np.arange(200))
        scores, ids = store.search(q, 5)
        raw = store._col.query(query_embeddings=q, n_results=5, include=["distances"])
    exact = np.einsum("nd,nkd->nk", q, x[ids])
    np.testing.assert_allclose(scores, exact, rtol=1e-6)
    one_minus = 1.0 - np.asarray(raw["distances"], dtype=np.float32)
    assert np.abs(one_minus - exact).max() > np.abs(scores - exact).max()


def test_a_small_chroma_collection_of_unequal_norms_is_searched_exactly(tmp_path):
    """HNSW's inner-product graph can leave such rows unreachable; a small collection is scored in full."""
    pytest.importorskip("chromadb", reason="needs the [chroma] extra")
    rng = np.random.default_rng(6)
    centres = rng.standard_normal((6, 16))
    x = (centres[rng.integers(0, 6, 300)] + 0.1 * rng.standard_normal((300, 16)))
    x = (x * rng.uniform(0.2, 5.0, (300, 1))).astype(np.float32)  # clustered rows of unequal norms
    q = rng.standard_normal((40, 16)).astype(np.float32)
    with ChromaStore(tmp_path / "chroma", "unequal", dim=16) as store:
        store.add(x, ids=np.arange(300) * 7)
        _, ids = store.search(q, 10)
        _, filtered = store.search(q, 3, where={"missing": 1})
    expected = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :10] * 7
    np.testing.assert_array_equal(ids, expected)
    assert (filtered == -1).all()


def test_missing_client_names_the_extra(engine, tmp_path, monkeypatch):
    module, extra = ENGINES[engine]
    monkeypatch.setitem(sys.modules, module, None)
    store = {"qdrant": QdrantStore, "chroma": ChromaStore, "lancedb": LanceDBStore}[engine]
    with pytest.raises(MissingExtraError, match=rf"lfa-index\[{extra}\]"):
        store(tmp_path / "db", "anything", dim=4)


def test_importing_the_package_imports_no_engine_client():
    modules = [m for m, _ in ENGINES.values()] + ["langchain_core", "llama_index"]
    code = (
        "import sys, lfa_index, lfa_index.stores, lfa_index.integrations\n"
        f"print([m for m in {modules!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_store_benchmark_runs_and_writes_its_table(tmp_path, capsys):
    pytest.importorskip("lancedb", reason="needs the [lancedb] extra")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not installed
    from benchmarks import stores as bench

    out = tmp_path / "stores.json"
    bench.main(["--n", "300", "--dim", "48", "--classes", "8", "--queries", "40", "--search-queries", "5",
                "--repeats", "1", "--stores", "faiss", "lancedb", "--workdir", str(tmp_path), "--out", str(out)])
    report = json.loads(out.read_text())
    assert set(report["stores"]) == {"faiss", "lancedb"}
    lance = report["stores"]["lancedb"]
    assert lance["classify_agrees_with_predict"] == 1.0 and lance["search_recall_at_k_vs_faiss"] == 1.0
    assert lance["insert_rows_per_s"] > 0 and "<workdir>" in lance["location"]
    assert "insert rows/s" in capsys.readouterr().out
