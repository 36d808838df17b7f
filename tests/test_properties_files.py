"""Property-based checks (hypothesis) of the file readers: ``load_embeddings`` and the CLI's readers.

Whatever a file holds (any dtype, shape, key, NaN, huge or tiny rows, pickles, truncated or
flipped bytes, foreign encodings), a reader either raises a typed
:class:`~lfa_index.errors.LFAIndexError` or returns exactly what the file holds, checked; and it
never changes the file.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from properties import DEFECTS, cases, inject
from safetensors.numpy import save_file

from lfa_index.adapters import load_embeddings
from lfa_index.adapters.embedding_files import EMBEDDING_KEYS, LABEL_KEYS
from lfa_index.cli.readers import read_classes, read_embedding_file, read_labels, read_texts
from lfa_index.errors import CLIError, LFAIndexError

pa = pytest.importorskip("pyarrow", reason="needs the [files] extra")
pq = pytest.importorskip("pyarrow.parquet", reason="needs the [files] extra")

pytestmark = pytest.mark.usefixtures("single_threaded")
KEYS = ("embeddings", "X", "features", "clip_vectors", "labels", "y", "target", "other")
SAFE = (1e-15, 1e15)  # rows whose largest entry lies outside are rescaled before normalising


# ------------------------------------------------------------------------------ expectations
def is_valid_embeddings(a: Any) -> bool:
    a = np.asarray(a)
    if a.dtype.kind not in "fiu" or a.ndim not in (2, 3) or a.shape[0] == 0 or a.size == 0:
        return False
    return bool(np.isfinite(a.astype(np.float64)).all())


def is_valid_labels(labels: Any, n_rows: int) -> bool:
    labels = np.asarray(labels)
    return labels.ndim == 1 and labels.shape[0] == n_rows and labels.dtype.kind in "iuUSb"


def beyond_float32(a: np.ndarray) -> bool:
    """Whether finite entries of ``a`` cannot be held by float32."""
    if a.dtype.kind != "f":
        return False
    x = a.astype(np.float64)
    return bool((np.abs(x[np.isfinite(x)]) > np.finfo(np.float32).max).any())


def unit_rows(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` in float64 with the largest entry of huge or tiny rows scaled to 1, then L2-normalised."""
    x = np.asarray(a, dtype=np.float64)
    peak = np.abs(x).max(axis=-1, keepdims=True)
    odd = (peak > SAFE[1]) | ((peak < SAFE[0]) & (peak > 0))
    x = np.where(odd, x / np.where(peak > 0, peak, 1.0), x)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def assert_embeddings(x: np.ndarray, expected: np.ndarray, normalize: bool) -> None:
    assert x.dtype == np.float32 and x.flags.c_contiguous and x.shape == expected.shape
    if normalize:
        np.testing.assert_allclose(x, unit_rows(expected), atol=2e-6)
    else:
        np.testing.assert_array_equal(x, np.asarray(expected).astype(np.float32))


def assert_labels(labels: Any, expected: Any) -> None:
    if expected is None:
        assert labels is None
        return
    expected = np.asarray(expected)
    expected = expected.astype(str) if expected.dtype.kind == "S" else expected
    assert labels.shape == expected.shape and labels.tolist() == expected.tolist()


