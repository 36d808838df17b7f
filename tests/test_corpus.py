"""AlignedCorpus: images aligned by a fitted AlignedIndex, searched by text and by image; its maps frozen
when it is built; saved beside the index in the safe format; every bad input a typed error."""

from __future__ import annotations

import concurrent.futures
import copy
import json
import pickle
import re
import tempfile
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from properties import cases, data_dir
from safetensors.numpy import load_file, save_file
from test_index import OPTIONS, make_task
from test_properties_index import ARRAY_DAMAGE, JSON_VALUES, damaged, leaves, mutate_json, rewrite_with_checksums

import lfa_index.index.corpus as corpus_module
import lfa_index.persistence as persistence
from lfa_index import (
    LFA,
    AlignedCorpus,
    AlignedIndex,
    DimensionMismatchError,
    DuplicateIdError,
    EmptyIndexError,
    IdsExhaustedError,
    IndexFormatError,
    IndexNotFoundError,
    IndexPathError,
    IndexVersionError,
    InvalidInputError,
    InvalidParameterError,
    NonFiniteError,
    NotFittedError,
    ShapeError,
)
from lfa_index.index import faiss_gpu_available
from lfa_index.index.corpus_format import CORPUS_FORMAT, KIND

pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def fitted(task):
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(*task[:3])


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(5).standard_normal((3000, 32)).astype(np.float32)


def brute_force(aligned_queries: np.ndarray, aligned_images: np.ndarray, ids: np.ndarray, k: int):
    """Top-``k`` ``(scores, ids)`` by cosine, in float32 as written out from the definition."""
    sims = aligned_queries @ aligned_images.T
    top = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, top, 1), ids[top]


def aligned(index: AlignedIndex, x: np.ndarray) -> np.ndarray:
    """``normalize(x G)`` with the index's current task map."""
    z = x @ index.query_transform()
    return z / np.linalg.norm(z, axis=1, keepdims=True)


# ------------------------------------------------------------------ search
def test_text_search_is_exact_in_a_flat_corpus_and_ids_round_trip(fitted, task, images):
    text = task[2]
    ids = np.random.default_rng(1).permutation(10**6)[: len(images)].astype(np.int64)
    corpus = AlignedCorpus(fitted).add(images[:1000], ids=ids[:1000]).add(images[1000:], ids=ids[1000:])
    assert corpus.ntotal == len(images)
    scores, found = corpus.search_text(text, k=10)
    ref_scores, ref_ids = brute_force(fitted.lfa_.transform_text(text), aligned(fitted, images), ids, 10)
    np.testing.assert_array_equal(found, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)


