"""What an AlignedIndex saves: only what it adds to its LFA plus the LFA's own state; indexes of
earlier formats load and answer identically; inconsistent contents raise IndexFormatError naming
the file, whatever the checksums say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
from test_index_options import ALL_ON, make_task

import lfa_index.persistence as persistence
from lfa_index import LFA, AlignedIndex, IndexFormatError, IndexVersionError
from lfa_index.index.format import INDEX_FORMAT, KIND

DATA = Path(__file__).parent / "data"
NAMES = [f"class {i}" for i in range(10)]

pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def index():
    """Named classes, class biases and centring (every option on), two classes added from text, a corpus."""
    support, labels, text, _, _, corpus = make_task()
    ix = AlignedIndex(lfa=LFA(**ALL_ON)).fit(support, np.array(NAMES)[labels], text[:10], class_names=NAMES)
    ix.add_classes(text[10:], names=["new a", "new b"])
    return ix.add(corpus, ids=np.arange(len(corpus)) * 3 + 1)


@pytest.fixture()
def saved(index, tmp_path):
    return index.save(tmp_path / "ix")


def read(path):
    documents, arrays, indexes = persistence.read_index_dir(path, kind=KIND)
    return documents["params.json"], arrays["arrays.safetensors"], indexes


def rewrite(path, doc, arrays, indexes):
    """Write altered contents back with persistence's own writer, so every checksum matches."""
    persistence.write_index_dir(
        path, kind=KIND, documents={"params.json": doc}, arrays={"arrays.safetensors": arrays}, faiss_indexes=indexes
    )


# ------------------------------------------------------------------ what is saved
def test_the_index_saves_the_lfa_state_once_and_only_what_it_adds(index, saved):
    doc, arrays, _ = read(saved)
    values, lfa_arrays = index.lfa_.fitted_state()
    assert doc["index_format"] == INDEX_FORMAT
    assert doc["lfa"]["state"] == json.loads(json.dumps(values))
    assert {name for name in arrays if name.startswith("lfa.")} == {"lfa." + name for name in lfa_arrays}
    for name, value in lfa_arrays.items():
        np.testing.assert_array_equal(arrays["lfa." + name], value)
    own = {name for name in arrays if not name.startswith("lfa.")}
    assert own == {
        "text_embeddings", "added_prototypes", "is_new_class", "support_embeddings", "support_labels",
        "folded_task", "folded_tt", "corpus_query_map", "corpus_query_offset",
    }
    assert arrays["added_prototypes"].shape == (2, index.prototypes_.shape[1])  # the classes added from text
    assert doc["params"]["lfa"] == index.lfa.get_params() and doc["class_names"] == NAMES + ["new a", "new b"]


