"""What only one engine has: Milvus Lite's file lock, index kinds and name rule, LanceDB's columns, Chroma's HNSW
scores; and what no engine has (the package imports no client, the store benchmark). Everything common to the
store protocol is in the five-engine suite (test_stores.py, test_stores_writes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)
from store_tasks import ENGINES

from lfa_index import InvalidParameterError
from lfa_index.stores import ChromaStore, LanceDBStore, MilvusStore, SchemaError, StoreUnavailableError

pytestmark = pytest.mark.usefixtures("single_threaded", "no_network")


# ------------------------------------------------------------------------------ Milvus Lite
@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory):
    """One Milvus Lite database for the module (each file starts an embedded server)."""
    pytest.importorskip("pymilvus", reason="needs the [milvus] extra")
    return str(tmp_path_factory.mktemp("milvus") / "stores.db")


def test_collection_names_follow_milvus_rules(milvus_uri):
    for name in ("c" * 256, "c" * 300, "1starts_with_a_digit", "café", "has-dash", ""):
        with pytest.raises(InvalidParameterError, match="255 letters, digits or '_'"):
            MilvusStore(milvus_uri, name, dim=4)
    with MilvusStore(milvus_uri, "_" + "c" * 254, dim=4) as store:
        assert store.count() == 0


def test_a_milvus_lite_file_held_by_another_process_is_named_as_such(tmp_path):
    pytest.importorskip("pymilvus", reason="needs the [milvus] extra")
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


# ------------------------------------------------------------------------------ LanceDB
def test_lancedb_table_with_string_ids_or_a_field_of_another_type_is_a_schema_error(tmp_path):
    lancedb = pytest.importorskip("lancedb", reason="needs the [lancedb] extra")
    import pyarrow as pa

    db = lancedb.connect(tmp_path / "lancedb")
    vector = pa.field("vector", pa.list_(pa.float32(), 4))
    db.create_table("foreign", schema=pa.schema([pa.field("id", pa.int64()), pa.field("emb", pa.list_(pa.float32()))]))
    db.create_table("string_ids", schema=pa.schema([pa.field("id", pa.string()), vector]))
    with pytest.raises(SchemaError, match="'vector'"):  # a column of vectors of no fixed size
        LanceDBStore(tmp_path / "lancedb", "foreign")
    with pytest.raises(SchemaError, match="integer column 'id'"):
        LanceDBStore(tmp_path / "lancedb", "string_ids")
    with LanceDBStore(tmp_path / "lancedb", "typed", dim=4) as store:
        store.add(np.eye(4), ids=np.arange(4), fields={"label": ["a", "b", "c", "d"]})
        with pytest.raises(SchemaError, match="'label'"):
            store.add(np.eye(4)[:1], ids=[9], fields={"label": [1.5]})
        assert (store.search(np.ones((1, 4)), 1, where={"nope": 1})[1] == -1).all()  # as in every engine


# ------------------------------------------------------------------------------ Chroma
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


# ------------------------------------------------------------------------------ no engine
def test_importing_the_package_imports_no_engine_client():
    modules = [m for m in ENGINES.values() if m is not None] + ["langchain_core", "llama_index"]
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
