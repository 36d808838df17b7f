"""Hybrid class prototypes in the aligned space: text prototypes mixed with the support rows.

An aligned query ``z`` (a row of ``(x − μ) W``, see :class:`~lfa_index.core.estimator.LFA`) scores
class ``c`` as ``z·q_c + b_c``. The paper's classifier is ``q_c = y_c`` (the aligned text
prototype) and ``b_c = 0``. A hybrid mixes in a prototype learnt from the support rows of class c,

    q_c = (1 − λ) y_c + λ s_c,        b_c = λ t_c,

where ``(s_c, t_c)`` is either the L2-normalised class mean (``kind="mean"``, ``t_c = 0``) or the
linear discriminant of the class in the aligned space (``kind="discriminant"``): class means
``m_c`` and the shared shrunk precision ``P = d((n − 1)S + tr(S) I)⁻¹`` of GDA (Wang et al.,
ICLR 2024) give ``s_c ∝ P m_c`` and ``t_c ∝ −½ m_cᵀ P m_c``, scaled together so that the ``s_c``
have unit mean norm and sit on the scale of the unit text prototypes. λ = 0 is plain LFA.
The classifier stays a nearest-vector search: ``[z, 1]·[q_c, b_c]``.

:func:`blend_with_discriminant` averages a chosen hybrid with the discriminant alone (λ = 1), each
classifier's scores standardised on the support rows: the default serves that average, a hedge
against a λ picked by the noise of a few hundred held-out rows (see
:mod:`~lfa_index.core.solvers.selection` for the discriminant's share).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..config import BLEND_SHARE, row_blocks

SupportKind = Literal["mean", "discriminant"]


def class_means(z: torch.Tensor, labels: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class means of the rows ``z`` (C, d) and the mask (C,) of classes that have rows.

    Classes without rows get a zero mean.
    """
    counts = torch.bincount(labels, minlength=n_classes).to(z.dtype)
    sums = torch.zeros(n_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, labels, z)
    seen = counts > 0
    return sums / counts.clamp(min=1).unsqueeze(1), seen