# ------------------------------------------------------------------------------ generated arrays
@st.composite
def arrays(draw: Any) -> np.ndarray:
    """An array an embeddings file might hold: usually (n, d) floats, sometimes anything."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = draw(st.sampled_from([(5, 4)] * 12 + [(3, 2, 4)] * 2 + [(1, 1), (4,), (), (0, 4), (4, 0), (2, 2, 2, 2)]))
    defect = draw(st.sampled_from(("none",) * 6 + DEFECTS))
    x = inject(rng.standard_normal(shape), defect, draw(st.integers(0, 9)), draw(st.booleans()))
    dtype = draw(st.sampled_from(
        ["float32"] * 8 + ["float64"] * 2 + ["float16", "int64", "uint8", "bool", "complex64", "U3"]))
    with np.errstate(all="ignore"):
        if dtype in ("int64", "uint8"):
            return np.clip(np.nan_to_num(np.round(x * 4)), 0 if dtype == "uint8" else -1e9, 1e9).astype(dtype)
        return x.astype(dtype) if dtype != "U3" else x.astype(str).astype("U3")


@st.composite
def label_arrays(draw: Any, n_rows: int) -> np.ndarray:
    kind = draw(st.sampled_from(["int", "int", "str", "bytes", "float", "bool", "short", "2d"]))
    base = np.arange(n_rows) % 3
    return {
        "int": base, "str": np.array(["cat", "dog", "owl"])[base], "bytes": np.array([b"a", b"b", b"c"])[base],
        "float": base + 0.5, "bool": base == 1, "short": base[:-1], "2d": base.reshape(-1, 1),
    }[kind]


def write_and_read(path: Path, write: Any, read: Any) -> tuple[Any, BaseException | None]:
    """Write a file, read it, and check the read left its bytes alone: ``(result, typed error)``."""
    write(path)
    before = path.read_bytes() if path.is_file() else None
    try:
        result, error = read(path), None
    except LFAIndexError as err:
        result, error = None, err
        event(f"refused: {type(err).__name__}")
    after = path.read_bytes() if path.is_file() else None
    assert before == after, "a reader changed its input file"
    return result, error


# ------------------------------------------------------------------------------ .npy
@cases(120)
@given(a=arrays(), normalize=st.booleans(), pickled=st.sampled_from([False] * 5 + [True]))
def test_npy_files_load_exactly_or_raise_a_typed_error(a, normalize, pickled):
    if pickled:
        a = a.astype(object)
    with tempfile.TemporaryDirectory() as folder:
        result, error = write_and_read(
            Path(folder) / "e.npy", lambda p: np.save(p, a, allow_pickle=pickled),
            lambda p: load_embeddings(p, normalize=normalize),
        )
    beyond = not normalize and beyond_float32(a)
    if error is not None:
        assert pickled or beyond or not is_valid_embeddings(a), f"a valid array was refused: {error}"
        return
    assert not pickled and is_valid_embeddings(a)
    x, labels = result
    assert_embeddings(x, a, normalize)
    assert labels is None


# ------------------------------------------------------------------------------ .npz and .safetensors
@st.composite
def named_arrays(draw: Any) -> dict[str, np.ndarray]:
    names = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    out = {}
    for name in names:
        out[name] = draw(label_arrays(5)) if name in LABEL_KEYS else draw(arrays())
    return out


def expected_keys(names: list[str], embeddings_key: str | None, labels_key: str | None) -> tuple | None:
    """Which arrays ``load_embeddings`` must return, ``(embeddings, labels or None)``; None: it must refuse."""
    if any(key is not None and key not in names for key in (embeddings_key, labels_key)):
        return None
    key = embeddings_key or next((k for k in EMBEDDING_KEYS if k in names), None)
    label_key = labels_key or next((k for k in LABEL_KEYS if k in names), None)
    if key is None:
        others = [n for n in names if n != label_key]
        if len(others) != 1:
            return None
        key = others[0]
    return key, label_key


@cases(150)
@given(
    content=named_arrays(), suffix=st.sampled_from([".npz", ".safetensors"]), normalize=st.booleans(),
    embeddings_key=st.sampled_from([None] * 4 + list(KEYS)), labels_key=st.sampled_from([None] * 4 + list(KEYS)),
)
def test_named_array_files_pick_the_documented_keys_or_raise_a_typed_error(
    content, suffix, normalize, embeddings_key, labels_key
):
    if suffix == ".safetensors":  # safetensors holds numbers only
        content = {k: np.ascontiguousarray(v) for k, v in content.items() if v.dtype.kind in "fiub"}
        if not content:
            return

    def write(path: Path) -> None:
        if suffix == ".npz":
            np.savez(path, **content)
        else:
            save_file(content, str(path))

    with tempfile.TemporaryDirectory() as folder:
        result, error = write_and_read(
            Path(folder) / f"d{suffix}", write,
            lambda p: load_embeddings(p, embeddings_key=embeddings_key, labels_key=labels_key, normalize=normalize),
        )
    keys = expected_keys(sorted(content), embeddings_key, labels_key)
    a = None if keys is None else content[keys[0]]
    labels = None if keys is None or keys[1] is None else content[keys[1]]
    beyond = a is not None and not normalize and beyond_float32(a)
    valid = keys is not None and is_valid_embeddings(a) and (labels is None or is_valid_labels(labels, len(a)))
    if error is not None:
        assert not valid or beyond, f"a valid file was refused: {error}"
        return
    assert valid
    x, got = result
    assert_embeddings(x, a, normalize)
    assert_labels(got, labels)


# ------------------------------------------------------------------------------ .parquet
@st.composite
def parquet_tables(draw: Any) -> tuple[Any, np.ndarray | None, Any]:
    """A Parquet table with a vector column (lists, fixed-size lists, ragged, nulls) and maybe labels."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, d = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    defect = draw(st.sampled_from(("none",) * 6 + DEFECTS))
    x = inject(rng.standard_normal((n, d)), defect, draw(st.integers(0, 9)), False)
    rows: list[Any] = [list(r) for r in x]
    kind = draw(st.sampled_from(
        ["list"] * 8 + ["fixed"] * 2 + ["ragged", "null_row", "null_value", "strings", "empty"]))
    column: Any
    if kind == "fixed":
        column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel(), pa.float64()), d)
    else:
        if kind == "ragged" and n > 1:
            rows[0] = rows[0] + [1.0]
        elif kind == "null_row":
            rows[0] = None
        elif kind == "null_value":
            rows[0][0] = None
        elif kind == "strings":
            rows = [[str(v) for v in r] for r in rows]
        elif kind == "empty":
            rows = [[] for _ in rows]
        column = pa.array(rows)
    name = draw(st.sampled_from(["embedding"] * 6 + ["vector"]))
    columns = {name: column}
    label_kind = draw(st.sampled_from(["none"] * 3 + ["int", "str"] * 2 + ["null", "float"]))
    labels = None
    if label_kind != "none":
        labels = {"int": np.arange(n) % 2, "str": np.array(["a", "b"])[np.arange(n) % 2],
                  "null": [None] * n, "float": np.arange(n) + 0.5}[label_kind]
        columns["label"] = pa.array(labels)
    valid = kind in ("list", "fixed") and name == "embedding" and np.isfinite(x).all()
    valid = valid and label_kind in ("none", "int", "str")
    return pa.table(columns), (x if valid else None), (None if label_kind == "none" else labels)


