"""Text embeddings from a BERT-style sentence encoder exported to ONNX, mean-pooled as sentence-transformers does."""

from __future__ import annotations

import os
import warnings
from numbers import Integral
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.validation import Interval
from ..errors import ModelUnavailableError, TruncationWarning
from ..extras import import_extra
from .base import BaseSource
from .cache import file_fingerprint


class OnnxSentenceSource(BaseSource):
    """A transformer encoder in an ONNX file plus a ``tokenizers`` tokenizer.json, run by onnxruntime.

    The model takes ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` if it asks for
    them) and returns token embeddings (batch, tokens, dim) as its first 3-D output; a text's
    embedding is their mean over its real tokens (the pooling of sentence-transformers models such
    as paraphrase-MiniLM-L3-v2).

    Parameters
    ----------
    model_path : the ``.onnx`` file.
    tokenizer_path : the model's ``tokenizer.json`` (Hugging Face ``tokenizers`` format).
    name : short name of the model, e.g. ``"paraphrase-MiniLM-L3-v2"`` (default: the file's stem).
    max_seq_length : token limit (default 128); longer texts are truncated with a
        :class:`TruncationWarning`.
    batch_size : texts per forward pass (default 32).
    num_threads : onnxruntime threads per operator; ``None`` (default): onnxruntime's choice (all cores).
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Example
    -------
    >>> source = OnnxSentenceSource("model.onnx", "tokenizer.json", num_threads=1)
    >>> source.embed_texts(["a photo of a cat"]).shape
    (1, 384)
    """

    _parameter_constraints: dict[str, list[Any]] = {
        **BaseSource._parameter_constraints,
        "max_seq_length": [Interval(Integral, 1, None, closed="left")],
        "num_threads": [None, Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        model_path: str | os.PathLike,
        tokenizer_path: str | os.PathLike,
        *,
        name: str | None = None,
        max_seq_length: int = 128,
        batch_size: int = 32,
        num_threads: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path
        self.model_name = name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        return f"onnx:{self.model_name or Path(self.model_path).stem}"

    @property
    def dim(self) -> int:
        shape = self._token_output()[1].shape
        if isinstance(shape[-1], int):
            return shape[-1]
        return int(self._encode(["dim"]).shape[1])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: (N, dim) float32, rows L2-normalised; cached inputs are not recomputed."""
        return self._embed_texts_cached(texts, self._encode)

    def _encode(self, texts: list[str]) -> np.ndarray:
        session, tokenizer = self._loaded()
        encodings = tokenizer.encode_batch(texts)
        self._warn_truncation(encodings)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64), "attention_mask": mask}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feeds["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        index, _ = self._token_output()
        tokens = session.run(None, feeds)[index]
        weights = mask[..., None].astype(np.float32)
        return (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)

    def _warn_truncation(self, encodings: list[Any]) -> None:
        n_over = sum(bool(e.overflowing) for e in encodings)
        if n_over:
            warnings.warn(
                f"{n_over} of {len(encodings)} texts are longer than {self.name}'s limit of "
                f"{self.max_seq_length} tokens and were truncated; split long documents into passages "
                "to embed all of their content.",
                TruncationWarning,
                stacklevel=6,
            )

    def _identity(self) -> str:
        return (
            f"onnx|{file_fingerprint(self._path(self.model_path))}|{file_fingerprint(self._path(self.tokenizer_path))}"
            f"|mean|max_seq_length={self.max_seq_length}"
        )

    def _token_output(self) -> tuple[int, Any]:
        """Position and description of the model's token embeddings (its first 3-D output)."""
        outputs = self._loaded()[0].get_outputs()
        for i, out in enumerate(outputs):
            if len(out.shape) == 3 and out.type == "tensor(float)":
                return i, out
        raise ModelUnavailableError(
            f"{self.model_path} has no float output of shape (batch, tokens, dim) "
            f"(outputs: {[(o.name, o.shape) for o in outputs]}); export the model with its token embeddings."
        )

    def _loaded(self) -> tuple[Any, Any]:
        loaded = getattr(self, "model_", None)
        if loaded is None:
            loaded = self.model_ = (self._session(), self._tokenizer())
        return loaded

    def _session(self) -> Any:
        ort = import_extra("onnxruntime", "encoders")
        options = ort.SessionOptions()
        if self.num_threads is not None:
            options.intra_op_num_threads = options.inter_op_num_threads = int(self.num_threads)
        path = self._path(self.model_path)
        try:
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types for bad files
            raise ModelUnavailableError(f"onnxruntime could not load {path}: {err}") from err

    def _tokenizer(self) -> Any:
        tokenizers = import_extra("tokenizers", "encoders")
        path = self._path(self.tokenizer_path)
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception for a malformed file
            raise ModelUnavailableError(f"could not read the tokenizer {path}: {err}") from err
        pad = tokenizer.padding or {}
        tokenizer.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"))
        tokenizer.enable_truncation(int(self.max_seq_length))
        return tokenizer

    @staticmethod
    def _path(given: str | os.PathLike) -> Path:
        path = Path(given).expanduser()
        if not path.is_file():
            raise ModelUnavailableError(f"no file at {path}: pass an existing .onnx model and tokenizer.json.")
        return path

