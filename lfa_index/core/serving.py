"""Answering queries with a fitted LFA: numpy only, so a saved index serves without torch.

:class:`AlignedClassifierMixin` holds the query side of :class:`~lfa_index.core.estimator.LFA`:
a query ``x`` is mapped to ``z = (normalize(proj(normalize(x))) − μ) W`` by the estimator's
:class:`~lfa_index.core.query_map.QueryMap` (:meth:`~AlignedClassifierMixin.query_map`, the one
map an index, a store or an integration serves too), and class c scores
``(z·q_c + b_c)/||z||``, where ``q_c`` are ``prototypes_``, ``b_c`` ``intercept_`` and μ
``feature_mean_`` (the aligned cosine when b = 0). The fitted state is declared once
(:class:`~lfa_index.core.state.FittedState`) and saves, checks and restores itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import MAPPINGS, Mapping
from ..errors import DimensionMismatchError
from .query_map import QueryMap, align_text, project_rows, unit_rows
from .state import FITTED_ARRAYS, FITTED_VALUES, FittedState, check_fitted_state
from .validation import check_choice, check_embeddings, check_is_fitted, weighted_accuracy


class AlignedClassifierMixin:
    """The query side of a fitted LFA (numpy only)."""

    temperature: float

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "W_")

    def query_map(self, mapping: Mapping = "task") -> QueryMap:
        """The map named ``mapping`` ("task": W, "tt": W_tt, "average": W_avg) with this fit's
        image-side projection and, with centring, its support mean: what every consumer aligns
        queries with (this estimator's scores, a FAISS index, a vector store)."""
        check_is_fitted(self)
        check_choice(mapping, "mapping", MAPPINGS)
        weights = {"task": self.W_, "tt": self.W_tt_, "average": self.W_avg_}[mapping]
        projection = self.projection_ if self.projection_side_ == "image" else None
        return QueryMap(weights, projection, self.feature_mean_ if self.center_ else None)

    def _project_rows(self, x: np.ndarray, side: str) -> np.ndarray:
        return project_rows(x, side, self.projection_, self.projection_side_)

    def _check_queries(self, X: Any, name: str = "X") -> np.ndarray:
        check_is_fitted(self)
        x = check_embeddings(X, name=name, ndims=(2, 3))
        if x.shape[-1] != self.n_features_in_:
            raise DimensionMismatchError(
                f"{name} has {x.shape[-1]} features, but {type(self).__name__} is expecting {self.n_features_in_} "
                "features as input; embed the queries with the same model as the support set."
            )
        return x

    def _mapped(self, X: Any, mapping: str) -> np.ndarray:
        """``(normalize(proj(normalize(x))) − μ) @ W`` for the chosen map, unnormalised, in float64."""
        x = self._check_queries(X)
        return self.query_map(mapping).mapped(x)

    def transform(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """Aligned, L2-normalised float32 embeddings ``normalize((proj(x) − μ) @ W)``, same shape as X but d."""
        return unit_rows(self._mapped(X, mapping)).astype(np.float32)

    def transform_text(self, text_emb: Any) -> np.ndarray:
        """Class prototypes or text queries ``text_emb`` (n, d_txt) in the aligned space (projected, L2-normalised)."""
        check_is_fitted(self)
        p = check_embeddings(text_emb, name="text_emb")
        expected = self._prototype_dim()
        if p.shape[1] != expected:
            raise DimensionMismatchError(
                f"text_emb has {p.shape[1]} dimensions but this LFA was fitted on {expected}-d text_emb; "
                "embed new class names with the same text model."
            )
        return align_text(p, self.projection_ if self.projection_side_ == "text" else None)

    def _prototype_dim(self) -> int:
        return self.projection_.shape[1] if self.projection_side_ == "text" else self.text_prototypes_.shape[1]

    def _scores(self, X: Any, mapping: Mapping = "task", text_emb: Any = None) -> np.ndarray:
        """Aligned scores (N, C) ``(z·q_c + b_c)/||z||``, multi-view rows averaged."""
        z = self._mapped(X, mapping)
        if z.ndim == 3:
            z = unit_rows(z).mean(axis=1)
        norms = np.maximum(np.linalg.norm(z, axis=1, keepdims=True), np.finfo(np.float64).tiny)
        unit = z / norms
        if text_emb is not None:
            return unit @ self.transform_text(text_emb).T.astype(np.float64)
        if mapping != "task":
            return unit @ np.asarray(self.text_prototypes_, dtype=np.float64).T
        scores = unit @ np.asarray(self.prototypes_, dtype=np.float64).T
        if np.any(self.intercept_):
            scores = scores + np.asarray(self.intercept_, dtype=np.float64)[None, :] / norms
        return scores

    def decision_function(self, X: Any, mapping: Mapping = "task", text_emb: Any = None) -> np.ndarray:
        """Aligned score of each row for each class: (N, C), or (N,) for two fitted classes.

        With the fitted classes and ``mapping="task"`` this is the served classifier (the aligned
        cosine when ``intercept_`` is zero); two classes give the score of ``classes_[1]`` minus
        that of ``classes_[0]``, as scikit-learn's binary classifiers do. Other maps, or
        ``text_emb`` (C', d_txt) of other classes (e.g. new ones, with ``mapping="tt"``), are
        scored by aligned cosine to the text prototypes. Multi-view input (N, V, d) averages the
        aligned views.
        """
        scores = self._scores(X, mapping, text_emb)
        if text_emb is None and mapping == "task" and scores.shape[1] == 2:
            return scores[:, 1] - scores[:, 0]
        return scores

    def predict(self, X: Any, mapping: Mapping = "task", text_emb: Any = None) -> np.ndarray:
        """The best-scoring class of each row: labels from ``classes_`` (row positions of ``text_emb`` with it)."""
        best = self._scores(X, mapping, text_emb).argmax(axis=1)
        return best if text_emb is not None else np.asarray(self.classes_)[best]

    def predict_proba(self, X: Any, mapping: Mapping = "task", text_emb: Any = None) -> np.ndarray:
        """``softmax(aligned score / temperature)`` (N, C), in float64 so that it ranks as the scores do."""
        logits = self._scores(X, mapping, text_emb).astype(np.float64) / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        proba = np.exp(logits)
        return proba / proba.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X: Any, mapping: Mapping = "task", text_emb: Any = None) -> np.ndarray:
        """Log of :meth:`predict_proba`, computed without underflow."""
        logits = self._scores(X, mapping, text_emb).astype(np.float64) / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    def score(self, X: Any, y: Any, sample_weight: Any = None, mapping: Mapping = "task") -> float:
        """Top-1 accuracy of :meth:`predict` on ``(X, y)`` (labels from ``classes_``)."""
        return weighted_accuracy(self.predict(X, mapping), y, sample_weight)

    # ------------------------------------------------------------------ state
    def _fitted(self) -> FittedState:
        """The fitted attributes as one :class:`FittedState`."""
        return FittedState(**{name: getattr(self, name, None) for name in FITTED_ARRAYS + FITTED_VALUES})

    def _set_fitted(self, state: FittedState) -> None:
        """Set every field of ``state`` as this estimator's fitted attribute."""
        for name in FITTED_ARRAYS + FITTED_VALUES:
            setattr(self, name, getattr(state, name))

    def fitted_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted state as (JSON-ready values, arrays), from :class:`~lfa_index.core.state.FittedState`.

        :meth:`from_fitted_state` restores an equal estimator from them.
        """
        check_is_fitted(self)
        arrays = {name: np.ascontiguousarray(getattr(self, name)) for name in FITTED_ARRAYS
                  if getattr(self, name, None) is not None}
        values = {name: _plain(getattr(self, name, None)) for name in FITTED_VALUES}
        return values, arrays

    @classmethod
    def from_fitted_state(cls, params: dict[str, Any], values: dict[str, Any], arrays: dict[str, np.ndarray]) -> Any:
        """An estimator with constructor ``params`` and the fitted state written by :meth:`fitted_state`.

        Raises :class:`~lfa_index.errors.InvalidParameterError` for parameters outside their
        constraints and an :class:`~lfa_index.errors.InvalidInputError` (``ShapeError``,
        ``NonFiniteError``, ``InputTypeError``) for a state no fit leaves: unknown option values,
        arrays that are not float, not finite or of inconsistent shapes.
        """
        fitted = cls(**params)
        fitted._validate_params()  # the estimator's own parameter constraints
        state = FittedState(**{name: arrays.get(name) for name in FITTED_ARRAYS},
                            **{name: values.get(name) for name in FITTED_VALUES})
        state.classes_ = np.asarray(values["classes_"])
        if state.step_trials_ is not None:
            state.step_trials_ = [tuple(t) for t in state.step_trials_]
        check_fitted_state(state)
        fitted._set_fitted(state)
        return fitted


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as plain Python values (JSON-ready)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