def test_image_search_is_knn_in_the_aligned_space(fitted, task, images):
    queries = task[3][:20]
    corpus = AlignedCorpus(fitted).add(images)
    scores, found = corpus.search(queries, k=5)
    ref_scores, ref_ids = brute_force(fitted.lfa_.transform(queries), aligned(fitted, images), np.arange(3000), 5)
    np.testing.assert_array_equal(found, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    assert (corpus.search(images[:10], k=1)[1][:, 0] == np.arange(10)).all()  # each image is its own neighbour


@pytest.mark.parametrize("d_img, d_txt, side", [(48, 32, "text"), (24, 40, "image")])
def test_a_projected_side_is_aligned_as_the_index_aligns_it(d_img, d_txt, side):
    support, labels, text, queries, _ = make_task(d_img, d_txt)
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    assert index.lfa_.projection_side_ == side
    corpus = AlignedCorpus(index).add(queries)
    np.testing.assert_array_equal(corpus.transform_text(text), index.transform_text(text))
    np.testing.assert_array_equal(index.transform_text(text), index.lfa_.transform_text(text))
    # the text side is part of the class snapshot: a copy (pickled table) aligns text as the original
    np.testing.assert_array_equal(copy.deepcopy(index).transform_text(text), index.transform_text(text))
    np.testing.assert_array_equal(corpus.query_map.align(queries), index.transform(queries))
    _, expected = brute_force(index.transform_text(text), index.transform(queries), np.arange(len(queries)), 5)
    np.testing.assert_array_equal(corpus.search_text(text, 5)[1], expected)


def test_default_ids_continue_after_the_largest_id(fitted, images):
    corpus = AlignedCorpus(fitted).add(images[:5], ids=[10, 11, 12, 13, 40]).add(images[5:8])
    assert sorted(corpus.search(images[:8], k=8)[1][0]) == [10, 11, 12, 13, 40, 41, 42, 43]


def test_k_larger_than_the_corpus_returns_what_exists(fitted, task, images):
    scores, ids = AlignedCorpus(fitted).add(images[:7]).search_text(task[2][:2], k=50)
    assert ids.shape == scores.shape == (2, 7) and sorted(ids[0]) == list(range(7))


def test_ivf_pq_corpus_trains_on_first_add_and_searches(fitted, task, images):
    text = task[2]
    flat = AlignedCorpus(fitted).add(images)
    ivf = AlignedCorpus(fitted, factory="IVF16,PQ32x4np", params="nprobe=8")
    ivf.add(images[:2000], ids=np.arange(2000) + 7).add(images[2000:], ids=np.arange(2000, 3000) + 7)
    inner = faiss.extract_index_ivf(ivf._corpus.index)
    assert inner.is_trained and inner.nprobe == 8 and ivf.ntotal == 3000
    _, exact = flat.search_text(text, k=10)
    _, approx = ivf.search_text(text, k=10)
    recall = np.mean([len(set(a) & set(e + 7)) / 10 for a, e in zip(approx, exact)])
    assert recall >= 0.5, recall
    assert set(approx.ravel()) <= set(range(7, 3007))


def test_a_large_first_add_trains_on_a_bounded_sample(fitted, images, monkeypatch):
    seen = []
    train = faiss.IndexIDMap2.train
    monkeypatch.setattr(faiss.IndexIDMap2, "train", lambda self, x: (seen.append(len(x)), train(self, x))[1])
    monkeypatch.setattr(corpus_module, "TRAIN_ROWS", 500)
    assert AlignedCorpus(fitted, factory="PQ8x4np").add(images).ntotal == len(images)
    assert seen == [500]
    assert AlignedCorpus(fitted, factory="IVF4,Flat").add(images).ntotal == len(images)
    assert seen == [500, 1024]  # 256 points per IVF list


@pytest.mark.parametrize("mapping", ["task", "tt", "average"])
def test_the_mapping_names_the_index_map_that_aligns_the_images(fitted, images, mapping):
    corpus = AlignedCorpus(fitted, mapping=mapping).add(images[:50])
    np.testing.assert_array_equal(corpus.query_map.matrix, fitted.query_transform(mapping))
    np.testing.assert_array_equal(corpus.search(images[:5], 1)[1][:, 0], np.arange(5))


def test_concurrent_searches_give_the_sequential_answers(fitted, task, images):
    corpus = AlignedCorpus(fitted).add(images)
    chunks = np.array_split(task[3], 4)
    calls = {"text": lambda i: corpus.search_text(task[2][i:i + 3], 5), "image": lambda i: corpus.search(chunks[i], 5)}
    jobs = [(name, i) for _ in range(8) for name in calls for i in range(4)]
    expected = {job: calls[job[0]](job[1]) for job in set(jobs)}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda job: calls[job[0]](job[1]), jobs))  # raises what a worker raised
    for job, (scores, ids) in zip(jobs, answers):
        np.testing.assert_array_equal(ids, expected[job][1])
        np.testing.assert_array_equal(scores, expected[job][0])


@pytest.mark.skipif(not faiss_gpu_available(), reason="needs faiss-gpu and a GPU")
def test_a_corpus_of_a_gpu_index_gives_the_cpu_answers(task, images):
    support, labels, text, _, _ = task
    cpu = AlignedCorpus(AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)).add(images)
    gpu = AlignedCorpus(AlignedIndex(lfa=LFA(**{**OPTIONS, "device": "cuda"})).fit(support, labels, text)).add(images)
    assert gpu._corpus._device.on_gpu
    assert (gpu.search_text(text, 5)[1] == cpu.search_text(text, 5)[1]).mean() > 0.95


