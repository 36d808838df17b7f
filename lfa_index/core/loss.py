"""The Adaptive Re-ranking (ARerank) loss, paper eq. 7.

    L(x_i W, Y) = 1/k Σ_{y_j ∈ N_k(x_i W)} max(d_ii − d_ij + m_ij, 0),
    d_ij = ||x_i W − y_j||₂ (plain, not squared),  m_ij = (1 − y_ciᵀ y_j) / s,

with the aligned row and the prototypes L2-normalised inside the loss, N_k the k nearest
prototypes (the true class is not excluded: its term is max(0 + 0, 0) = 0 but it counts in the
mean) and the mean taken over N·k terms.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def nearest_prototypes(aligned: torch.Tensor, prototypes: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (n, k) of the k prototypes nearest to each L2-normalised aligned row.

    For unit vectors the Euclidean order is the cosine order, so this is a top-k over one matrix
    product (no sort, no cdist).
    """
    with torch.no_grad():
        return (aligned @ prototypes.T).topk(min(k, prototypes.shape[0]), dim=1).indices


def arerank_loss(
    mapped: torch.Tensor,
    prototypes: torch.Tensor,
    labels: torch.Tensor,
    *,
    k: int = 3,
    scale: float = 4.0,
    prototype_gram: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean ARerank loss of the mapped rows ``x_i W`` against the class prototypes.

    Parameters
    ----------
    mapped : (n, d) tensor, image rows already multiplied by W (not necessarily unit norm).
    prototypes : (C, d) tensor of class prototypes.
    labels : (n,) int64 tensor, the class of each row.
    k : number of nearest prototypes in the re-ranking term (paper: 3).
    scale : s in the adaptive margin ``(1 − y_ciᵀ y_j)/s`` (paper: 4).
    prototype_gram : optional precomputed ``normalize(Y) normalize(Y)ᵀ`` (C, C).

    Only the true-class and the k selected distances carry gradients, so the backward pass costs
    O(n·k·d) instead of O(n·C·d).
    """
    z = F.normalize(mapped, dim=1)
    p = F.normalize(prototypes, dim=1)
    if prototype_gram is None:
        prototype_gram = p @ p.T
    n, d = z.shape
    c = p.shape[0]
    k = min(k, c)
    idx = nearest_prototypes(z.detach(), p, k)  # (n, k)
    # Unit vectors: ||z − y|| = sqrt(2 − 2 zᵀy). One gather of the true and the k nearest
    # prototypes and one batched product give every cosine the loss needs, without
    # materialising (n, k, d) differences; index_select on flat indices is several times faster
    # than advanced indexing on CPU.
    wanted = torch.cat([labels.unsqueeze(1), idx], dim=1)  # (n, 1 + k)
    gathered = p.index_select(0, wanted.reshape(-1)).view(n, k + 1, d)
    cosines = torch.bmm(gathered, z.unsqueeze(2)).squeeze(2)  # (n, 1 + k)
    distances = torch.sqrt(torch.clamp(2.0 - 2.0 * cosines, min=1e-12))
    d_pos, d_neg = distances[:, :1], distances[:, 1:]
    margins = prototype_gram.reshape(-1).index_select(0, (labels.unsqueeze(1) * c + idx).reshape(-1))
    margins = (1.0 - margins.view(n, k).to(d_neg.dtype)) / scale
    return torch.clamp(d_pos - d_neg + margins, min=0).mean()
