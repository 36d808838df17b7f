"""Mapping refinement with the ARerank loss (paper section 4.3, eq. 9 for the second mapping).

One step: draw a batch (a random 75 % of the support rows, or one random view per image when
rows carry several views), perturb it (Gaussian noise with probability ½, dropout with
probability ½, independently), minimise the ARerank loss of ``batch @ W`` with AdamW under a cosine
schedule, then move the base-to-new map W_tt towards W by an exponential moving average.

With ``train_prototypes=True`` the class prototypes are trained jointly with W by the same loss
and optimiser, starting from the given (text) prototypes, as LP++ and CLAP train class weights
initialised from text embeddings; the adaptive margins follow the current prototypes.
"""

from __future__ import annotations

import functools
import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Collection, Protocol

import numpy as np
import torch

from ..config import RefineConfig
from ..device import uses_bf16
from .loss import arerank_loss


class Progress(Protocol):
    """What refinement needs of a progress bar (``tqdm`` has it)."""

    def update(self, n: int = 1) -> object: ...


@dataclass
class RefineResult:
    """What a refinement run returns: the task map W, the base-to-new map W_tt and the loss per step."""

    W: torch.Tensor
    W_tt: torch.Tensor
    loss_curve: list[float] = field(default_factory=list)
    prototypes: torch.Tensor | None = None  # L2-normalised trained prototypes (train_prototypes=True)


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
    generator: torch.Generator,
    coin: torch.Generator,
    config: RefineConfig = RefineConfig(),
    horizon: int | None = None,
    w_tt_init: torch.Tensor | None = None,
    cuda_graph: bool | None = None,
    train_prototypes: bool = False,
    progress: Progress | None = None,
    callback: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor | None], None] | None = None,
    callback_steps: Collection[int] | None = None,
) -> RefineResult:
    """Refine ``w_init`` for ``steps`` AdamW steps on the ARerank loss.

    Parameters
    ----------
    w_init : (d, d) initial map (β-Procrustes).
    x : (n, d) or (n, V, d) L2-normalised support rows (V views per image).
    labels : (n,) int64 classes; prototypes : (C, d) L2-normalised class prototypes.
    steps : steps to run.
    generator : torch generator on x's device (batches, noise, dropout masks).
    coin : CPU generator for the ½-probability coin flips (keeps the GPU free of host syncs).
    config : the optimiser, loss and augmentation settings (:class:`RefineConfig`).
    horizon : length of the schedule (cosine learning rate, W_tt momentum ramp), default
        ``steps``. A run with ``steps < horizon`` is the first ``steps`` steps of a
        ``horizon``-step run, so held-out checkpoints of one long run describe shorter ones exactly.
    cuda_graph : replay the step as a CUDA graph (default: on CUDA devices). A step is ~80 small
        kernels, so on a GPU it is bound by launch overhead, which the graph removes. The coin
        flips are then drawn on the GPU and applied without branching, and the random streams
        come from a CUDA generator seeded from ``generator`` (same distribution, other numbers).
    train_prototypes : also train the prototypes, from ``prototypes``, with the same loss and
        optimiser; the result then carries them, L2-normalised.
    progress : a progress bar (``tqdm``-like: ``update(n)``) advanced by one per step.
    callback : called as ``callback(step, W, W_tt, prototypes)`` after each step (1-based);
        ``prototypes`` are the L2-normalised trained prototypes, or None.
    callback_steps : the steps at which ``callback`` is called (default: every step).
    """
    horizon = steps if horizon is None else max(int(horizon), int(steps))
    if callback is not None and callback_steps is not None:
        callback = _only_at(callback, frozenset(callback_steps))
    run = Refinement(w_init, x, labels, prototypes, steps=steps, horizon=horizon, config=config,
                      w_tt_init=w_tt_init, train_prototypes=train_prototypes)
    use_graph = x.device.type == "cuda" if cuda_graph is None else cuda_graph
    if use_graph and x.device.type == "cuda" and steps > _GRAPH_WARMUP:
        try:
            return run.on_cuda_graph(generator, progress=progress, callback=callback)
        except RuntimeError as err:  # an op this torch build cannot capture: run eagerly
            warnings.warn(f"CUDA graph capture failed ({err}); refining eagerly.", RuntimeWarning, stacklevel=2)
            run.reset()
    return run.eagerly(generator, coin, progress=progress, callback=callback)


def _only_at(callback: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor | None], None],
             steps: frozenset[int]) -> Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor | None], None]:
    """``callback``, called at ``steps`` only."""
    def at(step: int, w: torch.Tensor, w_tt: torch.Tensor, trained: torch.Tensor | None) -> None:
        if step in steps:
            callback(step, w, w_tt, trained)
    return at