# ------------------------------------------------------------------ frozen maps
@pytest.mark.parametrize("d_img, d_txt", [(32, 32), (48, 32), (24, 40)])
def test_a_corpus_keeps_the_maps_it_was_built_with_when_its_index_is_refitted(d_img, d_txt, tmp_path):
    support, labels, text, queries, _ = make_task(d_img, d_txt)
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    old_text, old_images = index.transform_text(text), index.transform(queries)
    corpus = AlignedCorpus(index).add(queries)
    before = corpus.search_text(text, 5), corpus.search(queries[:30], 5)
    other = make_task(d_img, d_txt, seed=1)  # another support set: other maps
    index.fit(other[0], other[1], text)
    index.add_classes(other[2][:2])
    assert not np.allclose(index.transform(queries), old_images, atol=1e-3)
    after = corpus.search_text(text, 5), corpus.search(queries[:30], 5)
    for got, expected in zip(after, before):
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_allclose(got[0], expected[0], atol=1e-6)
    _, frozen = brute_force(old_text, old_images, np.arange(len(queries)), 5)
    np.testing.assert_array_equal(after[0][1], frozen)  # the old fit's maps, on both sides
    # images added after the refit are aligned with the frozen map too: each is its own nearest neighbour
    corpus.add(other[3][:10], ids=np.arange(10) + 1000)
    np.testing.assert_array_equal(corpus.search(other[3][:10], 1)[1][:, 0], np.arange(10) + 1000)
    # and so is a saved and loaded copy; a corpus built now uses the new maps
    loaded = AlignedCorpus.load(corpus.save(tmp_path / "corpus"))
    np.testing.assert_array_equal(loaded.search_text(text, 5)[1], corpus.search_text(text, 5)[1])
    np.testing.assert_array_equal(AlignedCorpus(index).query_map.matrix, index.query_transform())


# ------------------------------------------------------------------ save and load
@pytest.fixture(scope="module")
def named():
    """Named classes, an image-side projection (32 -> 40), two added classes; and the text prototypes."""
    support, labels, text, _, _ = make_task(32, 40)
    names = [f"class {i}" for i in range(12)]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[labels < 10], np.array(names)[labels[labels < 10]],
                                                  text[:10], class_names=names[:10])
    return index.add_classes(text[10:], names[10:]), text


@pytest.fixture(scope="module")
def ivf_corpus(named, images):
    """An IVF corpus of ``named`` (averaged map, search parameters) with arbitrary ids."""
    index, text = named
    corpus = AlignedCorpus(index, factory="IVF8,Flat", params="nprobe=4", mapping="average")
    return corpus.add(images[:2500], ids=np.arange(2500) * 3 + 1), text


def corpus_answers(corpus: AlignedCorpus, text: np.ndarray, images: np.ndarray) -> list[np.ndarray]:
    return [*corpus.search_text(text, 10), *corpus.search(images[:20], 10), corpus.transform_text(text)]


def test_save_then_load_gives_identical_answers(ivf_corpus, images, tmp_path):
    corpus, text = ivf_corpus
    loaded = AlignedCorpus.load(corpus.save(tmp_path / "index.corpus"))
    for got, expected in zip(corpus_answers(loaded, text, images), corpus_answers(corpus, text, images)):
        np.testing.assert_array_equal(got, expected)
    assert (loaded.factory, loaded.params, loaded.mapping, loaded.ntotal) == ("IVF8,Flat", "nprobe=4", "average", 2500)
    assert faiss.extract_index_ivf(loaded._corpus.index).nprobe == 4
    assert repr(loaded) == repr(corpus)
    # it adds on: default ids after the largest one held, as before the save
    loaded.add(images[2500:2502])
    assert sorted(loaded.search(images[2500:2502], 1)[1][:, 0]) == [2499 * 3 + 2, 2499 * 3 + 3]


