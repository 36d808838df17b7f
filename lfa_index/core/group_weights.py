"""Weights of rows that come in groups (a document and its views): Kish's design effect.

``m`` rows of one group that are alike carry less evidence than ``m`` independent rows. The
intra-group correlation ρ (one-way ANOVA) says how much less: the group's design effect is
``1 + (m − 1)ρ`` (Kish, *Survey Sampling*, 1965). :class:`~lfa_index.EmbeddingAligner` weighs the
pairs of a group by its inverse (:mod:`lfa_index.core.solvers.migration`). Numpy only.
"""

from __future__ import annotations

import numpy as np


def design_weights(x_new: np.ndarray, x_old: np.ndarray, groups: np.ndarray | None) -> tuple[np.ndarray | None, float]:
    """Weights (n,), mean 1, of pairs that come in groups (a document and its sentences), and the
    intra-group correlation ρ they follow from.

    Views of one document are alike, so m of them carry less than m documents' worth of evidence:
    Kish's design effect ``1 + (m − 1)ρ`` (ρ the share of the rows' variance between groups, the
    one-way ANOVA estimator, the mean of both models') says how much less. Each pair of a group of
    m weighs ``1 / (1 + (m − 1)ρ)``: ρ = 0 keeps every pair at 1, ρ = 1 gives each group one pair's
    weight. ``(None, 0.0)`` when no group has two pairs, or all pairs are one group.
    """
    if groups is None:
        return None, 0.0
    codes, counts = np.unique(groups, return_inverse=True, return_counts=True)[1:]
    if counts.max() < 2 or len(counts) < 2:
        return None, 0.0
    rho = float(np.mean([intra_group_correlation(x, codes.reshape(-1), counts) for x in (x_new, x_old)]))
    size = counts[codes.reshape(-1)]
    weight = 1.0 / (1.0 + (size - 1) * rho)
    return weight / weight.mean(), rho


def intra_group_correlation(x: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> float:
    """The one-way ANOVA estimate of the intra-class correlation of rows ``x`` (n, d) in groups ``codes``
    (n,) of sizes ``counts``, pooled over the d coordinates; clipped to [0, 1]."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    n, k = len(x), len(counts)
    means = np.zeros((k, x.shape[1]))
    np.add.at(means, codes, x)
    means /= counts[:, None]
    within = float(((x - means[codes]) ** 2).sum()) / max(n - k, 1)
    between = float((counts * (means**2).sum(axis=1)).sum()) / (k - 1)
    size = (n - float((counts**2).sum()) / n) / (k - 1)
    denominator = between + (size - 1.0) * within
    return float(np.clip((between - within) / denominator, 0.0, 1.0)) if denominator > 0 else 0.0
