"""Choosing the number of refinement steps from the support set alone.

The paper hand-sets 30 to 2000 steps per dataset. Here a stratified part of the support is held
out, the map is refined on the rest for each step count of a doubling grid (each run with its own
cosine schedule, exactly as a final fit would run), and the count with the best held-out top-1
accuracy wins (ties: lower held-out ARerank loss, then fewer steps). The grid stops early once two
counts in a row fail to beat the best, so the cost stays within about four times the chosen count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .loss import arerank_loss
from .procrustes import beta_procrustes, orthogonal_procrustes, support_splits
from .refine import refine

STEP_GRID: tuple[int, ...] = (25, 50, 100, 200, 400, 800, 1600)
# With one row per class nothing can be held out (a held-out row's class would be unseen), so
# the count falls back to the middle of the paper's "50-200 iterations" (section 5).
ONE_SHOT_STEPS = 100


@dataclass
class StepTrial:
    """One step count tried on the held-out split."""

    steps: int
    accuracy: float
    loss: float


def select_steps(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    beta: float,
    refine_options: dict[str, Any],
    generator: torch.Generator,
    coin: torch.Generator,
    grid: Sequence[int] = STEP_GRID,
    val_size: float = 0.25,
    patience: int = 2,
    random_state: int | None = None,
) -> tuple[int, list[StepTrial]]:
    """Return the chosen step count and the trials that led to it (empty at 1 shot).

    ``x`` is (n, d) or (n, V, d), L2-normalised; view 0 is used for Procrustes and evaluation.
    """
    splits = support_splits(labels.cpu().numpy(), n_splits=1, val_size=val_size, random_state=random_state)
    if splits is None:
        return ONE_SHOT_STEPS, []
    (train_idx, val_idx), = splits
    tr = torch.as_tensor(train_idx, device=x.device)
    va = torch.as_tensor(val_idx, device=x.device)
    x_tr, y_tr = x[tr], labels[tr]
    x_val = (x[va, 0] if x.ndim == 3 else x[va])
    y_val = labels[va]
    first_view = x_tr[:, 0] if x_tr.ndim == 3 else x_tr
    w0 = beta_procrustes(orthogonal_procrustes(first_view, prototypes[y_tr]), beta)

    trials: list[StepTrial] = []
    stop = EarlyStop(patience)
    for steps in grid:
        result = refine(w0, x_tr, y_tr, prototypes, steps=steps, generator=generator, coin=coin, **refine_options)
        with torch.no_grad():
            mapped = x_val @ result.W
            acc = float((F.normalize(mapped, dim=1) @ prototypes.T).argmax(1).eq(y_val).float().mean())
            loss = float(arerank_loss(mapped, prototypes, y_val, k=refine_options.get("k", 3),
                                      scale=refine_options.get("scale", 4.0)))
        trials.append(StepTrial(steps, acc, loss))
        if stop.should_stop((acc, -loss)):
            break
    chosen = max(trials, key=lambda t: (t.accuracy, -t.loss, -t.steps))
    return chosen.steps, trials


class EarlyStop:
    """Ends a search after ``patience`` trials in a row that do not beat the best key so far."""

    def __init__(self, patience: int):
        self.patience = patience
        self.best: tuple[float, ...] | None = None
        self.misses = 0

    def should_stop(self, key: tuple[float, ...]) -> bool:
        """Record a trial's key (higher is better); True when the search should end."""
        if self.best is None or key > self.best:
            self.best, self.misses = key, 0
            return False
        self.misses += 1
        return self.misses >= self.patience


def trials_table(trials: Sequence[StepTrial]) -> np.ndarray:
    """Trials as a structured array (steps, accuracy, loss), handy for printing."""
    return np.array([(t.steps, t.accuracy, t.loss) for t in trials],
                    dtype=[("steps", "i4"), ("accuracy", "f8"), ("loss", "f8")])