def test_the_directory_holds_json_safetensors_and_faiss_files_with_checksums(ivf_corpus, tmp_path):
    corpus, _ = ivf_corpus
    path = corpus.save(tmp_path / "index.corpus")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["kind"] == KIND and manifest["format_version"] == persistence.FORMAT_VERSION
    assert sorted(p.name for p in data_dir(path).iterdir()) == ["corpus.faiss", "corpus.json", "maps.safetensors"]
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    doc = json.loads((data_dir(path) / "corpus.json").read_text())
    assert doc["corpus_format"] == CORPUS_FORMAT == 1 and doc["next_id"] == 2499 * 3 + 2
    assert doc["params"] == {"factory": "IVF8,Flat", "params": "nprobe=4", "mapping": "average"}
    maps = load_file(str(data_dir(path) / "maps.safetensors"))
    centred = {"map_mean"} if corpus.query_map.mean is not None else set()
    assert set(maps) == {"map_weights", "map_projection"} | centred  # images are projected here, text is not
    np.testing.assert_array_equal(maps["map_projection"], corpus.query_map.projection)


def test_load_never_unpickles(ivf_corpus, tmp_path, monkeypatch):
    path = ivf_corpus[0].save(tmp_path / "index.corpus")

    def refuse(*args, **kwargs):
        raise AssertionError("load() must not unpickle anything")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    AlignedCorpus.load(path)


def test_a_failed_save_leaves_the_previous_corpus_intact(fitted, images, tmp_path, monkeypatch):
    corpus = AlignedCorpus(fitted).add(images[:100])
    path = corpus.save(tmp_path / "index.corpus")
    before = (path / "manifest.json").read_bytes()

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    corpus.add(images[100:200])
    monkeypatch.setattr(faiss, "write_index", broken_write)
    with pytest.raises(OSError, match="disk full"):
        corpus.save(path)
    monkeypatch.undo()
    assert (path / "manifest.json").read_bytes() == before and len(list(path.glob("data-*"))) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.corpus"]
    assert AlignedCorpus.load(path).ntotal == 100


def test_a_device_given_to_load_overrides_the_saved_one(fitted, images, tmp_path):
    path = AlignedCorpus(fitted).add(images[:10]).save(tmp_path / "corpus")
    assert not AlignedCorpus.load(path, device="cpu")._corpus._device.on_gpu
    assert json.loads((data_dir(path) / "corpus.json").read_text())["device"] == "cpu"


# ------------------------------------------------------------------ typed errors
def test_a_corpus_needs_a_fitted_index(fitted):
    with pytest.raises(NotFittedError, match="not fitted"):
        AlignedCorpus(AlignedIndex())
    for wrong in ("my_index", fitted.lfa_, None):
        with pytest.raises(InvalidParameterError, match="index"):
            AlignedCorpus(wrong)


@pytest.mark.parametrize("options, match", [
    ({"factory": "NotAnIndex"}, "factory='NotAnIndex' cannot index 32-d vectors"),
    ({"factory": None}, "factory"), ({"params": 16}, "params"), ({"mapping": "both"}, "mapping"),
    ({"params": "nprobe=4"}, "does not apply to a 'Flat' index"), ({"factory": "PQ5"}, "PQm needs m to divide"),
])
def test_bad_parameters_are_typed_errors(fitted, options, match):
    with pytest.raises(InvalidParameterError, match=match):
        AlignedCorpus(fitted, **options)


CALLS = {
    "add": lambda c, x, t: c.add(x),
    "search": lambda c, x, t: c.search(x, 2),
    "search_text": lambda c, x, t: c.search_text(t, 2),
}


@pytest.fixture()
def filled(fitted, images):
    return AlignedCorpus(fitted).add(images[:10], ids=np.arange(10))


