"""load_embeddings: .npy / .npz / .safetensors / Parquet / FAISS, typed errors, never unpickling."""

from __future__ import annotations

import numpy as np
import pytest

from lfa_index.adapters import FileFormatError, load_embeddings
from lfa_index.errors import NonFiniteError, ShapeError


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(6, 4)).astype(np.float32), np.array([0, 1, 2, 0, 1, 2])


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_npy_gives_normalised_float32_rows_and_no_labels(tmp_path, data):
    x, _ = data
    np.save(tmp_path / "e.npy", x.astype(np.float64))
    emb, labels = load_embeddings(tmp_path / "e.npy")
    assert emb.dtype == np.float32 and labels is None
    np.testing.assert_allclose(emb, unit(x), atol=1e-6)
    raw, _ = load_embeddings(tmp_path / "e.npy", normalize=False)
    np.testing.assert_allclose(raw, x, atol=1e-7)


def test_npz_finds_embeddings_and_labels_by_their_usual_names(tmp_path, data):
    x, y = data
    np.savez(tmp_path / "d.npz", features=x, y=y)
    emb, labels = load_embeddings(tmp_path / "d.npz")
    np.testing.assert_allclose(emb, unit(x), atol=1e-6)
    np.testing.assert_array_equal(labels, y)


def test_npz_with_one_array_of_any_name_and_explicit_keys(tmp_path, data):
    x, y = data
    np.savez(tmp_path / "one.npz", clip_vectors=x)
    assert load_embeddings(tmp_path / "one.npz")[0].shape == (6, 4)
    np.savez(tmp_path / "two.npz", a=x, b=y, c=x)
    emb, labels = load_embeddings(tmp_path / "two.npz", embeddings_key="c", labels_key="b")
    np.testing.assert_array_equal(labels, y)
    with pytest.raises(FileFormatError, match=r"none is called"):
        load_embeddings(tmp_path / "two.npz")
    with pytest.raises(FileFormatError, match=r"no labels array 'label_ids'.*\['a', 'b', 'c'\]"):
        load_embeddings(tmp_path / "two.npz", embeddings_key="a", labels_key="label_ids")


def test_pickled_arrays_are_refused_not_loaded(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(FileFormatError, match="pickled"):
        load_embeddings(tmp_path / "obj.npy")
    np.savez(tmp_path / "obj.npz", embeddings=np.array([[1.0]], dtype=object))
    with pytest.raises(FileFormatError, match="pickled"):
        load_embeddings(tmp_path / "obj.npz")


def test_safetensors_with_multi_view_embeddings_and_labels(tmp_path, data):
    from safetensors.numpy import save_file

    x, y = data
    views = np.stack([x, x * 2, -x], axis=1)  # (6, 3, 4)
    save_file({"embeddings": views, "labels": y.astype(np.int64)}, str(tmp_path / "v.safetensors"))
    emb, labels = load_embeddings(tmp_path / "v.safetensors")
    assert emb.shape == (6, 3, 4)
    np.testing.assert_allclose(emb[:, 2], -unit(x), atol=1e-6)
    np.testing.assert_array_equal(labels, y)


def test_parquet_list_column_with_class_name_labels(tmp_path, data):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    x, y = data
    names = np.array(["cat", "dog", "owl"])[y]
    table = pa.table({"embedding": pa.array(list(x), type=pa.list_(pa.float32())), "label": names})
    pq.write_table(table, tmp_path / "t.parquet")
    emb, labels = load_embeddings(tmp_path / "t.parquet")
    np.testing.assert_allclose(emb, unit(x), atol=1e-6)
    assert labels.dtype.kind == "U" and list(labels) == list(names)
    fixed = pa.table({"vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4), "target": y})
    pq.write_table(fixed, tmp_path / "f.parquet")
    emb2, labels2 = load_embeddings(tmp_path / "f.parquet", embeddings_key="vec")
    np.testing.assert_allclose(emb2, unit(x), atol=1e-6)
    np.testing.assert_array_equal(labels2, y)


def test_parquet_errors_name_the_problem(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"embedding": [[1.0, 2.0], [1.0, 2.0, 3.0]]}), tmp_path / "ragged.parquet")
    with pytest.raises(ShapeError, match="different lengths"):
        load_embeddings(tmp_path / "ragged.parquet")
    pq.write_table(pa.table({"text": ["a"], "score": [0.5]}), tmp_path / "nocol.parquet")
    with pytest.raises(FileFormatError, match=r"columns \['text', 'score'\]"):
        load_embeddings(tmp_path / "nocol.parquet")
    with pytest.raises(FileFormatError, match="list of floats"):
        load_embeddings(tmp_path / "nocol.parquet", embeddings_key="score")


@pytest.mark.parametrize("factory", ["Flat", "IDMap,Flat", "IDMap2,Flat", "IVF2,Flat", "HNSW8"])
def test_a_flat_faiss_index_gives_back_its_vectors_and_other_kinds_are_refused(tmp_path, factory):
    faiss = pytest.importorskip("faiss")
    x = np.random.default_rng(1).normal(size=(200, 8)).astype(np.float32)
    index = faiss.index_factory(8, factory)
    index.train(x)
    if factory.startswith("IDMap"):
        index.add_with_ids(x, np.arange(1000, 1200))
    else:
        index.add(x)
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    if not factory.endswith("Flat") or factory.startswith("IVF"):  # only flat storage is read: checked from the header
        with pytest.raises(FileFormatError, match="not a flat FAISS index"):
            load_embeddings(tmp_path / "i.faiss")
        return
    emb, labels = load_embeddings(tmp_path / "i.faiss")
    assert labels is None
    np.testing.assert_allclose(emb, unit(x), atol=1e-5)


def test_faiss_index_without_vectors_is_refused(tmp_path):
    faiss = pytest.importorskip("faiss")
    index = faiss.IndexLSH(8, 16)
    index.add(np.ones((3, 8), np.float32))
    faiss.write_index(index, str(tmp_path / "lsh.index"))
    with pytest.raises(FileFormatError, match="not a flat FAISS index"):
        load_embeddings(tmp_path / "lsh.index")


def test_wrong_shapes_and_values_raise_typed_errors(tmp_path, data):
    x, y = data
    np.save(tmp_path / "flat.npy", x.ravel())
    with pytest.raises(ShapeError, match=r"\(n_rows, dim\)"):
        load_embeddings(tmp_path / "flat.npy")
    np.savez(tmp_path / "short.npz", embeddings=x, labels=y[:4])
    with pytest.raises(ShapeError, match=r"one per embedding row"):
        load_embeddings(tmp_path / "short.npz")
    bad = x.copy()
    bad[2, 1] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(NonFiniteError):
        load_embeddings(tmp_path / "nan.npy")
    np.savez(tmp_path / "floatlabels.npz", embeddings=x, labels=y + 0.5)
    with pytest.raises(FileFormatError, match="integers or strings"):
        load_embeddings(tmp_path / "floatlabels.npz")


def test_unknown_extension_and_missing_file(tmp_path):
    (tmp_path / "e.csv").write_text("1,2\n")
    with pytest.raises(FileFormatError, match=r"\.csv.*supported"):
        load_embeddings(tmp_path / "e.csv")
    with pytest.raises(FileNotFoundError):
        load_embeddings(tmp_path / "absent.npy")
