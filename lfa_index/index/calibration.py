"""Rejection thresholds: scores that calibrate them, the objectives that set them, the check of a given one.

A fitted map scores its own support rows higher than unseen images of the same classes, so a
threshold taken on them accepts far fewer test images than asked. The default LFA keeps the
cross-fitted scores of its option selection (``LFA.heldout_scores_``); otherwise class-stratified
K-fold clones of the fitted estimator (same parameters, ``steps=steps_``) score the held-out rows.

Example
-------
>>> scores, how = heldout_scores(index.lfa_, index.support_embeddings_, index.support_labels_,
...                              index.text_embeddings_[: len(index.lfa_.prototypes_)])
>>> tau = quantile_threshold(scores, accept_rate=0.95)  # float(np.quantile(scores, 0.05, method="lower"))

With labelled validation rows that include out-of-scope ones, :func:`objective_threshold` sets τ
for a known-class accept rate, a target out-of-scope recall or the best macro-F1 over the known
classes and "unknown".
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Literal

import numpy as np

from ..core.query_map import prepare_queries
from ..errors import InvalidParameterError
from . import folding

MAX_FOLDS = 5
How = Literal["cross-fitted", "k-fold", "support"]
Objective = Literal["accept-rate", "oos-recall", "macro-f1"]
OBJECTIVES: tuple[str, ...] = ("accept-rate", "oos-recall", "macro-f1")
UNKNOWN = -1
"""Class position of out-of-scope rows in :func:`objective_threshold`'s ``truth``."""


def heldout_scores(
    lfa: Any, support: np.ndarray, labels: np.ndarray | None, text_emb: np.ndarray
) -> tuple[np.ndarray, How]:
    """Best score of each support row (view 0) over the fitted classes under a model fitted without it.

    ``lfa``: the fitted estimator; ``support`` (N, d) or (N, V, d) and ``labels`` (N,) or None: what
    it was fitted on; ``text_emb`` (C, d_txt): its class prototypes as given. Returns the (N,)
    float32 scores and how they were obtained: "cross-fitted" (``lfa.heldout_scores_``), "k-fold"
    (K = min(5, smallest class count) folds, at least 2; unlabelled supports: K = min(5, N)) or
    "support" (no class has two rows: the fitted model's own scores, optimistic).
    """
    given = lfa.heldout_scores_
    if given is not None:
        given = np.asarray(given)
        if given.shape == (len(support),) and given.dtype.kind == "f" and np.isfinite(given).all():
            return given.astype(np.float32, copy=False), "cross-fitted"
    rows = first_view(support)
    folds = _folds(labels, len(support), lfa.random_state)
    if folds is None:
        return best_scores(lfa, rows), "support"
    from sklearn.base import clone

    out = np.empty(len(support), dtype=np.float32)
    for train, held in folds:
        model = clone(lfa).set_params(steps=int(lfa.steps_), warm_start=False)
        model.fit(support[train], None if labels is None else labels[train], text_emb)
        out[held] = best_scores(model, rows[held])
    return out, "k-fold"


def support_scores(lfa: Any, support: np.ndarray, labels: np.ndarray | None, text: np.ndarray) -> np.ndarray:
    """:func:`heldout_scores` of a fitted index (``text``: all its class prototypes as given, (C, d_txt)).

    K-fold scores are kept in ``lfa.heldout_scores_``: computed once per fit, and saved with the estimator.
    """
    scores, how = heldout_scores(lfa, support, labels, text[: len(lfa.prototypes_)])
    if how == "k-fold":
        lfa.heldout_scores_ = scores
    return scores


def quantile_threshold(scores: np.ndarray, accept_rate: float) -> float:
    """τ such that at least ``accept_rate`` of ``scores`` are >= τ ("lower" picks an observed score)."""
    return float(np.quantile(scores, 1.0 - accept_rate, method="lower"))


OOS_MARGIN = 1e-6
"""With no validation score above the last out-of-scope row to reject, τ sits this far above it (relative)."""


def objective_threshold(
    scores: np.ndarray, truth: np.ndarray, predicted: np.ndarray, objective: Objective, *,
    accept_rate: float = 0.95, oos_recall: float = 0.9,
) -> float:
    """τ for ``score >= τ`` (accept) set on labelled validation rows.

    ``scores`` (n,) open-set scores; ``truth`` (n,) class positions, :data:`UNKNOWN` for
    out-of-scope rows; ``predicted`` (n,) the predicted class positions. Objectives:
    "accept-rate" keeps ``accept_rate`` of the known-class rows; "oos-recall" rejects at least
    ``oos_recall`` of the out-of-scope rows; "macro-f1" maximises the macro-F1 over the known
    classes present in ``truth`` plus "unknown" (ties: the highest τ).
    """
    scores = np.asarray(scores)  # thresholds stay in the scores' own precision: τ compares to them as they are
    known = truth != UNKNOWN
    if objective == "accept-rate":
        return quantile_threshold(scores[known], accept_rate)
    if objective == "oos-recall":
        unknown = np.sort(scores[~known])
        needed = int(np.ceil(oos_recall * len(unknown) - 1e-9))
        last = float(unknown[max(needed, 1) - 1])
        # halfway to the next score above: the same rows are rejected here, and the last bit that
        # scoring a row in another batch (another GEMM kernel) or a reloaded index may change
        # cannot carry a rejected row across τ
        higher = scores[scores > last]
        return (last + float(higher.min())) / 2 if higher.size else last + OOS_MARGIN * max(1.0, abs(last))
    return _best_macro_f1_threshold(scores, truth, predicted)


