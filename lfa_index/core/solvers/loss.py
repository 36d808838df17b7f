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

from ..config import row_blocks


class _PickedCosines(torch.autograd.Function):
    """``cos(mapped_i, p_j)`` for the few prototypes ``j = wanted[i]`` of each row, from their dot products.

    The dots come from the one (n, C) product the nearest-prototype search needs anyway, so the
    forward pass gathers no prototype rows. The backward pass
    ``∂cos_ij/∂m_i = (p_j − cos_ij z_i) / ||m_i||`` sums the wanted prototypes with
    ``embedding_bag`` (read from cache, never an (n, k, d) tensor).
    """

    @staticmethod
    def forward(ctx, mapped, prototypes, wanted, dots):  # noqa: D102
        norms = torch.linalg.vector_norm(mapped, dim=1, keepdim=True).clamp(min=torch.finfo(mapped.dtype).tiny)
        cosines = dots / norms
        ctx.save_for_backward(mapped, prototypes, wanted, cosines, norms)
        return cosines

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        mapped, prototypes, wanted, cosines, norms = ctx.saved_tensors
        grad = grad.to(mapped.dtype)
        inverse = 1.0 / norms  # float32 where CUDA's autocast took the norms of bfloat16 rows in float32
        grad_mapped = grad_prototypes = None
        if ctx.needs_input_grad[0]:
            pulled = F.embedding_bag(wanted, prototypes.to(mapped.dtype), per_sample_weights=grad, mode="sum")
            along = (grad * cosines).sum(dim=1, keepdim=True) * inverse * inverse
            # in the rows' dtype, so the passes over (n, d) need no casts
            grad_mapped = pulled.mul_(inverse.to(mapped.dtype)).addcmul_(mapped, along.to(mapped.dtype), value=-1.0)
        if ctx.needs_input_grad[1]:
            z = mapped * inverse
            n_classes, width = prototypes.shape
            if n_classes <= wanted.shape[1] * width:  # the (n, C) weights are the smaller: one product
                weights = torch.zeros(len(z), n_classes, dtype=z.dtype, device=z.device).scatter_add_(
                    1, wanted, grad.to(z.dtype))  # z is float32 where the norms are
                grad_prototypes = (weights.T @ z).to(prototypes.dtype)
            else:  # many classes: never an (n, C) tensor
                grad_prototypes = torch.zeros_like(prototypes).index_add_(
                    0, wanted.reshape(-1), (grad.unsqueeze(2) * z.unsqueeze(1)).reshape(-1, width).to(prototypes.dtype)
                )
        return grad_mapped, grad_prototypes, None, None


ARGMAX_MIN_SCORES = 25_000
"""From about this many scores, k ≤ 4 arg-max passes beat ``topk`` on a CPU as well (torch 2.13, one
thread: 0.9 against 1.6 ms for 1,790 × 77; below it ``topk`` is up to 6× faster)."""
PARTIAL_SORT_CLASSES = 64
"""A CPU's ``topk`` takes a partial sort from ``k ×`` this many columns on (torch's own switch), and
is then up to 2× faster than arg-max passes (4 against 7.6 ms for 1,800 × 1,000, k = 3)."""


