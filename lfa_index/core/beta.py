"""Choosing β of β-Procrustes (paper eq. 5 and appendix) on the support set alone.

``W_β = (1 − β) W_op + β I``: β = 1 is the identity, i.e. zero-shot where images and prototypes
come from one model. The paper picks β by cross-validation on random 80/20 splits of the support
(:func:`select_beta`). Two questions the paper leaves open are answered here:

* **Is the identity worth anything?** Only when images and prototypes share a space. That is
  never the case across a projection (different widths), and otherwise it is tested on the
  support itself (:func:`identity_is_informative`): zero-shot uses no labels, so every support
  row is a fair test row.
* **How does the map carry over to classes it has not seen?** Folds that hold out whole classes
  (:func:`select_beta_unseen`) measure it. That is the only thing a 1-shot support can measure,
  and it is what a map for classes added from text alone needs.

Where the identity is informative, a smaller β has to *show* a gain on held-out rows (a paired
sign test against β = 1, :func:`significantly_better`); otherwise the identity is kept, so a
support too small to show anything cannot erase the zero-shot knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from scipy.stats import binomtest
from sklearn.model_selection import KFold

from .procrustes import orthogonal_procrustes, support_splits

BETA_GRID: tuple[float, ...] = tuple(float(b) for b in np.round(np.linspace(0.0, 1.0, 21), 2))
ALPHA = 0.05


@dataclass(frozen=True)
class BetaChoice:
    """A chosen β, how it was chosen, and the mean held-out accuracy of each β of the grid (or None)."""

    beta: float
    how: str
    scores: np.ndarray | None = None


def identity_is_informative(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor) -> bool:
    """Whether the identity map (zero-shot) ranks the true prototypes above chance on the support.

    Each row's similarities to the C prototypes are standardised (mean 0, variance 1 over the
    classes); were the true class unrelated to them, its standardised score would average 0. The
    identity counts as informative when that average is positive: a point estimate, not a test,
    because a support of a few rows cannot reject chance, and wrongly dropping a related model's
    zero-shot knowledge costs far more than keeping an unrelated identity that the guard on β
    (:func:`significantly_better`) then replaces wherever the support shows Procrustes doing better.
    Callers pass ``False`` outright when a projection bridges different widths (nothing shared).
    """
    sims = (x @ prototypes.T).double()
    spread = sims.std(dim=1, unbiased=False).clamp(min=1e-12)
    z = (sims.gather(1, labels.view(-1, 1)).squeeze(1) - sims.mean(dim=1)) / spread
    return bool(float(z.mean()) > 0)


def significantly_better(hits: np.ndarray, reference: np.ndarray, *, alpha: float = ALPHA) -> bool:
    """One-sided sign test: do ``hits`` beat ``reference`` on the rows where they disagree?

    Rows hold 0/1 hits, or the share of repeats a row was right in (repeated cross-validation).
    """
    difference = np.asarray(hits, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    gains, losses = int(np.sum(difference > 0)), int(np.sum(difference < 0))
    if gains <= losses:
        return False
    return bool(binomtest(gains, gains + losses, 0.5, alternative="greater").pvalue < alpha)


def grid_hits(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor,
              splits: Sequence[tuple[np.ndarray, np.ndarray]], betas: Sequence[float]) -> list[np.ndarray]:
    """Held-out hits of every β, one (n_betas, n_val) bool array per split.

    One SVD per split gives W_op on the training rows. ``W_β = (1−β)W_op + βI``, so the validation
    logits are ``(1−β)·(X W_op)Yᵀ + β·XYᵀ`` and the whole grid costs two matrix products.
    """
    grid = torch.as_tensor(np.asarray(betas), dtype=x.dtype, device=x.device).view(-1, 1, 1)
    out = []
    for train_idx, val_idx in splits:
        tr = torch.as_tensor(train_idx, device=x.device)
        va = torch.as_tensor(val_idx, device=x.device)
        w_op = orthogonal_procrustes(x[tr], prototypes[labels[tr]])
        logits_op = (x[va] @ w_op) @ prototypes.T
        logits_id = x[va] @ prototypes.T
        pred = ((1 - grid) * logits_op + grid * logits_id).argmax(dim=2)
        out.append(pred.eq(labels[va]).cpu().numpy())
    return out


def identity_kept(pooled: np.ndarray, best: int) -> bool:
    """The zero-shot guard: grid index ``best`` fails to beat β = 1 (the last) in the paired sign test.

    ``pooled`` holds the held-out hits (n_betas, n_rows) of every β of a grid that ends at 1.
    """
    return best != len(pooled) - 1 and not significantly_better(pooled[best], pooled[-1])


def _choose(per_split: list[np.ndarray], betas: Sequence[float], guard: bool, how: str) -> BetaChoice:
    scores = np.mean([h.mean(axis=1) for h in per_split], axis=0)
    best = int(np.argmax(scores))  # first maximum: the smallest β among ties, as the paper's code
    if guard and identity_kept(np.concatenate(per_split, axis=1), best):
        return BetaChoice(1.0, f"{how}, identity kept", scores)
    return BetaChoice(float(betas[best]), how, scores)


def select_beta(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    identity_informative: bool,
    guard: bool,
    betas: Sequence[float] = BETA_GRID,
    n_splits: int = 3,
    val_size: float = 0.2,
    random_state: int | None = None,
) -> BetaChoice:
    """β by cross-validation on random, class-stratified splits of the support (the paper's way).

    ``guard=True`` keeps β = 1 unless the best β beats it significantly on the held-out rows
    (only where ``identity_informative``). With one row per class no split can hold out a seen
    class, and β comes from :func:`select_beta_unseen` instead.

    ``betas`` must be increasing and end at 1. Returns a :class:`BetaChoice` (``how``: "cv" or
    "cv, identity kept", or the 1-shot outcomes of :func:`select_beta_unseen`).
    """
    splits = support_splits(labels.cpu().numpy(), n_splits=n_splits, val_size=val_size, random_state=random_state)
    if splits is None:
        return select_beta_unseen(x, labels, prototypes, identity_informative=identity_informative, betas=betas,
                                  random_state=random_state)
    per_split = grid_hits(x, labels, prototypes, splits, betas)
    return _choose(per_split, betas, guard and identity_informative, "cv")


def select_beta_unseen(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    identity_informative: bool,
    betas: Sequence[float] = BETA_GRID,
    n_folds: int = 5,
    random_state: int | None = None,
) -> BetaChoice:
    """β for classes the map has not seen: folds that hold out whole classes.

    Where the identity carries nothing (``identity_informative=False``) it can only dilute the
    map: β = 0, plain orthogonal Procrustes ("procrustes, identity uninformative"). Otherwise each
    fold fits W_op on the other classes' rows and scores the grid on the held-out classes' rows
    against all prototypes; a smaller β must beat the identity significantly
    ("class-disjoint-cv"), else β = 1 ("class-disjoint-cv, identity kept").
    """
    if not identity_informative:
        return BetaChoice(0.0, "procrustes, identity uninformative")
    classes = np.unique(labels.cpu().numpy())
    if len(classes) < 2:
        return BetaChoice(1.0, "identity kept, one class")
    y = labels.cpu().numpy()
    folds = KFold(n_splits=min(n_folds, len(classes)), shuffle=True, random_state=random_state)
    splits = [(np.flatnonzero(~np.isin(y, classes[held])), np.flatnonzero(np.isin(y, classes[held])))
              for _, held in folds.split(classes)]
    return _choose(grid_hits(x, labels, prototypes, splits, betas), betas, True, "class-disjoint-cv")
