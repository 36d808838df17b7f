"""AlignedIndex: an LFA map served as exact FAISS search over class prototypes and image corpora.

Classification costs one inner-product search of the raw query against C vectors: since
``(x W)·y = x·(y Wᵀ)`` and a positive per-query factor leaves a ranking unchanged, the index keeps
the prototypes folded with the query map ``G = Rᵀ W`` (``R`` the image-side projection, if any),
and the norm ``||x G||`` is computed only where cosines or probabilities are asked for.
Classes added later from text alone are scored with the base-to-new map ``W_tt`` (paper §4.5).

When the LFA classifier has class biases ``b`` or centred rows (``z = x̂ G + o`` with
``o = −μ W``), the folded vectors gain one coordinate, ``[q Gᵀ, q·o + b]``, and the queries get
their norm as a trailing coordinate: ``[x, ||x||]·[q Gᵀ, q·o + b] = ||x||(z·q + b)``, the LFA score
times a positive per-query factor, so the search stays one exact inner-product search with no
division pass (:meth:`AlignedIndex.prepare_queries` builds such queries for any store).

Example
-------
>>> index = AlignedIndex(steps=50, random_state=0).fit(img_emb, labels, text_emb, class_names)
>>> index.predict(queries)                      # class names
>>> scores, names = index.search(queries, k=5)  # top-5 classes, aligned cosines
>>> index.add(corpus_emb).search_text(text_emb, k=10)
>>> index.save("my_index"); AlignedIndex.load("my_index")
"""

from __future__ import annotations

import copy
import threading
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import faiss
import numpy as np
import torch
from scipy.special import softmax
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError

from .core import LFA
from .core.errors import (
    DimensionMismatchError,
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    LFAIndexError,
    NonFiniteError,
    ShapeError,
    ZeroNormError,
)
from .core.validation import check_choice, check_embeddings, check_ids, check_labels, check_number, resolve_device
from .persistence import IndexFormatError, read_index_dir, write_index_dir

Mapping = Literal["task", "tt", "average"]
_MAPPINGS = ("task", "tt", "average")
_CHUNK = 65536
_TRAIN_ROWS = 262144  # rows of the first add used to train a corpus index (more for IVF with nlist > 1024)
_KIND = "aligned-index"
_PARAMS_FILE, _ARRAYS_FILE, _CORPUS_FILE = "params.json", "arrays.safetensors", "corpus.faiss"


class NotFittedError(LFAIndexError, _SklearnNotFittedError):
    """The index is used before :meth:`AlignedIndex.fit` (or :meth:`AlignedIndex.load`)."""


class EmptyIndexError(LFAIndexError, ValueError):
    """A corpus search was asked for before any image embedding was added."""


class DuplicateIdError(InvalidInputError):
    """Ids passed to :meth:`AlignedIndex.add` repeat each other or ids already in the corpus."""


def faiss_gpu_available() -> bool:
    """True when the installed FAISS has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


# ------------------------------------------------------------------------------------ state
@dataclass(frozen=True)
class _ClassGroup:
    """Classes scored with one map: their folded prototypes in a flat inner-product index."""

    mapping: str  # "task" for fitted classes, "tt" for classes added from text (paper §4.5)
    positions: np.ndarray  # (c,) int64 positions of these classes in classes_
    folded: np.ndarray  # (c, d_in) or, with biases, (c, d_in + 1) float32 folded class vectors
    query_map: np.ndarray  # (d_in, d) float32 G, so that the aligned query is normalize(x̂ @ G + o)
    index: faiss.Index
    offset: np.ndarray | None = None  # (d,) float32 o = −μ W with centring, else None

    @property
    def augmented(self) -> bool:
        """Whether queries get their norm as a trailing coordinate (class biases or centring)."""
        return self.folded.shape[1] == self.query_map.shape[0] + 1


@dataclass(frozen=True)
class _ClassState:
    """An immutable snapshot that readers take once per call, so writers can swap it under them."""

    classes: np.ndarray
    groups: tuple[_ClassGroup, ...]


@dataclass
class _Corpus:
    index: faiss.Index  # IndexIDMap2 over normalize(x̂ @ query_map + query_offset)
    query_map: np.ndarray  # (d_in, d), frozen at the first add
    mapping: str
    ids: np.ndarray  # sorted int64 ids held
    next_id: int
    query_offset: np.ndarray | None = None  # (d,) with centring, frozen at the first add


class _ReadWriteLock:
    """Many concurrent readers or one writer (corpus searches vs. adds)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