def test_a_loaded_estimator_has_the_saved_state(index, saved):
    loaded = AlignedIndex.load(saved)
    values, arrays = loaded.lfa_.fitted_state()
    expected_values, expected_arrays = index.lfa_.fitted_state()
    assert json.loads(json.dumps(values)) == json.loads(json.dumps(expected_values))
    assert arrays.keys() == expected_arrays.keys()
    for name in arrays:
        np.testing.assert_array_equal(arrays[name], expected_arrays[name], err_msg=name)
    for name in ("prototypes_", "intercept_", "is_new_class_", "text_embeddings_", "classes_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(index, name), err_msg=name)


def test_a_device_given_to_load_overrides_the_saved_one(saved):
    assert AlignedIndex.load(saved, device="cpu").lfa_.device == "cpu"


# ------------------------------------------------------------------ earlier formats
def fixture_answers(ix, answers):
    queries, text, corpus = answers["queries"], answers["text"], answers["corpus"]
    raw = faiss.IndexFlatIP(corpus.shape[1])
    raw.add(corpus)
    tau = float(answers["tau"])
    got = {
        "predict": np.asarray(ix.predict(queries)).astype(str),
        # the fixture's τ came from the support rows' own scores (rejection_threshold now holds rows out)
        "tau": np.float32(np.quantile(ix.search(support_rows(ix), 1)[0][:, 0], 0.5, method="lower")),
        # rejected where the best aligned score is below τ, as predict(reject_below=τ) did then
        "reject": np.where(ix.search(queries, 1)[0][:, 0] >= tau, np.asarray(ix.predict(queries)).astype(str),
                           str(ix.unknown_label_)),
        "search_scores": ix.search(queries, 4)[0],
        "search_labels": np.asarray(ix.search(queries, 4)[1]).astype(str),
        "decision": ix.decision_function(queries),
        "proba": ix.predict_proba(queries),
        "text_scores": ix.search_text(text, 5)[0],
        "text_ids": ix.search_text(text, 5)[1],
        "corpus_scores": ix.search_corpus(queries[:10], 5)[0],
        "corpus_ids": ix.search_corpus(queries[:10], 5)[1],
        "unaligned_ids": ix.search_unaligned(raw, text, 5, overfetch=60)[1],
        "prototypes_auto": ix.aligned_prototypes(),
        "prepared": ix.prepare_queries(queries),
        "transform": ix.transform(queries),
    }
    for mapping in ("task", "tt", "average"):
        got[f"prototypes_{mapping}"] = ix.aligned_prototypes(mapping)
        got[f"norms_{mapping}"] = ix.query_norms(queries, mapping)
        got[f"query_map_{mapping}"] = ix.query_transform(mapping)
        got[f"offset_{mapping}"] = ix.query_offset(mapping)
    return got


def support_rows(ix: AlignedIndex) -> np.ndarray:
    """View 0 of the support rows."""
    support = ix.support_embeddings_
    return np.ascontiguousarray(support[:, 0] if support.ndim == 3 else support)


@pytest.mark.parametrize("name", ["index_v2_head", "index_v2_head_paper"])
def test_a_format_2_index_loads_and_answers_identically(name, tmp_path):
    """Written by the code before format 3 (commit 56ebff7, ``AlignedIndex(**lfa_options)``): every
    option on with named and added classes (index_v2_head); the paper's options with an image-side
    projection, an added class and an IVF corpus aligned with W_tt (index_v2_head_paper)."""
    answers = np.load(DATA / f"{name}_answers.npz")
    loaded = AlignedIndex.load(DATA / name)
    got = fixture_answers(loaded, answers)
    for key, value in got.items():
        _same_answer(value, answers[key], key)
    # it saves as format 3 and still answers the same
    again = AlignedIndex.load(loaded.save(tmp_path / "ix"))
    assert read(tmp_path / "ix")[0]["index_format"] == INDEX_FORMAT
    for key, value in fixture_answers(again, answers).items():
        _same_answer(value, answers[key], key)


def _same_answer(value: np.ndarray, expected: np.ndarray, key: str) -> None:
    """Labels and ids exactly; scores and probabilities to float32 rounding (the query side now
    computes in numpy float64, where the saved answers came from torch float32)."""
    if np.asarray(expected).dtype.kind == "f":
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=key)
    else:
        np.testing.assert_array_equal(value, expected, err_msg=key)


def test_a_format_2_index_keeps_its_parameters_as_an_lfa():
    loaded = AlignedIndex.load(DATA / "index_v2_head_paper")
    assert loaded.corpus_factory == "IVF2,Flat" and loaded.corpus_params == "nprobe=1"
    assert loaded.corpus_mapping == "tt" and loaded.lfa.projection == "shrink" and loaded.lfa.steps == 10
    assert loaded.lfa_.projection_side_ == "image" and loaded.label_space_.kind == "index"


def test_a_newer_index_format_is_refused(saved):
    doc, arrays, indexes = read(saved)
    rewrite(saved, {**doc, "index_format": INDEX_FORMAT + 1}, arrays, indexes)
    with pytest.raises(IndexVersionError, match="upgrade lfa-index"):
        AlignedIndex.load(saved)


# ------------------------------------------------------------------ tampered contents
def _set(container, key, value):
    container[key] = value


