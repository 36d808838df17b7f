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

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from scipy.stats import binomtest, norm
from sklearn.model_selection import KFold

from .. import config
from ..config import row_blocks
from .procrustes import beta_procrustes, orthogonal_procrustes, support_splits

BETA_GRID: tuple[float, ...] = tuple(float(b) for b in np.round(np.linspace(0.0, 1.0, 21), 2))
ALPHA = 0.05
IDENTITY_ALPHA = 1e-3
"""Level of the test that the identity carries information (see :func:`identity_is_informative`)."""


@dataclass(frozen=True)
class BetaChoice:
    """A chosen β, how it was chosen, and the mean held-out accuracy of each β of the grid (or None)."""

    beta: float
    how: str
    scores: np.ndarray | None = None


def identity_is_informative(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *,
                            alpha: float = IDENTITY_ALPHA) -> bool:
    """Whether zero-shot (the identity map) ranks the true prototypes above what unrelated spaces give.

    The evidence is :func:`identity_evidence`, a z-score under a null that permutes whole classes,
    so that two unrelated spaces of one width (which still match some classes by chance) are told
    apart from a shared space. With C! > 1/``alpha`` classes the identity is informative when its
    one-sided normal p-value is below ``alpha``. With fewer classes (C ≤ 6 at the default level)
    no support, however large, can reach that level: a lucky unrelated space ranks all C classes
    right once in C! draws. There the evidence only has to point the right way (z > 0): wrongly
    dropping a shared space's zero-shot map costs far more than keeping an unrelated identity,
    which the guard on β replaces wherever held-out rows show Procrustes doing better.
    Callers pass ``False`` outright when a projection bridges different widths (nothing shared).
    """
    n_classes = prototypes.shape[0]
    if n_classes < 2:
        return False
    return beyond_chance(identity_evidence(x, labels, prototypes), n_classes, alpha)


def beyond_chance(evidence: float, n_classes: int, alpha: float = IDENTITY_ALPHA) -> bool:
    """Whether a z-score under a class-permutation null is significant at ``alpha`` (one-sided normal).

    With C! ≤ 1/``alpha`` classes no permutation test can reach that level, so the evidence only has
    to point the right way (z > 0).
    """
    if math.lgamma(n_classes + 1) <= math.log(1.0 / alpha):
        return evidence > 0
    return bool(norm.sf(evidence) < alpha)


