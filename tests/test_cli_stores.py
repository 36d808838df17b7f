"""Store URIs and the store commands of `lfa-index`: fit --from-store, classify, search --store.

Every engine runs embedded (a FAISS store directory, a Milvus Lite file, Qdrant local mode,
Chroma's persistent client, a LanceDB directory) on small synthetic data; stores are filled
through the Python API, then the real command reads or writes them.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)

from lfa_index import LFA, AlignedCorpus, AlignedIndex, cli
from lfa_index.errors import CollectionNotFoundError, InvalidInputError, StoreURIError
from lfa_index.stores import (
    FaissStore,
    StoreURI,
    classify_rows,
    open_store,
    parse_store_uri,
    search_unaligned,
)

REPO = Path(__file__).resolve().parents[1]
ENGINES = {  # engine -> (client module, extra); FAISS needs none
    "faiss": None,
    "milvus": ("pymilvus", "milvus"),
    "qdrant": ("qdrant_client", "qdrant"),
    "chroma": ("chromadb", "chroma"),
    "lancedb": ("lancedb", "lancedb"),
}
LOCATIONS = {"faiss": "faiss_stores", "milvus": "vectors.db", "qdrant": "qdrant", "chroma": "chroma",
             "lancedb": "lancedb"}
D_IMG, D_TXT, N_CLASSES, SHOTS = 32, 24, 6, 5
NAMES = [f"class_{i}" for i in range(N_CLASSES)]

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


# ----------------------------------------------------------------------------- helpers and fixtures
def run(capsys, *argv) -> tuple[int, str, str]:
    """Run the command in-process; returns (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("lfa-index: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def store_uri(engine: str, root: Path, collection: str) -> str:
    return f"{engine}:{root / LOCATIONS[engine]}#{collection}"


def fill(uri: str, vectors: np.ndarray, ids: np.ndarray, fields: dict | None = None, **options) -> None:
    """Create the store a URI names and add rows to it (a FAISS store is saved)."""
    with closing(open_store(uri, dim=vectors.shape[1], **options)) as store:
        store.add(vectors, ids, fields=fields)
        if isinstance(store, FaissStore):
            store.save()


@pytest.fixture(scope="module")
def task():
    """Support rows around a linear image of their class's text prototype, queries, a raw corpus, text queries."""
    rng = np.random.default_rng(0)
    text = rng.standard_normal((N_CLASSES, D_TXT)).astype(np.float32)
    mix = rng.standard_normal((D_TXT, D_IMG)).astype(np.float32)

    def draw(labels):
        return (text[labels] @ mix + 0.8 * rng.standard_normal((len(labels), D_IMG))).astype(np.float32)

    labels = np.repeat(np.arange(N_CLASSES), SHOTS)
    query_labels = rng.integers(0, N_CLASSES, 40)
    corpus = draw(rng.integers(0, N_CLASSES, 300))
    return {
        "support": draw(labels), "labels": np.array(NAMES)[labels], "text": text,
        "queries": draw(query_labels),
        # unit rows, as embedding stores hold: Chroma's HNSW graph can leave non-unit rows unreachable by IP
        "corpus": corpus / np.linalg.norm(corpus, axis=1, keepdims=True),
        "text_queries": rng.standard_normal((5, D_TXT)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def index_dir(task, tmp_path_factory):
    """An index fitted through the command from an embeddings file."""
    folder = tmp_path_factory.mktemp("index")
    np.savez(folder / "support.npz", embeddings=task["support"], labels=task["labels"])
    np.save(folder / "prototypes.npy", task["text"])
    code = cli.main(["fit", "-q", "--support", str(folder / "support.npz"), "--prototypes",
                     str(folder / "prototypes.npy"), "--steps", "5", "--beta", "0.5", "--device", "cpu",
                     "-o", str(folder / "idx")])
    assert code == 0
    return folder / "idx"


@pytest.fixture(params=list(ENGINES))
def engine(request):
    if ENGINES[request.param] is not None:
        module, extra = ENGINES[request.param]
        pytest.importorskip(module, reason=f"needs the [{extra}] extra")
    return request.param


# ----------------------------------------------------------------------------- URIs
@pytest.mark.parametrize("uri,expected", [
    ("faiss:./stores", StoreURI("faiss", "./stores", None)),
    ("faiss:./stores#prototypes", StoreURI("faiss", "./stores", "prototypes")),
    ("milvus:./vectors.db#images", StoreURI("milvus", "./vectors.db", "images")),
    ("milvus:http://localhost:19530#images", StoreURI("milvus", "http://localhost:19530", "images")),
    ("qdrant::memory:#images", StoreURI("qdrant", ":memory:", "images")),
    ("qdrant:https://qdrant.example:6333#images", StoreURI("qdrant", "https://qdrant.example:6333", "images")),
    ("chroma:./chroma#my-images", StoreURI("chroma", "./chroma", "my-images")),
    ("LanceDB:db://prod#images", StoreURI("lancedb", "db://prod", "images")),
    ("lancedb:s3://bucket/a#b#table", StoreURI("lancedb", "s3://bucket/a#b", "table")),  # the last '#' splits
])
def test_store_uris_split_into_scheme_location_and_collection(uri, expected):
    assert parse_store_uri(uri) == expected


@pytest.mark.parametrize("uri,needle", [
    ("./vectors.db", "known scheme"),
    ("pinecone:index#c", "known scheme"),
    ("milvus:", "no location"),
    ("qdrant:./dir#", "names no collection after it"),
    ("milvus://localhost:19530#images", "milvus:http://localhost:19530#images"),
    ("chroma:./dir", "'chroma:./dir#NAME'"),
    ("faiss::memory:", "FaissStore(dim)"),
])
def test_malformed_store_uris_are_typed_errors_naming_the_uri(uri, needle):
    with pytest.raises(StoreURIError) as caught:
        open_store(uri)
    message = str(caught.value)
    assert needle in message and uri in message, message
    assert isinstance(caught.value, ValueError)


def test_a_missing_collection_is_not_created_by_reading(tmp_path, engine):
    uri = store_uri(engine, tmp_path, "nothing_here")
    with pytest.raises(CollectionNotFoundError, match="store URI") as caught:
        open_store(uri)
    assert uri in str(caught.value)
    assert not (tmp_path / LOCATIONS[engine]).exists()


def test_an_existing_location_without_the_collection_names_the_uri(tmp_path, engine):
    fill(store_uri(engine, tmp_path, "present"), np.eye(4, dtype=np.float32), np.arange(4))
    uri = store_uri(engine, tmp_path, "absent")
    with pytest.raises(CollectionNotFoundError) as caught:
        open_store(uri)
    assert uri in str(caught.value) and "absent" in str(caught.value)


@pytest.mark.parametrize("engine_name", ["qdrant", "chroma"])
def test_an_unreachable_server_is_a_store_unavailable_error_naming_the_uri(engine_name, index_dir, capsys):
    pytest.importorskip(ENGINES[engine_name][0], reason=f"needs the [{ENGINES[engine_name][1]}] extra")
    import socket

    with socket.socket() as sock:  # a localhost port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"{engine_name}:http://127.0.0.1:{port}#images"
    code, _, err = run(capsys, "classify", uri, "--index", index_dir, "-q")
    assert_clean_error(code, err, f"store URI {uri!r}", "127.0.0.1")


# ----------------------------------------------------------------------------- the FAISS store directory
def test_faiss_store_saves_and_loads_ids_vectors_and_fields_without_pickles(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 8)).astype(np.float32)
    ids = np.arange(30) * 7 + 2**40
    store = FaissStore(dim=8).add(x, ids, fields={"label": ["a", "b", "c"] * 10, "n": list(range(30))})
    store.add(x[:3] * 2, ids[:3], fields={"label": ["z"] * 3})  # replaced rows, without "n"
    path = store.save(tmp_path / "store")
    files = {p.suffix for p in path.rglob("*") if p.is_file()}
    assert files <= {".json", ".safetensors", ".faiss", ".lock"}, files
    loaded = FaissStore.load(path)
    assert (loaded.dim, loaded.count(), loaded.factory, loaded.field_names()) == (8, 30, "Flat", ["label", "n"])
    np.testing.assert_array_equal(loaded.get(ids), store.get(ids))
    q = rng.standard_normal((4, 8)).astype(np.float32)
    for where in (None, {"label": "z"}, {"n": 5}):
        np.testing.assert_array_equal(loaded.search(q, 5, where=where)[1], store.search(q, 5, where=where)[1])
    batches = list(loaded.scan(["label"]))
    assert sorted(np.concatenate([b[0] for b in batches]).tolist()) == sorted(ids.tolist())
    with pytest.raises(Exception, match="lack field"):  # the replaced rows have no "n"
        list(loaded.scan(["n"]))


def test_a_faiss_store_uri_refuses_an_index_directory_and_a_file(tmp_path, index_dir):
    with pytest.raises(ValueError, match="faiss-store"):  # an IndexFormatError
        open_store(f"faiss:{index_dir}")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreURIError, match="is a file"):
        open_store(f"faiss:{tmp_path / 'file'}", dim=4)


# ----------------------------------------------------------------------------- fit --from-store
def test_fit_from_store_equals_fit_from_the_same_rows(task, engine, tmp_path, capsys):
    uri = store_uri(engine, tmp_path, "labelled")
    order = np.random.default_rng(3).permutation(len(task["support"]))  # stored out of id order
    ids = order * 3 + 1
    fill(uri, task["support"][order], ids, fields={"label": task["labels"][order], "source": ["cam"] * len(ids)})
    np.save(tmp_path / "prototypes.npy", task["text"])
    code, _, err = run(capsys, "fit", "-q", "--from-store", uri, "--label-field", "label", "--prototypes",
                       tmp_path / "prototypes.npy", "--steps", 5, "--beta", 0.5, "--device", "cpu", "-o",
                       tmp_path / "idx")
    assert code == 0, err
    from_store = AlignedIndex.load(tmp_path / "idx")
    assert list(from_store.classes_) == NAMES  # the distinct label values, sorted
    lfa = LFA(steps=5, beta=0.5, device="cpu", random_state=0)  # what the command's options make
    direct = AlignedIndex(lfa=lfa).fit(task["support"], task["labels"], task["text"], NAMES)  # rows in id order
    np.testing.assert_array_equal(from_store.predict(task["queries"]), direct.predict(task["queries"]))
    code, _, err = run(capsys, "fit", "-q", "--from-store", uri, "--label-field", "missing", "--prototypes",
                       tmp_path / "prototypes.npy", "-o", tmp_path / "idx2")
    assert_clean_error(code, err, "missing")


def test_fit_takes_the_support_set_one_way_only(task, tmp_path, capsys):
    np.savez(tmp_path / "support.npz", embeddings=task["support"], labels=task["labels"])
    code, _, err = run(capsys, "fit", "--support", tmp_path / "support.npz", "--from-store",
                       f"faiss:{tmp_path / 'x'}", "-o", tmp_path / "idx")
    assert_clean_error(code, err, "one way only", "--from-store")


# ----------------------------------------------------------------------------- classify
def test_classify_prints_the_label_of_every_row_as_predict_does(task, engine, index_dir, tmp_path, capsys):
    uri = store_uri(engine, tmp_path, "raw_rows")
    ids = np.arange(len(task["queries"]))[::-1] * 5 + 11
    fill(uri, task["queries"], ids)
    code, out, err = run(capsys, "classify", "-q", uri, "--index", index_dir, "--batch-size", 7)
    assert code == 0, err
    rows = read_csv(out)
    index = AlignedIndex.load(index_dir)
    order = np.argsort(ids)
    scores, labels = index.search(task["queries"][order], k=1)
    assert [int(r["id"]) for r in rows] == ids[order].tolist()
    assert [r["label"] for r in rows] == labels[:, 0].tolist() == [r["class_name"] for r in rows]
    np.testing.assert_allclose([float(r["score"]) for r in rows], scores[:, 0], atol=1e-5)


def test_classify_writes_labels_into_the_store_keeping_vectors_and_fields(task, engine, index_dir, tmp_path, capsys):
    uri = store_uri(engine, tmp_path, "to_label")
    ids = np.arange(len(task["queries"])) * 2 + 3
    sources = [f"camera {i % 3}" for i in range(len(ids))]
    years, prices = [2020 + i for i in range(len(ids))], [float(i) + 0.5 * (i % 2) for i in range(len(ids))]
    fill(uri, task["queries"], ids, fields={"source": sources, "year": years, "price": prices})
    code, out, err = run(capsys, "classify", "-q", uri, "--index", index_dir, "--write-field", "predicted")
    assert code == 0 and out == "", err
    expected = AlignedIndex.load(index_dir).predict(task["queries"])
    with closing(open_store(uri)) as store:
        assert store.count() == len(ids)
        np.testing.assert_array_equal(store.get(ids), task["queries"])
        got = {int(i): (p, s, (type(y), y), (type(c), c.hex())) for b_ids, _, f in store.scan(
               ["predicted", "source", "year", "price"])
               for i, p, s, y, c in zip(b_ids, f["predicted"], f["source"], f["year"], f["price"])}
    kept = [((int, y), (float, c.hex())) for y, c in zip(years, prices)]  # 2020 stays an int, 1.0 a float
    assert [got[i] for i in ids.tolist()] == [(e, s, *k) for e, s, k in zip(expected.tolist(), sources, kept)]
    # again, rejecting every row: the field is overwritten with "" (no class); -o still writes the CSV
    code, _, err = run(capsys, "classify", "-q", uri, "--index", index_dir, "--write-field", "predicted",
                       "--reject-below", 1e6, "-o", tmp_path / "labels.csv")
    assert code == 0, err
    assert {r["class_name"] for r in read_csv((tmp_path / "labels.csv").read_text())} == {"unknown"}
    with closing(open_store(uri)) as store:
        values = np.concatenate([f["predicted"] for _, _, f in store.scan(["predicted", "source"])])
    assert set(values.tolist()) == {""}


def test_classify_refuses_a_store_of_another_dimension(index_dir, tmp_path, capsys):
    uri = f"faiss:{tmp_path / 'narrow'}"
    fill(uri, np.eye(8, dtype=np.float32), np.arange(8))
    code, _, err = run(capsys, "classify", uri, "--index", index_dir)
    assert_clean_error(code, err, "8-d", str(D_IMG))


def test_classify_rows_without_set_field_cannot_write_one_field_and_refuses(task, index_dir):
    class Bare:  # the protocol without the optional set_field()
        def __init__(self):
            self._store = FaissStore(dim=D_IMG).add(task["queries"], np.arange(len(task["queries"])))

        def __getattr__(self, name):
            if name == "set_field":
                raise AttributeError(name)
            return getattr(self._store, name)

    index = AlignedIndex.load(index_dir)
    _, labels, _ = classify_rows(index, Bare())
    np.testing.assert_array_equal(labels, index.predict(task["queries"]))
    with pytest.raises(InvalidInputError, match="set_field"):
        classify_rows(index, Bare(), write_field="predicted")


# ----------------------------------------------------------------------------- search --store
def test_search_store_equals_search_unaligned_and_reindexing_at_full_overfetch(
    task, engine, index_dir, tmp_path, capsys
):
    uri = store_uri(engine, tmp_path, "raw_corpus")
    corpus, queries = task["corpus"], task["text_queries"]
    ids = np.arange(len(corpus)) * 3 + 7
    # Chroma's HNSW is exact with more beam than rows; the collection keeps it, the command opens it so
    fill(uri, corpus, ids, **({"ef_search": 2048} if engine == "chroma" else {}))
    np.save(tmp_path / "queries.npy", queries)
    index = AlignedIndex.load(index_dir)
    reference = FaissStore(dim=D_IMG).add(corpus, ids)
    _, exact = AlignedCorpus(index).add(corpus, ids=ids).search_text(queries, k=5)
    for overfetch, expected in ((2, search_unaligned(index, reference, queries, k=5, overfetch=2)[1]),
                                (len(corpus), exact)):
        code, out, err = run(capsys, "search", "-q", index_dir, "--store", uri, "--prompt-embeddings",
                             tmp_path / "queries.npy", "-k", 5, "--overfetch", overfetch)
        assert code == 0, err
        rows = read_csv(out)
        found = np.array([int(r["id"]) for r in rows]).reshape(len(queries), 5)
        np.testing.assert_array_equal(found, expected, err_msg=f"overfetch {overfetch}")
        assert [r["query"] for r in rows[::5]] == [str(i) for i in range(len(queries))]


def test_search_store_takes_prompt_queries_only(task, index_dir, tmp_path, capsys):
    uri = f"faiss:{tmp_path / 'corpus'}"
    fill(uri, task["corpus"], np.arange(len(task["corpus"])))
    np.save(tmp_path / "queries.npy", task["queries"])
    np.save(tmp_path / "text.npy", task["text_queries"])
    code, _, err = run(capsys, "search", index_dir, "--store", uri, "--queries", tmp_path / "queries.npy")
    assert_clean_error(code, err, "--store", "--prompt-embeddings")
    code, _, err = run(capsys, "search", index_dir, "--store", uri, "--corpus", tmp_path / "queries.npy",
                       "--prompt-embeddings", tmp_path / "text.npy")
    assert_clean_error(code, err, "drop --corpus")
    code, _, err = run(capsys, "search", index_dir, "--store", uri, "--prompt-embeddings", tmp_path / "text.npy",
                       "--overfetch", 0)
    assert_clean_error(code, err, "--overfetch")


def test_prompt_embeddings_also_search_the_aligned_corpus(task, index_dir, tmp_path, capsys):
    np.save(tmp_path / "corpus.npy", task["corpus"])
    np.save(tmp_path / "text.npy", task["text_queries"])
    code, out, err = run(capsys, "search", "-q", index_dir, "--corpus", tmp_path / "corpus.npy",
                         "--prompt-embeddings", tmp_path / "text.npy", "-k", 3)
    assert code == 0, err
    own = AlignedCorpus(AlignedIndex.load(index_dir)).add(task["corpus"], ids=np.arange(len(task["corpus"])))
    _, expected = own.search_text(task["text_queries"], k=3)
    assert [int(r["id"]) for r in read_csv(out)] == expected.ravel().tolist()


@pytest.mark.slow
def test_prompt_queries_search_a_store_through_the_text_model(tmp_path, capsys):
    """--prompt with --text-model minilm (the bundled model): the prompts embedded as fit embedded class names."""
    from lfa_index.adapters import make_encoder

    encoder = make_encoder("minilm", cache_dir=tmp_path / "cache", progress=False, device="cpu")
    names = ["card arrival", "top up"]
    texts = ["my card has not arrived yet", "when will my new card come", "I want to top up with cash",
             "how do I add money to my account"]
    x = encoder.embed_texts(texts)
    fill(f"lancedb:{tmp_path / 'lance'}#support", x, np.arange(4), fields={"label": [names[0]] * 2 + [names[1]] * 2})
    common = ["--cache-dir", tmp_path / "cache", "--device", "cpu", "-q"]
    code, _, err = run(capsys, "fit", "--from-store", f"lancedb:{tmp_path / 'lance'}#support", "--text-model",
                       "minilm", "--steps", 5, "--beta", 0.5, *common, "-o", tmp_path / "idx")
    assert code == 0, err
    corpus = ["is it possible to top up my balance by bank transfer", "my card still has not been delivered"]
    fill(f"lancedb:{tmp_path / 'lance'}#corpus", encoder.embed_texts(corpus), np.array([10, 20]))
    code, out, err = run(capsys, "search", tmp_path / "idx", "--store", f"lancedb:{tmp_path / 'lance'}#corpus",
                         "--prompt", "top up", "--prompt", "card arrival", "--text-model", "minilm", "-k", 1, *common)
    assert code == 0, err
    assert [(r["query"], r["id"]) for r in read_csv(out)] == [("top up", "10"), ("card arrival", "20")]


# ----------------------------------------------------------------------------- the real command
def test_the_real_command_labels_a_milvus_lite_file_and_releases_it(task, index_dir, tmp_path):
    """Through ``python -m lfa_index.cli``: one process fills the file, the command labels it, and this
    process reads it (Milvus Lite lets one process at a time open a file, until that process ends)."""
    pytest.importorskip("pymilvus", reason="needs the [milvus] extra")
    uri = store_uri("milvus", tmp_path, "images")
    ids = np.arange(len(task["queries"]))
    np.save(tmp_path / "queries.npy", task["queries"])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    filler = ("import sys, numpy as np; from lfa_index.stores import open_store\n"
              "x = np.load(sys.argv[2]); store = open_store(sys.argv[1], dim=x.shape[1])\n"
              "store.add(x, np.arange(len(x)), fields={'source': ['a'] * len(x)}); store.close()")
    done = subprocess.run([sys.executable, "-c", filler, uri, str(tmp_path / "queries.npy")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "lfa_index.cli", "classify", uri, "--index", str(index_dir), "--write-field",
         "predicted", "--device", "cpu"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote the labels of {len(ids)} rows into field 'predicted'" in done.stderr
    with closing(open_store(uri)) as store:
        labels = np.concatenate([f["predicted"] for _, _, f in store.scan(["predicted"])])
    assert sorted(labels.tolist()) == sorted(AlignedIndex.load(index_dir).predict(task["queries"]).tolist())