def _best_macro_f1_threshold(scores: np.ndarray, truth: np.ndarray, predicted: np.ndarray) -> float:
    """τ with the best macro-F1 over the known classes of ``truth`` + unknown, over every cut of the sorted scores."""
    order = np.argsort(-scores, kind="stable")
    s, t, p = scores[order], truth[order], predicted[order]
    classes = np.unique(t[t != UNKNOWN])
    column = np.searchsorted(classes, p).clip(max=len(classes) - 1)
    hit = np.zeros((len(s), len(classes)))
    said = np.zeros((len(s), len(classes)))
    said[np.arange(len(s)), column] = classes[column] == p
    hit[np.arange(len(s)), column] = (classes[column] == p) & (p == t)
    zero = np.zeros((1, len(classes)))
    tp = np.concatenate([zero, np.cumsum(hit, axis=0)])  # row a: the first a rows (by score) accepted
    accepted_as = np.concatenate([zero, np.cumsum(said, axis=0)])
    support = np.bincount(np.searchsorted(classes, t[t != UNKNOWN]), minlength=len(classes))
    f1_known = 2 * tp / np.maximum(accepted_as + support, 1)
    n_unknown = int((t == UNKNOWN).sum())
    unknown_accepted = np.concatenate([[0], np.cumsum(t == UNKNOWN)])
    rejected = len(s) - np.arange(len(s) + 1)
    f1_unknown = 2 * (n_unknown - unknown_accepted) / np.maximum(rejected + n_unknown, 1)
    macro = (f1_known.sum(axis=1) + f1_unknown) / (len(classes) + 1)
    cuts = np.ones(len(s) + 1, dtype=bool)  # a cut between equal scores cannot be a threshold
    cuts[1:-1] = s[:-1] > s[1:]
    best = int(np.flatnonzero(cuts)[np.argmax(macro[cuts])])
    return float(np.nextafter(s[0], np.asarray(np.inf, dtype=s.dtype))) if best == 0 else float(s[best - 1])


def best_scores(lfa: Any, x: np.ndarray) -> np.ndarray:
    """Best aligned score over ``lfa``'s classes of raw float32 rows ``x`` (n,), as the index scores them."""
    task = lfa.query_map("task")
    folded = task.fold(np.asarray(lfa.prototypes_, dtype=np.float32), np.asarray(lfa.intercept_, dtype=np.float32))
    queries = prepare_queries(x, augmented=folded.shape[1] == x.shape[1] + 1)
    return folding.aligned_scores(queries @ folded.T, task.norms(x)).max(axis=1).astype(np.float32)


def first_view(support: np.ndarray) -> np.ndarray:
    """View 0 of each support row, float32 C-contiguous (N, d)."""
    rows = support[:, 0] if support.ndim == 3 else support
    return np.ascontiguousarray(rows, dtype=np.float32)


def _folds(labels: np.ndarray | None, n_rows: int, seed: int | None) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Class-stratified folds holding out every row once; None when no class has two rows."""
    from sklearn.model_selection import KFold, StratifiedKFold

    seed = 0 if seed is None else int(seed)
    if labels is None:
        k = min(MAX_FOLDS, n_rows)
        return None if k < 2 else list(KFold(k, shuffle=True, random_state=seed).split(np.zeros(n_rows)))
    counts = np.bincount(labels)
    counts = counts[counts > 0]
    if counts.max() < 2:
        return None
    k = int(min(MAX_FOLDS, max(2, counts.min())))
    with warnings.catch_warnings():  # classes with one row go to one fold, which sklearn warns about
        warnings.simplefilter("ignore", UserWarning)
        return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(n_rows), labels))


def validation_truth(lookup: Callable[..., np.ndarray], y_val: Any, unknown_label: Any, n_rows: int,
                     objective: str) -> np.ndarray:
    """Class positions of ``y_val`` by ``lookup`` (a label space's), :data:`UNKNOWN` where it is
    ``unknown_label``; checked for ``objective``."""
    if y_val is None:
        if objective != "accept-rate":
            raise InvalidParameterError(f"objective={objective!r} needs y_val with out-of-scope rows.")
        return np.zeros(n_rows, dtype=np.int64)
    labels = np.asarray(y_val, dtype=object)
    if labels.ndim != 1 or len(labels) != n_rows:
        raise InvalidParameterError(f"y_val must hold one label per row of X_val ({n_rows}), got {labels.shape}.")
    outside = np.array([unknown_label is not None and v == unknown_label for v in labels], dtype=bool)
    truth = np.full(n_rows, UNKNOWN, dtype=np.int64)
    if (~outside).any():
        truth[~outside] = lookup(labels[~outside].tolist(), name="y_val")
    if objective != "oos-recall" and outside.all():
        raise InvalidParameterError(f"objective={objective!r} needs known-class rows in y_val; all are unknown.")
    if objective != "accept-rate" and not outside.any():
        raise InvalidParameterError(
            f"objective={objective!r} needs out-of-scope rows: none of y_val is unknown_label={unknown_label!r}."
        )
    return truth