@cases(80)
@given(table=parquet_tables(), normalize=st.booleans())
def test_parquet_files_load_their_vector_column_or_raise_a_typed_error(table, normalize):
    table, expected, labels = table
    with tempfile.TemporaryDirectory() as folder:
        result, error = write_and_read(
            Path(folder) / "t.parquet", lambda p: pq.write_table(table, p),
            lambda p: load_embeddings(p, normalize=normalize),
        )
    if error is not None:
        assert expected is None, f"a valid Parquet file was refused: {error}"
        return
    assert expected is not None
    x, got = result
    assert_embeddings(x, expected, normalize)
    assert_labels(got, labels)


# ------------------------------------------------------------------------------ .faiss
FACTORIES = ("Flat", "Flat", "IDMap,Flat", "IDMap2,Flat", "FlatL2", "IVF2,Flat", "PQ2x4", "HNSW4", "LSH", "empty")
FLAT = ("Flat", "IDMap,Flat", "IDMap2,Flat", "FlatL2")


@cases(60)
@given(factory=st.sampled_from(FACTORIES), seed=st.integers(0, 2**16), normalize=st.booleans())
def test_faiss_files_give_back_their_vectors_or_raise_a_typed_error(factory, seed, normalize):
    x = np.random.default_rng(seed).standard_normal((80, 4)).astype(np.float32)
    if factory == "FlatL2":
        index = faiss.IndexFlatL2(4)
    elif factory == "empty":
        index = faiss.IndexFlatIP(4)
    else:
        metric = faiss.METRIC_L2 if factory == "LSH" else faiss.METRIC_INNER_PRODUCT
        index = faiss.index_factory(4, factory, metric)
    if factory != "empty":
        index.train(x)
        if factory.startswith("IDMap"):
            index.add_with_ids(x, np.arange(80) * 5)
        else:
            index.add(x)
    with tempfile.TemporaryDirectory() as folder:
        result, error = write_and_read(
            Path(folder) / "v.faiss", lambda p: faiss.write_index(index, str(p)),
            lambda p: load_embeddings(p, normalize=normalize),
        )
    if error is not None:  # only flat indexes (alone or under an id map) hold their vectors as they are
        assert factory not in FLAT, f"a flat FAISS index was refused: {error}"
        return
    got, labels = result
    assert factory in FLAT, f"a {factory} index was read"
    assert labels is None and got.shape == (80, 4) and got.dtype == np.float32
    assert_embeddings(got, x, normalize)