def dropout_mask(shape: torch.Size, keep: float, generator: torch.Generator,
                 bits: np.random.Generator | None = None) -> torch.Tensor:
    """Bool mask of the entries to drop: each is dropped with probability ``1 − keep``.

    On the CPU the mask comes from 16 random bits per entry of a numpy PCG64 stream (``bits``),
    twice as fast as a float per entry from torch's generator; ``keep`` is then rounded to a
    multiple of 1/65536.
    """
    if bits is None:
        return torch.rand(shape, device=generator.device, generator=generator) >= keep
    threshold = round(keep * 65536)
    return torch.from_numpy(bits.integers(0, 65536, size=tuple(shape), dtype=np.uint16) >= threshold)


def cosine_learning_rates(config: RefineConfig, horizon: int, steps: int) -> list[float]:
    """Learning rate of each of the first ``steps`` steps of a ``horizon``-step cosine schedule.

    Read off torch's ``CosineAnnealingLR`` on a stand-in optimiser, so it is torch's schedule.
    """
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(probe, T_max=horizon, eta_min=config.final_lr)
    rates = []
    for _ in range(steps):
        rates.append(probe.param_groups[0]["lr"])
        probe.step()
        schedule.step()
    return rates


@functools.lru_cache(maxsize=None)
def fused_adamw_supported(device: torch.device) -> bool:
    """Whether this torch build has a fused AdamW kernel for ``device`` (CPU since torch 2.4)."""
    try:
        probe = torch.nn.Parameter(torch.zeros(1, device=device))
        probe.grad = torch.zeros_like(probe)
        torch.optim.AdamW([probe], fused=True).step()
        return True
    except (RuntimeError, TypeError):
        return False


_GRAPH_WARMUP = 3  # eager steps on a side stream before capture, as the CUDA-graph docs ask


