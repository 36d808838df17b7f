"""Image handling shared by the image sources: crop geometry, hashing, unreadable files."""

from __future__ import annotations

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

from lfa_index.adapters import SkippedInputWarning, UnreadableImageError  # noqa: E402
from lfa_index.adapters.base import BaseSource  # noqa: E402
from lfa_index.adapters.images import (  # noqa: E402
    center_crop,
    corner_crops,
    embed_image_items,
    image_key,
)


def coordinate_image(width: int, height: int):
    """Pixel (x, y) holds R = x, G = y: a crop's first pixel tells where it was taken."""
    xs, ys = np.meshgrid(np.arange(width), np.arange(height))
    return Image.fromarray(np.stack([xs, ys, np.zeros_like(xs)], axis=-1).astype(np.uint8))


def test_corner_crops_are_top_left_top_right_bottom_left_bottom_right():
    img = coordinate_image(80, 64)  # shorter side 64 = 32 / 0.5: no resize
    crops = corner_crops(img, 32, Image.BILINEAR, ratio=0.5)
    origins = [np.asarray(c)[0, 0, :2].tolist() for c in crops]
    assert origins == [[0, 0], [48, 0], [0, 32], [48, 32]]
    assert all(c.size == (32, 32) for c in crops)


def test_centre_crop_is_centred():
    crop = center_crop(coordinate_image(80, 64), 32)
    assert np.asarray(crop)[0, 0, :2].tolist() == [24, 16] and crop.size == (32, 32)


def test_image_key_follows_content_not_name(tmp_path):
    img = coordinate_image(8, 8)
    img.save(tmp_path / "a.png")
    img.save(tmp_path / "b.png")
    assert image_key(tmp_path / "a.png") == image_key(str(tmp_path / "b.png"))
    assert image_key(img) == image_key(img.copy()) != image_key(coordinate_image(8, 9))
    assert image_key(np.asarray(img)) != image_key(np.asarray(img).T.copy())


class MeanColourSource(BaseSource):
    """A real (if tiny) image model: an image's embedding is its mean RGB colour."""

    name, dim = "mean-colour", 3

    def __init__(self, strict=False, cache_dir=None):
        self.batch_size, self.progress, self.strict, self.cache_dir = 2, False, strict, cache_dir
        self.calls = 0

    def _identity(self):
        return "mean-colour"

    def embed_images(self, images):
        def encode(decoded):
            self.calls += len(decoded)
            return np.stack([np.asarray(im, dtype=np.float32).mean(axis=(0, 1)) for im in decoded])

        rows, self.skipped_ = embed_image_items(
            self, images, encode, modality="image", item_shape=lambda: (3,), extra="vision"
        )
        return rows


@pytest.fixture
def folder(tmp_path):
    Image.new("RGB", (10, 10), (255, 0, 0)).save(tmp_path / "red.png")
    Image.new("RGB", (10, 10), (0, 0, 255)).save(tmp_path / "blue.jpg")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
    full = (tmp_path / "red.png").read_bytes()
    (tmp_path / "truncated.png").write_bytes(full[: len(full) // 2])
    return tmp_path


def test_unreadable_images_are_skipped_with_a_count_and_their_indices(folder):
    source = MeanColourSource()
    images = [
        folder / "red.png",
        folder / "missing.png",
        folder / "broken.png",
        folder / "blue.jpg",
        folder / "truncated.png",
        np.zeros((4, 4, 3), np.uint8),
    ]
    with pytest.warns(SkippedInputWarning, match=r"Skipped 3 of 6"):
        out = source.embed_images(images)
    assert source.skipped_ == [1, 2, 4]
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out[0], [1, 0, 0], atol=1e-6)
    assert out[1][2] > 0.99  # blue (jpeg: nearly pure)
    np.testing.assert_array_equal(out[2], [0, 0, 0])  # a black image stays a zero row


def test_strict_mode_raises_a_typed_error_naming_the_image(folder):
    with pytest.raises(UnreadableImageError, match="broken.png"):
        MeanColourSource(strict=True).embed_images([folder / "red.png", folder / "broken.png"])
    with pytest.raises(UnreadableImageError, match="missing.png"):
        MeanColourSource(strict=True).embed_images([folder / "missing.png"])


def test_cached_images_are_not_decoded_again(folder, tmp_path):
    images = [folder / "red.png", folder / "blue.jpg", folder / "broken.png"]
    with pytest.warns(SkippedInputWarning):
        first = MeanColourSource(cache_dir=tmp_path / "cache").embed_images(images)
    again = MeanColourSource(cache_dir=tmp_path / "cache")
    with pytest.warns(SkippedInputWarning):
        second = again.embed_images(images)
    assert again.calls == 0
    np.testing.assert_array_equal(first, second)


def test_a_lone_image_must_be_wrapped_in_a_list(folder):
    with pytest.raises(ValueError, match="wrap a single image"):
        MeanColourSource().embed_images(folder / "red.png")