# ------------------------------------------------------------------------------ damaged files
@cases(100)
@given(
    suffix=st.sampled_from([".npy", ".npz", ".safetensors", ".parquet", ".faiss"]), cut=st.booleans(),
    at=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7),
)
def test_a_flipped_or_cut_embeddings_file_is_refused_or_still_reads_as_checked_embeddings(suffix, cut, at, bit):
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    writers = {
        ".npy": lambda p: np.save(p, x), ".npz": lambda p: np.savez(p, embeddings=x, labels=np.arange(6)),
        ".safetensors": lambda p: save_file({"embeddings": x, "labels": np.arange(6)}, str(p)),
        ".parquet": lambda p: pq.write_table(pa.table({"embedding": [list(r) for r in x]}), p),
        ".faiss": lambda p: write_flat_index(x, p),
    }

    def write(path: Path) -> None:
        writers[suffix](path)
        raw = bytearray(path.read_bytes())
        i = int(at * len(raw))
        if cut:
            raw = raw[:i]
        else:
            raw[i] ^= 1 << bit
        path.write_bytes(bytes(raw))

    with tempfile.TemporaryDirectory() as folder:
        result, error = write_and_read(Path(folder) / f"e{suffix}", write, load_embeddings)
    if error is None:
        got, labels = result
        assert got.dtype == np.float32 and got.ndim in (2, 3) and np.isfinite(got).all()
        norms = np.linalg.norm(got, axis=-1)
        assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))
        assert labels is None or len(labels) == len(got)


def write_flat_index(x: np.ndarray, path: Path) -> None:
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    faiss.write_index(index, str(path))


@cases(20)
@given(name=st.sampled_from(["missing.npy", "folder.npz", "e.csv", "e", "e.NPY"]))
def test_missing_folders_and_unknown_suffixes_raise_typed_errors(name):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "folder.npz").mkdir()
        np.save(Path(folder) / "e.npy", np.eye(2))
        (Path(folder) / "e.NPY").write_bytes((Path(folder) / "e.npy").read_bytes())
        try:
            x, _ = load_embeddings(Path(folder) / name)
        except LFAIndexError:
            assert name != "e.NPY"
        else:
            assert name == "e.NPY" and x.shape == (2, 2)  # suffixes are case-insensitive


# ------------------------------------------------------------------------------ CLI readers
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
ENCODINGS = ("utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16", "raw")


def encoded(draw: Any, text: str) -> bytes:
    encoding = draw(st.sampled_from(ENCODINGS))
    if encoding == "raw":
        return draw(st.binary(max_size=40))
    return text.encode(encoding, errors="replace")


def utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


@cases(120)
@given(
    suffix=st.sampled_from([".json", ".txt", ".npy"]),
    values=st.one_of(
        st.lists(st.integers(-5, 2**70), max_size=5), st.lists(TEXT, max_size=5),
        st.lists(st.one_of(st.integers(0, 3), st.floats(), st.booleans(), st.none()), max_size=4),
        st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=3), st.dictionaries(TEXT, st.integers()),
    ),
    data=st.data(),
)
def test_labels_files_read_exactly_or_raise_a_typed_error(suffix, values, data):
    if suffix == ".json":
        raw = encoded(data.draw, json.dumps(values))
    elif suffix == ".txt":
        raw = encoded(data.draw, "\n".join(str(v) for v in (values if isinstance(values, list) else [values])))
    else:
        buffer = io.BytesIO()
        try:
            array = np.asarray(values if isinstance(values, list) else list(values))
        except ValueError:
            array = np.asarray([0.5])
        np.save(buffer, array, allow_pickle=True)
        raw = buffer.getvalue()
    with tempfile.TemporaryDirectory() as folder:
        labels, error = write_and_read(
            Path(folder) / f"l{suffix}", lambda p: p.write_bytes(raw), lambda p: read_labels(str(p)))
    if error is not None:
        return
    assert labels.ndim == 1 and labels.dtype.kind in "iuU"
    if suffix == ".txt":
        assert labels.tolist() == [line.strip() for line in raw.decode("utf-8-sig").splitlines() if line.strip()]
    elif suffix == ".json":
        assert [str(v) for v in labels.tolist()] == [str(v) for v in json.loads(raw.decode("utf-8-sig"))]
    else:
        assert labels.tolist() == np.load(io.BytesIO(raw), allow_pickle=True).tolist()