TAMPERED = {
    # name: (what to change in (doc, arrays, indexes), the file the error names)
    "W not square": (lambda d, a, i: _set(a, "lfa.W_", a["lfa.W_"][:-1]), "arrays.safetensors"),
    "W_tt holds NaN": (lambda d, a, i: a["lfa.W_tt_"].__setitem__((0, 0), np.nan), "arrays.safetensors"),
    "W_avg of integers": (lambda d, a, i: _set(a, "lfa.W_avg_", a["lfa.W_avg_"].astype(np.int32)),
                          "arrays.safetensors"),
    "prototypes of another width": (lambda d, a, i: _set(a, "lfa.prototypes_", a["lfa.prototypes_"][:, :-1]),
                                    "arrays.safetensors"),
    "an intercept too few": (lambda d, a, i: _set(a, "lfa.intercept_", a["lfa.intercept_"][:-1]), "arrays.safetensors"),
    "folded prototypes changed": (lambda d, a, i: _set(a, "folded_task", a["folded_task"] * np.float32(1.01)),
                                  "arrays.safetensors"),
    "folded prototypes a row short": (lambda d, a, i: _set(a, "folded_tt", a["folded_tt"][:-1]), "arrays.safetensors"),
    "folded prototypes in float64": (lambda d, a, i: _set(a, "folded_task", a["folded_task"].astype(np.float64)),
                                     "arrays.safetensors"),
    "a text row short": (lambda d, a, i: _set(a, "text_embeddings", a["text_embeddings"][:-1]), "arrays.safetensors"),
    "text of another width": (lambda d, a, i: _set(a, "text_embeddings", a["text_embeddings"][:, :-1]),
                              "arrays.safetensors"),
    "is_new_class a flag short": (lambda d, a, i: _set(a, "is_new_class", a["is_new_class"][:-1]),
                                  "arrays.safetensors"),
    "an added class marked fitted": (lambda d, a, i: a["is_new_class"].__setitem__(-1, 0), "arrays.safetensors"),
    "added prototypes missing": (lambda d, a, i: a.pop("added_prototypes"), "arrays.safetensors"),
    "support labels out of range": (lambda d, a, i: _set(a, "support_labels", a["support_labels"] + 100),
                                    "arrays.safetensors"),
    "support of another width": (lambda d, a, i: _set(a, "support_embeddings", a["support_embeddings"][:, :-1]),
                                 "arrays.safetensors"),
    "corpus map of another width": (lambda d, a, i: _set(a, "corpus_query_map", a["corpus_query_map"][:, :-1]),
                                    "arrays.safetensors"),
    "corpus offset with NaN": (lambda d, a, i: a["corpus_query_offset"].__setitem__(0, np.nan), "arrays.safetensors"),
    "a complex array": (lambda d, a, i: _set(a, "extra", np.zeros(2, dtype=np.complex64)), "arrays.safetensors"),
    "next_id below a held id": (lambda d, a, i: d["corpus"].__setitem__("next_id", 5), "params.json"),
    "next_id negative": (lambda d, a, i: d["corpus"].__setitem__("next_id", -1), "params.json"),
    "next_id beyond int64": (lambda d, a, i: d["corpus"].__setitem__("next_id", 2**64), "params.json"),
    "an unknown corpus map": (lambda d, a, i: d["corpus"].__setitem__("mapping", "both"), "params.json"),
    "class names repeated": (lambda d, a, i: d["class_names"].__setitem__(1, d["class_names"][0]), "params.json"),
    "a class name short": (lambda d, a, i: d["class_names"].pop(), "params.json"),
    "an unknown label space": (lambda d, a, i: _set(d, "label_space", "colours"), "params.json"),
    "an unknown LFA option": (lambda d, a, i: d["lfa"]["params"].__setitem__("betta", 0.5), "params.json"),
    "an unknown index parameter value": (lambda d, a, i: d["params"].__setitem__("corpus_mapping", "both"),
                                         "params.json"),
    "the LFA state missing": (lambda d, a, i: d["lfa"].pop("state"), "params.json"),
    "an index format as text": (lambda d, a, i: _set(d, "index_format", "3"), "params.json"),
    "a projection side unknown": (lambda d, a, i: d["lfa"]["state"].__setitem__("projection_side_", "both"),
                                  "arrays.safetensors"),
    "classes_ of another count": (lambda d, a, i: d["lfa"]["state"].__setitem__("classes_", [0, 1, 2]),
                                  "arrays.safetensors"),
    "the corpus file missing": (lambda d, a, i: i.pop("corpus.faiss"), "corpus.faiss"),
    "a corpus without ids": (lambda d, a, i: _set(i, "corpus.faiss", faiss.IndexFlatIP(a["corpus_query_map"].shape[1])),
                             "corpus.faiss"),
    "a corpus of another width": (lambda d, a, i: _set(i, "corpus.faiss", faiss.IndexIDMap2(faiss.IndexFlatIP(7))),
                                  "corpus.faiss"),
}


@pytest.mark.parametrize("change", TAMPERED, ids=list(TAMPERED))
def test_tampered_contents_with_matching_checksums_raise_a_format_error_naming_the_file(saved, change):
    mutate, file = TAMPERED[change]
    doc, arrays, indexes = read(saved)
    arrays = {name: value.copy() for name, value in arrays.items()}
    mutate(doc, arrays, indexes)
    rewrite(saved, doc, arrays, indexes)
    with pytest.raises(IndexFormatError, match=file.replace(".", r"\.")) as caught:
        AlignedIndex.load(saved)
    assert type(caught.value) is IndexFormatError and "re-save the index" in str(caught.value)


@pytest.mark.parametrize("name", ["index_v1", "index_v2_head"])
def test_tampered_indexes_of_earlier_formats_raise_a_format_error(name, tmp_path):
    path = shutil.copytree(DATA / name, tmp_path / name)
    doc, arrays, indexes = read(path)
    arrays = {key: value.copy() for key, value in arrays.items()}
    arrays["folded_task"][0] += 1.0
    rewrite(path, doc, arrays, indexes)
    with pytest.raises(IndexFormatError, match=r"arrays\.safetensors.*folded_task"):
        AlignedIndex.load(path)
    arrays.pop("W")
    rewrite(path, doc, arrays, indexes)
    with pytest.raises(IndexFormatError, match=r"params\.json.*missing 'W'"):
        AlignedIndex.load(path)


