"""Supervised LFA (paper section 4.4, Algorithm 1) and the options beyond it: one fit path.

:func:`fit_supervised` runs β-Procrustes then ARerank refinement. What the caller leaves at
"auto" is chosen on the support set alone (:mod:`~lfa_index.core.solvers.beta` for β,
:mod:`~lfa_index.core.solvers.selection` for the step count and the options). With every option off and
``keep_zero_shot=False`` it is the paper's algorithm: the text prototypes as the classifier, β by
random-split CV, one full cosine run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ...errors import InvalidInputError
from ..config import RefineConfig
from .beta import BetaChoice, NewClassMap, select_beta, select_new_class_map
from .metrics import hubness
from .procrustes import beta_procrustes, orthogonal_procrustes
from .refine import Progress, fused_adamw_supported, refine
from .selection import (
    CLOSED_FORM_FOLDS,
    CLOSED_FORM_REPEATS,
    ONE_SHOT_MIX,
    ONE_SHOT_STEPS,
    PAPER_CHECKPOINTS,
    Candidate,
    Evidence,
    Rows,
    Selection,
    Variant,
    checkpoints_for,
    choose,
    cross_fitted_evidence,
    horizon_for,
    map_for,
    select_paper_steps,
    served_classifier,
    support_folds,
)

CENTRING_MIN_NORM = 1e-3
"""Unit rows closer than this to their mean lose their direction when centred."""


@dataclass(frozen=True)
class Asked:
    """What the estimator's parameters ask for; a tuple of more than one value means "choose"."""

    beta: float | None  # None: cross-validated
    steps: int | None  # None: chosen on held-out rows
    mixes: tuple[float, ...]
    mappings: tuple[str, ...]
    centers: tuple[bool, ...]
    refines: tuple[bool, ...]
    kinds: tuple[str, ...]  # support prototypes to try: "discriminant" and/or "mean"
    keep_zero_shot: bool
    new_class_map: str  # "auto" (class-disjoint β) or "ema" (the paper's W_tt)
    cv_splits: int
    cv_val_size: float
    blend: bool = False  # serve a held-out choice averaged with the discriminant (selection.served_classifier)

    @property
    def paper_classifier(self) -> bool:
        """Only the paper's classifier can come out (text prototypes, task map, no variant)."""
        return self.mixes == (0.0,) and self.mappings == ("task",) and self.centers == (False,) \
            and self.refines == (False,)


@dataclass(frozen=True)
class Warm:
    """The previous fit a warm start continues from."""

    W: torch.Tensor  # task map
    W_ema: torch.Tensor
    mean: torch.Tensor  # feature mean (zero without centring)
    beta: float
    steps: int
    candidate: Candidate
    blend_share: float | None = None  # the discriminant's share in the previous fit's served average (None: none)


@dataclass
class SupervisedFit:
    """Everything :func:`fit_supervised` learnt (tensors on the fit's device)."""

    W: torch.Tensor  # map serving the fitted classes (task map or average)
    W_task: torch.Tensor
    W_ema: torch.Tensor  # the paper's W_tt: moving average of W over the first half of the schedule
    W_new: torch.Tensor  # map for classes added from text alone
    prototypes: torch.Tensor
    intercept: torch.Tensor
    refined_prototypes: torch.Tensor | None
    feature_mean: torch.Tensor
    beta: BetaChoice
    new_class_beta: NewClassMap | None
    candidate: Candidate
    selection: Selection | None
    step_trials: list[tuple[int, float, float]] | None
    discriminant_weight: float | None = None  # weight of the discriminant in the served average (None: no average)
    loss_curve: list[float] = field(default_factory=list)
    hubness_init: float = 0.0
    hubness: float = 0.0


def first_view(x: torch.Tensor) -> torch.Tensor:
    """View 0 of multi-view rows (N, V, d), or the rows themselves."""
    return x[:, 0] if x.ndim == 3 else x


def choose_beta(x0: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, asked: Asked,
                informative: bool, seed: int) -> BetaChoice:
    """β as asked: fixed, or by CV (with the zero-shot guard when ``asked.keep_zero_shot``)."""
    if asked.beta is not None:
        return BetaChoice(float(asked.beta), "fixed")
    return select_beta(x0, labels, prototypes, identity_informative=informative, guard=asked.keep_zero_shot,
                       n_splits=asked.cv_splits, val_size=asked.cv_val_size, random_state=seed)


