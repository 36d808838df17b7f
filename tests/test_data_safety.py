"""A call touches only what it owns, refuses what it cannot keep exactly, and fails with a typed error naming the
file, field or flag: saves, loads, outputs, embeddings files, copies, parameters, URIs and embedders.

Commands run through the real console script (``python -m lfa_index.cli``)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest
from synthetic import planted_gap_problem

from lfa_index import (
    LFA,
    AlignedCorpus,
    AlignedIndex,
    IndexFormatError,
    IndexPathError,
    InvalidParameterError,
    LabelError,
)
from lfa_index.adapters import load_embeddings
from lfa_index.errors import FileFormatError, InvalidInputError, OutputPathError, ShapeError, StoreURIError
from lfa_index.persistence.layout import file_sha256
from lfa_index.stores import FaissStore, open_store

REPO = Path(__file__).resolve().parents[1]
OPTIONS = dict(steps=5, device="cpu", random_state=0)

pytestmark = pytest.mark.usefixtures("single_threaded")


PROBLEM = planted_gap_problem(n_classes=4, shots=5, d=8, n_test=6, seed=0)  # X, y, P, queries, their labels


@pytest.fixture(scope="module")
def problem():
    return PROBLEM


@pytest.fixture(scope="module")
def index():
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(*PROBLEM[:3])


def console(*argv, cwd=None) -> subprocess.CompletedProcess:
    """``python -m lfa_index.cli ARGV`` in a fresh process (this checkout first on the path)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "lfa_index.cli", *map(str, argv)], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_refused(done: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 1 with one ``lfa-index: error:`` line and no traceback (a crash would exit with a signal)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("lfa-index: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def resave(path: Path, name: str, edit) -> None:
    """Change one JSON file of a saved index and record its new checksum, as a careful forger would."""
    manifest = json.loads((path / "manifest.json").read_text())
    file = path / manifest["data"] / name
    file.write_text(json.dumps(edit(json.loads(file.read_text()))))
    manifest["files"][name] = {"sha256": file_sha256(file), "bytes": file.stat().st_size}
    (path / "manifest.json").write_text(json.dumps(manifest))


# ------------------------------------------------------------------------------ what a save may replace
def test_a_save_replaces_only_its_own_kind(index, tmp_path):
    store = FaissStore(dim=8).add(np.eye(8), np.arange(8), fields={"n": list(range(8))})
    store.save(tmp_path / "store")
    index.save(tmp_path / "index")
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    with pytest.raises(IndexPathError, match="kind 'faiss-store'"):
        index.save(tmp_path / "store")
    with pytest.raises(IndexPathError, match="kind 'aligned-index'"):
        store.save(tmp_path / "index")
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before
    assert FaissStore.load(tmp_path / "store").count() == 8 and AlignedIndex.load(tmp_path / "index")


def test_a_symlinked_lock_file_is_refused_and_its_target_never_created(index, tmp_path):
    target = tmp_path / "index"
    target.mkdir()
    (target / ".lfa-index.lock").symlink_to(tmp_path / "outside.lock")
    with pytest.raises(IndexPathError, match="lfa-index.lock"):
        index.save(target)
    assert not (tmp_path / "outside.lock").exists() and sorted(os.listdir(target)) == [".lfa-index.lock"]
    index.save(tmp_path / "saved")  # over an index whose lock became a link meanwhile, too
    (tmp_path / "saved" / ".lfa-index.lock").unlink()
    (tmp_path / "saved" / ".lfa-index.lock").symlink_to(tmp_path / "elsewhere.lock")
    with pytest.raises(IndexPathError):
        index.save(tmp_path / "saved")
    assert not (tmp_path / "elsewhere.lock").exists()


def test_load_refuses_a_data_folder_or_file_that_is_a_link_out_of_the_index(index, tmp_path):
    for kind in ("folder", "file"):
        path = index.save(tmp_path / kind)
        data = path / json.loads((path / "manifest.json").read_text())["data"]
        moved = tmp_path / f"{kind}-elsewhere"
        source = data if kind == "folder" else data / "params.json"
        source.rename(moved)
        source.symlink_to(moved)
        with pytest.raises(IndexFormatError, match="symbolic link"):
            AlignedIndex.load(path)


@pytest.mark.parametrize("name", ["../escaped", "/abs", ".hidden", "a/b", ""])
def test_a_faiss_store_name_leading_out_of_its_directory_is_refused(tmp_path, name):
    uri = f"faiss:{tmp_path / 'stores'}#{tmp_path / 'abs' if name == '/abs' else name}"
    with pytest.raises((InvalidParameterError, StoreURIError)):
        open_store(uri, dim=4).save()
    assert sorted(os.listdir(tmp_path)) == []


def test_the_command_refuses_a_faiss_store_name_leading_out_of_its_directory(tmp_path, index):
    index.save(tmp_path / "ix")
    (tmp_path / "stores").mkdir()
    FaissStore(dim=8).add(np.eye(8), np.arange(8), fields={"n": list(range(8))}).save(tmp_path / "x")
    before = {p: p.read_bytes() for p in sorted((tmp_path / "x").rglob("*")) if p.is_file()}
    done = console("classify", f"faiss:{tmp_path / 'stores'}#../x", "--index", tmp_path / "ix", "--write-field",
                   "label", "--device", "cpu")
    assert_refused(done, "FAISS store name")
    assert {p: p.read_bytes() for p in sorted((tmp_path / "x").rglob("*")) if p.is_file()} == before


# ------------------------------------------------------------------------------ outputs never replace inputs
def test_predict_refuses_to_write_its_csv_over_its_queries(index, problem, tmp_path):
    index.save(tmp_path / "ix")
    np.save(tmp_path / "q.npy", problem[3])
    before = sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file())
    for output in (tmp_path / "q.npy", tmp_path / "ix" / "out.csv", tmp_path):
        assert_refused(console("predict", tmp_path / "ix", "--queries", tmp_path / "q.npy", "-o", output,
                               "--device", "cpu"), "-o/--output", "would overwrite an input")
    assert sorted((p, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()) == before
    done = console("predict", tmp_path / "ix", "--queries", tmp_path / "q.npy", "-o", tmp_path / "out.csv",
                   "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 1 + len(problem[3])


def test_fit_refuses_to_save_over_its_support_file(problem, tmp_path):
    X, y, P, _, _ = problem
    np.savez(tmp_path / "s.npz", embeddings=X, labels=y)
    np.save(tmp_path / "p.npy", P)
    before = (tmp_path / "s.npz").read_bytes()
    assert_refused(console("fit", "--support", tmp_path / "s.npz", "--prototypes", tmp_path / "p.npy", "--steps", 2,
                           "--device", "cpu", "-o", tmp_path / "s.npz"), "--support")
    assert (tmp_path / "s.npz").read_bytes() == before


def test_classify_parquet_refuses_a_destination_that_is_or_holds_its_source(index, tmp_path):
    from lfa_index.distributed import classify_parquet

    index.save(tmp_path / "ix")
    source = tmp_path / "embeddings"
    source.mkdir()
    (source / "part.parquet").write_bytes(b"rows")
    for destination in (source, source / "out", tmp_path, tmp_path / "ix"):
        with pytest.raises(OutputPathError, match="would overwrite an input"):
            classify_parquet(source, destination, tmp_path / "ix", overwrite=True)
    assert (source / "part.parquet").read_bytes() == b"rows" and sorted(os.listdir(source)) == ["part.parquet"]


# ------------------------------------------------------------------------------ .faiss inputs
def write_index(path: Path, factory: str, x: np.ndarray) -> None:
    metric = faiss.METRIC_L2 if factory == "LSH" else faiss.METRIC_INNER_PRODUCT
    index = faiss.index_factory(x.shape[1], factory, metric)
    index.train(x)
    if "IDMap" in factory:
        index.add_with_ids(x, np.arange(len(x)) * 2)
    else:
        index.add(x)
    faiss.write_index(index, str(path))


@pytest.mark.parametrize("factory", ["IVF4,PQ4x4fs", "HNSW8", "IVF2,Flat", "PQ4x4", "LSH", "IDMap,HNSW8"])
def test_a_faiss_file_other_than_flat_is_refused_before_faiss_touches_it(tmp_path, factory):
    x = np.random.default_rng(0).standard_normal((400, 16)).astype(np.float32)
    write_index(tmp_path / "v.faiss", factory, x)
    with pytest.raises(FileFormatError, match="not a flat FAISS index"):
        load_embeddings(tmp_path / "v.faiss")


def test_the_command_refuses_an_ivf_pq_file_instead_of_crashing(index, tmp_path):
    x = np.random.default_rng(0).standard_normal((400, 8)).astype(np.float32)
    write_index(tmp_path / "q.faiss", "IVF4,PQ4x4fs", x)
    index.save(tmp_path / "ix")
    assert_refused(console("predict", tmp_path / "ix", "--queries", tmp_path / "q.faiss", "--device", "cpu"),
                   "q.faiss", "not a flat FAISS index")


@pytest.mark.parametrize("factory", ["Flat", "IDMap,Flat", "IDMap2,Flat"])
def test_a_flat_faiss_file_gives_back_its_vectors(tmp_path, factory):
    x = np.random.default_rng(1).standard_normal((30, 6)).astype(np.float32)
    write_index(tmp_path / "v.faiss", factory, x)
    np.testing.assert_array_equal(load_embeddings(tmp_path / "v.faiss", normalize=False)[0], x)


@pytest.mark.parametrize("field,value", [("ntotal", 2**40), ("d", 2**30), ("codes", 2**45), ("d", -1)])
def test_a_forged_faiss_header_is_refused_before_anything_is_allocated(tmp_path, field, value):
    raw = bytearray(faiss.serialize_index(faiss.IndexFlatIP(4)).tobytes())  # 45 bytes
    offset, fmt = {"d": (4, "<i"), "ntotal": (8, "<q"), "codes": (37, "<Q")}[field]
    raw[offset : offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
    (tmp_path / "v.faiss").write_bytes(bytes(raw))
    with pytest.raises(FileFormatError, match="flat FAISS index"):
        load_embeddings(tmp_path / "v.faiss")


# ------------------------------------------------------------------------------ load checks every scalar
@pytest.mark.parametrize("temperature", [0, float("nan"), -0.01, float("inf"), "hot", None])
def test_a_saved_temperature_that_cannot_make_probabilities_is_refused(index, tmp_path, temperature):
    path = index.save(tmp_path / "ix")

    def edit(doc):
        doc["lfa"]["params"]["temperature"] = temperature
        return doc

    resave(path, "params.json", edit)
    with pytest.raises(IndexFormatError, match="temperature"):
        AlignedIndex.load(path)


def test_a_non_finite_number_in_the_fitted_state_is_refused(index, tmp_path):
    path = index.save(tmp_path / "ix")

    def edit(doc):
        doc["lfa"]["state"]["beta_"] = float("nan")
        return doc

    resave(path, "params.json", edit)
    with pytest.raises(IndexFormatError, match="beta_"):
        AlignedIndex.load(path)


# ------------------------------------------------------------------------------ copies
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_fitted_index_and_its_corpus_copy_and_answer_the_same_on_their_own(index, problem, how):
    X, _, P, queries, _ = problem
    original = copy.deepcopy(index)
    original.add_classes(P[:1] + 0.5)
    corpus = AlignedCorpus(original).add(X)
    twin, twin_corpus = copy.deepcopy((original, corpus)) if how == "deepcopy" else pickle.loads(
        pickle.dumps((original, corpus)))
    np.testing.assert_array_equal(twin.predict(queries), original.predict(queries))
    np.testing.assert_array_equal(twin_corpus.search(queries, 3)[1], corpus.search(queries, 3)[1])
    twin_corpus.add(X, ids=np.arange(100, 100 + len(X)))  # its own FAISS index and locks
    assert twin_corpus.ntotal == 2 * len(X) and corpus.ntotal == len(X)
    twin.add_classes(P[1:2] + 0.5)  # and its own classes
    assert len(twin.classes_) == len(original.classes_) + 1


# ------------------------------------------------------------------------------ typed errors naming the input
def test_score_checks_labels_and_weights_as_lfa_score_does(index, problem):
    X, y, _, _, _ = problem
    assert index.score(X, y) == index.score(X, y, sample_weight=np.ones(len(y)))
    for labels, weights in ((y[:3], None), (y, np.ones(3)), (y, -np.ones(len(y))), (y, np.zeros(len(y))),
                            (y, np.full(len(y), np.nan)), (y, ["a"] * len(y))):
        with pytest.raises((ShapeError, InvalidInputError)):
            index.score(X, labels, sample_weight=weights)


@pytest.mark.parametrize("options", [
    {"factory": "IDMap,Flat"}, {"factory": "IDMap2,HNSW8"}, {"params": "nprobe=-1"},
    {"params": "efSearch=0"}, {"params": f"efSearch={2**32 + 1}"}, {"params": "nprobe"},
    {"params": "nprobe=nan"},
])
def test_corpus_options_faiss_would_refuse_or_misread_are_typed_errors(index, options):
    name = next(iter(options))
    with pytest.raises(InvalidParameterError, match=f"{name}="):
        AlignedCorpus(index, **options)
    with pytest.raises(InvalidParameterError):
        FaissStore(dim=8, factory=options.get("factory", "Flat,nope"))


@pytest.mark.parametrize("uri", [
    "qdrant:http://localhost:99999#c", "milvus:http://localhost:99999#c", "chroma:http://[::1:8000#c",
    "qdrant:http://[::1#c", "lancedb:http://localhost:-1#c",
])
def test_a_bad_port_or_ipv6_address_in_a_store_uri_is_a_typed_error_naming_it(uri):
    with pytest.raises(StoreURIError, match="not a valid server address"):
        open_store(uri, dim=4)


def test_the_command_names_a_bad_store_address(index, tmp_path):
    index.save(tmp_path / "ix")
    assert_refused(console("classify", "qdrant:http://localhost:99999#c", "--index", tmp_path / "ix", "--device",
                           "cpu"), "99999")


def test_the_demo_refuses_seeds_numpy_cannot_take(tmp_path):
    assert_refused(console("demo", "--quick", "--seeds", 2**32, "-o", tmp_path / "report"), "--seeds")


def test_an_empty_class_name_is_refused_it_would_read_as_a_rejected_row(problem):
    X, y, P, _, _ = problem
    names = ["", "b", "c", "d"]
    with pytest.raises(LabelError, match="empty"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(X, np.array(names)[y], P, class_names=names)


def test_a_csv_with_a_utf8_byte_order_mark_reads_its_first_column(tmp_path):
    from lfa_index.cli.readers import read_classes, read_texts

    (tmp_path / "t.csv").write_text("text,label\nhello,a\nbye,b\n", encoding="utf-8-sig")
    (tmp_path / "c.txt").write_text("cat\ndog\n", encoding="utf-8-sig")
    items = read_texts(str(tmp_path / "t.csv"), text_column="text", label_column=None, need_labels=True)
    assert items.texts == ["hello", "bye"] and items.labels.tolist() == ["a", "b"]
    assert read_classes(str(tmp_path / "c.txt")) == ["cat", "dog"]


# ------------------------------------------------------------------------------ write-backs through the command
def test_the_command_writes_one_field_and_every_other_value_keeps_its_type(index, problem, tmp_path):
    queries = problem[3]
    fields = {"year": [2020] * len(queries), "price": [1.0] * len(queries), "flag": [True] * len(queries),
              "note": ["2020"] * len(queries)}
    FaissStore(dim=8).add(queries, np.arange(len(queries)) * 7, fields=fields).save(tmp_path / "rows")
    index.save(tmp_path / "ix")
    done = console("classify", f"faiss:{tmp_path / 'rows'}", "--index", tmp_path / "ix", "--write-field",
                   "predicted", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    store = FaissStore.load(tmp_path / "rows")
    (ids, vectors, got), = store.scan([*fields, "predicted"])
    np.testing.assert_array_equal(vectors, queries)
    assert got["predicted"].tolist() == index.predict(queries).tolist()
    for name, values in fields.items():
        assert [(type(v), v) for v in got[name]] == [(type(v), v) for v in values], name
