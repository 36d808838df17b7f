"""Whether the text prototypes' geometry says anything about the support rows' (a Mantel test).

Where images and prototypes come from different models, the only thing the text can teach a map
is its geometry: classes whose names are alike should hold images that are alike. With one row per
class nothing can be held out to check it, but the check needs no held-out rows: compare the
centred Gram matrix of the support's class means with that of their prototypes (Mantel's statistic,
the sum of their off-diagonal products) against the same statistic under random class → prototype
permutations. Unrelated spaces (an ImageNet CNN against a sentence model's names of clothes) sit
inside the null; related ones (one text read by two sentence models, CLIP images against MiniLM
names) sit many standard deviations above it (``benchmarks/results/robustness.md``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .beta import IDENTITY_ALPHA, beyond_chance

PERMUTATIONS = 200
"""Random class permutations behind the null's mean and spread."""
MAX_CLASSES = 200
"""Classes the test reads at most (a seeded subset beyond): each permutation costs C² products, and
200 classes already tell related spaces from unrelated ones by many standard deviations."""


def geometry_evidence(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *,
                      permutations: int = PERMUTATIONS, random_state: int = 0) -> float:
    """Mantel z-score of the class means' centred Gram matrix against the prototypes'.

    ``x`` (n, d) and ``prototypes`` (C, d') need not share a width: only their Gram matrices meet.
    Classes without rows are left out; of more than :data:`MAX_CLASSES`, a seeded subset is read.
    Returns +inf (−inf) when the null has no spread and the statistic is above (not above) its
    mean; 0.0 with fewer than three classes.
    """
    n_classes = prototypes.shape[0]
    counts = torch.bincount(labels, minlength=n_classes).double()
    present = torch.nonzero(counts > 0).flatten().cpu().numpy()
    if len(present) < 3:
        return 0.0
    rng = np.random.default_rng(random_state)
    if len(present) > MAX_CLASSES:
        present = np.sort(rng.choice(present, MAX_CLASSES, replace=False))
    sums = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, device=x.device)
    sums.index_add_(0, labels, x.double())
    keep = torch.from_numpy(present).to(x.device)
    means = (sums[keep] / counts[keep, None].to(x.device)).cpu().numpy()
    protos = prototypes[keep].double().cpu().numpy()
    gram_x, gram_t = (_centred_gram(m) for m in (means, protos))
    observed = float((gram_x * gram_t).sum())
    orders = [rng.permutation(len(means)) for _ in range(permutations)]
    if x.device.type == "cuda":  # all permutations in one gather (a loop of small ones costs more than the fit's steps)
        perms = torch.as_tensor(np.stack(orders), device=x.device)
        gx, gt = torch.as_tensor(gram_x, device=x.device), torch.as_tensor(gram_t, device=x.device)
        null = (gt[perms[:, :, None], perms[:, None, :]] * gx).sum(dim=(1, 2)).cpu().numpy()
    else:
        null = np.array([(gram_x * gram_t[np.ix_(p, p)]).sum() for p in orders])
    spread = float(null.std())
    if spread == 0.0:
        return math.inf if observed > float(null.mean()) else -math.inf
    return (observed - float(null.mean())) / spread


def geometry_is_informative(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *,
                            alpha: float = IDENTITY_ALPHA, random_state: int = 0) -> bool:
    """Whether the prototypes' geometry matches the support's beyond chance, at the identity test's level.

    With C! ≤ 1/``alpha`` classes no support can reach that level, so the evidence only has to point
    the right way (z > 0), as for :func:`~lfa_index.core.solvers.beta.identity_is_informative`.
    """
    evidence = geometry_evidence(x, labels, prototypes, random_state=random_state)
    present = min(MAX_CLASSES, int((torch.bincount(labels, minlength=prototypes.shape[0]) > 0).sum()))
    return beyond_chance(evidence, present, alpha)


def names_at_chance(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, *,
                    alpha: float = IDENTITY_ALPHA, random_state: int = 0) -> bool:
    """Whether the test could tell and found the prototypes' geometry no better than chance: False with
    fewer than three classes with rows, where no Gram matrix can say anything (``text_check=True``)."""
    present = int((torch.bincount(labels, minlength=prototypes.shape[0]) > 0).sum())
    return present >= 3 and not geometry_is_informative(x, labels, prototypes, alpha=alpha, random_state=random_state)


def _centred_gram(rows: np.ndarray) -> np.ndarray:
    """Gram matrix of the centred rows, zero on the diagonal."""
    centred = rows - rows.mean(axis=0)
    gram = centred @ centred.T
    np.fill_diagonal(gram, 0.0)
    return gram
