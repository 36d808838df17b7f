"""Property-based checks (hypothesis) of the readers of damaged or forged files: ``.faiss`` embeddings files,
and the manifest, JSON, safetensors and FAISS parts of saved indexes and FAISS stores, checksums re-recorded as
a forger would. Whatever a file claims (a huge dimension, row count, vector length, header size or tensor
shape), a reader raises a typed error or returns checked contents, and its memory never grows by more than a
small multiple of the file's size: a file of a few hundred bytes cannot make it allocate gigabytes."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
from pathlib import Path

import faiss
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from properties import cases, data_dir, peak_memory

from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.adapters import load_embeddings
from lfa_index.errors import IndexFormatError, LFAIndexError
from lfa_index.stores import FaissStore

pytestmark = pytest.mark.usefixtures("single_threaded")
MEMORY_LIMIT = 64 << 20  # the files are a few KiB: what a reader may add to its resident memory
HUGE = st.sampled_from([0, 1, -1, 255, 2**20, 2**20 + 1, 2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1])
INTEGER = st.one_of(HUGE, st.integers(-(2**63), 2**63 - 1))


def forge(raw: bytearray, data: st.DataObject, offsets: list[int]) -> bytearray:
    """One damage: an integer written over a header field (or anywhere), a flipped bit, a cut, or bytes added."""
    how = data.draw(st.sampled_from(["field", "field", "field", "anywhere", "flip", "cut", "append"]))
    event(f"damage: {how}")
    if how in ("field", "anywhere"):
        at = data.draw(st.sampled_from(offsets) if how == "field" else st.integers(0, max(0, len(raw) - 4)))
        width = data.draw(st.sampled_from([4, 8]))
        value = data.draw(INTEGER)
        packed = struct.pack("<q", value) if width == 8 else struct.pack("<i", max(-(2**31), min(value, 2**31 - 1)))
        raw[at : at + width] = packed
    elif how == "flip" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    else:
        raw += bytes(data.draw(st.binary(min_size=1, max_size=64)))
    return raw


def flat_offsets(n: int, d: int, idmap: bool) -> list[int]:
    """Where a flat file's (or an id map over one) integer header fields lie: dimension, rows, vector length, ids."""
    if not idmap:
        return [4, 8, 37]
    return [4, 8, 41, 45, 78, 82 + 4 * n * d]


def read_checked(read, limit: int = MEMORY_LIMIT):
    """``read()``'s result, or None when it raised a typed error; its memory growth below ``limit``."""
    with peak_memory() as grown:
        try:
            result = read()
        except LFAIndexError as err:
            event(f"refused: {type(err).__name__}")
            result = None
    assert grown[0] < limit, f"reading a damaged file grew resident memory by {grown[0] >> 20} MiB"
    return result


# ------------------------------------------------------------------------------ .faiss embeddings files
@cases(150)
@given(n=st.integers(0, 12), d=st.integers(1, 8), kind=st.sampled_from(["Flat", "IDMap,Flat", "IDMap2,Flat"]),
       data=st.data())
def test_a_forged_or_damaged_faiss_file_reads_as_checked_embeddings_or_a_typed_error(n, d, kind, data):
    x = np.random.default_rng(n * 10 + d).standard_normal((n, d)).astype(np.float32)
    index = faiss.index_factory(d, kind, faiss.METRIC_INNER_PRODUCT)
    if "IDMap" in kind:
        index.add_with_ids(x, np.arange(n, dtype=np.int64) * 3)
    else:
        index.add(x)
    raw = forge(bytearray(faiss.serialize_index(index).tobytes()), data, flat_offsets(n, d, "IDMap" in kind))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "v.faiss"
        path.write_bytes(bytes(raw))
        result = read_checked(lambda: load_embeddings(path))
    if result is not None:
        got, labels = result
        assert labels is None and got.dtype == np.float32 and got.ndim == 2 and np.isfinite(got).all()
        assert len(got) * got.shape[1] * 4 <= len(raw)  # what it read, the file held


