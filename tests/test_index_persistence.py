"""AlignedIndex.save / load: identical answers, safetensors + JSON + FAISS, checksums, atomic writes."""

from __future__ import annotations

import json
import pickle

import faiss
import numpy as np
import pytest

import lfa_index.persistence as persistence
from lfa_index import AlignedIndex, IndexFormatError, IndexPathError, IndexVersionError

OPTIONS = dict(beta=0.5, steps=5, device="cpu", random_state=0)
NAMES = [f"class {i}" for i in range(10)]


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    text = rng.standard_normal((12, 24)).astype(np.float32)
    mix = rng.standard_normal((24, 40)).astype(np.float32)
    labels = np.repeat(np.arange(10), 3)
    support = (text[labels] @ mix + rng.standard_normal((30, 40))).astype(np.float32)
    queries = (text[rng.integers(0, 12, 200)] @ mix + rng.standard_normal((200, 40))).astype(np.float32)
    corpus = rng.standard_normal((2500, 40)).astype(np.float32)
    return support, labels, text, queries, corpus


@pytest.fixture(scope="module")
def index(data):
    """Named classes, an image-side projection (40 -> 24), two added classes and an IVF corpus."""
    support, labels, text, _, corpus = data
    ix = AlignedIndex(corpus_factory="IVF8,Flat", corpus_params="nprobe=4", **OPTIONS)
    ix.fit(support, np.array(NAMES)[labels], text[:10], class_names=NAMES)
    ix.add_classes(text[10:], names=["new a", "new b"])
    return ix.add(corpus, ids=np.arange(len(corpus)) * 3 + 1)


def answers(ix, data):
    _, _, text, queries, corpus = data
    return {
        "predict": ix.predict(queries),
        "reject": ix.predict(queries, reject_below=0.2),
        "search": ix.search(queries, 4),
        "decision": ix.decision_function(queries),
        "proba": ix.predict_proba(queries),
        "text": ix.search_text(text, 10),
        "corpus": ix.search_corpus(queries[:20], 10),
        "prototypes": ix.aligned_prototypes(),
    }


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        left = a[key] if isinstance(a[key], tuple) else (a[key],)
        right = b[key] if isinstance(b[key], tuple) else (b[key],)
        for x, y in zip(left, right):
            np.testing.assert_array_equal(x, y, err_msg=key)


def test_save_then_load_gives_identical_answers(index, data, tmp_path):
    index.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    assert_same(answers(index, data), answers(loaded, data))
    assert loaded.get_params() == index.get_params()
    assert list(loaded.classes_) == NAMES + ["new a", "new b"] and loaded.corpus_size_ == index.corpus_size_
    assert faiss.extract_index_ivf(loaded._corpus.index).nprobe == 4


