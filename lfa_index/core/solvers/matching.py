"""Aligning two encoders from unpaired samples: ``EmbeddingAligner.fit(X_new, X_old, paired=False)``.

No row of ``X_new`` need embed the same item as a row of ``X_old``. This is U-LFA (paper section
4.4) with each old row a class:

1. both samples are centred and L2-normalised (the pair means are unknown, the sample means stand in);
2. a first soft matching needs no shared space: entropic Gromov-Wasserstein (POT) between the two
   samples' cosine-distance matrices matches rows whose distances to the other rows agree;
3. Procrustes on the matched targets ``P Y`` (U-LFA step 2);
4. ``n_rounds`` of Sinkhorn ``[X W, Y]`` (U-LFA step 4a) then Procrustes on the new targets.

The matching costs O(m²) memory and O(m³) time per iteration on ``m`` rows, so both samples are
subsampled to ``max_rows`` rows for step 2; steps 3-4 use ``max_rows`` rows too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .migration import semi_orthogonal_procrustes
from .sinkhorn import sinkhorn_assignments

MAX_ROWS = 1000
GW_EPSILON = 5e-3
ROUND_REG = 0.01


@dataclass
class UnpairedFit:
    """What :func:`fit_unpaired` learnt: the map, the served mean and the rows it matched."""

    W: torch.Tensor
    mean: torch.Tensor
    rounds: int
    rows: tuple[int, int]


def fit_unpaired(
    x_new: torch.Tensor,
    x_old: torch.Tensor,
    *,
    n_rounds: int,
    sinkhorn_reg: float = ROUND_REG,
    max_rows: int = MAX_ROWS,
    seed: int,
) -> UnpairedFit:
    """The unpaired fit on L2-normalised samples (n, d_new) and (m, d_old) (module docstring)."""
    import ot  # POT: only the unpaired fit needs it

    rng = np.random.default_rng(seed)
    mean_new, mean_old = x_new.mean(dim=0), x_old.mean(dim=0)
    a = F.normalize(x_new - mean_new, dim=1)
    b = F.normalize(x_old - mean_old, dim=1)
    a = a[torch.as_tensor(np.sort(rng.permutation(len(a))[:max_rows]), device=a.device)]
    b = b[torch.as_tensor(np.sort(rng.permutation(len(b))[:max_rows]), device=b.device)]
    cost_new = (1.0 - a @ a.T).double().cpu().numpy()
    cost_old = (1.0 - b @ b.T).double().cpu().numpy()
    plan = ot.gromov.entropic_gromov_wasserstein(
        cost_new, cost_old, ot.unif(len(a)), ot.unif(len(b)), loss_fun="square_loss", epsilon=GW_EPSILON,
        max_iter=200,
    )
    plan = torch.as_tensor(plan, dtype=a.dtype, device=a.device)
    targets = (plan / plan.sum(dim=1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)) @ b
    w = semi_orthogonal_procrustes(a, targets)
    for _ in range(n_rounds):
        assignments = sinkhorn_assignments(F.normalize(a @ w, dim=1), b, reg=sinkhorn_reg)
        w = semi_orthogonal_procrustes(a, assignments @ b)
    return UnpairedFit(W=w, mean=mean_new, rounds=int(n_rounds), rows=(len(a), len(b)))
