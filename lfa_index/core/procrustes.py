"""Orthogonal Procrustes (paper eq. 4) and beta-Procrustes (paper eq. 5).

Rows multiply on the right: an image row ``x`` is aligned as ``x @ W``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from scipy.stats import binomtest
from sklearn.model_selection import KFold, StratifiedShuffleSplit


def orthogonal_procrustes(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``argmin_{W orthogonal} ||source W - target||_F = U Vᵀ`` with ``U Σ Vᵀ = SVD(sourceᵀ target)``.

    Parameters
    ----------
    source : (n, d) tensor, the (L2-normalised) image rows X.
    target : (n, d) tensor, the matching prototypes PY.

    Returns
    -------
    (d, d) orthogonal tensor W_op.
    """
    u, _, vh = torch.linalg.svd(source.T @ target)
    return u @ vh


def beta_procrustes(w_op: torch.Tensor, beta: float) -> torch.Tensor:
    """``W_β = W_op − β (W_op − I)``: β=0 keeps W_op, β=1 gives the identity (paper eq. 5)."""
    eye = torch.eye(w_op.shape[0], dtype=w_op.dtype, device=w_op.device)
    return w_op - beta * (w_op - eye)


def support_splits(
    labels: np.ndarray, *, n_splits: int, val_size: float, random_state: int | None
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Random train/validation splits of the support rows, stratified by class.

    Only classes with at least two rows can sit on both sides: their rows are split with
    scikit-learn's ``StratifiedShuffleSplit`` (at least one row of each on each side), while
    classes with a single row always stay in the training part. Returns None when no class has
    two rows (1-shot support), where no split can tell how the map generalises to new rows of a
    seen class.
    """
    labels = np.asarray(labels)
    counts = np.bincount(labels)
    multi = np.flatnonzero(counts[labels] >= 2)
    if len(multi) == 0:
        return None
    singles = np.flatnonzero(counts[labels] < 2)
    n_classes = int(np.count_nonzero(counts >= 2))
    n_val = min(max(n_classes, int(round(val_size * len(multi)))), len(multi) - n_classes)
    splitter = StratifiedShuffleSplit(n_splits=n_splits, test_size=n_val, random_state=random_state)
    return [
        (np.sort(np.concatenate([multi[tr], singles])), multi[va])
        for tr, va in splitter.split(np.zeros(len(multi)), labels[multi])
    ]


def identity_is_informative(
    x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *, alpha: float = 0.05
) -> bool:
    """Whether the identity map (zero-shot: nearest raw prototype) beats chance on the support.

    A one-sided binomial test of the zero-shot hits against 1/C. Zero-shot uses no labels, so
    every support row is a fair test row. Fails for unrelated image and text encoders (a random
    projection carries no class information) and passes for encoders trained together.
    """
    hits = int((x @ prototypes.T).argmax(dim=1).eq(labels).sum())
    test = binomtest(hits, len(labels), 1.0 / prototypes.shape[0], alternative="greater")
    return bool(test.pvalue < alpha)


def select_beta(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    betas: Sequence[float],
    n_splits: int = 3,
    val_size: float = 0.2,
    random_state: int | None = None,
) -> tuple[float, np.ndarray | None, str]:
    """Pick β by cross-validation on the support set alone (paper section 4.2 and appendix).

    For each split, one SVD gives W_op on the training rows; every β of the grid is then scored
    by top-1 accuracy on the validation rows. W_β = (1−β)W_op + βI, so the validation logits are
    ``(1−β)·(X W_op)Yᵀ + β·XYᵀ`` and the whole grid costs two matrix products per split.
    Ties go to the smallest β, as in the paper's public code.

    With one row per class (1 shot) no validation row can belong to a class seen in training,
    so the only thing a split measures is how much the identity (zero-shot) part carries to new
    classes. Then: if the identity beats chance on the support (see
    :func:`identity_is_informative`), β is chosen by class-disjoint K-fold (every row validated
    once); otherwise the identity carries nothing and β = 0 (plain orthogonal Procrustes).

    Returns
    -------
    (best β, mean validation accuracy of each β or None, how β was chosen:
    "cv", "class-disjoint-cv" or "procrustes-fallback").
    """
    y_np = labels.cpu().numpy()
    betas = np.asarray(betas, dtype=np.float64)
    splits = support_splits(y_np, n_splits=n_splits, val_size=val_size, random_state=random_state)
    how = "cv"
    if splits is None:
        if len(y_np) < 2 or not identity_is_informative(x, labels, prototypes):
            return 0.0, None, "procrustes-fallback"
        folds = KFold(n_splits=min(5, len(y_np)), shuffle=True, random_state=random_state)
        splits, how = list(folds.split(y_np)), "class-disjoint-cv"
    grid = torch.as_tensor(betas, dtype=x.dtype, device=x.device)
    scores = torch.zeros(len(grid), dtype=torch.float64)
    for train_idx, val_idx in splits:
        tr = torch.as_tensor(train_idx, device=x.device)
        va = torch.as_tensor(val_idx, device=x.device)
        w_op = orthogonal_procrustes(x[tr], prototypes[labels[tr]])
        x_val = x[va]
        logits_op = (x_val @ w_op) @ prototypes.T
        logits_id = x_val @ prototypes.T
        y_val = labels[va]
        for i, beta in enumerate(grid):
            pred = ((1 - beta) * logits_op + beta * logits_id).argmax(dim=1)
            scores[i] += (pred == y_val).double().mean().cpu()
    scores /= len(splits)
    best = int(torch.argmax(scores))  # first maximum: the smallest β among ties
    return float(betas[best]), scores.numpy(), how
