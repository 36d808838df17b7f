"""Open-set metrics of a classifier that may reject: in-scope accuracy, out-of-scope recall and
precision, macro-F1 over the known classes + unknown, AUROC of the score.

Example
-------
>>> m = open_set_metrics(truth, predicted, scores, tau)      # truth: class positions, -1 = out of scope
>>> m["oos_recall"], m["macro_f1"], m["auroc"]
>>> print(format_open_set(m))
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import f1_score, roc_auc_score

UNKNOWN = -1
"""Class position of out-of-scope rows (in ``truth``) and of rejected rows (in the labelling)."""


def open_set_metrics(truth: np.ndarray, predicted: np.ndarray, scores: np.ndarray, tau: float | None) -> dict[str, Any]:
    """Metrics of predicting ``predicted`` (n,) class positions where ``scores >= tau`` and unknown elsewhere.

    ``truth`` (n,): class positions, :data:`UNKNOWN` for out-of-scope rows. ``tau`` None: nothing
    is rejected. Macro-F1 averages the known classes present in ``truth`` and the unknown class;
    AUROC is that of ``scores`` for known (positive) against out-of-scope rows (None when one
    side is missing). Rates over an empty group are None.
    """
    truth, predicted, scores = np.asarray(truth), np.asarray(predicted), np.asarray(scores, dtype=np.float64)
    accepted = np.ones(len(truth), dtype=bool) if tau is None else scores >= tau
    labelled = np.where(accepted, predicted, UNKNOWN)
    known, rejected = truth != UNKNOWN, ~accepted
    classes = sorted(set(truth[known].tolist())) + [UNKNOWN]
    return {
        "tau": None if tau is None else float(tau),
        "n_known": int(known.sum()), "n_unknown": int((~known).sum()),
        "in_scope_accuracy": _rate(labelled[known] == truth[known]),
        "closed_set_accuracy": _rate(predicted[known] == truth[known]),
        "known_accepted": _rate(accepted[known]),
        "oos_recall": _rate(rejected[~known]),
        "oos_precision": _rate(~known[rejected]),
        "macro_f1": float(f1_score(truth, labelled, labels=classes, average="macro", zero_division=0)),
        "auroc": float(roc_auc_score(known, scores)) if 0 < known.sum() < len(known) else None,
    }


def format_open_set(metrics: dict[str, Any]) -> str:
    """The metrics as one line of text (percentages; '-' where a rate is undefined)."""

    def pct(key: str) -> str:
        value = metrics[key]
        return "-" if value is None else f"{100 * value:.1f}%"

    auroc = "-" if metrics["auroc"] is None else f"{metrics['auroc']:.3f}"
    tau = "none" if metrics["tau"] is None else f"{metrics['tau']:.4f}"
    return (
        f"open set ({metrics['n_known']} in-scope, {metrics['n_unknown']} out-of-scope queries, τ {tau}): "
        f"in-scope accuracy {pct('in_scope_accuracy')} (closed-set {pct('closed_set_accuracy')}, accepted "
        f"{pct('known_accepted')}), out-of-scope recall {pct('oos_recall')}, precision {pct('oos_precision')}, "
        f"macro-F1 {100 * metrics['macro_f1']:.1f}%, AUROC {auroc}"
    )


def _rate(hits: np.ndarray) -> float | None:
    return float(np.mean(hits)) if len(hits) else None
