"""Image inputs of the image sources: reading, hashing, the paper's five crops, unreadable files.

An image is a file path, a PIL image, or an (H, W) / (H, W, 3|4) uint8 array. Unreadable images
are skipped with a :class:`SkippedInputWarning` (their input indices go to ``source.skipped_``),
or raise :class:`UnreadableImageError` when the source has ``strict=True``.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InvalidParameterError, SkippedInputWarning, UnreadableImageError
from ..extras import import_extra

ImageInput = Any  # str | os.PathLike | PIL.Image.Image | np.ndarray

#: Corner crops of the five-crop views are taken from the image resized to crop / 0.875
#: (256 px for 224 px crops, the usual ImageNet evaluation ratio).
CROP_RATIO = 0.875


def check_images(images: Any, *, name: str = "images") -> list[ImageInput]:
    """Return ``images`` as a list, refusing a lone path or image given without a list."""
    if isinstance(images, (str, bytes, os.PathLike)) or (isinstance(images, np.ndarray) and images.ndim <= 3):
        raise InvalidParameterError(f"{name} must be a sequence of images; wrap a single image in a list.")
    if hasattr(images, "getpixel"):
        raise InvalidParameterError(f"{name} must be a sequence of images; wrap a single image in a list.")
    try:
        return list(images)
    except TypeError as err:
        raise InvalidParameterError(
            f"{name} must be a sequence of images, got {type(images).__name__}."
        ) from err


def describe(item: ImageInput) -> str:
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if isinstance(item, np.ndarray):
        return f"<array {item.shape} {item.dtype}>"
    return f"<{type(item).__name__}>"


def image_key(item: ImageInput) -> bytes:
    """SHA-256 of the image content (file bytes, or pixels with mode and size)."""
    h = hashlib.sha256()
    if isinstance(item, (str, os.PathLike)):
        with open(item, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    elif isinstance(item, np.ndarray):
        h.update(f"array|{item.dtype.str}|{item.shape}|".encode())
        h.update(np.ascontiguousarray(item).tobytes())
    elif hasattr(item, "tobytes") and hasattr(item, "mode"):
        h.update(f"pil|{item.mode}|{item.size}|".encode())
        h.update(item.tobytes())
    else:
        raise TypeError(f"not an image: {type(item).__name__} (pass paths, PIL images or uint8 arrays)")
    return h.digest()


def load_rgb(item: ImageInput, *, extra: str) -> Any:
    """Decode one image to an RGB PIL image (raises on an unreadable one)."""
    Image = import_extra("PIL.Image", extra=extra, package="pillow")
    if isinstance(item, (str, os.PathLike)):
        with Image.open(item) as img:
            img.load()
            return img.convert("RGB")
    if isinstance(item, np.ndarray):
        if (
            item.dtype != np.uint8
            or item.ndim not in (2, 3)
            or (item.ndim == 3 and item.shape[2] not in (1, 3, 4))
        ):
            raise ValueError(
                f"an image array must be uint8 of shape (H, W) or (H, W, 3|4), got {item.dtype} {item.shape}"
            )
        return Image.fromarray(item.squeeze(-1) if item.ndim == 3 and item.shape[2] == 1 else item).convert(
            "RGB"
        )
    if isinstance(item, Image.Image):
        return item.convert("RGB")
    raise TypeError(f"not an image: {type(item).__name__}")


def resize_shorter(img: Any, size: int, resample: int) -> Any:
    """Resize so that the shorter side is ``size`` pixels, keeping the aspect ratio."""
    w, h = img.size
    if min(w, h) == size:
        return img
    if w <= h:
        return img.resize((size, max(1, round(h * size / w))), resample)
    return img.resize((max(1, round(w * size / h)), size), resample)


def center_crop(img: Any, size: int) -> Any:
    """Central ``size`` x ``size`` crop (rounding as torchvision's ``CenterCrop``)."""
    w, h = img.size
    left, top = int(round((w - size) / 2.0)), int(round((h - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def corner_crops(img: Any, size: int, resample: int, ratio: float = CROP_RATIO) -> list[Any]:
    """The four corner crops (top-left, top-right, bottom-left, bottom-right) of ``size`` pixels,
    taken from the image resized so that its shorter side is ``size / ratio``."""
    big = resize_shorter(img, int(round(size / ratio)), resample)
    w, h = big.size
    return [
        big.crop((x, y, x + size, y + size))
        for x, y in ((0, 0), (w - size, 0), (0, h - size), (w - size, h - size))
    ]


N_VIEWS = 5
"""Views per image with ``five_crop=True``: the standard centre view, then the four corner crops."""


def embed_image_views(
    source: Any,
    images: Sequence[ImageInput],
    *,
    five_crop: bool,
    encode_images: Callable[[list[Any]], np.ndarray],
    encode_five_crops: Callable[[list[Any]], np.ndarray],
    extra: str,
) -> tuple[np.ndarray, list[int]]:
    """:func:`embed_image_items` with one view per image, (N, dim), or five, (N, 5, dim)."""
    if five_crop:
        return embed_image_items(source, images, encode_five_crops, modality="image-5crop",
                                 item_shape=lambda: (N_VIEWS, source.dim), extra=extra)
    return embed_image_items(source, images, encode_images, modality="image",
                             item_shape=lambda: (source.dim,), extra=extra)


def embed_image_items(
    source: Any,
    images: Sequence[ImageInput],
    encode: Callable[[list[Any]], np.ndarray],
    *,
    modality: str,
    item_shape: Callable[[], tuple[int, ...]],
    extra: str,
) -> tuple[np.ndarray, list[int]]:
    """Embed images through ``source``'s cache and batches; returns (rows of readable images, skipped).

    ``encode`` maps decoded RGB images to an (n, *item_shape) array. Unreadable images are skipped
    (or raise :class:`UnreadableImageError` when ``source.strict``).
    """
    images = check_images(images)
    source.check_params()
    failures: dict[int, str] = {}
    keys: list[bytes] = []
    readable: list[int] = []
    for i, item in enumerate(images):
        try:
            keys.append(image_key(item))
            readable.append(i)
        except (OSError, TypeError) as err:
            failures[i] = f"{type(err).__name__}: {err}"
            _maybe_raise(source, i, item, failures[i])

    def compute(batch: list[tuple[int, ImageInput]]) -> np.ndarray:
        decoded, ok = [], []
        for j, (i, item) in enumerate(batch):
            try:
                decoded.append(load_rgb(item, extra=extra))
                ok.append(j)
            except Exception as err:  # PIL raises many types on damaged files
                failures[i] = f"{type(err).__name__}: {err}"
                _maybe_raise(source, i, item, failures[i])
        out = np.full((len(batch), *item_shape()), np.nan, dtype=np.float32)
        if decoded:
            out[ok] = encode(decoded)
        return out

    if readable:
        rows = source.embed_cached([(i, images[i]) for i in readable], keys, compute, modality=modality, unit="image")
        good = np.isfinite(rows.reshape(len(readable), -1)).all(axis=1)
    else:
        rows, good = np.empty((0, *item_shape()), dtype=np.float32), np.zeros(0, dtype=bool)
    skipped = sorted(set(failures) | {readable[j] for j in np.flatnonzero(~good)})
    if skipped:
        first = ", ".join(f"{describe(images[i])} ({failures.get(i, 'unreadable')})" for i in skipped[:3])
        warnings.warn(
            f"Skipped {len(skipped)} of {len(images)} unreadable image(s), e.g. {first}. Their indices are in "
            f"{type(source).__name__}.skipped_; pass strict=True to raise instead.",
            SkippedInputWarning,
            stacklevel=3,
        )
    return rows[good], skipped


def _maybe_raise(source: Any, index: int, item: ImageInput, reason: str) -> None:
    if source.strict:
        raise UnreadableImageError(
            f"Image {index} ({describe(item)}) could not be read: {reason}. Fix or remove it, "
            "or pass strict=False to skip unreadable images with a warning."
        )