def identity_evidence(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor) -> float:
    """How far zero-shot ranks the rows' own classes above a random class → prototype correspondence.

    Each row's similarities to the C prototypes are standardised (mean 0, variance 1 over the
    classes); T is the sum over rows of their own class's standardised score. Two unrelated spaces
    of one width still match some classes to the "right" prototype by chance, and all rows of a
    class move together, so the null hypothesis permutes whole classes: under a random class →
    prototype permutation T has mean 0 and Hoeffding's variance (the combinatorial central limit
    theorem), computed exactly from the (C, C) class-by-prototype sums, one block of classes at a
    time. Returns T / σ (+inf when σ = 0 and T > 0, −inf when σ = 0 otherwise).
    """
    n_classes = prototypes.shape[0]
    order = torch.argsort(labels)
    x, labels = x[order], labels[order]
    counts = torch.bincount(labels, minlength=n_classes).tolist()
    starts = np.concatenate([[0], np.cumsum(counts)])
    block = max(1, config.SCORE_BLOCK // n_classes)  # classes per block: about SCORE_BLOCK scores in memory
    p = prototypes.double()
    trace = squares = 0.0
    column = torch.zeros(n_classes, dtype=torch.float64, device=x.device)
    for first in range(0, n_classes, block):
        last = min(n_classes, first + block)
        rows = slice(int(starts[first]), int(starts[last]))
        sims = x[rows].double() @ p.T
        z = (sims - sims.mean(dim=1, keepdim=True)) / sims.std(dim=1, unbiased=False, keepdim=True).clamp(min=1e-12)
        sums = torch.zeros(last - first, n_classes, dtype=torch.float64, device=x.device)
        sums.index_add_(0, labels[rows] - first, z)  # (classes of the block, prototypes)
        trace += float(sums.diagonal(offset=first).sum())
        squares += float((sums * sums).sum())
        column += sums.sum(dim=0)
    # Var Σ_c S[c, π(c)] = Σ (S − row means − column means + grand mean)² / (C − 1); rows of S sum to 0
    variance = (squares - float((column * column).sum()) / n_classes) / max(n_classes - 1, 1)
    if variance <= 0:
        return math.inf if trace > 0 else -math.inf
    return trace / math.sqrt(variance)


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

    One Procrustes per split gives W_op on the training rows. ``W_β = (1−β)W_op + βI``, so the
    validation logits are ``(1−β)·(X W_op)Yᵀ + β·XYᵀ`` and the whole grid costs two matrix products
    (in blocks of rows, see :func:`~lfa_index.core.config.row_blocks`).
    """
    out = []
    for train_idx, val_idx in splits:
        tr = torch.as_tensor(train_idx, device=x.device)
        va = torch.as_tensor(val_idx, device=x.device)
        w_op = orthogonal_procrustes(x[tr], prototypes[labels[tr]])
        out.append(_grid_predictions(x[va], prototypes, w_op, betas, None, None) == labels[va].cpu().numpy())
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
        return select_beta_unseen(x, labels, prototypes, identity_informative=identity_informative, guard=guard,
                                  betas=betas, random_state=random_state)
    per_split = grid_hits(x, labels, prototypes, splits, betas)
    return _choose(per_split, betas, guard and identity_informative, "cv")


def select_beta_unseen(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    identity_informative: bool,
    guard: bool = True,
    betas: Sequence[float] = BETA_GRID,
    n_folds: int = 5,
    random_state: int | None = None,
) -> BetaChoice:
    """β from folds that hold out whole classes (all a 1-shot support can hold out).

    Without ``guard`` (the paper: its random 80/20 splits of a 1-shot support hold out whole
    classes) the best mean held-out accuracy wins ("class-disjoint-cv"). With it, where the
    identity carries nothing it can only dilute the map: β = 0, plain orthogonal Procrustes
    ("procrustes, identity uninformative"); otherwise a smaller β must beat the identity
    significantly ("class-disjoint-cv"), else β = 1 ("class-disjoint-cv, identity kept").
    Each fold fits W_op on the other classes' rows and scores the held-out classes' rows against
    all prototypes.
    """
    if guard and not identity_informative:
        return BetaChoice(0.0, "procrustes, identity uninformative")
    classes = np.unique(labels.cpu().numpy())
    if len(classes) < 2:
        return BetaChoice(1.0, "identity kept, one class")
    y = labels.cpu().numpy()
    folds = KFold(n_splits=min(n_folds, len(classes)), shuffle=True, random_state=random_state)
    splits = [(np.flatnonzero(~np.isin(y, classes[held])), np.flatnonzero(np.isin(y, classes[held])))
              for _, held in folds.split(classes)]
    return _choose(grid_hits(x, labels, prototypes, splits, betas), betas, guard, "class-disjoint-cv")


@dataclass(frozen=True)
class NewClassMap:
    """The map for classes added from text alone, and how it was chosen."""

    W: torch.Tensor
    beta: float
    how: str
    scores: np.ndarray | None = None  # class-disjoint CV accuracy: (2, n_betas), plain / mean directions removed


def mean_direction_projector(rows: torch.Tensor) -> torch.Tensor:
    """``I − m̂m̂ᵀ`` (d, d), m̂ the unit mean of ``rows``: removes the direction all rows share."""
    mean = rows.mean(dim=0)
    unit = mean / mean.norm().clamp(min=torch.finfo(rows.dtype).tiny)
    return torch.eye(rows.shape[1], dtype=rows.dtype, device=rows.device) - torch.outer(unit, unit)


def _new_class_maps(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """W_op, and the projectors removing the support's and the fitted classes' mean directions."""
    seen = torch.unique(labels)
    return (orthogonal_procrustes(x, prototypes[labels]), mean_direction_projector(x),
            mean_direction_projector(prototypes[seen]))


def select_new_class_map(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    identity_informative: bool,
    betas: Sequence[float] = BETA_GRID,
    n_folds: int = 5,
    random_state: int | None = None,
) -> NewClassMap:
    """The map for classes the fit has not seen, chosen on folds that hold out whole classes.

    Where the identity carries nothing it is plain orthogonal Procrustes ("procrustes, identity
    uninformative"). Otherwise the candidates are β-Procrustes over the grid, each as it is and
    with the direction shared by all support rows and the one shared by all fitted prototypes
    removed (``P_x W_β P_y``; a common offset, such as the gap between sentences and short class
    names, carries over to any class). Each fold fits them on the other classes and scores the
    held-out classes' rows against all prototypes (among the held-out classes alone, a few per
    fold, the choice followed the noise on Banking77: see ``benchmarks/base_to_new.py``); the best
    mean wins, and zero-shot (β = 1, as it is) stays unless a candidate beats it
    ("class-disjoint-cv" or "class-disjoint-cv, zero-shot kept").
    """
    if not identity_informative:
        return NewClassMap(orthogonal_procrustes(x, prototypes[labels]), 0.0, "procrustes, identity uninformative")
    y = labels.cpu().numpy()
    classes = np.unique(y)
    eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
    if len(classes) < 2:
        return NewClassMap(eye, 1.0, "identity kept, one class")
    folds = KFold(n_splits=min(n_folds, len(classes)), shuffle=True, random_state=random_state)
    hits = []
    for _, held in folds.split(classes):
        tr = torch.as_tensor(np.flatnonzero(~np.isin(y, classes[held])), device=x.device)
        va = torch.as_tensor(np.flatnonzero(np.isin(y, classes[held])), device=x.device)
        w_op, p_x, p_y = _new_class_maps(x[tr], labels[tr], prototypes)
        hits.append(np.stack([_grid_predictions(x[va], prototypes, w_op, betas, left, right) == labels[va].cpu().numpy()
                              for left, right in ((None, None), (p_x, p_y))]))
    pooled = np.concatenate(hits, axis=2)  # (2, n_betas, n_rows)
    scores = pooled.mean(axis=2)
    # the best mean; ties go to the plain map and the larger β (the grid ends at 1: zero-shot)
    order = [(v, b) for v in (0, 1) for b in reversed(range(len(betas)))]
    variant, best = max(order, key=lambda vb: scores[vb])
    if scores[variant, best] <= scores[0, -1]:
        return NewClassMap(eye, 1.0, "class-disjoint-cv, zero-shot kept", scores)
    w_op, p_x, p_y = _new_class_maps(x, labels, prototypes)
    w = beta_procrustes(w_op, float(betas[best]))
    how = "class-disjoint-cv"
    if variant:
        w, how = p_x @ w @ p_y, "class-disjoint-cv, mean directions removed"
    return NewClassMap(w, float(betas[best]), how, scores)


def _grid_predictions(x: torch.Tensor, prototypes: torch.Tensor, w_op: torch.Tensor, betas: Sequence[float],
                      left: torch.Tensor | None, right: torch.Tensor | None) -> np.ndarray:
    """Nearest prototype (n_betas, n) of rows ``x`` under ``left · W_β · right`` for every β of the grid."""
    target = prototypes if right is None else prototypes @ right.T
    grid = torch.as_tensor(np.asarray(betas), dtype=x.dtype, device=x.device).view(-1, 1, 1)
    out = np.empty((len(betas), len(x)), dtype=np.int64)
    for block in row_blocks(len(x), len(betas) * target.shape[0]):  # (β, rows, classes) a block at a time
        rows = x[block] if left is None else x[block] @ left
        logits = (1 - grid) * ((rows @ w_op) @ target.T) + grid * (rows @ target.T)
        out[:, block] = logits.argmax(dim=2).cpu().numpy()
    return out