@pytest.mark.parametrize("call", CALLS, ids=list(CALLS))
def test_wrong_widths_empty_batches_and_non_finite_rows_change_nothing(filled, task, call):
    x, text = task[3][:4].copy(), task[2][:3].copy()
    bad = [(np.ones((3, 31), np.float32), np.ones((3, 31), np.float32), DimensionMismatchError, "same"),
           (np.ones((0, 32), np.float32), np.ones((0, 32), np.float32), ShapeError, "empty")]
    x[2, 5], text[1, 3] = np.nan, np.inf
    bad.append((x, text, NonFiniteError, "NaN|infinite|non-finite"))
    for rows, prototypes, error, match in bad:
        with pytest.raises(error, match=match):
            CALLS[call](filled, rows, prototypes)
    assert filled.ntotal == 10  # nothing was added


def test_search_before_any_add_and_k_out_of_range(fitted, filled, task):
    corpus = AlignedCorpus(fitted)
    with pytest.raises(EmptyIndexError, match=re.escape("call add(X) before search_text()")):
        corpus.search_text(task[2][:1], k=3)
    with pytest.raises(EmptyIndexError, match=re.escape("before search()")):
        corpus.search(task[3], k=3)
    for k in (0, -1, 2.5, "3"):
        with pytest.raises(InvalidParameterError, match="k must"):
            filled.search_text(task[2], k=k)


def test_duplicate_and_malformed_ids_are_refused_and_add_nothing(filled, images):
    with pytest.raises(DuplicateIdError, match="already in the corpus"):
        filled.add(images[:2], ids=[10, 3])
    with pytest.raises(DuplicateIdError, match="repeat within this batch"):
        filled.add(images[:2], ids=[20, 20])
    with pytest.raises(InvalidInputError, match="non-negative"):
        filled.add(images[:2], ids=[-1, 30])
    with pytest.raises(ShapeError, match="one id per image"):
        filled.add(images[:2], ids=[30])
    assert filled.ntotal == 10


def test_an_untrainable_first_add_leaves_the_corpus_empty(fitted, task):
    corpus = AlignedCorpus(fitted, factory="IVF64,Flat")
    with pytest.raises(InvalidInputError, match="add more images in the first call.*factory='Flat'"):
        corpus.add(task[3][:10])
    assert corpus.ntotal == 0
    with pytest.raises(EmptyIndexError):
        corpus.search_text(task[2], 2)


def test_default_ids_after_the_last_int64_id_raise_a_typed_error(fitted, task, tmp_path):
    queries = task[3]
    corpus = AlignedCorpus(fitted).add(queries[:2], ids=[7, 2**63 - 1])
    with pytest.raises(IdsExhaustedError, match="pass ids= explicitly"):
        corpus.add(queries[2:4])
    corpus.add(queries[2:4], ids=[8, 9])
    loaded = AlignedCorpus.load(corpus.save(tmp_path / "corpus"))
    with pytest.raises(IdsExhaustedError):
        loaded.add(queries[4:5])
    assert loaded.ntotal == 4 and sorted(loaded.search(queries[:4], 4)[1][0]) == [7, 8, 9, 2**63 - 1]


def test_bad_paths_are_typed_errors_and_an_index_and_its_corpus_never_overwrite_each_other(fitted, images, tmp_path):
    corpus = AlignedCorpus(fitted).add(images[:10])
    index_dir = fitted.save(tmp_path / "index")
    with pytest.raises(IndexNotFoundError, match="no index directory"):
        AlignedCorpus.load(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexFormatError, match="is a file"):
        AlignedCorpus.load(tmp_path / "file")
    with pytest.raises(IndexPathError, match="is a file"):
        corpus.save(tmp_path / "file")
    with pytest.raises(IndexFormatError, match="kind 'aligned-index', not 'aligned-corpus'"):
        AlignedCorpus.load(index_dir)
    with pytest.raises(IndexPathError, match="kind 'aligned-index'"):
        corpus.save(index_dir)
    corpus_dir = corpus.save(tmp_path / "index.corpus")
    with pytest.raises(IndexFormatError, match="kind 'aligned-corpus', not 'aligned-index'"):
        AlignedIndex.load(corpus_dir)
    with pytest.raises(IndexPathError, match="kind 'aligned-corpus'"):
        fitted.save(corpus_dir)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "holiday.jpg").write_bytes(b"not a corpus")
    with pytest.raises(IndexPathError, match="not an lfa-index"):
        corpus.save(tmp_path / "photos")
    assert AlignedIndex.load(index_dir).classes_.tolist() == fitted.classes_.tolist()