def shared_precision(z: torch.Tensor, labels: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """GDA's shrunk precision ``d((n − 1)S + tr(S) I)⁻¹`` of the class-centred rows (d, d).

    S is the covariance of ``z − means[labels]``. With no within-class spread (one row per
    class) it is the identity.
    """
    n, d = z.shape
    residuals = z - means[labels]
    n_classes = int(torch.unique(labels).numel())
    eye = torch.eye(d, dtype=z.dtype, device=z.device)
    if n - n_classes < 1:
        return eye
    cov = residuals.T @ residuals / (n - 1)
    return d * torch.linalg.pinv((n - 1) * cov + torch.trace(cov) * eye, hermitian=True)


def precision_times(z: torch.Tensor, labels: torch.Tensor, means: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``v @ P`` for GDA's shrunk precision P of :func:`shared_precision`, without forming P.

    With R the class-centred rows (n, d) and τ = tr(S), ``P = d (RᵀR + τI)⁻¹``. Fewer rows than
    dimensions: Woodbury's identity ``(RᵀR + τI)⁻¹ = (I − Rᵀ(RRᵀ + τI)⁻¹R)/τ`` solves an n × n system
    (O(n²d), not O(d³)); otherwise a Cholesky solve of the d × d system.
    """
    n, d = z.shape
    if n - int(torch.unique(labels).numel()) < 1:
        return v
    residuals = z - means[labels]
    tau = float((residuals * residuals).sum()) / (n - 1)  # tr(S)
    if tau <= 0:  # no spread at all: the pseudo-inverse copes
        return v @ shared_precision(z, labels, means)
    if n < d:
        gram = residuals @ residuals.T
        gram.diagonal().add_(tau)
        factor, info = torch.linalg.cholesky_ex(gram)
        if int(info) == 0:
            inner = torch.cholesky_solve(residuals @ v.T, factor)  # (RRᵀ + τI)⁻¹ R vᵀ
            return (d / tau) * (v - (residuals.T @ inner).T)
    else:
        shrunk = residuals.T @ residuals
        shrunk.diagonal().add_(tau)
        factor, info = torch.linalg.cholesky_ex(shrunk)
        if int(info) == 0:
            return d * torch.cholesky_solve(v.T, factor).T
    return v @ shared_precision(z, labels, means)


def support_prototypes(
    z: torch.Tensor, labels: torch.Tensor, n_classes: int, kind: SupportKind = "discriminant"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Support prototypes ``s`` (C, d), their biases ``t`` (C,) and the mask of classes with rows.

    ``z`` are aligned support rows (n, d) with ``labels`` (n,). Computed in float64. Classes
    without support rows get ``s_c = 0, t_c = 0`` (see :func:`hybrid_prototypes`).
    """
    z64 = z.double()
    means, seen = class_means(z64, labels, n_classes)
    if kind == "mean":
        return F.normalize(means, dim=1) * seen.unsqueeze(1), torch.zeros_like(means[:, 0]), seen
    directions = precision_times(z64, labels, means, means)
    bias = -0.5 * (directions * means).sum(dim=1)
    scale = directions[seen].norm(dim=1).mean().clamp(min=torch.finfo(z64.dtype).tiny)
    return directions * seen.unsqueeze(1) / scale, bias * seen / scale, seen


def hybrid_prototypes(
    text: torch.Tensor, support: torch.Tensor, support_bias: torch.Tensor, seen: torch.Tensor, weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q = (1 − λ) y + λ s`` (C, d) and ``b = λ t`` (C,) with λ = ``weight``, in ``text``'s dtype.

    Classes without support rows keep their text prototype and the mean bias of the others, so
    that the bias neither favours nor hides them.
    """
    q = torch.where(seen.unsqueeze(1), (1 - weight) * text.double() + weight * support, text.double())
    b = weight * support_bias
    if bool(seen.any()) and not bool(seen.all()):
        b = torch.where(seen, b, b[seen].mean())
    return q.to(text.dtype), b.to(text.dtype)


def score_spread(z: torch.Tensor, prototypes: torch.Tensor, intercept: torch.Tensor | None) -> torch.Tensor:
    """Standard deviation of the row-centred scores ``z qᵀ + b`` (a classifier's score scale).

    Summed over blocks of rows (:func:`~lfa_index.core.config.row_blocks`), so no (n, C) matrix is held.
    """
    total = torch.zeros((), dtype=torch.float64, device=z.device)
    squares = torch.zeros((), dtype=torch.float64, device=z.device)
    for rows in row_blocks(len(z), prototypes.shape[0]):
        scores = class_scores(z[rows].to(prototypes.dtype), prototypes, intercept).double()
        centred = scores - scores.mean(dim=1, keepdim=True)
        total += centred.sum()
        squares += (centred * centred).sum()
    count = len(z) * prototypes.shape[0]
    if count < 2:
        return torch.zeros((), dtype=prototypes.dtype, device=z.device)
    return ((squares - total * total / count) / (count - 1)).clamp(min=0).sqrt().to(prototypes.dtype)


def blend_weight(spread_chosen: float, spread_discriminant: float, share: float) -> float:
    """The discriminant's weight ``w`` in ``(1 − w)·chosen + w·discriminant`` that gives its
    standardised scores the share ``share`` (0 when either classifier ranks nothing)."""
    if not (spread_chosen > 0 and spread_discriminant > 0):
        return 0.0
    return share * spread_chosen / (share * spread_chosen + (1 - share) * spread_discriminant)


def blend_with_discriminant(
    z: torch.Tensor, chosen: tuple[torch.Tensor, torch.Tensor | None], discriminant: tuple[torch.Tensor, torch.Tensor],
    share: float = BLEND_SHARE,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The weighted average of two classifiers' standardised scores, as one ``(q, b)``.

    ``chosen`` and ``discriminant`` are ``(q, b)`` pairs (``b`` None: no bias) scoring the rows
    ``z`` (n, d) as ``z qᵀ + b``; each score is divided by its :func:`score_spread` on ``z``, and
    the discriminant's standardised scores get weight ``share`` (ω; ½ is the plain average).
    Rescaled to sum to one, that is ``w·discriminant + (1 − w)·chosen`` with
    ``w = ω σ_chosen / (ω σ_chosen + (1 − ω) σ_discriminant)``. Returns ``(q, b, w)``.
    """
    q, b = chosen
    s, t = discriminant
    w = blend_weight(float(score_spread(z, q, b)), float(score_spread(z, s, t)), share)
    if w == 0.0:
        return q, (torch.zeros_like(t) if b is None else b), 0.0
    bias = w * t if b is None else (1 - w) * b + w * t
    return (1 - w) * q + w * s, bias.to(q.dtype), w


def class_scores(z: torch.Tensor, prototypes: torch.Tensor, intercept: torch.Tensor | None) -> torch.Tensor:
    """Ranking scores ``z qᵀ + b`` (n, C) of aligned rows against hybrid prototypes."""
    scores = z @ prototypes.T
    return scores if intercept is None else scores + intercept


def unit(rows: torch.Tensor, unit_rows: bool) -> torch.Tensor:
    """``rows`` L2-normalised when ``unit_rows`` (:attr:`RefineConfig.unit_rows`), else as they are."""
    return F.normalize(rows, dim=1) if unit_rows else rows


def hybrid_key(kind: str, mix: float) -> tuple:
    """What tells two hybrids of the grid apart: at λ = 0 every kind is the base alone."""
    return ("base",) if mix <= 0 else (kind, float(mix))


@dataclass
class HybridGrid:
    """Every hybrid of the (kind, λ) grid on one set of aligned support rows, from two score matrices per kind.

    A hybrid's scores are linear in λ: ``(1 − λ)·z yᵀ + λ·(z sᵀ + t)`` with ``(s, t)`` the kind's
    classifier at λ = 1 (classes without rows keep their text prototype and the mean bias, as
    :func:`hybrid_prototypes` has them). So the base's scores and each kind's λ = 1 scores give every
    hybrid's, and the moments of their row-centred scores on the support rows give every hybrid's
    :func:`score_spread`, each in one pass. Held-out scoring
    (:func:`~lfa_index.core.solvers.selection.cross_fitted_evidence`) uses it at every checkpoint.
    """

    base: torch.Tensor  # (C, d) the text (or trained) prototypes: λ = 0
    ends: dict[str, tuple[torch.Tensor, torch.Tensor]]  # kind -> its classifier at λ = 1
    keys: dict[tuple, tuple[str, float]]  # hybrid key -> (kind, λ); λ = 0 is ("base",)
    alone: tuple  # the key of the discriminant alone, (discriminant, λ = 1)
    moments: dict[tuple[str, str], float]  # (a, b) -> Σ of the product of the row-centred scores
    totals: dict[str, float]  # a -> Σ of its row-centred scores (zero but for rounding)
    count: int

    @staticmethod
    def of(aligned: torch.Tensor, labels: torch.Tensor, base: torch.Tensor, kinds: Sequence[str],
           mixes: Sequence[float], *, blend: bool, unit_rows: bool) -> "HybridGrid":
        """The grid on the aligned support rows ``aligned`` (n, d) with ``labels`` (n,)."""
        keys = {hybrid_key(kind, mix): (kind, float(mix)) for kind in kinds for mix in mixes}
        alone = hybrid_key("discriminant", 1.0)
        needed = sorted({kind for kind, mix in keys.values() if mix > 0} | ({"discriminant"} if blend else set()))
        supports = {kind: support_prototypes(unit(aligned, unit_rows), labels, base.shape[0], kind) for kind in needed}
        ends = {kind: hybrid_prototypes(base, *supports[kind], 1.0) for kind in needed}
        grid = HybridGrid(base, ends, keys, alone, {}, {}, len(aligned) * base.shape[0])
        if blend:  # spreads, on the rows as they are (what blend_with_discriminant standardises by)
            names = ["base", *needed]
            moments = {(a, b): 0.0 for i, a in enumerate(names) for b in names[i:]}
            totals = {a: 0.0 for a in names}
            for rows in row_blocks(len(aligned), base.shape[0]):
                centred = {}
                for name, scores in grid.scores(aligned[rows].to(base.dtype), by_kind=True).items():
                    scores = scores.double()
                    centred[name] = scores - scores.mean(dim=1, keepdim=True)
                    totals[name] += float(centred[name].sum())
                for a, b in moments:
                    moments[(a, b)] += float((centred[a] * centred[b]).sum())
            grid.moments, grid.totals = moments, totals
        return grid

    def scores(self, z: torch.Tensor, *, by_kind: bool = False) -> dict:
        """Scores (rows, C) of ``z`` under every hybrid key (``by_kind``: under "base" and each kind at λ = 1)."""
        ends = {"base": class_scores(z, self.base, None)}
        ends.update({kind: class_scores(z, *end) for kind, end in self.ends.items()})
        if by_kind:
            return ends
        out = {}
        for key, (kind, mix) in self.keys.items():
            out[key] = ends["base"] if mix <= 0 else ends[kind] if mix == 1.0 else \
                torch.lerp(ends["base"], ends[kind], mix)
        if "discriminant" in ends:
            out[self.alone] = ends["discriminant"]
        return out

    def spread(self, key: tuple) -> float:
        """:func:`score_spread` of the hybrid ``key`` on the support rows, from the moments."""
        kind, mix = ("discriminant", 1.0) if key == self.alone else self.keys[key]
        weights = {"base": 1.0} if mix <= 0 else {kind: 1.0} if mix == 1.0 else {"base": 1.0 - mix, kind: mix}
        squares = sum(weights[a] * weights[b] * self.moments[(a, b) if (a, b) in self.moments else (b, a)]
                      for a in weights for b in weights)
        total = sum(weights[a] * self.totals[a] for a in weights)
        if self.count < 2:
            return 0.0
        return float(np.sqrt(max(squares - total * total / self.count, 0.0) / (self.count - 1)))
