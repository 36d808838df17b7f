"""Alignment diagnostics: rank of the true prototype and hubness (paper section 4.3, Fig. 3)."""

from __future__ import annotations

import torch

from ..config import row_blocks


def true_prototype_rank(aligned: torch.Tensor, prototypes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Rank (0 = nearest) of each row's own class prototype among all prototypes."""
    ranks = []
    for rows in row_blocks(len(aligned), prototypes.shape[0]):
        sims = aligned[rows] @ prototypes.T
        own = sims.gather(1, labels[rows].view(-1, 1))
        ranks.append((sims > own).sum(dim=1))
    return torch.cat(ranks) if ranks else torch.zeros(0, dtype=torch.long, device=aligned.device)


def hubness(aligned: torch.Tensor, prototypes: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of rows whose own prototype is not ranked first (0 = perfectly aligned)."""
    return float((true_prototype_rank(aligned, prototypes, labels) > 0).float().mean())
