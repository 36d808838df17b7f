"""Orthogonal Procrustes (paper eq. 4) and beta-Procrustes (paper eq. 5).

Rows multiply on the right: an image row ``x`` is aligned as ``x @ W``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from sklearn.model_selection import ShuffleSplit, StratifiedShuffleSplit


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
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random train/validation splits of the support rows, stratified by class where possible.

    Stratification needs at least two rows per class; at 1 shot no class can sit on both sides,
    so the split falls back to a plain shuffle (the validation rows then measure how the mapping
    generalises to classes it was not fitted on).
    """
    counts = np.bincount(labels)
    counts = counts[counts > 0]
    n_val = max(1, int(round(val_size * len(labels))))
    stratify = counts.min() >= 2 and n_val >= len(counts) and len(labels) - n_val >= len(counts)
    splitter_cls = StratifiedShuffleSplit if stratify else ShuffleSplit
    splitter = splitter_cls(n_splits=n_splits, test_size=n_val, random_state=random_state)
    return list(splitter.split(np.zeros(len(labels)), labels))


def select_beta(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    betas: Sequence[float],
    n_splits: int = 3,
    val_size: float = 0.2,
    random_state: int | None = None,
) -> tuple[float, np.ndarray]:
    """Pick β by cross-validation on the support set alone (paper section 4.2 and appendix).

    For each split, one SVD gives W_op on the training rows; every β of the grid is then scored
    by top-1 accuracy on the validation rows. W_β = (1−β)W_op + βI, so the validation logits are
    ``(1−β)·(X W_op)Yᵀ + β·XYᵀ`` and the whole grid costs two matrix products per split.
    Ties go to the smallest β, as in the paper's public code.

    Returns
    -------
    (best β, mean validation accuracy of each β in ``betas``).
    """
    y_np = labels.cpu().numpy()
    betas = np.asarray(betas, dtype=np.float64)
    grid = torch.as_tensor(betas, dtype=x.dtype, device=x.device)
    scores = torch.zeros(len(grid), dtype=torch.float64)
    splits = support_splits(y_np, n_splits=n_splits, val_size=val_size, random_state=random_state)
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
    return float(betas[best]), scores.numpy()
