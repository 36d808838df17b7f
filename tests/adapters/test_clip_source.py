"""OpenCLIPSource on a small randomly initialised open_clip model (no download)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.vision

open_clip = pytest.importorskip("open_clip")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

from lfa_index import InvalidParameterError  # noqa: E402
from lfa_index.adapters import (  # noqa: E402
    CLIP_IMAGENET_TEMPLATES,
    EmbeddingSource,
    ModelUnavailableError,
    OpenCLIPSource,
    SkippedInputWarning,
    UnreadableImageError,
)
from lfa_index.core import max_pool_frames  # noqa: E402

TINY = "lfa-test-tiny-clip"
TINY_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_name(tmp_path_factory):
    config = tmp_path_factory.mktemp("clip-config") / f"{TINY}.json"
    config.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(config)
    return TINY


@pytest.fixture(scope="module")
def checkpoint(tiny_name, tmp_path_factory):
    """A state dict saved with torch.save, as a user's fine-tuned checkpoint would be."""
    torch.manual_seed(0)
    model = open_clip.create_model(tiny_name, pretrained=None)
    path = tmp_path_factory.mktemp("ckpt") / "tiny_clip.pt"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def clip(tiny_name, checkpoint):
    return OpenCLIPSource(tiny_name, pretrained=str(checkpoint), device="cpu", progress=False)


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (48 + 8 * i, 64, 3), dtype=np.uint8)) for i in range(4)]


def test_towers_give_unit_float32_rows_of_the_embedding_dim(clip, images):
    texts = clip.embed_texts(["a photo of a cat.", "a photo of a dog."])
    pixels = clip.embed_images(images)
    assert isinstance(clip, EmbeddingSource) and clip.dim == 32
    assert texts.shape == (2, 32) and pixels.shape == (4, 32)
    assert texts.dtype == pixels.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(pixels, axis=1), 1.0, atol=1e-6)


def test_checkpoint_file_loads_the_same_weights_into_a_fresh_open_clip_model(
    clip, checkpoint, tiny_name, images
):
    reference = open_clip.create_model(tiny_name, pretrained=None)
    reference.load_state_dict(torch.load(checkpoint, weights_only=True))
    reference.eval()
    _, _, preprocess = open_clip.create_model_and_transforms(tiny_name)
    tokenizer = open_clip.get_tokenizer(tiny_name)
    with torch.no_grad():
        want_text = reference.encode_text(tokenizer(["a cat", "a dog"]), normalize=True).numpy()
        want_img = reference.encode_image(
            torch.stack([preprocess(im) for im in images]), normalize=True
        ).numpy()
    np.testing.assert_allclose(clip.embed_texts(["a cat", "a dog"]), want_text, atol=1e-5)
    np.testing.assert_allclose(clip.embed_images(images), want_img, atol=1e-5)
    torch.manual_seed(1)
    other = OpenCLIPSource(tiny_name, pretrained=None, device="cpu", progress=False)
    assert np.abs(other.embed_texts(["a cat"]) - want_text[:1]).max() > 1e-2  # random weights differ


def test_five_crops_put_the_standard_centre_view_first(clip, images):
    single = clip.embed_images(images)
    views = clip.embed_images(images, five_crop=True)
    assert views.shape == (4, 5, 32)
    np.testing.assert_allclose(views[:, 0], single, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(views, axis=-1), 1.0, atol=1e-6)
    assert (np.abs(views[:, 1:] - views[:, :1]).max(axis=-1) > 1e-3).all()  # corners are other views


def test_class_prompts_use_template_ensembling(clip):
    protos = clip.embed_class_names(["cat", "dog"], CLIP_IMAGENET_TEMPLATES)
    assert protos.shape == (2, 32) and len(CLIP_IMAGENET_TEMPLATES) == 80
    rows = clip.embed_texts([t.format("dog") for t in CLIP_IMAGENET_TEMPLATES])
    mean = rows.mean(axis=0)
    np.testing.assert_allclose(protos[1], mean / np.linalg.norm(mean), atol=1e-5)
    np.testing.assert_allclose(
        clip.embed_class_names(["cat"]), clip.embed_texts(["a photo of a cat."]), atol=1e-6
    )


def test_video_clip_is_the_max_pool_of_its_frame_embeddings(clip, images):
    frames = [np.asarray(im.resize((64, 48))) for im in images]
    clips = [frames[:3], np.stack(frames[1:])]
    out = clip.embed_videos(clips)
    assert out.shape == (2, 32)
    np.testing.assert_allclose(out[0], max_pool_frames(clip.embed_images(frames[:3])), atol=1e-6)
    np.testing.assert_allclose(out[1], max_pool_frames(clip.embed_images(frames[1:])), atol=1e-6)