# ------------------------------------------------------------------------------------ index
class AlignedIndex:
    """Few-shot classifier and aligned retrieval index built on an LFA map and FAISS.

    Parameters
    ----------
    corpus_factory : str, default="Flat"
        FAISS factory string of the aligned image corpus (e.g. "IVF1024,PQ32" for large corpora,
        trained on the first :meth:`add`; a trailing "np" skips FAISS's polysemous training,
        which plain searches do not use). Ids are kept by an ``IndexIDMap2`` around it.
    corpus_params : str or None, default=None
        FAISS search parameters of the corpus, as ``faiss.ParameterSpace`` reads them
        (e.g. "nprobe=16"). None keeps FAISS's defaults.
    corpus_mapping : {"task", "tt", "average"}, default="task"
        Map that aligns corpus images (and the queries of :meth:`search_unaligned`).
    **lfa_options
        Any parameter of :class:`lfa_index.LFA` (``beta``, ``steps``, ``device``, ``random_state``,
        ``temperature``, ...). ``device`` also places the FAISS indexes: on a CUDA device with
        faiss-gpu installed they move to the GPU.

    Attributes
    ----------
    lfa_ : LFA                        the fitted core estimator.
    classes_ : ndarray (C,)           labels, in the label space given to ``fit``: row indices of
                                      ``text_emb`` (int64) or class names (object array of str).
    class_names_ : list[str] or None  names of the classes, in row order.
    label_space_ : "index" or "name"  how labels were given to ``fit``.
    unknown_label_ : int or None      label that ``predict(reject_below=τ)`` returns for rejected
                                      queries: -1 for integer labels, None for names.
    is_new_class_ : ndarray (C,) bool classes added by :meth:`add_classes` without support images.
    prototypes_ : ndarray (C, d)      class vectors in the aligned space (L2-normalised text
                                      prototypes, or LFA's hybrid prototypes for fitted classes).
    intercept_ : ndarray (C,)         class biases (LFA's ``intercept_``; 0 for classes from text).
    text_embeddings_ : ndarray (C, d_txt)       the prototypes as given.
    support_embeddings_, support_labels_ : the support set seen so far (for :meth:`partial_fit`).
    n_features_in_ : int              image embedding dimension d_in.
    corpus_size_ : int                images in the aligned corpus (0 before :meth:`add`).

    Example
    -------
    >>> index = AlignedIndex(steps=100, random_state=0).fit(X, ["cat", "dog"], T, ["cat", "dog", "bird"])
    >>> index.predict(Q, reject_below=index.rejection_threshold())
    """

    def __init__(
        self,
        *,
        corpus_factory: str = "Flat",
        corpus_params: str | None = None,
        corpus_mapping: Mapping = "task",
        **lfa_options: Any,
    ):
        self.corpus_factory = corpus_factory
        self.corpus_params = corpus_params
        self.corpus_mapping = corpus_mapping
        self.lfa_options = lfa_options
        self._lock = threading.RLock()
        self._corpus_lock = _ReadWriteLock()
        self._gpu_lock = threading.Lock()
        self._gpu_resources: Any = None
        self._state: _ClassState | None = None
        self._corpus: _Corpus | None = None

    # ------------------------------------------------------------------ parameters
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters, the LFA options flattened in (as scikit-learn's)."""
        return {
            "corpus_factory": self.corpus_factory,
            "corpus_params": self.corpus_params,
            "corpus_mapping": self.corpus_mapping,
            **self.lfa_options,
        }

    def set_params(self, **params: Any) -> "AlignedIndex":
        """Set constructor parameters (they take effect at the next ``fit``)."""
        for name, value in params.items():
            if name in ("corpus_factory", "corpus_params", "corpus_mapping"):
                setattr(self, name, value)
            else:
                self.lfa_options = {**self.lfa_options, name: value}
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"AlignedIndex({args})"

    def _validate_params(self) -> None:
        known = set(LFA().get_params())
        unknown = sorted(set(self.lfa_options) - known)
        if unknown:
            raise InvalidParameterError(
                f"unknown option(s) {unknown}; AlignedIndex takes corpus_factory, corpus_params, "
                f"corpus_mapping and the LFA options {sorted(known)}."
            )
        check_choice(self.corpus_mapping, "corpus_mapping", _MAPPINGS)
        if not isinstance(self.corpus_factory, str) or not self.corpus_factory:
            raise InvalidParameterError(
                f"corpus_factory must be a FAISS factory string such as 'Flat' or 'IVF1024,PQ32', got {self.corpus_factory!r}."
            )
        if self.corpus_params is not None and not isinstance(self.corpus_params, str):
            raise InvalidParameterError(
                f"corpus_params must be None or a FAISS parameter string such as 'nprobe=16', got {self.corpus_params!r}."
            )

    def _check_corpus_factory(self, dim: int) -> None:
        try:
            faiss.index_factory(dim, self.corpus_factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as err:
            raise InvalidParameterError(
                f"corpus_factory={self.corpus_factory!r} cannot index {dim}-d aligned vectors ({_first_line(err)}); "
                "use e.g. 'Flat', 'HNSW32' or 'IVF1024,PQ32' (PQm needs m to divide the dimension)."
            ) from err

    # ------------------------------------------------------------------ fitting
    def fit(self, img_emb: Any, labels: Any, text_emb: Any, class_names: Sequence[str] | None = None) -> "AlignedIndex":
        """Learn the LFA map and index the class prototypes. Any previous corpus is dropped.

        Parameters
        ----------
        img_emb : (N, d_in) or (N, V, d_in) support image embeddings (V views per image).
        labels : (N,) ints indexing the rows of ``text_emb``, or strings found in ``class_names``;
            None fits unsupervised LFA. Predictions come back in the same label space.
        text_emb : (C, d_txt) class prototypes (e.g. text embeddings of the class names).
        class_names : sequence of C distinct strings, default=None.

        Example
        -------
        >>> AlignedIndex(steps=50).fit(X, ["cat", "dog"], T, class_names=["cat", "dog"])
        """
        self._validate_params()
        support = check_embeddings(img_emb, name="img_emb", ndims=(2, 3)).cpu().numpy()
        text = check_embeddings(text_emb, name="text_emb").cpu().numpy()
        # the core's projection maps the wider side onto the narrower one
        self._check_corpus_factory(min(support.shape[-1], text.shape[1]))
        names = _check_class_names(class_names, len(text))
        space, y = _resolve_fit_labels(labels, names, len(support), len(text))
        lfa = LFA(**self.lfa_options).fit(support, y, text)
        with self._lock, self._corpus_lock.write():
            self._place_faiss()
            self.lfa_ = lfa
            self.label_space_ = space
            self.class_names_ = names
            self.classes_ = np.array(names, dtype=object) if space == "name" else np.arange(len(text), dtype=np.int64)
            self.unknown_label_ = None if space == "name" else -1
            self.text_embeddings_ = text
            self.prototypes_ = np.asarray(lfa.prototypes_, dtype=np.float32)
            self.intercept_ = np.asarray(lfa.intercept_, dtype=np.float32)
            self.is_new_class_ = np.zeros(len(text), dtype=bool)
            self.support_embeddings_ = support
            self.support_labels_ = None if y is None else np.asarray(y, dtype=np.int64)
            self.n_features_in_ = int(lfa.n_features_in_)
            self._corpus = None
            self._publish_classes()
        return self

    def partial_fit(self, img_emb: Any, labels: Any) -> "AlignedIndex":
        """Refit with a warm start (current W and W_tt) on the support seen so far plus ``img_emb``.

        ``labels`` are in the label space of ``fit`` and may name classes added by
        :meth:`add_classes`; those classes then count as fitted and are scored with W. The corpus
        keeps the map it was built with (re-add images to align them with the new map).

        Example
        -------
        >>> index.partial_fit(more_images, more_labels)
        """
        self._check_fitted()
        with self._lock:
            support = check_embeddings(img_emb, name="img_emb", ndims=(self.support_embeddings_.ndim,)).cpu().numpy()
            if support.shape[1:] != self.support_embeddings_.shape[1:]:
                raise ShapeError(
                    f"img_emb has rows of shape {support.shape[1:]} but the support set has {self.support_embeddings_.shape[1:]}; "
                    "pass embeddings from the same model with the same number of views."
                )
            if (labels is None) != (self.support_labels_ is None):
                raise LabelError(
                    "partial_fit needs labels exactly when fit had them: pass labels=None for an unsupervised index, "
                    "labels otherwise."
                )
            y = None if labels is None else self._label_positions(labels, len(support), "labels")
            all_support = np.concatenate([self.support_embeddings_, support])
            all_y = None if y is None else np.concatenate([self.support_labels_, y])
            lfa = copy.deepcopy(self.lfa_).set_params(warm_start=True)
            lfa.fit(all_support, all_y, self.text_embeddings_)
            is_new = self.is_new_class_.copy()
            if all_y is not None:
                is_new[np.unique(all_y)] = False
            self.lfa_ = lfa
            self.prototypes_ = np.asarray(lfa.prototypes_, dtype=np.float32)
            self.intercept_ = np.where(is_new, 0.0, np.asarray(lfa.intercept_)).astype(np.float32)
            self.is_new_class_ = is_new
            self.support_embeddings_ = all_support
            self.support_labels_ = all_y
            self._publish_classes()
        return self

    def add_classes(self, text_emb: Any, names: Sequence[str] | None = None) -> "AlignedIndex":
        """Add classes from their prototypes alone, scored with the base-to-new map W_tt (paper §4.5).

        ``names`` are required when the index has class names; with integer labels the new
        classes get the next integers.

        Example
        -------
        >>> index.add_classes(encode(["a photo of a zebra."]), names=["zebra"])
        """
        self._check_fitted()
        with self._lock:
            text = self._check_text(text_emb)
            if self.class_names_ is None and names is not None:
                raise InvalidParameterError(
                    "this index was fitted without class_names, so new classes get integer labels; pass names=None."
                )
            new_names = None if self.class_names_ is None else _check_class_names(names, len(text), required=True)
            if new_names is not None:
                clash = sorted(set(new_names) & set(self.class_names_))
                if clash:
                    raise LabelError(f"class name(s) {clash[:5]} already exist; choose new names.")
            prototypes = np.asarray(self.lfa_.transform_prototypes(text), dtype=np.float32)
            start = len(self.classes_)
            if self.label_space_ == "name":
                added = np.array(new_names, dtype=object)
            else:
                added = np.arange(start, start + len(text), dtype=np.int64)
            self.classes_ = np.concatenate([self.classes_, added])
            if new_names is not None:
                self.class_names_ = self.class_names_ + new_names
            self.text_embeddings_ = np.concatenate([self.text_embeddings_, text])
            self.prototypes_ = np.concatenate([self.prototypes_, prototypes])
            self.intercept_ = np.concatenate([self.intercept_, np.zeros(len(text), dtype=np.float32)])
            self.is_new_class_ = np.concatenate([self.is_new_class_, np.ones(len(text), dtype=bool)])
            self._publish_classes()
        return self

    def _publish_classes(self) -> None:
        groups = []
        for mapping, mask in (("task", ~self.is_new_class_), ("tt", self.is_new_class_)):
            positions = np.flatnonzero(mask).astype(np.int64)
            if not len(positions):
                continue
            query_map, offset = self._query_map(mapping), self._query_offset(mapping)
            bias = self.intercept_[positions] if mapping == "task" else np.zeros(len(positions), dtype=np.float32)
            folded = _fold(self.prototypes_[positions], query_map, offset, bias)
            groups.append(_ClassGroup(mapping, positions, folded, query_map, self._flat_index(folded), offset))
        self._state = _ClassState(classes=self.classes_.copy(), groups=tuple(groups))

    def _flat_index(self, vectors: np.ndarray) -> faiss.Index:
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        return self._to_device(index)

    def _query_map(self, mapping: str) -> np.ndarray:
        w = np.asarray(self._lfa_map(mapping), dtype=np.float32)
        if self.lfa_.projection_side_ == "image":
            # normalize(normalize(x Rᵀ) W) = normalize(x Rᵀ W): fold the projection into the map
            # (exact with an offset too: LFA only centres when R is an isometry, ||x̂ Rᵀ|| = 1)
            w = np.asarray(self.lfa_.projection_, dtype=np.float32).T @ w
        return np.ascontiguousarray(w)

    def _lfa_map(self, mapping: str) -> np.ndarray:
        return {"task": self.lfa_.W_, "tt": self.lfa_.W_tt_, "average": self.lfa_.W_avg_}[mapping]

    def _query_offset(self, mapping: str) -> np.ndarray | None:
        """``o = −μ W`` of the map when the LFA centres its rows, else None."""
        if not getattr(self.lfa_, "center_", False):
            return None
        mean = np.asarray(self.lfa_.feature_mean_, dtype=np.float64)
        return np.ascontiguousarray(-(mean @ np.asarray(self._lfa_map(mapping), dtype=np.float64)), dtype=np.float32)

    # ------------------------------------------------------------------ classification
    def predict(self, X: Any, reject_below: float | None = None) -> np.ndarray:
        """Label of the nearest class in the aligned space, shape (n,).

        With ``reject_below=τ``, queries whose best aligned cosine is below τ get
        ``unknown_label_`` (-1, or None for named classes); see :meth:`rejection_threshold`.

        Example
        -------
        >>> index.predict(Q), index.predict(Q, reject_below=0.3)
        """
        state = self._classes_state()
        x = self._check_queries(X)
        if reject_below is None and len(state.groups) == 1:
            group = state.groups[0]
            _, nearest = self._search_index(group.index, _group_queries(group, x), 1)
            return state.classes[group.positions[nearest[:, 0]]]
        if reject_below is not None:
            check_number(reject_below, "reject_below", low=-1.0, high=1.0)
        scores, positions = self._top_classes(state, x, 1)
        labels = state.classes[positions[:, 0]]
        if reject_below is None:
            return labels
        rejected = scores[:, 0] < reject_below
        if rejected.any():
            labels = labels.astype(object) if self.unknown_label_ is None else labels
            labels[rejected] = self.unknown_label_
        return labels

    def search(self, X: Any, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` classes of each query: ``(scores, labels)``, each (n, k), best first.

        Scores are aligned cosines. ``k`` larger than the number of classes returns all classes.

        Example
        -------
        >>> scores, labels = index.search(Q, k=3)
        """
        check_number(k, "k", low=1, integer=True)
        state = self._classes_state()
        x = self._check_queries(X)
        scores, positions = self._top_classes(state, x, int(k))
        return scores, state.classes[positions]

    def decision_function(self, X: Any) -> np.ndarray:
        """Aligned cosine of each query to each class, shape (n, C), columns in ``classes_`` order."""
        state = self._classes_state()
        x = self._check_queries(X)
        out = np.empty((len(x), len(state.classes)), dtype=np.float32)
        for group in state.groups:
            out[:, group.positions] = (_group_queries(group, x) @ group.folded.T) / _group_norms(group, x)[:, None]
        return out

    def predict_proba(self, X: Any) -> np.ndarray:
        """``softmax(aligned cosine / temperature)``, shape (n, C), columns in ``classes_`` order."""
        logits = self.decision_function(X) / np.float32(self.lfa_.temperature)
        return softmax(logits, axis=1).astype(np.float32)

    def rejection_threshold(self, accept_rate: float = 0.95, img_emb: Any = None) -> float:
        """τ for ``predict(reject_below=τ)`` that accepts ``accept_rate`` of known-class queries.

        Computed on ``img_emb`` (held-out images of known classes) when given, else on the support
        set (view 0), whose scores are optimistic since W was fitted on it.

        Example
        -------
        >>> tau = index.rejection_threshold(0.95); index.predict(Q, reject_below=tau)
        """
        check_number(accept_rate, "accept_rate", low=0.0, high=1.0, low_inclusive=False)
        state = self._classes_state()
        if img_emb is None:
            support = self.support_embeddings_
            x = support[:, 0] if support.ndim == 3 else support
        else:
            x = self._check_queries(img_emb, name="img_emb")
        best, _ = self._top_classes(state, np.ascontiguousarray(x, dtype=np.float32), 1)
        # "lower" picks an observed score, so at least accept_rate of the rows score >= τ
        return float(np.quantile(best[:, 0], 1.0 - accept_rate, method="lower"))

    def _top_classes(self, state: _ClassState, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(state.classes))
        scores, positions = [], []
        for group in state.groups:
            raw, nearest = self._search_index(group.index, _group_queries(group, x), min(k, len(group.positions)))
            scores.append(raw / _group_norms(group, x)[:, None])
            positions.append(group.positions[nearest])
        if len(scores) == 1:
            return scores[0], positions[0]
        scores_all, positions_all = np.concatenate(scores, axis=1), np.concatenate(positions, axis=1)
        order = np.argsort(-scores_all, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores_all, order, 1), np.take_along_axis(positions_all, order, 1)

    # ------------------------------------------------------------------ export
    def aligned_prototypes(self, mapping: Literal["auto", "task", "tt", "average"] = "auto") -> np.ndarray:
        """Prototypes folded with the query map, (C, d_in): ``argmax_c x·p_c`` over raw queries
        ``x`` is the aligned classification, in any inner-product store.

        When the classifier has class biases or centred rows (:attr:`augmented_`), the rows are
        (C, d_in + 1), the last coordinate holding each class's bias, and the queries are
        ``prepare_queries(x)`` (``[x, ||x||]``); the ranking stays exact.

        "auto" folds each class with its own map (W for fitted classes, W_tt for added ones); the
        ranking is exact when all classes share one map, so pass a single map to mix them.

        Example
        -------
        >>> store.add(index.aligned_prototypes()); store.search(index.prepare_queries(raw_queries), 1)
        """
        self._check_fitted()
        check_choice(mapping, "mapping", ("auto",) + _MAPPINGS)
        if mapping == "auto":
            state = self._classes_state()
            width = self.n_features_in_ + int(self.augmented_)
            out = np.zeros((len(self.classes_), width), dtype=np.float32)
            for group in state.groups:
                out[group.positions, : group.folded.shape[1]] = group.folded
            return out
        folded = _fold(self.prototypes_, self._query_map(mapping), self._query_offset(mapping), self.intercept_)
        if self.augmented_ and folded.shape[1] == self.n_features_in_:
            folded = np.hstack([folded, np.zeros((len(folded), 1), dtype=np.float32)])
        return folded

    @property
    def augmented_(self) -> bool:
        """Whether stored class vectors carry a bias coordinate (queries: :meth:`prepare_queries`)."""
        return any(group.augmented for group in self._classes_state().groups)

    def prepare_queries(self, X: Any) -> np.ndarray:
        """Raw queries as :meth:`aligned_prototypes` expects them: float32 (n, d_in), or, when
        :attr:`augmented_`, ``[x, ||x||]`` (n, d_in + 1) — it ranks as ``[x̂, 1]``.

        Example
        -------
        >>> store.search(index.prepare_queries(Q), 1)   # == index.predict(Q)
        """
        x = self._check_queries(X)
        return _augment(x) if self.augmented_ else x

    def query_norms(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """``||x G + ||x|| o||`` (n,): dividing the inner products of :meth:`prepare_queries` rows
        with :meth:`aligned_prototypes` by it gives the aligned scores of :meth:`decision_function`."""
        self._check_fitted()
        check_choice(mapping, "mapping", _MAPPINGS)
        x = self._check_queries(X)
        return _row_norms(x, self._query_map(mapping), self._query_offset(mapping))

    def transform(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """Aligned, L2-normalised image embeddings (n, d) of raw rows, ``normalize(x̂ @ G + o)``:
        what :meth:`add` stores in the corpus (with ``mapping=corpus_mapping``) and what any
        store of aligned vectors should hold.

        Example
        -------
        >>> store.add(index.transform(images), ids)
        """
        self._check_fitted()
        check_choice(mapping, "mapping", _MAPPINGS)
        x = self._check_queries(X)
        return _align(x, self._query_map(mapping), self._query_offset(mapping))

    def query_offset(self, mapping: Mapping = "task") -> np.ndarray:
        """The offset o, (d,), of the affine query map: the aligned query is ``normalize(x̂ @ G + o)``
        (``x̂`` the L2-normalised query). Zero unless the LFA centres its rows."""
        self._check_fitted()
        check_choice(mapping, "mapping", _MAPPINGS)
        offset = self._query_offset(mapping)
        return np.zeros(self._query_map(mapping).shape[1], dtype=np.float32) if offset is None else offset.copy()

    def query_transform(self, mapping: Mapping = "task") -> np.ndarray:
        """The query map G, (d_in, d): the aligned embedding of ``x`` is ``normalize(x @ G)``
        (``normalize(x̂ @ G + o)`` when the LFA centres its rows, see :meth:`query_offset`).

        G is W, with the image-side random projection folded in when there is one.
        """
        self._check_fitted()
        check_choice(mapping, "mapping", _MAPPINGS)
        return self._query_map(mapping).copy()

    def query_linear_transform(self, mapping: Mapping = "task") -> faiss.LinearTransform:
        """The query map as a ``faiss.LinearTransform`` (d_in -> d), for ``faiss.IndexPreTransform``.

        Chain it with ``faiss.NormalizationTransform(d)`` to get aligned, normalised vectors. With
        centring it is affine (``x @ G + o``, FAISS's bias) and expects L2-normalised queries.

        Example
        -------
        >>> chain = faiss.IndexPreTransform(index.query_linear_transform(), faiss.IndexFlatIP(d))
        """
        g = self.query_transform(mapping)
        offset = self._query_offset(mapping)
        transform = faiss.LinearTransform(g.shape[0], g.shape[1], offset is not None)
        faiss.copy_array_to_vector(np.ascontiguousarray(g.T).ravel(), transform.A)
        if offset is not None:
            faiss.copy_array_to_vector(np.ascontiguousarray(offset, dtype=np.float32), transform.b)
        transform.is_trained = True
        return transform

    # ------------------------------------------------------------------ aligned corpus
    @property
    def corpus_size_(self) -> int:
        corpus = self._corpus
        return 0 if corpus is None else int(corpus.index.ntotal)

    def add(self, img_emb: Any, ids: Any = None) -> "AlignedIndex":
        """Add image embeddings (N, d_in) to the aligned corpus, stored as ``normalize(x @ G)``.

        ``ids`` are distinct non-negative int64 (default: consecutive after the largest id held).
        A corpus_factory that needs training is trained on the first call's images (a seeded
        sample of at most max(262144, 256 · nlist) of them).

        Example
        -------
        >>> index.add(corpus_emb, ids=np.arange(len(corpus_emb)))
        """
        self._check_fitted()
        x = self._check_queries(img_emb, name="img_emb")
        with self._corpus_lock.write():
            corpus = self._corpus if self._corpus is not None else self._new_corpus()
            new_ids = _check_ids(ids, len(x), corpus)
            if not corpus.index.is_trained:
                self._train_corpus(corpus, x)
            for start in range(0, len(x), _CHUNK):
                chunk = _align(x[start : start + _CHUNK], corpus.query_map, corpus.query_offset)
                with self._gpu_guard():
                    corpus.index.add_with_ids(chunk, new_ids[start : start + _CHUNK])
            corpus.ids = np.union1d(corpus.ids, new_ids)
            corpus.next_id = max(corpus.next_id, int(new_ids.max()) + 1)
            self._corpus = corpus
        return self

    def _new_corpus(self) -> _Corpus:
        query_map = self._query_map(self.corpus_mapping)
        index = faiss.index_factory(query_map.shape[1], "IDMap2," + self.corpus_factory, faiss.METRIC_INNER_PRODUCT)
        index = self._to_device(index)
        self._apply_corpus_params(index)
        return _Corpus(index, query_map, self.corpus_mapping, np.empty(0, dtype=np.int64), 0,
                       self._query_offset(self.corpus_mapping))

    def _apply_corpus_params(self, index: faiss.Index) -> None:
        if self.corpus_params is None:
            return
        space = faiss.GpuParameterSpace() if self._on_gpu() else faiss.ParameterSpace()
        try:
            space.set_index_parameters(index, self.corpus_params)
        except RuntimeError as err:
            raise InvalidParameterError(
                f"corpus_params={self.corpus_params!r} does not apply to a {self.corpus_factory!r} index "
                f"({_first_line(err)}); e.g. 'nprobe=16' for IVF, 'efSearch=64' for HNSW."
            ) from err

    def _train_corpus(self, corpus: _Corpus, x: np.ndarray) -> None:
        # FAISS's k-means keeps at most 256 points per centroid (its max_points_per_centroid):
        # aligning more of a large first add would only cost memory
        ivf = faiss.try_extract_index_ivf(corpus.index)
        limit = max(_TRAIN_ROWS, 256 * ivf.nlist) if ivf is not None else _TRAIN_ROWS
        if len(x) > limit:
            x = x[np.sort(np.random.default_rng(0).choice(len(x), limit, replace=False))]
        sample = _align(x, corpus.query_map, corpus.query_offset)
        try:
            with self._gpu_guard():
                corpus.index.train(sample)
        except RuntimeError as err:
            raise InvalidInputError(
                f"could not train the {self.corpus_factory!r} corpus on the first add's {len(x)} image(s) "
                f"({_first_line(err)}); add more images in the first call (IVFn needs at least n, ideally 39·n) "
                "or use corpus_factory='Flat'."
            ) from err

    def search_text(self, text_emb: Any, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Text -> image retrieval in the aligned corpus: ``(scores, ids)``, each (n, k'), best first.

        ``k' = min(k, corpus_size_)``: asking for more than the corpus holds returns what exists.
        Approximate factories may leave slots unfilled (id -1, score -inf).

        Example
        -------
        >>> scores, ids = index.search_text(encode(["a photo of a dog."]), k=10)
        """
        self._check_fitted()
        check_number(k, "k", low=1, integer=True)
        queries = self._text_queries(text_emb)
        return self._search_corpus(queries, int(k), "search_text")

    def search_corpus(self, img_emb: Any, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Image -> image kNN in the aligned corpus: ``(scores, ids)``, each (n, k'), best first.

        ``k' = min(k, corpus_size_)``, as in :meth:`search_text`.
        """
        self._check_fitted()
        check_number(k, "k", low=1, integer=True)
        x = self._check_queries(img_emb, name="img_emb")
        corpus = self._corpus
        if corpus is None:
            raise EmptyIndexError("the aligned corpus is empty: call add(img_emb) before search_corpus().")
        return self._search_corpus(_align(x, corpus.query_map, corpus.query_offset), int(k), "search_corpus")

    def _search_corpus(self, queries: np.ndarray, k: int, caller: str) -> tuple[np.ndarray, np.ndarray]:
        with self._corpus_lock.read():
            corpus = self._corpus
            if corpus is None or corpus.index.ntotal == 0:
                raise EmptyIndexError(f"the aligned corpus is empty: call add(img_emb) before {caller}().")
            scores, ids = self._search_index(corpus.index, queries, min(k, int(corpus.index.ntotal)))
        scores[ids < 0] = -np.inf
        return scores, ids

    def search_unaligned(
        self,
        index: faiss.Index,
        q_text: Any,
        k: int = 10,
        *,
        overfetch: int = 10,
        vectors: Any = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Text -> image search in an existing FAISS index of raw (unaligned) image embeddings.

        Queries are mapped back to the raw space (``y Gᵀ``), ``k * overfetch`` candidates are
        fetched and re-ranked exactly by aligned cosine. Candidate vectors come from
        ``index.reconstruct_batch`` or, when given, from ``vectors`` (N, d_in) indexed by id.
        Returns ``(scores, ids)``, each (n, min(k, k * overfetch, ntotal)).

        Example
        -------
        >>> scores, ids = index.search_unaligned(raw_faiss_index, encode(["a dog"]), k=10, overfetch=10)
        """
        self._check_fitted()
        check_number(k, "k", low=1, integer=True)
        check_number(overfetch, "overfetch", low=1, integer=True)
        if not isinstance(index, faiss.Index):
            raise InvalidParameterError(f"index must be a FAISS index of raw image embeddings, got {type(index).__name__}.")
        if index.d != self.n_features_in_:
            raise DimensionMismatchError(
                f"index holds {index.d}-d vectors but this AlignedIndex aligns {self.n_features_in_}-d image embeddings; "
                "pass an index of embeddings from the same image model."
            )
        if index.ntotal == 0:
            raise EmptyIndexError("index is empty: add raw image embeddings to it before search_unaligned().")
        store = None if vectors is None else self._check_queries(vectors, name="vectors", allow_zero=True)
        text = self._text_queries(q_text, "q_text")
        query_map = self._query_map(self.corpus_mapping)
        fetch = min(int(k) * int(overfetch), int(index.ntotal))
        _, candidates = index.search(np.ascontiguousarray(text @ query_map.T), fetch)
        scores = np.full(candidates.shape, -np.inf, dtype=np.float32)
        valid = candidates >= 0
        unique_ids = np.unique(candidates[valid])
        if len(unique_ids):
            aligned = _align(_reconstruct(index, unique_ids, store), query_map, self._query_offset(self.corpus_mapping))
            rows, cols = np.nonzero(valid)
            slots = np.searchsorted(unique_ids, candidates[rows, cols])
            for s in range(0, len(rows), _CHUNK):
                r, c, u = rows[s : s + _CHUNK], cols[s : s + _CHUNK], slots[s : s + _CHUNK]
                scores[r, c] = np.einsum("ij,ij->i", aligned[u], text[r])
        order = np.argsort(-scores, axis=1, kind="stable")[:, : min(int(k), fetch)]
        top_scores = np.take_along_axis(scores, order, 1)
        top_ids = np.take_along_axis(candidates, order, 1)
        top_ids[~np.isfinite(top_scores)] = -1
        return top_scores, top_ids

    def _check_text(self, text_emb: Any, name: str = "text_emb") -> np.ndarray:
        text = check_embeddings(text_emb, name=name).cpu().numpy()
        if text.shape[1] != self.text_embeddings_.shape[1]:
            raise DimensionMismatchError(
                f"{name} has {text.shape[1]} dimensions but the index was fitted on {self.text_embeddings_.shape[1]}-d "
                "prototypes; embed text with the same text model."
            )
        return text

    def _text_queries(self, text_emb: Any, name: str = "text_emb") -> np.ndarray:
        text = self._check_text(text_emb, name)
        return np.ascontiguousarray(self.lfa_.transform_prototypes(text), dtype=np.float32)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the index to directory ``path`` atomically (safetensors, JSON, FAISS; sha256 manifest).

        An existing index or empty directory at ``path`` is replaced; any other existing path
        raises :class:`~lfa_index.persistence.IndexPathError`.

        Example
        -------
        >>> index.save("my_index"); same = AlignedIndex.load("my_index")
        """
        self._check_fitted()
        with self._lock, self._corpus_lock.read():
            lfa = self.lfa_
            arrays = {
                "W": lfa.W_, "W_tt": lfa.W_tt_, "W_avg": lfa.W_avg_, "lfa_prototypes": lfa.prototypes_,
                "text_embeddings": self.text_embeddings_, "prototypes": self.prototypes_,
                "intercept": self.intercept_, "lfa_intercept": lfa.intercept_,
                "lfa_text_prototypes": lfa.text_prototypes_, "lfa_feature_mean": lfa.feature_mean_,
                "is_new_class": self.is_new_class_.astype(np.uint8), "support_embeddings": self.support_embeddings_,
            }
            optional = {
                "projection": lfa.projection_, "assignments": getattr(lfa, "assignments_", None),
                "beta_scores": getattr(lfa, "beta_scores_", None), "support_labels": self.support_labels_,
                "lfa_refined_prototypes": getattr(lfa, "refined_prototypes_", None),
            }
            arrays.update({k: np.asarray(v) for k, v in optional.items() if v is not None})
            for group in self._state.groups:
                arrays[f"folded_{group.mapping}"] = group.folded
            corpus = self._corpus
            indexes = {}
            corpus_doc = None
            if corpus is not None:
                arrays["corpus_query_map"] = corpus.query_map
                if corpus.query_offset is not None:
                    arrays["corpus_query_offset"] = corpus.query_offset
                indexes[_CORPUS_FILE] = self._to_cpu(corpus.index)
                corpus_doc = {"mapping": corpus.mapping, "next_id": corpus.next_id}
            params = {
                "params": {
                    "corpus_factory": self.corpus_factory, "corpus_params": self.corpus_params,
                    "corpus_mapping": self.corpus_mapping, "lfa_options": _jsonable(self.lfa_options),
                },
                "label_space": self.label_space_,
                "classes": [c if self.label_space_ == "name" else int(c) for c in self.classes_],
                "class_names": self.class_names_,
                "lfa": {
                    "n_classes": int(len(lfa.classes_)), "n_features_in": int(lfa.n_features_in_),
                    "projection_side": lfa.projection_side_, "beta": float(lfa.beta_), "steps": int(lfa.steps_),
                    "step_trials": _jsonable(getattr(lfa, "step_trials_", None)),
                    "beta_selection": getattr(lfa, "beta_selection_", None),
                    "loss_curve": _jsonable(getattr(lfa, "loss_curve_", None)),
                    "hubness_init": _jsonable(getattr(lfa, "hubness_init_", None)),
                    "hubness": _jsonable(getattr(lfa, "hubness_", None)),
                    "projection_kind": getattr(lfa, "projection_kind_", None),
                    "center": bool(lfa.center_), "prototype_mix": float(lfa.prototype_mix_),
                    "refine_prototypes": bool(lfa.refine_prototypes_), "mapping": lfa.mapping_,
                    "selection": _jsonable(getattr(lfa, "selection_", None)),
                },
                "corpus": corpus_doc,
            }
            arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
            return write_index_dir(
                path, kind=_KIND, documents={_PARAMS_FILE: params}, arrays={_ARRAYS_FILE: arrays}, faiss_indexes=indexes
            )

    @classmethod
    def load(cls, path: str | Path, device: str | None = None) -> "AlignedIndex":
        """Read an index written by :meth:`save`; checksums and format version are verified.

        ``device`` overrides the saved ``device`` option (e.g. "cpu" to load a GPU index on a CPU).

        Raises :class:`~lfa_index.persistence.IndexFormatError` for a missing, foreign,
        corrupted or truncated directory, and ``IndexVersionError`` for a newer format.
        """
        documents, arrays, indexes = read_index_dir(path, kind=_KIND)
        try:
            doc, arr = documents[_PARAMS_FILE], arrays[_ARRAYS_FILE]
            params = dict(doc["params"])
            lfa_options = params.pop("lfa_options")
            if device is not None:
                lfa_options["device"] = device
            index = cls(
                corpus_factory=params["corpus_factory"], corpus_params=params["corpus_params"],
                corpus_mapping=params["corpus_mapping"], **lfa_options,
            )
            index.lfa_ = _restore_lfa(lfa_options, doc["lfa"], arr)
            index._place_faiss()
            index.label_space_ = doc["label_space"]
            index.class_names_ = doc["class_names"]
            if index.label_space_ == "name":
                index.classes_ = np.array(doc["classes"], dtype=object)
            else:
                index.classes_ = np.asarray(doc["classes"], dtype=np.int64)
            index.unknown_label_ = None if index.label_space_ == "name" else -1
            index.text_embeddings_ = arr["text_embeddings"]
            index.prototypes_ = arr["prototypes"]
            index.is_new_class_ = arr["is_new_class"].astype(bool)
            index.intercept_ = arr.get("intercept", np.zeros(len(index.prototypes_), dtype=np.float32))
            index.support_embeddings_ = arr["support_embeddings"]
            index.support_labels_ = arr.get("support_labels")
            index.n_features_in_ = int(index.lfa_.n_features_in_)
            index._restore_classes(arr)
            if doc["corpus"] is not None:
                corpus_index = index._to_device(indexes[_CORPUS_FILE])
                index._apply_corpus_params(corpus_index)
                ids = np.sort(faiss.vector_to_array(faiss.downcast_index(indexes[_CORPUS_FILE]).id_map))
                index._corpus = _Corpus(
                    corpus_index, arr["corpus_query_map"], doc["corpus"]["mapping"], ids.astype(np.int64),
                    int(doc["corpus"]["next_id"]), arr.get("corpus_query_offset"),
                )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            if isinstance(err, LFAIndexError):
                raise
            raise IndexFormatError(
                f"{path} has the right checksums but unexpected contents ({type(err).__name__}: {err}); "
                "it was not written by AlignedIndex.save()."
            ) from err
        return index

    def _restore_classes(self, arrays: dict[str, np.ndarray]) -> None:
        groups = []
        for mapping, mask in (("task", ~self.is_new_class_), ("tt", self.is_new_class_)):
            positions = np.flatnonzero(mask).astype(np.int64)
            if len(positions):
                folded = arrays[f"folded_{mapping}"]
                groups.append(_ClassGroup(mapping, positions, folded, self._query_map(mapping), self._flat_index(folded),
                                          self._query_offset(mapping)))
        self._state = _ClassState(classes=self.classes_.copy(), groups=tuple(groups))

    # ------------------------------------------------------------------ plumbing
    def _check_fitted(self) -> None:
        if self._state is None:
            raise NotFittedError(
                "this AlignedIndex is not fitted yet; call fit(img_emb, labels, text_emb) or AlignedIndex.load(path) first."
            )

    def _classes_state(self) -> _ClassState:
        self._check_fitted()
        return self._state

    def _check_queries(self, X: Any, name: str = "X", allow_zero: bool = False) -> np.ndarray:
        return check_query_matrix(X, name=name, dim=self.n_features_in_, allow_zero=allow_zero)

    def _label_positions(self, labels: Any, n_rows: int, name: str) -> np.ndarray:
        if self.label_space_ == "name":
            return _names_to_positions(labels, list(self.classes_), n_rows, name)
        return check_labels(labels, n_rows=n_rows, n_classes=len(self.classes_)).numpy()

    def _place_faiss(self) -> None:
        """Choose where FAISS indexes live: the torch CUDA device when faiss-gpu sees a GPU, else the CPU."""
        device = resolve_device(self.lfa_options.get("device", "auto"))
        self._faiss_gpu = (device.index or 0) if device.type == "cuda" and faiss_gpu_available() else None

    def _on_gpu(self) -> bool:
        return getattr(self, "_faiss_gpu", None) is not None

    def _to_device(self, index: faiss.Index) -> faiss.Index:
        if not self._on_gpu():
            return index
        with self._lock:
            if self._gpu_resources is None:
                self._gpu_resources = faiss.StandardGpuResources()
        try:
            return faiss.index_cpu_to_gpu(self._gpu_resources, self._faiss_gpu, index)
        except RuntimeError as err:  # e.g. a factory string with no GPU implementation (HNSW)
            warnings.warn(f"keeping a {type(index).__name__} on the CPU: FAISS cannot move it to the GPU ({_first_line(err)})")
            return index

    def _to_cpu(self, index: faiss.Index) -> faiss.Index:
        return faiss.index_gpu_to_cpu(index) if self._on_gpu() else index

    def _gpu_guard(self) -> Any:
        # FAISS GPU indexes share one StandardGpuResources, which is not thread-safe, even for search
        return self._gpu_lock if self._on_gpu() else nullcontext()

    def _search_index(self, index: faiss.Index, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self._gpu_guard():
            return index.search(x, k)


# ------------------------------------------------------------------------------------ helpers
def check_query_matrix(X: Any, *, name: str, dim: int, allow_zero: bool = False) -> np.ndarray:
    """Convert queries to a C-contiguous float32 (n, dim) array without copying when they already are.

    One parallel pass over the data (FAISS's squared row norms) checks finiteness and zero rows, so
    validation costs a small fraction of the search itself. Raises :class:`ShapeError`,
    :class:`DimensionMismatchError`, :class:`NonFiniteError` or :class:`ZeroNormError`.
    """
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu()
        X = (X.float() if X.dtype == torch.bfloat16 else X).numpy()
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"{name} must be a numeric array; could not convert it: {err}") from err
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {arr.dtype}; pass a float array.")
    if arr.ndim != 2:
        hint = f" e.g. {name}.reshape(1, -1) for a single query" if arr.ndim == 1 else ""
        raise ShapeError(f"{name} must have shape (n_queries, {dim}), got an array of shape {arr.shape};{hint}.")
    if arr.shape[0] == 0:
        raise ShapeError(f"{name} is an empty batch (shape {arr.shape}); pass at least one row.")
    if arr.shape[1] != dim:
        raise DimensionMismatchError(
            f"{name} has {arr.shape[1]} dimensions but the index aligns {dim}-d image embeddings; "
            "embed the queries with the same image model as the support set."
        )
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    # FAISS's multi-threaded squared norms: NaN/inf propagate, so one pass checks both traps
    squared = np.empty(len(arr), dtype=np.float32)
    faiss.fvec_norms_L2sqr(faiss.swig_ptr(squared), faiss.swig_ptr(arr), arr.shape[1], arr.shape[0])
    bad = ~np.isfinite(squared)
    if bad.any():
        rows = np.flatnonzero(bad)
        if not np.isfinite(arr[rows]).all():
            nonfinite = rows[~np.isfinite(arr[rows]).all(axis=1)]
            raise NonFiniteError(
                f"{name} holds NaN or infinite values in {len(nonfinite)} row(s) (first: {nonfinite[:5].tolist()}); "
                "drop or repair those rows first."
            )
        raise InvalidInputError(
            f"{name} has row(s) {rows[:5].tolist()} whose values are too large for float32 arithmetic; "
            "L2-normalise the embeddings first."
        )
    if not allow_zero and not squared.all():
        zero = np.flatnonzero(squared == 0)
        raise ZeroNormError(
            f"{name} has {len(zero)} zero-norm row(s) (first: {zero[:5].tolist()}); an all-zero embedding has no "
            "direction to search with: remove those rows or re-embed them."
        )
    return arr


def _row_norms(x: np.ndarray, query_map: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """``||x G + ||x|| o||`` row by row (= ``||x||·||x̂ G + o||``; ``||x G||`` without an offset)."""
    out = np.empty(len(x), dtype=np.float32)
    for start in range(0, len(x), _CHUNK):
        chunk = x[start : start + _CHUNK]
        z = chunk @ query_map
        if offset is not None:
            z += _norms(chunk)[:, None] * offset
        out[start : start + _CHUNK] = np.linalg.norm(z, axis=1)
    return out


def _norms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", x, x))


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _augment(x: np.ndarray) -> np.ndarray:
    """``[x, ||x||]`` (float32, C-contiguous): ranks as ``[x̂, 1]`` without a division pass."""
    out = np.empty((len(x), x.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = x
    out[:, -1] = _norms(x)
    return out


def _fold(prototypes: np.ndarray, query_map: np.ndarray, offset: np.ndarray | None, bias: np.ndarray) -> np.ndarray:
    """Class vectors folded into the raw query space: ``q Gᵀ`` (c, d_in), or ``[q Gᵀ, q·o + b]``
    (c, d_in + 1) when there is an offset or a nonzero bias."""
    folded = np.asarray(prototypes, dtype=np.float64) @ np.asarray(query_map, dtype=np.float64).T
    bias = np.asarray(bias, dtype=np.float64)
    if offset is not None:
        bias = bias + np.asarray(prototypes, dtype=np.float64) @ np.asarray(offset, dtype=np.float64)
    elif not bias.any():
        return np.ascontiguousarray(np.asarray(prototypes, dtype=np.float32) @ query_map.T, dtype=np.float32)
    return np.ascontiguousarray(np.hstack([folded, bias[:, None]]), dtype=np.float32)


def _group_queries(group: _ClassGroup, x: np.ndarray) -> np.ndarray:
    return _augment(x) if group.augmented else x


def _group_norms(group: _ClassGroup, x: np.ndarray) -> np.ndarray:
    return _row_norms(x, group.query_map, group.offset)


def _align(x: np.ndarray, query_map: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """``normalize(x @ G)`` row by row, or ``normalize(x̂ @ G + o)`` with an offset (float32, C-contiguous),
    in chunks of :data:`_CHUNK` rows."""
    out = np.empty((len(x), query_map.shape[1]), dtype=np.float32)
    for start in range(0, len(x), _CHUNK):
        chunk = x[start : start + _CHUNK]
        z = chunk @ query_map if offset is None else _unit_rows(chunk) @ query_map + offset
        norms = np.linalg.norm(z, axis=1, keepdims=True)
        out[start : start + _CHUNK] = np.divide(z, norms, out=z, where=norms > 0)
    return out


def _reconstruct(index: faiss.Index, ids: np.ndarray, store: np.ndarray | None) -> np.ndarray:
    if store is not None:
        if ids.max() >= len(store):
            raise InvalidInputError(
                f"vectors has {len(store)} rows but the index returned id {int(ids.max())}; pass vectors indexed by the "
                "index's ids (row i = the embedding with id i)."
            )
        return store[ids]
    try:
        return index.reconstruct_batch(ids)
    except RuntimeError as err:
        raise InvalidParameterError(
            f"this {type(index).__name__} cannot return its stored vectors ({_first_line(err)}); pass vectors= "
            "(the raw embeddings, row i = id i), call index.make_direct_map() on an IVF index, or use IndexIDMap2."
        ) from err


def _check_ids(ids: Any, n_rows: int, corpus: _Corpus) -> np.ndarray:
    if ids is None:
        return np.arange(corpus.next_id, corpus.next_id + n_rows, dtype=np.int64)
    arr = check_ids(ids, n_rows, per="image", duplicate_error=DuplicateIdError)
    held = np.intersect1d(arr, corpus.ids)
    if len(held):
        raise DuplicateIdError(
            f"id(s) {held[:5].tolist()} are already in the corpus; pass new ids, or ids=None for consecutive ones."
        )
    return arr


def _check_class_names(names: Any, n_classes: int, required: bool = False) -> list[str] | None:
    if names is None:
        if required:
            raise InvalidParameterError("names are required: this index labels its classes by name.")
        return None
    if isinstance(names, str):
        raise InvalidParameterError("class names must be a sequence of strings, not a single string.")
    names = list(names)
    if not all(isinstance(n, (str, np.str_)) for n in names):
        raise InvalidParameterError("class names must be strings (they are stored as JSON).")
    names = [str(n) for n in names]
    if len(names) != n_classes:
        raise ShapeError(f"got {len(names)} class names for {n_classes} prototype rows; pass one name per row.")
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise LabelError(f"class names must be distinct; repeated: {dupes[:5]}.")
    return names


def _is_name_array(arr: np.ndarray) -> bool:
    return arr.dtype.kind in "US" or (arr.dtype == object and all(isinstance(v, (str, np.str_)) for v in arr.ravel()))


def _resolve_fit_labels(labels: Any, names: list[str] | None, n_rows: int, n_classes: int) -> tuple[str, np.ndarray | None]:
    if labels is None:
        return ("name" if names is not None else "index"), None
    arr = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if _is_name_array(arr):
        if names is None:
            raise LabelError("labels are strings but class_names is None; pass class_names (one per text_emb row).")
        return "name", _names_to_positions(arr, names, n_rows, "labels")
    return "index", check_labels(arr, n_rows=n_rows, n_classes=n_classes).numpy()


def _names_to_positions(labels: Any, names: Sequence[Any], n_rows: int, name: str) -> np.ndarray:
    arr = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise ShapeError(f"{name} must be 1-D with one label per row ({n_rows}), got shape {arr.shape}.")
    if not _is_name_array(arr):
        raise LabelError(f"{name} must be class names (strings) for this index, got dtype {arr.dtype}.")
    lookup = {n: i for i, n in enumerate(names)}
    unknown = sorted({str(v) for v in arr if str(v) not in lookup})
    if unknown:
        raise LabelError(
            f"{name} hold name(s) not among the classes: {unknown[:5]}; add them with add_classes() "
            "(or pass them in class_names at fit)."
        )
    return np.fromiter((lookup[str(v)] for v in arr), dtype=np.int64, count=len(arr))


def _restore_lfa(options: dict[str, Any], fitted: dict[str, Any], arrays: dict[str, np.ndarray]) -> LFA:
    lfa = LFA(**options)
    lfa.W_, lfa.W_tt_, lfa.W_avg_ = arrays["W"], arrays["W_tt"], arrays["W_avg"]
    lfa.prototypes_ = arrays["lfa_prototypes"]
    # format version 1 (before the options) holds the paper's classifier: text prototypes, no bias
    lfa.text_prototypes_ = arrays.get("lfa_text_prototypes", lfa.prototypes_)
    lfa.intercept_ = arrays.get("lfa_intercept", np.zeros(len(lfa.prototypes_), dtype=np.float32))
    lfa.feature_mean_ = arrays.get("lfa_feature_mean", np.zeros(lfa.W_.shape[0], dtype=np.float32))
    lfa.refined_prototypes_ = arrays.get("lfa_refined_prototypes")
    lfa.projection_kind_ = fitted.get("projection_kind", "shrink" if fitted["projection_side"] else None)
    lfa.center_ = bool(fitted.get("center", False))
    lfa.prototype_mix_ = float(fitted.get("prototype_mix", 0.0))
    lfa.refine_prototypes_ = bool(fitted.get("refine_prototypes", False))
    lfa.mapping_ = fitted.get("mapping", "task")
    lfa.selection_ = fitted.get("selection")
    lfa.projection_ = arrays.get("projection")
    lfa.projection_side_ = fitted["projection_side"]
    lfa.classes_ = np.arange(fitted["n_classes"])
    lfa.n_features_in_ = int(fitted["n_features_in"])
    lfa.beta_, lfa.steps_ = float(fitted["beta"]), int(fitted["steps"])
    lfa.beta_scores_ = arrays.get("beta_scores")
    lfa.assignments_ = arrays.get("assignments")
    trials = fitted.get("step_trials")
    lfa.step_trials_ = None if trials is None else [tuple(t) for t in trials]
    lfa.beta_selection_ = fitted.get("beta_selection")
    lfa.loss_curve_ = fitted.get("loss_curve")
    lfa.hubness_init_, lfa.hubness_ = fitted.get("hubness_init"), fitted.get("hubness")
    return lfa


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    raise InvalidParameterError(
        f"cannot save a {type(value).__name__} ({value!r}) as JSON; pass plain str/int/float options (e.g. device='cuda')."
    )


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    last = text[-1] if text else type(err).__name__
    return last.split("Error: ")[-1][:300]