# ------------------------------------------------------------------ what load refuses
@pytest.fixture()
def saved(fitted, images, tmp_path):
    return AlignedCorpus(fitted, mapping="tt").add(images[:50], ids=np.arange(50) * 2).save(tmp_path / "corpus")


def read(path):
    """The saved corpus's JSON document, arrays (copies) and FAISS indexes."""
    documents, arrays, indexes = persistence.read_index_dir(path, kind=KIND)
    return documents["corpus.json"], {k: v.copy() for k, v in arrays["maps.safetensors"].items()}, indexes


def rewrite(path, doc, arrays, indexes):
    """Write altered contents back with persistence's own writer, so every checksum matches."""
    persistence.write_index_dir(path, kind=KIND, documents={"corpus.json": doc},
                                arrays={"maps.safetensors": arrays}, faiss_indexes=indexes)


@pytest.mark.parametrize("version", [CORPUS_FORMAT + 1, 0])
def test_another_corpus_format_is_refused_with_how_to_fix_it(saved, version):
    parts = read(saved)
    parts[0]["corpus_format"] = version
    rewrite(saved, *parts)
    with pytest.raises(IndexVersionError, match=f"corpus format {version}.*rebuild the corpus and re-save it"):
        AlignedCorpus.load(saved)


def _set(container, key, value):
    container[key] = value


TAMPERED = {
    # name: (what to change in (doc, arrays, indexes), the file the error names)
    "a map of another width": (lambda d, a, i: _set(a, "map_weights", a["map_weights"][:, :-1]), "corpus.json"),
    "a map with NaN": (lambda d, a, i: a["map_weights"].__setitem__((0, 0), np.nan), "maps.safetensors"),
    "a mean of another width": (lambda d, a, i: _set(a, "map_mean", np.zeros(3, np.float32)), "maps.safetensors"),
    "a text projection of another width": (lambda d, a, i: _set(a, "text_projection", np.eye(7, 32, dtype=np.float32)),
                                           "maps.safetensors"),
    "the map missing": (lambda d, a, i: a.pop("map_weights"), "maps.safetensors"),
    "a complex array": (lambda d, a, i: _set(a, "extra", np.zeros(2, dtype=np.complex64)), "maps.safetensors"),
    "a text width the maps cannot take": (lambda d, a, i: _set(d, "n_text_features", 7), "corpus.json"),
    "an image width the map cannot take": (lambda d, a, i: _set(d, "n_features_in", 31), "corpus.json"),
    "a map without its projection": (lambda d, a, i: _set(a, "map_weights", np.eye(40, 32, dtype=np.float32)),
                                     "corpus.json"),
    "next_id below a held id": (lambda d, a, i: _set(d, "next_id", 5), "corpus.json"),
    "next_id negative": (lambda d, a, i: _set(d, "next_id", -1), "corpus.json"),
    "next_id beyond int64": (lambda d, a, i: _set(d, "next_id", 2**64), "corpus.json"),
    "an unknown map": (lambda d, a, i: d["params"].__setitem__("mapping", "both"), "corpus.json"),
    "a factory that is not a string": (lambda d, a, i: d["params"].__setitem__("factory", 3), "corpus.json"),
    "search parameters the index does not take": (lambda d, a, i: d["params"].__setitem__("params", "nprobe=4"),
                                                  "corpus.json"),
    "a corpus format as text": (lambda d, a, i: _set(d, "corpus_format", "1"), "corpus.json"),
    "the corpus file missing": (lambda d, a, i: i.pop("corpus.faiss"), "corpus.faiss"),
    "a corpus without ids": (lambda d, a, i: _set(i, "corpus.faiss", faiss.IndexFlatIP(32)), "corpus.faiss"),
    "a corpus of another width": (lambda d, a, i: _set(i, "corpus.faiss", faiss.IndexIDMap2(faiss.IndexFlatIP(7))),
                                  "corpus.faiss"),
    "a corpus ranked by L2": (lambda d, a, i: _set(i, "corpus.faiss", faiss.IndexIDMap2(faiss.IndexFlatL2(32))),
                              "corpus.faiss"),
}


