"""Mapping refinement with the ARerank loss (paper section 4.3, eq. 9 for the second mapping).

One step: draw a batch (a random 75 % of the support rows, or one random view per image when
rows carry several views), perturb it (Gaussian noise with probability ½, dropout with
probability ½, independently), minimise the ARerank loss of ``batch @ W`` with AdamW under a cosine
schedule, then move the base-to-new map W_tt towards W by an exponential moving average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm.auto import tqdm

from .loss import arerank_loss


@dataclass
class RefineResult:
    """What a refinement run returns: the task map W, the base-to-new map W_tt and the loss per step."""

    W: torch.Tensor
    W_tt: torch.Tensor
    loss_curve: list[float] = field(default_factory=list)


def ema_momentum(step: int, steps: int, start: float = 0.9) -> float:
    """Momentum α(t) of W_tt: ``start`` at t=0, rising to 1.0 on a log schedule by t = steps/2.

    The ramp is the public code's ``1 − exp(−5 t / L)`` rescaled to reach exactly 1 at L = steps/2
    (the paper's "increased to 1.0 during the first half"); W_tt is frozen after that.
    """
    half = steps // 2
    if half == 0:
        return 1.0
    frac = min(step, half) / half
    ramp = (1.0 - math.exp(-5.0 * frac)) / (1.0 - math.exp(-5.0))
    return start + (1.0 - start) * ramp


def refine(
    w_init: torch.Tensor,
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    steps: int,
    lr: float = 5e-4,
    weight_decay: float = 5e-4,
    final_lr: float = 1e-7,
    k: int = 3,
    scale: float = 4.0,
    noise_std: float = 0.035,
    dropout: float = 0.025,
    batch_fraction: float = 0.75,
    w_tt_init: torch.Tensor | None = None,
    momentum_start: float = 0.9,
    generator: torch.Generator,
    coin: torch.Generator,
    precision: str = "float32",
    progress: bool = False,
    callback: Callable[[int, torch.Tensor], None] | None = None,
) -> RefineResult:
    """Refine ``w_init`` for ``steps`` AdamW steps on the ARerank loss.

    Parameters
    ----------
    w_init : (d, d) initial map (β-Procrustes).
    x : (n, d) or (n, V, d) L2-normalised support rows (V views per image).
    labels : (n,) int64 classes; prototypes : (C, d) L2-normalised class prototypes.
    generator : torch generator on x's device (batches, noise, dropout masks).
    coin : CPU generator for the ½-probability coin flips (keeps the GPU free of host syncs).
    precision : "float32" (default) or "bf16-mixed": matrix products in bfloat16 under
        ``torch.autocast`` with float32 weights, optimiser state and norms (several times faster
        on CPUs with native bf16; results move within noise, see benchmarks/speed.py).
    callback : called as ``callback(step, W)`` after each step (1-based), e.g. to follow a
        held-out accuracy.
    """
    device = x.device
    w = torch.nn.Parameter(w_init.detach().clone())
    w_tt = (
        torch.eye(w.shape[0], device=device, dtype=w.dtype) if w_tt_init is None else w_tt_init.detach().clone()
    )
    opt = torch.optim.AdamW([w], lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=final_lr)
    gram = prototypes @ prototypes.T
    n = x.shape[0]
    multi_view = x.ndim == 3
    flat_views = x.reshape(-1, x.shape[-1]) if multi_view else None
    first_rows = torch.arange(n, device=device) * (x.shape[1] if multi_view else 1)
    batch_size = n if multi_view else max(1, int(n * batch_fraction))
    losses = torch.empty(steps, device=device)
    keep = 1.0 - dropout
    mixed = precision == "bf16-mixed"
    bar = tqdm(range(steps), desc="LFA refinement", disable=not progress, leave=False)
    for step in bar:
        if multi_view:
            view = torch.randint(x.shape[1], (n,), device=device, generator=generator)
            batch = flat_views.index_select(0, first_rows + view)
            batch_labels = labels
        else:
            rows = torch.randperm(n, device=device, generator=generator)[:batch_size]
            batch = x.index_select(0, rows)
            batch_labels = labels.index_select(0, rows)
        add_noise, drop = (torch.rand(2, generator=coin) < 0.5).tolist()
        # `batch` is a fresh copy (index_select), so it can be perturbed in place.
        if noise_std > 0 and add_noise:
            batch.add_(torch.randn(batch.shape, device=device, generator=generator), alpha=noise_std)
        if dropout > 0 and drop:
            # Inverted dropout drawn from our generator (F.dropout cannot take one), so a seed
            # reproduces the run exactly.
            dropped = torch.rand(batch.shape, device=device, generator=generator) >= keep
            batch.masked_fill_(dropped, 0.0).mul_(1.0 / keep)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
            loss = arerank_loss(batch @ w, prototypes, batch_labels, k=k, scale=scale, prototype_gram=gram)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            alpha = ema_momentum(step, steps, momentum_start)
            w_tt.mul_(alpha).add_(w.detach(), alpha=1.0 - alpha)
            losses[step] = loss.detach()
        if callback is not None:
            callback(step + 1, w.detach())
        if progress and (step % 20 == 0 or step == steps - 1):
            bar.set_postfix(loss=f"{float(loss):.4f}")
    return RefineResult(W=w.detach(), W_tt=w_tt, loss_curve=losses.cpu().tolist())
