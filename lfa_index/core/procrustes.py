"""Orthogonal Procrustes (paper eq. 4) and beta-Procrustes (paper eq. 5).

Rows multiply on the right: an image row ``x`` is aligned as ``x @ W``.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.model_selection import StratifiedShuffleSplit


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