def variant_rows(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, asked: Asked, informative: bool,
                 seed: int, mean: torch.Tensor, warm: Warm | None) -> dict[bool, tuple[Rows, BetaChoice]]:
    """The support rows (and their β) without and/or with centring, as far as ``asked.centers`` needs."""
    out = {}
    for centred in asked.centers:
        if centred and warm is None and float((x - mean).norm(dim=-1).min()) < CENTRING_MIN_NORM:
            if asked.centers == (True,):
                raise InvalidInputError(
                    "center=True needs support rows that differ in direction, but centring sends some of them to "
                    "(almost) zero: the support lies along one direction. Set center=False (or 'auto')."
                )
            continue  # "auto": a centring that erases rows is not a candidate
        fit_rows = F.normalize(x - mean, dim=-1) if centred else x
        served = first_view(x) - mean if centred else first_view(x)
        if warm is not None:
            beta = BetaChoice(warm.beta, "warm-start")
        else:
            beta = choose_beta(first_view(fit_rows), labels, prototypes, asked, informative and not centred, seed)
        out[centred] = (Rows(fit_rows, served, beta.beta), beta)
    return out


def fit_supervised(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    asked: Asked,
    config: RefineConfig,
    identity_informative: bool,
    seed: int,
    generator: torch.Generator,
    coin: torch.Generator,
    progress: Any = None,
    warm: Warm | None = None,
) -> SupervisedFit:
    """Fit the map and the classifier on L2-normalised rows ``x`` (n, d) or (n, V, d)."""
    device = x.device
    n_classes = prototypes.shape[0]
    x0 = first_view(x)
    mean = x0.mean(dim=0) if warm is None or not warm.candidate.variant.center else warm.mean
    rows = variant_rows(x, labels, prototypes, asked, identity_informative, seed, mean, warm)
    plain = Variant(asked.centers[0] if len(asked.centers) == 1 else False,
                    asked.refines[0] if len(asked.refines) == 1 else False)
    variants = {Variant(c, r): rows[c][0] for c in asked.centers if c in rows for r in asked.refines}
    y_np = labels.cpu().numpy()
    folds = support_folds(y_np, config.folds, seed)

    selection: Selection | None = None
    step_trials: list[tuple[int, float, float]] | None = None
    if warm is not None:
        candidate, horizon = warm.candidate, warm.steps
        selection = Selection(candidate, "warm-start", horizon, blend_share=warm.blend_share)
    elif asked.paper_classifier:
        candidate, horizon, step_trials = _paper_steps(rows[plain.center][0], labels, prototypes, asked, config,
                                                       seed, progress)
    elif folds is None:  # one row per class: nothing can be held out
        steps = asked.steps if asked.steps is not None else (0 if n_classes <= config.k + 1 else ONE_SHOT_STEPS)
        # a kept zero-shot map keeps its text prototypes too; otherwise the single row enters lightly
        kept = rows[plain.center][1].beta == 1.0 and identity_informative
        mix = (0.0 if kept else ONE_SHOT_MIX) if len(asked.mixes) > 1 else asked.mixes[0]
        candidate, horizon = Candidate(plain, int(steps), asked.mappings[0] if len(asked.mappings) == 1 else "task",
                                       float(mix), asked.kinds[0]), int(steps)
        selection = Selection(candidate, "one-shot", horizon)
    elif asked.steps is not None and len(variants) == len(asked.mixes) == len(asked.mappings) == len(asked.kinds) == 1:
        candidate = Candidate(plain, int(asked.steps), asked.mappings[0], float(asked.mixes[0]), asked.kinds[0])
        horizon = int(asked.steps)
        selection = Selection(candidate, "fixed", horizon)
    else:
        horizon = asked.steps if asked.steps is not None else horizon_for(len(y_np), n_classes, config.k)
        marks = (horizon,) if asked.steps is not None else checkpoints_for(horizon)
        if progress is not None:  # the clock starts with the steps it counts (β's cross-validation is done)
            fused_adamw_supported(x.device)  # torch's first optimiser step imports for seconds: not a step's cost
            progress.reset(total=len(variants) * len(folds) * horizon + horizon)
            progress.set_postfix_str(f"{len(variants) * len(folds)} held-out fold run(s), then the final fit")
        repeats = [folds] if horizon > 0 else \
            [support_folds(y_np, CLOSED_FORM_FOLDS, seed + r) for r in range(CLOSED_FORM_REPEATS)]
        evidence = Evidence.mean([cross_fitted_evidence(
            variants, labels, prototypes, folds=f, horizon=horizon, checkpoints=marks, mixes=asked.mixes,
            mappings=asked.mappings, kinds=asked.kinds, config=config, random_state=seed,
            progress=progress, blend=asked.blend,
        ) for f in repeats])
        selection = choose(evidence, plain, asked.mappings[0] if len(asked.mappings) == 1 else "task")
        selection.runs = len(variants) * len(folds) * len(repeats) if horizon > 0 else 0
        if horizon == 0:
            selection.how = "no-refinement"
        candidate = selection.chosen

    if progress is not None:
        if progress.total == 0:  # no held-out runs: the clock starts here
            fused_adamw_supported(x.device)
            progress.reset(total=candidate.steps)
        else:
            progress.total = progress.n + candidate.steps
        progress.set_postfix_str("final fit")
    source, beta = rows[candidate.variant.center]
    fit0 = first_view(source.fit)
    if warm is not None:
        w_init, w_tt_init = warm.W, warm.W_ema
    else:
        w_init, w_tt_init = beta_procrustes(orthogonal_procrustes(fit0, prototypes[labels]), beta.beta), None
    result = refine(w_init, source.fit, labels, prototypes, steps=candidate.steps, horizon=horizon,
                    generator=generator, coin=coin, config=config, w_tt_init=w_tt_init,
                    train_prototypes=candidate.variant.refine_prototypes, progress=progress)
    served_map = map_for(result.W, result.W_tt, candidate.mapping)
    base = result.prototypes if candidate.variant.refine_prototypes else prototypes
    share = None if selection is None else selection.blend_share  # set by choose() when asked.blend, or kept warm
    vectors, bias, weight = served_classifier(source.served @ served_map, labels, base, candidate.mix, candidate.kind,
                                              share=share, unit_rows=config.unit_rows)
    if bias is None:
        bias = torch.zeros(n_classes, dtype=prototypes.dtype, device=device)

    new_beta = None
    if asked.new_class_map == "ema":
        w_new = result.W_tt
    else:
        new_beta = select_new_class_map(fit0, labels, prototypes, random_state=seed,
                                        identity_informative=identity_informative and not candidate.variant.center)
        w_new = new_beta.W
    return SupervisedFit(
        W=served_map, W_task=result.W, W_ema=result.W_tt, W_new=w_new, prototypes=vectors, intercept=bias,
        refined_prototypes=result.prototypes,
        feature_mean=mean if candidate.variant.center else torch.zeros_like(mean),
        beta=beta, new_class_beta=new_beta, candidate=candidate, selection=selection, step_trials=step_trials,
        discriminant_weight=weight, loss_curve=result.loss_curve,
        hubness_init=hubness(F.normalize(fit0 @ w_init, dim=1), prototypes, labels),
        hubness=hubness(F.normalize(fit0 @ served_map, dim=1), prototypes, labels),
    )


def _paper_steps(source: Rows, labels: torch.Tensor, prototypes: torch.Tensor, asked: Asked, config: RefineConfig,
                 seed: int, progress: Progress | None) -> tuple[Candidate, int, list[tuple[int, float, float]] | None]:
    """The paper's classifier: a fixed step count, or one held-out run (a full cosine run follows)."""
    plain = Variant(False, False)
    if asked.steps is not None:
        return Candidate(plain, int(asked.steps), "task", 0.0), int(asked.steps), None
    if progress is not None:
        fused_adamw_supported(labels.device)
        progress.reset(total=max(PAPER_CHECKPOINTS) * 2)
        progress.set_postfix_str("held-out run, then the final fit")
    steps, trials = select_paper_steps(source.fit, labels, prototypes, beta=source.beta, config=config,
                                       random_state=seed, progress=progress)
    return Candidate(plain, steps, "task", 0.0), steps, trials