@pytest.mark.parametrize("change", TAMPERED, ids=list(TAMPERED))
def test_tampered_contents_with_matching_checksums_raise_a_format_error_naming_the_file(saved, change):
    mutate, file = TAMPERED[change]
    parts = read(saved)
    mutate(*parts)
    rewrite(saved, *parts)
    with pytest.raises(IndexFormatError, match=re.escape(f"{file} of the corpus at")) as caught:
        AlignedCorpus.load(saved)
    assert type(caught.value) is IndexFormatError and "re-save the corpus" in str(caught.value)


# ------------------------------------------------------------------ damaged directories (properties)
@pytest.fixture(scope="module")
def damage_source(named, images):
    """A small corpus (image-side projection, the added classes' map) to save, damage and load."""
    index, text = named
    return AlignedCorpus(index, mapping="tt").add(images[:40], ids=np.arange(40) * 3), text[:3]


def damaged_then_loaded(damage_source, images, change) -> None:
    """Save the corpus, ``change(root)`` it: it must be refused with IndexFormatError, or load and answer
    as the one saved."""
    corpus, text = damage_source
    with tempfile.TemporaryDirectory() as folder:
        root = corpus.save(Path(folder) / "corpus")
        change(root)
        try:
            loaded = AlignedCorpus.load(root)
        except IndexFormatError:
            return
    for got, expected in zip(corpus_answers(loaded, text, images), corpus_answers(corpus, text, images)):
        np.testing.assert_array_equal(got, expected)


@cases(40)
@given(how=st.sampled_from(ARRAY_DAMAGE), data=st.data())
def test_a_damaged_map_with_valid_checksums_is_refused_or_changes_nothing(damage_source, images, how, data):
    def change(root: Path) -> None:
        arrays = load_file(str(data_dir(root) / "maps.safetensors"))
        key = data.draw(st.sampled_from(sorted(arrays)))
        new = damaged(arrays[key], how)
        if new is None:
            del arrays[key]
        else:
            arrays[key] = np.ascontiguousarray(new)
        save_file(arrays, str(root.parent / "scratch.safetensors"))
        rewrite_with_checksums(root, "maps.safetensors", (root.parent / "scratch.safetensors").read_bytes())

    damaged_then_loaded(damage_source, images, change)


@cases(40)
@given(data=st.data())
def test_a_damaged_corpus_json_is_refused_or_changes_nothing(damage_source, images, data):
    def change(root: Path) -> None:
        doc = json.loads((data_dir(root) / "corpus.json").read_text())
        doc = mutate_json(doc, list(data.draw(st.sampled_from(leaves(doc)))), data.draw(JSON_VALUES))
        rewrite_with_checksums(root, "corpus.json", json.dumps(doc).encode())

    damaged_then_loaded(damage_source, images, change)


@cases(40)
@given(data=st.data())
def test_any_flipped_or_cut_byte_is_refused_or_changes_nothing(damage_source, images, data):
    def change(root: Path) -> None:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != ".lfa-index.lock")
        target = data.draw(st.sampled_from(files))
        raw = bytearray(target.read_bytes())
        at = int(data.draw(st.floats(0, 1, exclude_max=True)) * len(raw))
        if data.draw(st.booleans()) and raw:
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        else:
            raw = raw[:at]
        target.write_bytes(bytes(raw))

    damaged_then_loaded(damage_source, images, change)
