"""Alignment diagnostics: rank of the true prototype and hubness (paper section 4.3, Fig. 3)."""

from __future__ import annotations

import torch


def true_prototype_rank(aligned: torch.Tensor, prototypes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Rank (0 = nearest) of each row's own class prototype among all prototypes."""
    sims = aligned @ prototypes.T
    own = sims.gather(1, labels.view(-1, 1))
    return (sims > own).sum(dim=1)


def hubness(aligned: torch.Tensor, prototypes: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of rows whose own prototype is not ranked first (0 = perfectly aligned)."""
    return float((true_prototype_rank(aligned, prototypes, labels) > 0).float().mean())
