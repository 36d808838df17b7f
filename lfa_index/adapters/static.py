"""Text embeddings from the 64-d static model of ``tokenlearn-static-model`` (model2vec style, bundled weights)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ModelUnavailableError
from ..extras import import_extra
from .base import BaseSource
from .cache import folder_fingerprint

_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class StaticEmbeddingSource(BaseSource):
    """The tokenlearn static embedding model (64-d) shipped in the pip package ``tokenlearn-static-model``.

    A model2vec-style model: a Unigram tokenizer, a table of int8 token vectors (10,000 rows after
    vocabulary quantisation) and per-token weights; a text's embedding is the weighted mean of its
    token vectors, computed by the package's own Rust encoder (first 512 tokens of each text). No
    torch, no download; thousands of texts per second on one core.

    Parameters
    ----------
    batch_size : texts per call into the encoder (default 1024).
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Example
    -------
    >>> StaticEmbeddingSource().embed_texts(["card arrival", "exchange rate"]).shape
    (2, 64)
    """

    def __init__(
        self,
        *,
        batch_size: int = 1024,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        return "tokenlearn-static-model:64d"

    @property
    def dim(self) -> int:
        from safetensors import safe_open

        with safe_open(str(_model_dir(_static_model()) / "model.safetensors"), framework="np") as f:
            return int(f.get_slice("embeddings").get_shape()[1])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: (N, 64) float32, rows L2-normalised; cached inputs are not recomputed."""
        return self._embed_texts_cached(texts, self._encode)

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(_static_model().get_embeddings(texts), dtype=np.float32)

    def _identity(self) -> str:
        return f"tokenlearn-static-model|{folder_fingerprint(_model_dir(_static_model()))}"


def _static_model() -> Any:
    return import_extra("static_model", "encoders", package="tokenlearn-static-model")


def _model_dir(static_model: Any) -> Path:
    folder = Path(static_model.__file__).with_name("model")
    missing = [f for f in _MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise ModelUnavailableError(
            f"tokenlearn-static-model lacks {missing} in {folder}; reinstall it with: "
            "pip install --force-reinstall 'lfa-index[encoders]'"
        )
    return folder