def nearest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Columns of the k largest scores of each row (n, k), best first.

    For the k ≤ 4 of the loss, the fastest of three ways (measured; see the constants; k > 4: ``topk``):

    * ``topk`` on a CPU below :data:`ARGMAX_MIN_SCORES` scores, and from :data:`PARTIAL_SORT_CLASSES`
      ``× k`` columns on (its partial sort);
    * otherwise k arg-max passes: on a GPU by ``argmax`` (faster than ``topk``'s radix select on an
      H200, ``benchmarks/gpu_fit.py``), on a CPU by ``max`` in float32 (its indices are ``argmax``'s,
      the first of equal maxima, 1.6× faster; a CPU's arg-max over bfloat16 is 2.5× slower).

    Ties may resolve to another column of equal score than ``topk``'s.
    """
    on_cpu = scores.device.type != "cuda"
    if k > 4 or (on_cpu and (scores.numel() < ARGMAX_MIN_SCORES or scores.shape[1] >= PARTIAL_SORT_CLASSES * k)):
        return scores.topk(k, dim=1).indices
    work = scores.float() if on_cpu and scores.dtype != torch.float32 else scores
    work = work.clone() if k > 1 and work is scores else work
    picked = []
    for i in range(k):
        best = work.max(dim=1, keepdim=True).indices if on_cpu else work.argmax(dim=1, keepdim=True)
        picked.append(best)
        if i + 1 < k:
            work.scatter_(1, best, float("-inf"))
    return torch.cat(picked, dim=1)


def arerank_loss(
    mapped: torch.Tensor,
    prototypes: torch.Tensor,
    labels: torch.Tensor,
    *,
    k: int = 3,
    scale: float = 4.0,
    margin_gradient: bool = True,
) -> torch.Tensor:
    """Mean ARerank loss of the mapped rows ``x_i W`` against the class prototypes.

    Parameters
    ----------
    mapped : (n, d) tensor, image rows already multiplied by W (not necessarily unit norm).
    prototypes : (C, d) tensor of class prototypes.
    labels : (n,) int64 tensor, the class of each row.
    k : number of nearest prototypes in the re-ranking term (paper: 3).
    scale : s in the adaptive margin ``(1 − y_ciᵀ y_j)/s`` (paper: 4).
    margin_gradient : let gradients reach the prototypes through the margins (False: the margins
        follow the prototypes as constants, as refinement with trained prototypes has them).

    One (n, C) product of the unnormalised rows finds the k nearest prototypes (row scaling does
    not change the order) and gives the dot products of the true and the k nearest; only those
    k + 1 cosines carry gradients, so the backward pass costs O(n·k·d) instead of O(n·C·d). The
    product is taken in blocks of rows (:func:`~lfa_index.core.config.row_blocks`), and the margins
    from the C × C Gram matrix or, where that is larger than the k gathered prototype pairs, from
    those, so memory stays O(n·k + block + min(C², n·k·d)) whatever C is.
    """
    p = F.normalize(prototypes, dim=1)
    c = p.shape[0]
    k = min(k, c)
    with torch.no_grad():
        idx = torch.empty(mapped.shape[0], k, dtype=torch.long, device=mapped.device)
        picked = torch.empty(mapped.shape[0], k + 1, dtype=torch.float32 if mapped.dtype == torch.bfloat16
                             else mapped.dtype, device=mapped.device)
        detached, unit = mapped.detach(), p.detach()
        for rows in row_blocks(mapped.shape[0], c):
            dots = detached[rows] @ unit.T  # (block, C)
            idx[rows] = nearest(dots, k)
            picked[rows] = dots.gather(1, torch.cat([labels[rows].unsqueeze(1), idx[rows]], dim=1)).to(picked.dtype)
        wanted = torch.cat([labels.unsqueeze(1), idx], dim=1)  # (n, 1 + k)
    # m_ij = (1 − y_ciᵀ y_j)/s: from the C × C Gram matrix where it is the smaller (constant margins),
    # else from the gathered pairs
    if not margin_gradient and c * c <= idx.numel() * p.shape[1]:
        with torch.no_grad():
            gram = p @ p.T
            margins = (1.0 - gram[labels.unsqueeze(1), idx]) / scale
    else:
        paired = p if margin_gradient else p.detach()
        margins = (1.0 - (paired[labels].unsqueeze(1) * paired[idx]).sum(dim=2)) / scale
    cosines = _PickedCosines.apply(mapped, p, wanted, picked.to(mapped.dtype))
    # Unit vectors: ||z − y|| = sqrt(2 − 2 zᵀy).
    distances = torch.sqrt(torch.clamp(2.0 - 2.0 * cosines, min=1e-12))
    d_pos, d_neg = distances[:, :1], distances[:, 1:]
    return torch.clamp(d_pos - d_neg + margins.to(d_neg.dtype), min=0).mean()
