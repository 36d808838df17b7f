"""What an AlignedIndex saves: only what it adds to its LFA plus the LFA's own state, and no image
corpus; another index format, or an index saved with a corpus section, is refused; inconsistent
contents raise IndexFormatError naming the file, whatever the checksums say."""

from __future__ import annotations

import json
import re

import faiss
import numpy as np
import pytest
from test_index_options import ALL_ON, make_task

import lfa_index.persistence as persistence
from lfa_index import LFA, AlignedIndex, IndexFormatError, IndexVersionError
from lfa_index.index.format import INDEX_FORMAT, KIND

NAMES = [f"class {i}" for i in range(10)]

pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def index():
    """Named classes, class biases and centring (every option on), two classes added from text."""
    support, labels, text, _, _, _ = make_task()
    ix = AlignedIndex(lfa=LFA(**ALL_ON)).fit(support, np.array(NAMES)[labels], text[:10], class_names=NAMES)
    return ix.add_classes(text[10:], class_names=["new a", "new b"])


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
        "folded_task", "folded_tt",
    }
    assert arrays["added_prototypes"].shape == (2, index.prototypes_.shape[1])  # the classes added from text
    assert doc["params"] == {"lfa": index.lfa.get_params()} and doc["class_names"] == NAMES + ["new a", "new b"]
    assert "corpus" not in doc


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


# ------------------------------------------------------------------ other formats
@pytest.mark.parametrize("version", [INDEX_FORMAT + 1, 3, 0])
def test_another_index_format_is_refused_with_how_to_fix_it(saved, version):
    doc, arrays, indexes = read(saved)
    rewrite(saved, {**doc, "index_format": version}, arrays, indexes)
    with pytest.raises(IndexVersionError, match=f"index format {version}.*re-fit the index and re-save it"):
        AlignedIndex.load(saved)


# ------------------------------------------------------------------ a corpus section: refused, not upgraded
def _corpus_index(d, a, i):
    ids = faiss.IndexIDMap2(faiss.IndexFlatIP(a["folded_task"].shape[1]))
    ids.add_with_ids(np.ones((2, ids.d), dtype=np.float32), np.arange(2))
    i["corpus.faiss"] = ids


STALE_CORPUS = {  # what an index saved while indexes held their own image corpus carried
    "a corpus.faiss file": (_corpus_index, "corpus.faiss"),
    "a corpus entry": (lambda d, a, i: _set(d, "corpus", {"mapping": "task", "next_id": 2}), "a 'corpus' entry"),
    "an empty corpus entry": (lambda d, a, i: _set(d, "corpus", None), "a 'corpus' entry"),
    "corpus parameters": (lambda d, a, i: d["params"].update(corpus_factory="Flat", corpus_mapping="task"),
                          "corpus_* parameters"),
}


@pytest.mark.parametrize("change", STALE_CORPUS, ids=list(STALE_CORPUS))
def test_an_index_saved_with_a_corpus_section_is_refused_with_how_to_fix_it(saved, change):
    mutate, part = STALE_CORPUS[change]
    doc, arrays, indexes = read(saved)
    mutate(doc, arrays, indexes)
    rewrite(saved, doc, arrays, indexes)
    expected = f"holds an aligned corpus section \\({re.escape(part)}\\).*AlignedCorpus"
    with pytest.raises(IndexFormatError, match=expected) as caught:
        AlignedIndex.load(saved)
    assert type(caught.value) is IndexFormatError  # not upgraded, not a version error: the format is still 1


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
    "a complex array": (lambda d, a, i: _set(a, "extra", np.zeros(2, dtype=np.complex64)), "arrays.safetensors"),
    "class names repeated": (lambda d, a, i: d["class_names"].__setitem__(1, d["class_names"][0]), "params.json"),
    "a class name short": (lambda d, a, i: d["class_names"].pop(), "params.json"),
    "an unknown label space": (lambda d, a, i: _set(d, "label_space", "colours"), "params.json"),
    "an unknown LFA option": (lambda d, a, i: d["lfa"]["params"].__setitem__("betta", 0.5), "params.json"),
    "an unknown index parameter": (lambda d, a, i: d["params"].__setitem__("metric", "cosine"), "params.json"),
    "an index parameter value of another type": (lambda d, a, i: d["params"].__setitem__("lfa", "LFA()"),
                                                 "params.json"),
    "the LFA state missing": (lambda d, a, i: d["lfa"].pop("state"), "params.json"),
    "an index format as text": (lambda d, a, i: _set(d, "index_format", "3"), "params.json"),
    "a projection side unknown": (lambda d, a, i: d["lfa"]["state"].__setitem__("projection_side_", "both"),
                                  "arrays.safetensors"),
    "classes_ of another count": (lambda d, a, i: d["lfa"]["state"].__setitem__("classes_", [0, 1, 2]),
                                  "arrays.safetensors"),
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