class Refinement:
    """One refinement run: its state, its batch draw and its step, run eagerly or as a CUDA graph."""

    def __init__(self, w_init, x, labels, prototypes, *, steps: int, horizon: int, config: RefineConfig,
                 w_tt_init=None, train_prototypes: bool = False):
        self.w_init, self.w_tt_init = w_init, w_tt_init
        self.x, self.labels, self.prototypes = x, labels, prototypes
        self.steps, self.horizon, self.config = steps, horizon, config
        self.keep = 1.0 - config.dropout
        self.mixed = uses_bf16(config.precision, x.device)
        self.train_prototypes = train_prototypes
        device = x.device
        n = x.shape[0]
        self.multi_view = x.ndim == 3
        self.flat_views = x.reshape(-1, x.shape[-1]) if self.multi_view else None
        self.first_rows = torch.arange(n, device=device) * (x.shape[1] if self.multi_view else 1)
        self.batch_size = n if self.multi_view else max(1, int(n * config.batch_fraction))
        self.rates = cosine_learning_rates(config, horizon, steps)
        self.reset()

    def reset(self) -> None:
        device = self.x.device
        self.w = torch.nn.Parameter(self.w_init.detach().clone())
        eye = torch.eye(self.w.shape[0], device=device, dtype=self.w.dtype)
        self.w_tt = eye if self.w_tt_init is None else self.w_tt_init.detach().clone()
        self.trained = torch.nn.Parameter(self.prototypes.detach().clone()) if self.train_prototypes else None
        self.losses = torch.empty(self.steps, device=device)

    def _momentum(self, step: int) -> float:
        return ema_momentum(step, self.horizon, self.config.momentum_start)

    def _draw_batch(self, generator):
        n, device = self.x.shape[0], self.x.device
        if self.multi_view:
            view = torch.randint(self.x.shape[1], (n,), device=device, generator=generator)
            return self.flat_views.index_select(0, self.first_rows + view), self.labels
        if generator is None:  # inside a CUDA graph: randperm cannot be captured, argsort can
            rows = torch.rand(n, device=device).argsort()[: self.batch_size]
        else:
            rows = torch.randperm(n, device=device, generator=generator)[: self.batch_size]
        return self.x.index_select(0, rows), self.labels.index_select(0, rows)

    def _loss(self, batch, batch_labels):
        # trained prototypes: the adaptive margins follow them (arerank_loss takes them without a gradient)
        prototypes = self.prototypes if self.trained is None else torch.nn.functional.normalize(self.trained, dim=1)
        with torch.autocast(self.x.device.type, dtype=torch.bfloat16, enabled=self.mixed, cache_enabled=False):
            return arerank_loss(batch @ self.w, prototypes, batch_labels, k=self.config.k,
                                scale=self.config.margin_scale, margin_gradient=False)

    def _optimizer(self, params, lr) -> torch.optim.AdamW:
        settings = dict(lr=lr, weight_decay=self.config.weight_decay, betas=(0.9, 0.999), eps=1e-8)
        if not isinstance(lr, float):  # a device tensor: the CUDA-graph step
            return torch.optim.AdamW(params, capturable=True, **settings)
        # One fused kernel per step instead of a dozen passes over the d × d state (same update).
        return torch.optim.AdamW(params, fused=fused_adamw_supported(params[0].device), **settings)

    def _trained_unit(self) -> torch.Tensor | None:
        return None if self.trained is None else torch.nn.functional.normalize(self.trained.detach(), dim=1)

    def _result(self) -> RefineResult:
        return RefineResult(W=self.w.detach().clone(), W_tt=self.w_tt.clone(), loss_curve=self.losses.cpu().tolist(),
                            prototypes=self._trained_unit())

    # ------------------------------------------------------------------ eager
    def eagerly(self, generator, coin, *, progress, callback) -> RefineResult:
        params = [self.w] if self.trained is None else [self.w, self.trained]
        opt = self._optimizer(params, self.config.lr)
        device = self.x.device
        bits = None if device.type != "cpu" else np.random.default_rng(
            int(torch.randint(2**62, (1,), generator=generator)))
        for step in range(self.steps):
            for group in opt.param_groups:
                group["lr"] = self.rates[step]
            batch, batch_labels = self._draw_batch(generator)
            add_noise, drop = (torch.rand(2, generator=coin) < 0.5).tolist()
            # `batch` is a fresh copy (index_select), so it can be perturbed in place.
            if self.config.noise_std > 0 and add_noise:
                batch.add_(torch.randn(batch.shape, device=device, generator=generator), alpha=self.config.noise_std)
            if self.keep < 1.0 and drop:
                # Inverted dropout drawn from our own seeded stream (F.dropout cannot take one), so a
                # seed reproduces the run exactly.
                batch.masked_fill_(dropout_mask(batch.shape, self.keep, generator, bits), 0.0).mul_(1.0 / self.keep)
            loss = self._loss(batch, batch_labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                alpha = self._momentum(step)
                self.w_tt.lerp_(self.w.detach(), 1.0 - alpha)
                self.losses[step] = loss.detach()
            if callback is not None:
                callback(step + 1, self.w.detach(), self.w_tt, self._trained_unit())
            if progress is not None:
                progress.update(1)
        return self._result()

    # ------------------------------------------------------------------ CUDA graph
    def graph_step(self, opt, ema_weight) -> torch.Tensor:
        """A branch-free step (coin flips as tensors), so one captured graph serves every step."""
        batch, batch_labels = self._draw_batch(None)
        flips = torch.rand(2, device=batch.device) < 0.5
        batch = batch + torch.randn_like(batch) * (self.config.noise_std * flips[0])
        kept = (torch.rand_like(batch) < self.keep) | ~flips[1]
        batch = batch * kept * torch.where(flips[1], 1.0 / self.keep, 1.0)
        loss = self._loss(batch, batch_labels)
        loss.backward()
        opt.step()
        with torch.no_grad():
            self.w_tt.lerp_(self.w.detach(), ema_weight)
        return loss.detach()

    def on_cuda_graph(self, generator, *, progress, callback) -> RefineResult:
        device = self.x.device
        # The learning rate of each step is written into a device tensor before each replay (no
        # host sync inside the loop).
        lr_t = torch.tensor(self.config.lr, device=device)
        ema_weight = torch.zeros((), device=device)
        opt = self._optimizer([self.w] if self.trained is None else [self.w, self.trained], lr_t)
        seed = int(torch.randint(2**62, (1,), device=device, generator=generator))
        graph = None
        index = device.index if device.index is not None else torch.cuda.current_device()
        with torch.random.fork_rng(devices=[index]):  # graphs may only use the default CUDA RNG
            torch.cuda.manual_seed(seed)
            side = torch.cuda.Stream(device)
            current = torch.cuda.current_stream(device)
            for step in range(self.steps):
                warm = step < _GRAPH_WARMUP
                if warm:
                    side.wait_stream(current)
                with torch.cuda.stream(side) if warm else nullcontext():
                    lr_t.fill_(self.rates[step])
                    ema_weight.fill_(1.0 - self._momentum(step))
                    if warm:
                        opt.zero_grad(set_to_none=True)
                        loss = self.graph_step(opt, ema_weight)
                if warm:
                    current.wait_stream(side)
                else:
                    if graph is None:
                        graph = torch.cuda.CUDAGraph()
                        opt.zero_grad(set_to_none=True)
                        with torch.cuda.graph(graph):
                            loss = self.graph_step(opt, ema_weight)
                    graph.replay()
                self.losses[step].copy_(loss)
                if callback is not None:
                    callback(step + 1, self.w.detach(), self.w_tt, self._trained_unit())
                if progress is not None:
                    progress.update(1)
        return self._result()