@pytest.mark.parametrize("values", [[True, 1, False, True], [1, 2.0], [0, None], ["a", 1]])
def test_labels_json_of_booleans_floats_nulls_or_a_mix_is_refused(tmp_path, values):
    """Found by the property above: numpy read ``[true, 1, false, true]`` as the labels ``[1, 1, 0, 1]``."""
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    with pytest.raises(CLIError, match="JSON list of integers or of class names"):
        read_labels(str(path))


@cases(100)
@given(
    suffix=st.sampled_from([".json", ".txt"]), data=st.data(),
    names=st.one_of(st.lists(TEXT, max_size=5), st.lists(st.integers(), max_size=2), st.none(), st.just("cat")),
)
def test_class_lists_read_exactly_or_raise_a_typed_error(suffix, names, data):
    text = json.dumps(names) if suffix == ".json" else "\n".join(names) if isinstance(names, list) and all(
        isinstance(n, str) for n in names) else str(names)
    raw = encoded(data.draw, text)
    with tempfile.TemporaryDirectory() as folder:
        got, error = write_and_read(
            Path(folder) / f"c{suffix}", lambda p: p.write_bytes(raw), lambda p: read_classes(str(p)))
    if error is not None:
        return
    assert isinstance(got, list) and got and all(isinstance(n, str) for n in got)
    decoded = raw.decode("utf-8-sig")  # a byte-order mark is not part of the first name
    if suffix == ".json":
        assert got == [n.strip() for n in json.loads(decoded)]
    else:
        assert got == [line.strip() for line in decoded.splitlines() if line.strip()]


@cases(100)
@given(
    rows=st.lists(st.tuples(TEXT, st.sampled_from(["a", "b", "", "1"])), max_size=5),
    header=st.sampled_from([("text", "label"), ("text",), ("body", "label"), ("text", "intent"), ()]),
    suffix=st.sampled_from([".csv", ".csv", ".txt"]), need_labels=st.booleans(), data=st.data(),
)
def test_text_files_read_one_item_per_row_or_raise_a_typed_error(rows, header, suffix, need_labels, data):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if header:
        writer.writerow(header)
    for text, label in rows:
        writer.writerow((text, label)[: max(1, len(header))])
    raw = encoded(data.draw, buffer.getvalue())
    with tempfile.TemporaryDirectory() as folder:
        items, error = write_and_read(
            Path(folder) / f"t{suffix}", lambda p: p.write_bytes(raw),
            lambda p: read_texts(str(p), text_column="text", label_column=None, need_labels=need_labels),
        )
    if error is not None:
        return
    assert items.kind == "texts" and len(items.ids) == len(items.texts) > 0
    assert all(isinstance(t, str) for t in items.texts)
    if items.labels is not None:
        assert len(items.labels) == len(items.texts)
    else:
        assert not need_labels
    if suffix == ".csv":
        decoded = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
        assert items.texts == [r["text"] or "" for r in decoded]


READERS = {
    "labels": lambda p: read_labels(str(p)), "classes": lambda p: read_classes(str(p)),
    "texts": lambda p: read_texts(str(p), text_column="text", label_column=None, need_labels=False),
    "embeddings": lambda p: read_embedding_file(str(p)),
}


@cases(24)
@given(reader=st.sampled_from(sorted(READERS)), suffix=st.sampled_from([".json", ".txt", ".csv", ".npy"]),
       folder_instead=st.booleans())
def test_a_missing_file_or_a_folder_is_a_typed_error_naming_the_path(reader, suffix, folder_instead):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        if folder_instead:
            path.mkdir()
        with pytest.raises(LFAIndexError, match="input"):
            READERS[reader](path)


@cases(40)
@given(a=arrays(), labels=label_arrays(5), data=st.data())
def test_an_embeddings_file_with_a_labels_file_pairs_them_or_raises_a_typed_error(a, labels, data):
    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "l.npy", labels)
        items, error = write_and_read(
            Path(folder) / "e.npy", lambda p: np.save(p, a),
            lambda p: read_embedding_file(str(p), str(Path(folder) / "l.npy")),
        )
    if error is not None:
        return
    assert is_valid_embeddings(a) and len(items.labels) == len(items.embeddings) == len(items.ids) == len(a)
    assert items.labels.tolist() == labels.tolist()
