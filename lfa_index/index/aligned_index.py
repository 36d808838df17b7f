"""AlignedIndex: an LFA estimator served as exact FAISS search over its class prototypes."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..compat import BaseEstimator, ClassifierMixin, clone
from ..core import LFA
from ..core.validation import (
    check_embeddings,
    check_is_fitted,
    check_more_support,
    check_number,
    check_query_matrix,
    check_text_matrix,
    validate_params,
    weighted_accuracy,
)
from ..errors import InvalidParameterError
from .calibration import (
    OBJECTIVES,
    Objective,
    first_view,
    objective_threshold,
    quantile_threshold,
    support_scores,
    validation_truth,
)
from .classes import ClassTable, class_vectors, fitted_maps, nearest_classes, text_projection, top_class_positions
from .export import StoreExportMixin
from .faiss_device import FaissDevice
from .format import NO_ENCODERS, PARAMS_FILE, SavedIndex, as_format_error, file_label, load_index, save_index
from .labels import LabelSpace
from .openset import NoveltyScore


def _from_table(read: Callable[[ClassTable], Any], doc: str) -> property:
    return property(lambda self: read(self.class_table_), doc=doc)


class AlignedIndex(StoreExportMixin, ClassifierMixin, BaseEstimator):
    """Few-shot classifier served as an index: an LFA estimator folded into FAISS.

    Classifying a query is one inner-product search of the raw query against the class
    prototypes folded with the LFA's query map (:class:`lfa_index.core.query_map.QueryMap`); classes added later from
    text alone are scored with the base-to-new map W_tt (paper §4.5).

    Parameters
    ----------
    lfa : LFA or None, default=None
        The estimator to fit (cloned by :meth:`fit`); None means ``LFA()``. Its ``device`` also
        places the FAISS indexes: on a CUDA device with faiss-gpu installed they move to the GPU.
        Images to search by text or by image go in an :class:`~lfa_index.AlignedCorpus` built from
        the fitted index.

    Attributes
    ----------
    lfa_ : LFA                        the fitted estimator.
    label_space_ : LabelSpace         class labels ↔ positions (``.kind``: "index" or "name").
    classes_ : ndarray (C,)           labels: row indices of ``text_emb`` (int64) or class names.
    class_names_ : list[str] or None  class names, in row order.
    unknown_label_ : int or None      what ``predict(reject_below=τ)`` gives rejected queries.
    reject_below_ : float or None     a τ kept with the index (:meth:`set_reject_below`), or None.
    encoders_ : dict                  encoder SPECs of the rows ("document") and the class names ("name"),
                                      each str or None, as :meth:`set_encoders` recorded them.
    is_new_class_ : ndarray (C,) bool classes added by :meth:`add_classes` without support images.
    prototypes_, intercept_ : ndarray (C, d), (C,)   class vectors and biases in the aligned space.
    text_embeddings_ : ndarray (C, d_txt)            the prototypes as given.
    support_embeddings_, support_labels_ : the support set seen so far (for :meth:`partial_fit`).
    n_features_in_ : int              image embedding dimension d_in.

    Example
    -------
    >>> index = AlignedIndex(lfa=LFA(steps=100, random_state=0)).fit(X, ["cat", "dog"], T, ["cat", "dog"])
    >>> index.predict(Q, reject_below=index.rejection_threshold())
    >>> index.score_samples(Q)                         # open-set score, higher = more likely known
    >>> cross_val_score(AlignedIndex(lfa=LFA(steps=50)), X, y, params={"text_emb": T})  # y: ints
    """

    _parameter_constraints: dict = {"lfa": [LFA, None]}

    def __init__(self, lfa: LFA | None = None):
        self.lfa = lfa
        self._lock = threading.RLock()
        self._table: ClassTable | None = None
        self._device: FaissDevice | None = None
        self._novelty: tuple[ClassTable, NoveltyScore] | None = None
        self._reject_below: float | None = None
        self._encoders: dict[str, str | None] = dict(NO_ENCODERS)

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any, text_emb: Any, class_names: Any = None) -> "AlignedIndex":
        """Fit a clone of ``lfa`` and index the class prototypes.

        X : (N, d_in) or (N, V, d_in) support embeddings; y : (N,) ints indexing the rows of
        ``text_emb``, or names found in ``class_names`` (None: unsupervised LFA); text_emb :
        (C, d_txt) class prototypes; class_names : C distinct strings or None. The LFA is fitted on
        ``y`` with ``classes_`` as its ``class_names``, so ``lfa_.classes_`` are the fitted classes.
        """
        self._check_params()
        support = check_embeddings(X, name="X", ndims=(2, 3))
        text = check_embeddings(text_emb, name="text_emb")
        space, positions = LabelSpace.from_fit(y, class_names, n_rows=len(support), n_classes=len(text))
        lfa = self._fit_lfa(LFA() if self.lfa is None else clone(self.lfa), support, space, positions, text)
        with self._lock:
            self._device = FaissDevice(lfa.device)
            self._set_fitted(lfa, support, positions)
            self._encoders = dict(NO_ENCODERS)
            self._publish(space, np.zeros(len(text), dtype=bool), text, np.empty((0, 0), dtype=np.float32))
        return self

    def partial_fit(self, X: Any, y: Any) -> "AlignedIndex":
        """Refit with a warm start on the support seen so far plus ``X`` (``y`` as in ``fit``;
        classes added by :meth:`add_classes` that now have support rows count as fitted; the others
        keep W_tt)."""
        check_is_fitted(self)
        with self._lock:
            table, seen = self._table, self.support_embeddings_
            support = check_more_support(X, y, seen, self.support_labels_)
            positions = None if y is None else table.labels.positions(y, n_rows=len(support), name="y")
            all_y = None if positions is None else np.concatenate([self.support_labels_, positions])
            all_support = np.concatenate([seen, support])
            lfa = copy.deepcopy(self.lfa_).set_params(warm_start=True)
            self._fit_lfa(lfa, all_support, table.labels, all_y, table.text_embeddings)
            is_new = table.is_new.copy()
            if all_y is not None:
                is_new[np.unique(all_y)] = False
            self._set_fitted(lfa, all_support, all_y)
            self._publish(table.labels, is_new, table.text_embeddings, np.empty((0, 0), dtype=np.float32))
        return self

    def add_classes(self, text_emb: Any, class_names: Any = None) -> "AlignedIndex":
        """Add classes from their prototypes alone, scored with W_tt (paper §4.5); ``class_names`` are
        required when the index has class names, else the new classes get the next integers."""
        check_is_fitted(self)
        with self._lock:
            table = self._table
            text = self._check_text(text_emb)
            space = table.labels.extend(len(text), class_names)
            added = np.asarray(self.lfa_.transform_text(text), dtype=np.float32)
            fitted = len(self.lfa_.prototypes_)
            is_new = np.concatenate([table.is_new, np.ones(len(text), dtype=bool)])
            text = np.concatenate([table.text_embeddings, text])
            self._publish(space, is_new, text, np.concatenate([table.prototypes[fitted:], added]))
        return self

    @staticmethod
    def _fit_lfa(lfa: LFA, support: np.ndarray, space: LabelSpace, positions: np.ndarray | None,
                 text: np.ndarray) -> LFA:
        """``lfa`` fitted on the labels at ``positions`` of ``space``, with ``space.classes`` as ``class_names``."""
        y = None if positions is None else space.labels(positions)
        return lfa.fit(support, y, text, class_names=space.classes)

    def _set_fitted(self, lfa: LFA, support: np.ndarray, labels: np.ndarray | None) -> None:
        self.lfa_ = lfa
        self.support_embeddings_ = support
        self.support_labels_ = None if labels is None else np.asarray(labels, dtype=np.int64)
        self.n_features_in_ = int(lfa.n_features_in_)

    def _publish(self, space: LabelSpace, is_new: np.ndarray, text: np.ndarray, added: np.ndarray) -> None:
        """A new class table; a kept τ is dropped (it was set on the scores of the previous one)."""
        prototypes, intercept = class_vectors(self.lfa_, is_new, added)
        maps = fitted_maps(self.lfa_)
        self._table = ClassTable.build(space, prototypes, intercept, is_new, text, maps, self._device,
                                       text_projection=text_projection(self.lfa_))
        self._reject_below = None

    # ------------------------------------------------------------------ classification
    def predict(self, X: Any, reject_below: float | None = None) -> np.ndarray:
        """Label of the nearest class (n,); with ``reject_below=τ`` queries whose :meth:`score_samples`
        is below τ get ``unknown_label_`` (see :meth:`rejection_threshold`)."""
        table = self.class_table_
        x = self._check_queries(X)
        if reject_below is None:
            return table.labels.labels(nearest_classes(table, x))
        self.check_threshold(reject_below)
        scores, positions = top_class_positions(table, x, 1)
        known = self._novelty_score(table).score(x, scores[:, 0])
        return table.labels.reject(table.labels.labels(positions[:, 0]), known, reject_below)

    def score_samples(self, X: Any) -> np.ndarray:
        """Open-set score of each query (n,) float32: higher means more likely a known class.

        The best aligned score plus the cosine to the nearest aligned support row, each
        standardised on held-out support rows (:mod:`~lfa_index.index.openset`; the best aligned
        score alone while the index holds classes added from text). ``predict(X, reject_below=τ)``
        rejects where it is below τ. The first call after a fit may fit K-fold clones of ``lfa_``
        to hold support rows out (not for the default LFA, whose fit keeps cross-fitted scores).

        >>> roc_auc_score(is_known, index.score_samples(queries))
        """
        table = self.class_table_
        x = self._check_queries(X)
        return self._novelty_score(table).score(x, top_class_positions(table, x, 1)[0][:, 0])

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Top-1 accuracy of :meth:`predict` on ``(X, y)``, optionally weighted (one weight >= 0 per row)."""
        return weighted_accuracy(self.predict(X), y, sample_weight)

    def check_threshold(self, reject_below: Any) -> float:
        """``reject_below`` as a finite τ on the scale of :meth:`score_samples`; typed error otherwise."""
        return check_number(reject_below, "reject_below")

    def set_reject_below(self, reject_below: float | None) -> "AlignedIndex":
        """Keep τ with the index (``reject_below_``, saved by :meth:`save`); None forgets it. Refitting or
        adding classes forgets it too: τ belongs to the scores it was set on.

        >>> index.set_reject_below(index.rejection_threshold(X_val, y_val, unknown_label="oos")).save("idx")
        """
        check_is_fitted(self)
        self._reject_below = None if reject_below is None else self.check_threshold(reject_below)
        return self

    def set_encoders(self, document: str | None = None, name: str | None = None) -> "AlignedIndex":
        """Record the encoder SPECs (e.g. "minilm") that embedded the rows (``document``: support and
        queries) and the class names (``name``), kept in ``encoders_`` and saved by :meth:`save`."""
        for value, what in ((document, "document"), (name, "name")):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidParameterError(f"{what} must be an encoder SPEC string (e.g. 'minilm') or None.")
        self._encoders = {"document": document, "name": name}
        return self

    @property
    def reject_below_(self) -> float | None:
        """The τ kept with the index by :meth:`set_reject_below` (saved with it), or None."""
        return self._reject_below

    @property
    def encoders_(self) -> dict[str, str | None]:
        """Encoder SPECs recorded by :meth:`set_encoders`: ``{"document": ..., "name": ...}`` (a copy)."""
        return dict(self._encoders)

    def search(self, X: Any, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` classes of each query: ``(aligned scores, labels)``, each (n, min(k, C)), best first."""
        check_number(k, "k", low=1, integer=True)
        table = self.class_table_
        scores, positions = top_class_positions(table, self._check_queries(X), int(k))
        return scores, table.labels.labels(positions)

    def decision_function(self, X: Any) -> np.ndarray:
        """Aligned score of each query for each class, (n, C), columns in ``classes_`` order."""
        table = self.class_table_
        return table.decision_function(self._check_queries(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """``softmax(aligned score / temperature)``, (n, C), columns in ``classes_`` order."""
        logits = self.decision_function(X).astype(np.float64) / self.lfa_.temperature
        proba = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (proba / proba.sum(axis=1, keepdims=True)).astype(np.float32)

    def rejection_threshold(
        self, X_val: Any = None, y_val: Any = None, *, unknown_label: Any = None, objective: Objective = "accept-rate",
        accept_rate: float = 0.95, oos_recall: float = 0.9,
    ) -> float:
        """τ for ``predict(reject_below=τ)``, on the scale of :meth:`score_samples`.

        X_val : (n, d_in) or None
            Validation rows; None: the support rows, each scored by a model that never saw it
            (the default LFA's cross-fitted ``heldout_scores_``, or K-fold clones of ``lfa_``, kept
            in ``lfa_.heldout_scores_``; at 1 shot nothing can be held out and τ accepts fewer
            unseen rows than asked).
        y_val : (n,) labels of ``X_val`` in the index's label space, or None (every row known).
        unknown_label : the label of ``y_val`` that marks out-of-scope rows (e.g. "oos").
        objective : {"accept-rate", "oos-recall", "macro-f1"}, default="accept-rate"
            Accept ``accept_rate`` of the known-class rows; reject at least ``oos_recall`` of the
            out-of-scope rows; or the best macro-F1 over the known classes + unknown. The last
            two need ``y_val`` with out-of-scope rows.

        >>> index.predict(queries, reject_below=index.rejection_threshold(accept_rate=0.95))
        >>> index.rejection_threshold(X_val, y_val, unknown_label="oos", objective="macro-f1")
        """
        check_number(accept_rate, "accept_rate", low=0.0, high=1.0, low_inclusive=False)
        check_number(oos_recall, "oos_recall", low=0.0, high=1.0, low_inclusive=False)
        if objective not in OBJECTIVES:
            raise InvalidParameterError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}.")
        if X_val is None:
            if y_val is not None or objective != "accept-rate":
                raise InvalidParameterError(
                    f"objective={objective!r} and y_val need validation rows: pass X_val (with y_val and "
                    "unknown_label for out-of-scope rows)."
                )
            table = self.class_table_
            return quantile_threshold(self._novelty_score(table).heldout, accept_rate)
        table = self.class_table_
        x = self._check_queries(X_val, name="X_val")
        best, positions = top_class_positions(table, x, 1)
        scores = self._novelty_score(table).score(x, best[:, 0])
        truth = validation_truth(table.labels.lookup, y_val, unknown_label, len(x), objective)
        return objective_threshold(scores, truth, positions[:, 0], objective, accept_rate=accept_rate,
                                   oos_recall=oos_recall)

    def transform_text(self, text_emb: Any, name: str = "text_emb") -> np.ndarray:
        """Aligned unit text embeddings (n, d), as the class prototypes are aligned: text queries of the
        aligned space (:func:`lfa_index.stores.search_aligned`, :func:`~lfa_index.stores.search_unaligned`)."""
        table = self.class_table_  # one snapshot: the text side as the current classes were aligned
        text = check_text_matrix(text_emb, name=name, dim=table.text_embeddings.shape[1])
        return np.ascontiguousarray(table.transform_text(text), dtype=np.float32)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the index to directory ``path`` atomically (JSON, safetensors, FAISS; sha256 manifest).

        An existing index or empty directory is replaced; any other existing path raises
        :class:`~lfa_index.errors.IndexPathError`.
        """
        check_is_fitted(self)
        with self._lock:
            return save_index(
                path, params=self.get_params(deep=False), lfa=self.lfa_, table=self._table,
                support_embeddings=self.support_embeddings_, support_labels=self.support_labels_,
                serving={"reject_below": self._reject_below, "encoders": self._encoders},
            )

    @classmethod
    def load(cls, path: str | Path, device: str | None = None) -> "AlignedIndex":
        """Read an index written by :meth:`save`; ``device`` overrides the LFA's (e.g. "cpu" for a GPU
        index). Raises :class:`~lfa_index.errors.IndexFormatError` for a missing, foreign, corrupted or
        inconsistent directory (or one saved with an image corpus inside), naming the file."""
        saved = load_index(path, device)
        index = cls(**saved.params)
        with as_format_error(file_label(path, PARAMS_FILE)):
            index._check_params()
            index._restore(saved)
        return index

    def _restore(self, saved: SavedIndex) -> None:
        self._set_fitted(saved.lfa, saved.support_embeddings, saved.support_labels)
        self._device = device = FaissDevice(saved.lfa.device)
        self._table = ClassTable.build(
            saved.labels, saved.prototypes, saved.intercept, saved.is_new, saved.text_embeddings, saved.maps, device,
            folded=saved.folded, text_projection=text_projection(saved.lfa),
        )
        self._reject_below = saved.reject_below
        self._encoders = {**NO_ENCODERS, **(saved.encoders or {})}

    # ------------------------------------------------------------------ plumbing
    classes_ = _from_table(lambda t: t.labels.classes, "Labels of the classes, (C,).")
    class_names_ = _from_table(lambda t: t.labels.names, "Class names in row order, or None.")
    label_space_ = _from_table(lambda t: t.labels, "The LabelSpace: labels ↔ positions.")
    unknown_label_ = _from_table(lambda t: t.labels.unknown_label, "Label of rejected queries: -1 or None.")
    prototypes_ = _from_table(lambda t: t.prototypes, "Class vectors in the aligned space, (C, d).")
    intercept_ = _from_table(lambda t: t.intercept, "Class biases, (C,); 0 for classes added from text.")
    is_new_class_ = _from_table(lambda t: t.is_new, "Classes added from text alone, (C,) bool.")
    text_embeddings_ = _from_table(lambda t: t.text_embeddings, "The class prototypes as given, (C, d_txt).")

    def __sklearn_is_fitted__(self) -> bool:
        return self._table is not None

    def __getstate__(self) -> dict[str, Any]:  # copies and pickles (joblib workers) get a lock of their own
        return {k: v for k, v in super().__getstate__().items() if k not in ("_lock", "_novelty")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._novelty = None
        self._lock = threading.RLock()

    def _check_params(self) -> None:
        validate_params(self.get_params(deep=False), self._parameter_constraints, type(self).__name__)

    @property
    def class_table_(self) -> ClassTable:
        """The current :class:`~lfa_index.index.classes.ClassTable`: one consistent snapshot of the classes."""
        check_is_fitted(self)
        return self._table

    def _novelty_score(self, table: ClassTable) -> NoveltyScore:
        """The open-set score of ``table``, built on first use (held-out support scores may need K-fold fits)."""
        with self._lock:
            built = self._novelty
            if built is None or built[0] is not table:
                support = self.support_embeddings_
                heldout = support_scores(self.lfa_, support, self.support_labels_, table.text_embeddings)
                built = self._novelty = (table, NoveltyScore.build(table, first_view(support), heldout))
            return built[1]

    def _check_queries(self, X: Any, name: str = "X") -> np.ndarray:
        return check_query_matrix(X, name=name, dim=self.class_table_.n_features)

    def _check_text(self, text_emb: Any, name: str = "text_emb") -> np.ndarray:
        return check_text_matrix(text_emb, name=name, dim=self.class_table_.text_embeddings.shape[1])