def test_directory_holds_safetensors_json_and_faiss_files_with_checksums(index, tmp_path):
    path = index.save(tmp_path / "ix")
    files = sorted(p.name for p in path.iterdir())
    assert files == ["arrays.safetensors", "corpus.faiss", "manifest.json", "params.json"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "lfa-index" and manifest["format_version"] == persistence.FORMAT_VERSION
    assert set(manifest["files"]) == {"arrays.safetensors", "corpus.faiss", "params.json"}
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    assert json.loads((path / "params.json").read_text())["class_names"] == NAMES + ["new a", "new b"]


def test_load_never_unpickles(index, tmp_path, monkeypatch):
    index.save(tmp_path / "ix")

    def refuse(*args, **kwargs):
        raise AssertionError("load() must not unpickle anything")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    AlignedIndex.load(tmp_path / "ix")


def test_partial_fit_after_load_continues_as_before(data, tmp_path):
    support, labels, text, queries, _ = data
    original = AlignedIndex(**OPTIONS).fit(support[::2], labels[::2], text)
    original.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    original.partial_fit(support[1::2], labels[1::2])
    loaded.partial_fit(support[1::2], labels[1::2])
    np.testing.assert_array_equal(loaded.lfa_.W_, original.lfa_.W_)
    np.testing.assert_array_equal(loaded.predict(queries), original.predict(queries))


def test_index_without_corpus_round_trips(data, tmp_path):
    support, labels, text, queries, _ = data
    ix = AlignedIndex(**OPTIONS).fit(support, labels, text[:10])
    loaded = AlignedIndex.load(ix.save(tmp_path / "ix"))
    np.testing.assert_array_equal(loaded.predict(queries), ix.predict(queries))
    assert loaded.corpus_size_ == 0 and loaded.label_space_ == "index"


# ------------------------------------------------------------------ where save may write
def test_save_replaces_an_existing_index_and_fills_an_empty_directory(index, data, tmp_path):
    support, labels, text, queries, _ = data
    (tmp_path / "empty").mkdir()
    index.save(tmp_path / "empty")
    other = AlignedIndex(**OPTIONS).fit(support, labels, text[:10])
    other.save(tmp_path / "empty")
    np.testing.assert_array_equal(AlignedIndex.load(tmp_path / "empty").predict(queries), other.predict(queries))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no temporary directories left


def test_save_refuses_a_non_empty_directory_that_is_not_an_index(index, tmp_path):
    target = tmp_path / "photos"
    target.mkdir()
    (target / "holiday.jpg").write_bytes(b"not an index")
    with pytest.raises(IndexPathError, match="not an lfa-index"):
        index.save(target)
    assert [p.name for p in target.iterdir()] == ["holiday.jpg"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexPathError, match="is a file"):
        index.save(tmp_path / "file")


def test_a_failed_save_leaves_the_previous_index_intact(index, data, tmp_path, monkeypatch):
    path = index.save(tmp_path / "ix")
    before = (path / "manifest.json").read_bytes()

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(persistence.faiss, "write_index", broken_write)
    with pytest.raises(OSError, match="disk full"):
        index.save(path)
    assert (path / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]
    monkeypatch.undo()
    assert_same(answers(AlignedIndex.load(path), data), answers(index, data))


# ------------------------------------------------------------------ what load refuses
@pytest.fixture()
def saved(index, tmp_path):
    return index.save(tmp_path / "ix")


def test_corrupted_file_is_detected(saved):
    blob = bytearray((saved / "arrays.safetensors").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (saved / "arrays.safetensors").write_bytes(bytes(blob))
    with pytest.raises(IndexFormatError, match="corrupted"):
        AlignedIndex.load(saved)


def test_truncated_file_is_detected(saved):
    blob = (saved / "corpus.faiss").read_bytes()
    (saved / "corpus.faiss").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(IndexFormatError, match="truncated"):
        AlignedIndex.load(saved)


def test_missing_file_is_detected(saved):
    (saved / "params.json").unlink()
    with pytest.raises(IndexFormatError, match="missing"):
        AlignedIndex.load(saved)


def test_foreign_directories_are_refused(tmp_path, saved):
    with pytest.raises(IndexFormatError, match="no manifest.json"):
        AlignedIndex.load(tmp_path)
    with pytest.raises(IndexFormatError, match="no index directory"):
        AlignedIndex.load(tmp_path / "nowhere")
    (saved / "manifest.json").write_text(json.dumps({"format": "something-else", "files": {}}))
    with pytest.raises(IndexFormatError, match="foreign"):
        AlignedIndex.load(saved)
    (saved / "manifest.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupted"):
        AlignedIndex.load(saved)


def test_manifest_cannot_point_outside_the_directory(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["files"]["../escape.json"] = {"sha256": "0" * 64, "bytes": 1}
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="invalid entry"):
        AlignedIndex.load(saved)


def test_newer_format_version_is_refused(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["format_version"] = persistence.FORMAT_VERSION + 1
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexVersionError, match="upgrade lfa-index"):
        AlignedIndex.load(saved)


def test_consistent_but_foreign_contents_are_refused(tmp_path):
    persistence.write_index_dir(
        tmp_path / "odd", kind="aligned-index", documents={"params.json": {"hello": 1}}, arrays={}, faiss_indexes={}
    )
    with pytest.raises(IndexFormatError, match="not written by AlignedIndex.save"):
        AlignedIndex.load(tmp_path / "odd")
