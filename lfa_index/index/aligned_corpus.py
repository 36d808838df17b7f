"""AlignedCorpus: images aligned by a fitted AlignedIndex in a FAISS index, searched by text or by image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import MAPPINGS, Mapping
from ..core.query_map import QueryMap, align_text
from ..core.validation import StrOptions, check_number, check_query_matrix, check_text_matrix, validate_params
from .aligned_index import AlignedIndex
from .corpus import Corpus, check_factory
from .corpus_format import SavedCorpus, corpus_errors, load_corpus, save_corpus
from .faiss_device import FaissDevice


class AlignedCorpus:
    """Image embeddings aligned by a fitted :class:`~lfa_index.AlignedIndex`, held in FAISS with int64 ids.

    Each added image is stored as ``normalize(x̂ G + o)``, its aligned embedding; a text query is
    aligned as the index aligns class prototypes, so :meth:`search_text` is text -> image retrieval
    and :meth:`search` image -> image kNN, both by aligned cosine (exact with ``factory="Flat"``).
    The maps are copied from the index when the corpus is built: refitting the index later leaves
    the corpus as it was, its images and queries aligned by one fit.

    Parameters
    ----------
    index : AlignedIndex
        A fitted index; its FAISS placement (CPU or GPU) is kept too.
    factory : str, default="Flat"
        FAISS factory string (e.g. "IVF1024,PQ32" for large corpora, trained on the first
        :meth:`add`; a trailing "np" skips polysemous training). Ids are kept by an
        ``IndexIDMap2`` around it.
    params : str or None, default=None
        FAISS search parameters, as ``faiss.ParameterSpace`` reads them ("nprobe=16").
    mapping : {"task", "tt", "average"}, default="task"
        The index's map that aligns the images and image queries (W, W_tt or their mean).

    Attributes
    ----------
    query_map : QueryMap   the frozen image-side map (:class:`~lfa_index.core.query_map.QueryMap`).
    ntotal : int           images held.

    Example
    -------
    >>> corpus = AlignedCorpus(index, factory="IVF1024,PQ32", params="nprobe=16").add(images)
    >>> scores, ids = corpus.search_text(text_emb, k=10)   # text -> image
    >>> scores, ids = corpus.search(images[:5], k=10)      # image -> image
    >>> corpus.save("my_index.corpus"); AlignedCorpus.load("my_index.corpus")
    """

    _parameter_constraints: dict = {
        "index": [AlignedIndex],
        "factory": [str],
        "params": [str, None],
        "mapping": [StrOptions(set(MAPPINGS))],
    }

    def __init__(
        self, index: AlignedIndex, *, factory: str = "Flat", params: str | None = None, mapping: Mapping = "task"
    ):
        validate_params(
            {"index": index, "factory": factory, "params": params, "mapping": mapping},
            self._parameter_constraints, type(self).__name__,
        )
        table = index.class_table_  # NotFittedError before a fit; one snapshot of the maps and the text side
        query_map = table.maps[mapping]
        check_factory(factory, query_map.n_features_out)
        self.factory, self.params, self.mapping = factory, params, mapping
        self._device = str(index.lfa_.device)  # the placement asked for ("auto", "cpu", "cuda:1"): a parameter
        self._n_text_features = int(table.text_embeddings.shape[1])
        self._text_projection = table.text_projection
        self._corpus = Corpus.create(factory, params, query_map, table.device)

    # ------------------------------------------------------------------ the corpus
    @property
    def query_map(self) -> QueryMap:
        """The map the images and image queries are aligned with, frozen when the corpus was built."""
        return self._corpus.query_map

    @property
    def ntotal(self) -> int:
        """Images held."""
        return self._corpus.size

    def __repr__(self) -> str:
        return f"AlignedCorpus(factory={self.factory!r}, params={self.params!r}, mapping={self.mapping!r}, " \
               f"ntotal={self.ntotal})"

    def add(self, X: Any, ids: Any = None) -> "AlignedCorpus":
        """Align and add image embeddings (N, d_in). ``ids``: distinct non-negative int64, default consecutive
        after the largest id held. A factory that needs training is trained on the first call's images (a
        seeded sample of at most max(262144, 256 · nlist)). Returns ``self``."""
        self._corpus.add(self._check_images(X), ids)
        return self

    def search_text(self, text_emb: Any, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Text -> image retrieval: ``(scores, ids)``, each (n, min(k, ntotal)), best first; approximate
        factories may leave slots unfilled (id -1, score -inf). ``text_emb`` (n, d_txt): embedded like
        the index's class prototypes."""
        check_number(k, "k", low=1, integer=True)
        return self._corpus.search(self.transform_text(text_emb), int(k), "search_text")

    def search(self, X: Any, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Image -> image kNN in the aligned space: ``(scores, ids)`` of raw image queries (n, d_in), as
        :meth:`search_text`."""
        check_number(k, "k", low=1, integer=True)
        return self._corpus.search(self.query_map.align(self._check_images(X)), int(k), "search")

    def transform_text(self, text_emb: Any) -> np.ndarray:
        """Aligned unit text embeddings (n, d), the queries of :meth:`search_text`: as the index aligned
        class prototypes when the corpus was built."""
        text = check_text_matrix(text_emb, name="text_emb", dim=self._n_text_features)
        return np.ascontiguousarray(align_text(text, self._text_projection))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the corpus to directory ``path`` atomically (JSON, safetensors, FAISS; sha256 manifest), e.g.
        beside its index. An existing corpus or empty directory is replaced; any other existing path raises
        :class:`~lfa_index.errors.IndexPathError`."""
        with self._corpus.saved() as (index, next_id):
            params = {"factory": self.factory, "params": self.params, "mapping": self.mapping}
            return save_corpus(path, SavedCorpus(
                params, self._device, next_id, self._n_text_features, self.query_map, self._text_projection, index
            ))

    @classmethod
    def load(cls, path: str | Path, device: str | None = None) -> "AlignedCorpus":
        """Read a corpus written by :meth:`save`; ``device`` overrides the saved FAISS placement (e.g. "cpu").
        Raises :class:`~lfa_index.errors.IndexFormatError` for a missing, foreign, corrupted or inconsistent
        directory, naming the file."""
        placement = None if device is None else FaissDevice(device)  # a wrong device is the caller's error
        saved = load_corpus(path, device)
        corpus = cls.__new__(cls)
        corpus.factory, corpus.params, corpus.mapping = (saved.params[k] for k in ("factory", "params", "mapping"))
        corpus._device = saved.device
        corpus._n_text_features = saved.n_text_features
        corpus._text_projection = saved.text_projection
        with corpus_errors(path):  # saved search parameters that do not apply to the saved index
            corpus._corpus = Corpus.restore(
                saved.index, saved.next_id, saved.query_map, corpus.factory, corpus.params,
                placement or FaissDevice(saved.device),
            )
        return corpus

    def _check_images(self, X: Any) -> np.ndarray:
        return check_query_matrix(X, name="X", dim=self.query_map.n_features_in)
