"""Few-shot baselines that LFA is compared against: zero-shot, class mean, kNN, linear probe.

Each function fits on the support rows ``X`` (N, d) with labels ``y`` (N,) in 0..C-1 and returns
the predicted labels (M,) of the eval rows ``X_eval`` (M, d). Only the support set is looked at
while fitting. Rows are L2-normalised inside each function. ``benchmarks/baselines.py`` uses
these same functions next to its tuned baselines (probe CV, GDA, Tip-Adapter).

Example
-------
>>> pred = nearest_class_mean(X, y, X_eval)
>>> pred = BASELINES["linear_probe"].predict(X, y, prototypes, X_eval)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

from .arrays import l2_normalize

KNN_MAX_NEIGHBORS = 16
LINEAR_PROBE_C = 1.0
LINEAR_PROBE_MAX_ITER = 1000
# sklearn reads "more classes than half the rows" (every 1-shot support) as a hint of regression
_FEW_ROWS_WARNING = "The number of unique classes is greater than 50%"


def zero_shot(prototypes: np.ndarray, X_eval: np.ndarray) -> np.ndarray:
    """Index of the nearest prototype by cosine (M,). Meaningful only when X_eval and the
    prototypes come from the same model (one embedding space)."""
    return np.argmax(l2_normalize(X_eval) @ l2_normalize(prototypes).T, axis=1)


def nearest_class_mean(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray) -> np.ndarray:
    """Cosine to the L2-normalised mean of each class's support rows."""
    X, X_eval = l2_normalize(X), l2_normalize(X_eval)
    classes = np.unique(y)
    means = l2_normalize(np.stack([X[y == c].mean(axis=0) for c in classes]))
    return classes[np.argmax(X_eval @ means.T, axis=1)]


def knn_neighbors(y: np.ndarray) -> int:
    """k of :func:`knn`: the paper's 16 neighbours, capped at the mean shots per class (>= 1)."""
    return max(1, min(KNN_MAX_NEIGHBORS, len(y) // len(np.unique(y))))


def knn(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, n_neighbors: int | None = None) -> np.ndarray:
    """Majority vote of the k nearest support rows (k from :func:`knn_neighbors`: 1-NN at 1 shot)."""
    k = knn_neighbors(y) if n_neighbors is None else n_neighbors
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_FEW_ROWS_WARNING)
        return KNeighborsClassifier(n_neighbors=k).fit(l2_normalize(X), y).predict(l2_normalize(X_eval))


def linear_probe(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, C: float = LINEAR_PROBE_C) -> np.ndarray:
    """Logistic regression on L2-normalised rows (L2 penalty, lbfgs, C=1, as LFA's public code)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message=_FEW_ROWS_WARNING)
        model = LogisticRegression(C=C, max_iter=LINEAR_PROBE_MAX_ITER)
        return model.fit(l2_normalize(X), y).predict(l2_normalize(X_eval))


@dataclass(frozen=True)
class Baseline:
    """A baseline as a harness runs it: ``predict(X, y, prototypes, X_eval) -> (M,) labels``.

    ``same_model_only`` marks methods that compare eval rows with prototypes directly.
    """

    label: str
    predict: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    same_model_only: bool = False


BASELINES: dict[str, Baseline] = {
    "zero_shot": Baseline("zero-shot", lambda X, y, P, Xe: zero_shot(P, Xe), same_model_only=True),
    "nearest_class_mean": Baseline("class mean", lambda X, y, P, Xe: nearest_class_mean(X, y, Xe)),
    "knn": Baseline("kNN", lambda X, y, P, Xe: knn(X, y, Xe)),
    "linear_probe": Baseline("linear probe", lambda X, y, P, Xe: linear_probe(X, y, Xe)),
}
"""Name -> :class:`Baseline`, in the order tables show them."""
