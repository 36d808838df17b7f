"""Unsupervised LFA (U-LFA, paper section 4.4): Sinkhorn pseudo-labels alternated with refinement."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..config import RefineConfig
from .beta import BetaChoice, select_beta
from .metrics import hubness
from .procrustes import beta_procrustes, orthogonal_procrustes
from .refine import Progress, refine
from .selection import PAPER_CHECKPOINTS, select_paper_steps
from .sinkhorn import sinkhorn_assignments
from .supervised import first_view


@dataclass
class UnsupervisedFit:
    """What :func:`fit_unsupervised` learnt."""

    W: torch.Tensor
    W_ema: torch.Tensor
    beta: BetaChoice
    steps: int
    step_trials: list[tuple[int, float, float]] | None
    assignments: torch.Tensor  # (N, C) soft assignments under the final map
    loss_curve: list[float] = field(default_factory=list)
    hubness_init: float = 0.0
    hubness: float = 0.0


def fit_unsupervised(
    x: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    beta: float | None,
    steps: int | None,
    n_rounds: int,
    sinkhorn_reg: float,
    cv_splits: int,
    cv_val_size: float,
    config: RefineConfig,
    seed: int,
    generator: torch.Generator,
    coin: torch.Generator,
    progress: Progress | None = None,
    warm: tuple[torch.Tensor, float] | None = None,
) -> UnsupervisedFit:
    """U-LFA on L2-normalised rows: β-Procrustes on Sinkhorn pseudo-labels, then ``n_rounds`` of
    (re-assign by Sinkhorn, refine). ``steps=None`` picks the count on the first round's labels;
    ``warm`` = (W, β) continues from a previous map."""
    x0 = first_view(x)
    pseudo = sinkhorn_assignments(x0, prototypes, reg=sinkhorn_reg).argmax(dim=1)
    if warm is not None:
        w, choice = warm[0], BetaChoice(warm[1], "warm-start")
    else:
        if beta is not None:
            choice = BetaChoice(float(beta), "fixed")
        else:
            choice = select_beta(x0, pseudo, prototypes, identity_informative=False, guard=False,
                                 n_splits=cv_splits, val_size=cv_val_size, random_state=seed)
        w = beta_procrustes(orthogonal_procrustes(x0, prototypes[pseudo]), choice.beta)
    hubness_init = hubness(F.normalize(x0 @ w, dim=1), prototypes, pseudo)
    trials = None
    result = None
    if progress is not None and steps is not None:
        progress.total = n_rounds * steps
        progress.refresh()
    for _ in range(n_rounds):
        pseudo = sinkhorn_assignments(F.normalize(x0 @ w, dim=1), prototypes, reg=sinkhorn_reg).argmax(dim=1)
        if steps is None:
            if progress is not None:
                progress.total = max(PAPER_CHECKPOINTS) + n_rounds * max(PAPER_CHECKPOINTS)
                progress.refresh()
            steps, trials = select_paper_steps(x, pseudo, prototypes, beta=choice.beta, config=config,
                                               random_state=seed, progress=progress)
            if progress is not None:
                progress.total = progress.n + n_rounds * steps
                progress.refresh()
        result = refine(w, x, pseudo, prototypes, steps=steps, generator=generator, coin=coin, config=config,
                        progress=progress)
        w = result.W
    assignments = sinkhorn_assignments(F.normalize(x0 @ w, dim=1), prototypes, reg=sinkhorn_reg)
    return UnsupervisedFit(
        W=result.W, W_ema=result.W_tt, beta=choice, steps=int(steps), step_trials=trials, assignments=assignments,
        loss_curve=result.loss_curve, hubness_init=hubness_init,
        hubness=hubness(F.normalize(x0 @ w, dim=1), prototypes, assignments.argmax(dim=1)),
    )