# ------------------------------------------------------------------------------ saved indexes and stores
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved index, its saved corpus, and a saved FAISS store, to copy and damage."""
    rng = np.random.default_rng(0)
    support, text = rng.standard_normal((12, 6)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    index = AlignedIndex(lfa=LFA(steps=3, device="cpu", random_state=0)).fit(support, np.repeat(np.arange(3), 4), text)
    root = tmp_path_factory.mktemp("saved")
    index.save(root / "index")
    AlignedCorpus(index).add(support, ids=np.arange(12) * 2).save(root / "corpus")
    FaissStore(dim=6).add(support, np.arange(12), fields={"n": list(range(12))}).save(root / "store")
    return root, support


def forge_safetensors_header(raw: bytearray, data: st.DataObject) -> bytearray:
    """A tensor's shape or data offsets set to what the data cannot hold."""
    length = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + length])
    name = data.draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
    field = data.draw(st.sampled_from(["shape", "data_offsets"]))
    values = header[name][field]
    if values:
        values[data.draw(st.integers(0, len(values) - 1))] = data.draw(HUGE.filter(lambda v: v >= 0))
    else:
        values.append(data.draw(HUGE.filter(lambda v: v >= 0)))
    body = json.dumps(header).encode()
    return bytearray(struct.pack("<Q", len(body)) + body + raw[8 + length :])


@cases(120)
@given(data=st.data())
def test_a_forged_part_of_a_saved_index_or_store_is_refused_typed_within_bounded_memory(saved, data):
    source, support = saved
    what = data.draw(st.sampled_from(["index", "corpus", "store"]))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(shutil.copytree(source / what, Path(folder) / what))
        files = data_dir(root)
        part = data.draw(st.sampled_from(sorted(p.name for p in files.iterdir()) + ["manifest.json"]))
        event(f"part: {part}")
        path = root / part if part == "manifest.json" else files / part
        raw = bytearray(path.read_bytes())
        if part.endswith(".json"):
            raw = bytearray(forge_json(json.loads(raw), data))
        elif part.endswith(".safetensors") and data.draw(st.booleans()):
            raw = forge_safetensors_header(raw, data)
        elif part.endswith(".faiss"):
            raw = forge(raw, data, [4, 8, 37, 41, 45, 74, 78, 82])
        else:
            raw = forge(raw, data, [0, 4])
        path.write_bytes(bytes(raw))
        if part != "manifest.json":  # the checksums match: only the reader's own checks stand in the way
            manifest = json.loads((root / "manifest.json").read_text())
            manifest["files"][part] = {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}
            (root / "manifest.json").write_text(json.dumps(manifest))
        kind = {"index": AlignedIndex, "corpus": AlignedCorpus, "store": FaissStore}[what]
        loaded = read_checked(lambda: kind.load(root))
    if loaded is None:
        return
    if what == "index":  # it loaded: every check passed, so it answers well-formed
        scores, labels = loaded.search(support, 2)
        assert np.isfinite(scores).all() and set(labels.ravel().tolist()) <= set(loaded.classes_.tolist())
        assert np.isfinite(loaded.predict_proba(support)).all()
    elif what == "corpus":
        scores, ids = loaded.search(support, 3)
        assert scores.shape == ids.shape == (len(support), min(3, loaded.ntotal))
        assert set(ids.ravel().tolist()) <= set(range(0, 24, 2)) | {-1}
    else:
        assert loaded.count() == len(loaded.get(np.array(sorted(i for b, _, _ in loaded.scan([]) for i in b))))


def forge_json(doc, data: st.DataObject) -> bytes:
    """A JSON document with one value (a size, a count, a name, a number) replaced."""
    paths = list(json_leaves(doc))
    path = data.draw(st.sampled_from(paths))
    value = data.draw(st.one_of(HUGE, st.sampled_from([None, "", "../x", "data-aaaaaaaa", float("nan"), 1e308, []])))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(doc).encode()


def json_leaves(doc, prefix=()):
    if isinstance(doc, dict) and doc:
        for key, value in doc.items():
            yield from json_leaves(value, prefix + (key,))
    elif isinstance(doc, list) and doc:
        for i, value in enumerate(doc[:4]):
            yield from json_leaves(value, prefix + (i,))
    elif prefix:
        yield prefix


def test_the_forged_manifest_size_of_a_part_is_refused_before_the_part_is_read(saved):
    source, _ = saved
    with tempfile.TemporaryDirectory() as folder:
        root = Path(shutil.copytree(source / "corpus", Path(folder) / "corpus"))
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["files"]["corpus.faiss"]["bytes"] = 2**62
        (root / "manifest.json").write_text(json.dumps(manifest))
        with peak_memory() as grown, pytest.raises(IndexFormatError, match="corpus.faiss has"):
            AlignedCorpus.load(root)
    assert grown[0] < MEMORY_LIMIT
