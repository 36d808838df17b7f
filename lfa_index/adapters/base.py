"""The interface every embedding source follows, and the batching/caching loop they share."""

from __future__ import annotations

import abc
import os
from numbers import Integral
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..arrays import l2_normalize
from ..core.validation import BOOLEAN, Interval, check_texts, validate_params
from ..errors import (
    DimensionMismatchError,
    ShapeError,
    UnsupportedModalityError,
)
from .cache import EmbeddingCache, content_key


class EmbeddingSource(abc.ABC):
    """What lfa-index needs from an embedding model: ``name``, ``dim``, ``embed_texts``, ``embed_images``.

    Both methods return L2-normalised float32 arrays of shape (N, dim); a source that cannot embed
    one modality raises :class:`UnsupportedModalityError`. Any class with these four members counts
    as a source for ``isinstance`` (checked on the class, so no model is loaded to answer), as with
    ``collections.abc``; subclassing it is optional.
    """

    _members = ("name", "dim", "embed_texts", "embed_images")

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Short human-readable name, e.g. ``"open_clip:ViT-B-32:openai"``."""

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Size of one embedding (may load the model)."""

    @abc.abstractmethod
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32, rows L2-normalised."""

    @abc.abstractmethod
    def embed_images(self, images: Sequence[Any]) -> np.ndarray:
        """(N, dim) float32, rows L2-normalised."""

    @classmethod
    def __subclasshook__(cls, candidate: type) -> bool:
        if cls is not EmbeddingSource:
            return NotImplemented
        found = all(
            any(m in vars(k) and vars(k)[m] is not None for k in candidate.__mro__) for m in cls._members
        )
        return True if found else NotImplemented


def hf_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` asks for offline mode."""
    return any(
        os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def fixed_batches(n: int, batch_size: int) -> list[range]:
    """Consecutive index ranges of at most ``batch_size`` items."""
    return [range(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def embed_in_batches(
    items: Sequence[Any],
    keys: Sequence[bytes],
    compute: Callable[[list[Any]], np.ndarray],
    *,
    batches: Callable[[list[Any]], Iterable[Sequence[int]]],
    cache: EmbeddingCache | None,
    identity: str,
    progress: bool,
    desc: str,
    unit: str,
) -> np.ndarray:
    """Embed ``items`` (``keys[i]`` is the digest of ``items[i]``), reading and filling the cache.

    Identical inputs are computed once; each computed batch is normalised and stored right away,
    so an interrupted run resumes where it stopped. ``compute`` may return NaN rows for inputs it
    could not embed: those are passed through and never cached.

    Returns an (N, ...) float32 array in the order of ``items``.
    """
    from tqdm.auto import tqdm

    if len(items) == 0:
        raise ShapeError(f"{desc}: nothing to embed (empty input); pass at least one item.")
    first: dict[bytes, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    unique = list(first)
    found = cache.get(identity, unique) if cache is not None else {}
    todo = [k for k in unique if k not in found]
    todo_items = [items[first[k]] for k in todo]
    results: dict[bytes, np.ndarray] = dict(found)
    where = f" (cache folder {cache.namespace_dir(identity)})" if cache is not None else ""
    shapes = sorted({row.shape for row in found.values()})
    if len(shapes) > 1:
        raise DimensionMismatchError(
            f"{desc}: the cache holds embeddings of different sizes {[_size(s) for s in shapes]}{where}; the model "
            "behind this name changed between runs: delete that cache folder, or fix the model's output size."
        )
    row_shape, seen_in = (shapes[0], "the cache holds") if shapes else (None, "")
    with tqdm(total=len(unique), initial=len(found), disable=not progress, desc=desc, unit=unit) as bar:
        for batch in batches(todo_items):
            batch = list(batch)
            out = l2_normalize(compute([todo_items[j] for j in batch]))
            if out.shape[0] != len(batch):
                raise ShapeError(f"{desc}: the model gave {out.shape[0]} embeddings for a batch of {len(batch)} "
                                 "inputs; check that it returns one embedding per input.")
            if row_shape is None:
                row_shape, seen_in = out.shape[1:], "earlier batches gave"
            elif out.shape[1:] != row_shape:  # checked before caching: a wrong batch is never stored
                raise DimensionMismatchError(
                    f"{desc}: the model returned embeddings of size {_size(out.shape[1:])} but {seen_in} size "
                    f"{_size(row_shape)}{where if seen_in.startswith('the cache') else ''}; the model behind this name "
                    "changed: delete the cache folder, or fix the model's output size (e.g. dimensions=...)."
                )
            batch_keys = [todo[j] for j in batch]
            if cache is not None:
                ok = np.isfinite(out.reshape(len(batch), -1)).all(axis=1)
                if ok.any():
                    cache.put(identity, [k for k, good in zip(batch_keys, ok) if good], out[ok])
            results.update(zip(batch_keys, out))
            bar.update(len(batch))
    return np.stack([results[k] for k in keys]).astype(np.float32, copy=False)


def _size(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    return shape[0] if len(shape) == 1 else shape


class BaseSource(EmbeddingSource):
    """Shared parameters and plumbing of the built-in sources (batching, progress bar, cache).

    Subclasses implement ``name``, ``dim``, ``_identity()`` and the modalities they support.
    """

    batch_size: int
    cache_dir: str | os.PathLike | None
    progress: bool

    _parameter_constraints: dict[str, list[Any]] = {
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "progress": [BOOLEAN],
    }
    """What each parameter may be (checked before each embedding call); subclasses extend it."""

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        raise UnsupportedModalityError(
            f"{type(self).__name__} cannot embed texts; use a text or text-image source "
            "(SentenceTransformerSource, OpenAIEmbeddingSource, OpenCLIPSource)."
        )

    def embed_images(self, images: Sequence[Any]) -> np.ndarray:
        raise UnsupportedModalityError(
            f"{type(self).__name__} cannot embed images; use an image source "
            "(OpenCLIPSource, VisionBackboneSource)."
        )

    def _identity(self) -> str:
        raise NotImplementedError

    def check_params(self) -> None:
        """Raise a typed error unless every parameter meets ``_parameter_constraints`` (before any embedding work)."""
        constraints = self._parameter_constraints
        validate_params({name: getattr(self, name) for name in constraints}, constraints, type(self).__name__)

    def _cache(self) -> EmbeddingCache | None:
        if self.cache_dir is None:
            return None
        path = Path(self.cache_dir).expanduser()
        cache = getattr(self, "_cache_obj", None)
        if cache is None or cache.directory != path:
            cache = self._cache_obj = EmbeddingCache(path)
        return cache

    def embed_cached(
        self,
        items: list[Any],
        keys: list[bytes],
        compute: Callable[[list[Any]], np.ndarray],
        *,
        modality: str,
        unit: str,
        batches: Callable[[list[Any]], Iterable[Sequence[int]]] | None = None,
    ) -> np.ndarray:
        """:func:`embed_in_batches` through this source's cache (keyed by its identity and ``modality``),
        batch size and progress bar; ``keys`` are the items' content keys."""
        return embed_in_batches(
            items,
            keys,
            compute,
            batches=batches or (lambda todo: fixed_batches(len(todo), self.batch_size)),
            cache=self._cache(),
            identity=f"{self._identity()}|{modality}",
            progress=self.progress,
            desc=f"{self.name} {modality}",
            unit=unit,
        )

    def _embed_texts_cached(
        self,
        texts: Sequence[str],
        compute: Callable[[list[str]], np.ndarray],
        *,
        modality: str = "text",
        batches: Callable[[list[Any]], Iterable[Sequence[int]]] | None = None,
    ) -> np.ndarray:
        texts = check_texts(texts)
        self.check_params()
        return self.embed_cached(texts, [content_key(t) for t in texts], compute, modality=modality, unit="text",
                                 batches=batches)