def test_clip_shapes_are_checked(clip, images):
    frames = np.stack([np.asarray(im.resize((64, 48))) for im in images])
    with pytest.raises(ValueError, match="wrap a single"):
        clip.embed_videos(frames)  # one (T, H, W, 3) clip not wrapped in a list
    with pytest.raises(ValueError, match="sequence of frames"):
        clip.embed_videos(["video.mp4"])
    assert clip.embed_videos(frames[None]).shape == (1, 32)


def test_unreadable_images_and_frames_are_skipped_or_raise_when_strict(
    clip, images, tmp_path, tiny_name, checkpoint
):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.warns(SkippedInputWarning, match="Skipped 1 of 3"):
        out = clip.embed_images([images[0], broken, images[1]])
    assert out.shape == (2, 32) and clip.skipped_ == [1]
    with pytest.warns(SkippedInputWarning):
        pooled = clip.embed_videos([[broken], [images[0], broken]])
    assert pooled.shape == (1, 32) and clip.skipped_ == [0]
    strict = OpenCLIPSource(tiny_name, pretrained=str(checkpoint), device="cpu", progress=False, strict=True)
    with pytest.raises(UnreadableImageError, match="broken.jpg"):
        strict.embed_images([images[0], broken])


def test_rerun_with_cache_needs_no_model(tiny_name, checkpoint, images, tmp_path):
    kwargs = dict(pretrained=str(checkpoint), device="cpu", progress=False, cache_dir=tmp_path)
    first = OpenCLIPSource(tiny_name, **kwargs)
    a, a5 = first.embed_images(images), first.embed_images(images, five_crop=True)
    second = OpenCLIPSource(tiny_name, **kwargs)
    b, b5 = second.embed_images(images), second.embed_images(images, five_crop=True)
    assert getattr(second, "model_", None) is None
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a5, b5)


def test_randomly_initialised_models_never_share_cache_entries(tiny_name, images, tmp_path):
    torch.manual_seed(3)
    a = OpenCLIPSource(tiny_name, device="cpu", progress=False, cache_dir=tmp_path).embed_texts(["a cat"])
    torch.manual_seed(4)
    b = OpenCLIPSource(tiny_name, device="cpu", progress=False, cache_dir=tmp_path).embed_texts(["a cat"])
    assert np.abs(a - b).max() > 1e-2


def test_weights_that_need_a_download_raise_a_typed_error_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="network"):
        OpenCLIPSource("ViT-B-32", pretrained="openai", device="cpu").embed_texts(["a"])


@pytest.mark.parametrize(
    "pretrained, match",
    [
        ("no-such-tag", "neither a checkpoint file nor a known tag"),
        ("/nowhere/model.pt", "neither a checkpoint file"),
    ],
)
def test_bad_pretrained_values_raise_a_typed_error(tiny_name, pretrained, match):
    with pytest.raises(ModelUnavailableError, match=match):
        OpenCLIPSource(tiny_name, pretrained=pretrained, device="cpu").dim


def test_a_checkpoint_of_another_architecture_raises_a_typed_error(tiny_name, tmp_path):
    torch.save({"visual.conv1.weight": torch.zeros(3)}, tmp_path / "wrong.pt")
    with pytest.raises(ModelUnavailableError, match="fits it"):
        OpenCLIPSource(tiny_name, pretrained=str(tmp_path / "wrong.pt"), device="cpu").dim


def test_a_loaded_open_clip_model_is_used_as_it_is(tiny_name, checkpoint, clip, images, tmp_path):
    model, _, _ = open_clip.create_model_and_transforms(tiny_name, pretrained=str(checkpoint))
    given = OpenCLIPSource(model, cache_dir=tmp_path, progress=False)
    assert given.dim == clip.dim and given._model() is model
    texts = ["a photo of a cat", "a dog"]
    np.testing.assert_allclose(given.embed_texts(texts), clip.embed_texts(texts), atol=1e-5)
    np.testing.assert_allclose(given.embed_images(images), clip.embed_images(images), atol=1e-5)
    np.testing.assert_allclose(
        given.embed_images(images, five_crop=True), clip.embed_images(images, five_crop=True), atol=1e-5
    )
    again = OpenCLIPSource(model, cache_dir=tmp_path, progress=False)
    np.testing.assert_array_equal(again.embed_texts(texts), given.embed_texts(texts))  # same weights, same cache
    with pytest.raises(InvalidParameterError, match="drop pretrained="):
        OpenCLIPSource(model, pretrained=str(checkpoint), progress=False).embed_texts(["a"])
    with pytest.raises(InvalidParameterError, match="loaded open_clip model"):
        OpenCLIPSource(object(), progress=False).embed_texts(["a"])
