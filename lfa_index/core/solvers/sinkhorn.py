"""Soft image-to-class assignments by entropic optimal transport (U-LFA, paper section 4.4).

The transport problem has uniform marginals over the images and over the classes (each class
receives an equal share of the images) and the cost ``½||x − y||² = 1 − xᵀy`` between unit
vectors. It is solved in the log domain by POT, on whatever device the tensors live.
"""

from __future__ import annotations

import warnings

import torch


def sinkhorn_assignments(
    x: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    reg: float = 0.0025,
    max_iter: int = 2000,
    tol: float = 1e-7,
) -> torch.Tensor:
    """Soft assignments (n, C) of L2-normalised rows to L2-normalised prototypes; rows sum to 1.

    ``reg`` is the entropic regularisation ε on the ``½||x − y||²`` cost; the paper's public code
    uses geomloss with ``blur=0.05, p=2``, i.e. ε = blur² = 0.0025, the default here.
    """
    import ot  # POT is only needed by unsupervised LFA; imported here to keep `import lfa_index` light

    n, c = x.shape[0], prototypes.shape[0]
    cost = 1.0 - x @ prototypes.T
    a = torch.full((n,), 1.0 / n, dtype=x.dtype, device=x.device)
    b = torch.full((c,), 1.0 / c, dtype=x.dtype, device=x.device)
    with warnings.catch_warnings():
        # POT warns when the tolerance is not met; the plan is still the best iterate and the
        # assignments only feed an argmax and a Procrustes target.
        warnings.simplefilter("ignore", UserWarning)
        plan = ot.sinkhorn(a, b, cost, reg, method="sinkhorn_log", numItermax=max_iter, stopThr=tol)
    plan = torch.as_tensor(plan, dtype=x.dtype, device=x.device)
    return plan / plan.sum(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
