"""Unsupervised LFA (U-LFA, paper section 4.4): Sinkhorn pseudo-labels alternated with refinement."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..config import RefineConfig
from ..state import FittedState
from .beta import BetaChoice, select_beta
from .metrics import hubness
from .procrustes import beta_procrustes, orthogonal_procrustes
from .refine import Progress, refine
from .selection import PAPER_CHECKPOINTS, select_paper_steps
from .sinkhorn import sinkhorn_assignments
from .supervised import first_view, to_numpy


def solve_unsupervised(
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
    mapping: str = "task",
    progress: Progress | None = None,
    previous: FittedState | None = None,
) -> FittedState:
    """U-LFA on L2-normalised rows: β-Procrustes on Sinkhorn pseudo-labels, then ``n_rounds`` of
    (re-assign by Sinkhorn, refine). ``steps=None`` picks the count on the first round's labels;
    ``previous`` continues from a previous fit's task map and β. ``mapping`` ("task" or
    "average") is the map served to the fitted classes."""
    x0 = first_view(x)
    pseudo = sinkhorn_assignments(x0, prototypes, reg=sinkhorn_reg).argmax(dim=1)
    if previous is not None:
        w = torch.as_tensor(previous.task_map(), device=x.device)
        choice = BetaChoice(float(previous.beta_), "warm-start")
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
    hubness_final = hubness(F.normalize(x0 @ w, dim=1), prototypes, assignments.argmax(dim=1))
    task, ema = to_numpy(result.W), to_numpy(result.W_tt)
    average = (task + ema) / 2
    return FittedState(
        W_=average if mapping == "average" else task, W_tt_=ema, W_ema_=ema, W_avg_=average,
        prototypes_=to_numpy(prototypes), intercept_=np.zeros(prototypes.shape[0], dtype=np.float32),
        feature_mean_=np.zeros(task.shape[0], dtype=np.float32), refined_prototypes_=None,
        center_=False, refine_prototypes_=False, prototype_mix_=0.0, support_kind_=None, mapping_=mapping,
        beta_=choice.beta, beta_selection_=choice.how, beta_scores_=choice.scores, new_class_beta_=None,
        steps_=int(steps), step_trials_=trials, selection_=None, heldout_scores_=None, discriminant_weight_=None,
        loss_curve_=result.loss_curve, hubness_init_=hubness_init, hubness_=hubness_final,
        assignments_=to_numpy(assignments),
    )
