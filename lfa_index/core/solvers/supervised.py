"""Supervised LFA (paper section 4.4, Algorithm 1) and the options beyond it: one fit path.

:func:`solve_supervised` runs β-Procrustes then ARerank refinement. What the caller leaves at
"auto" is chosen on the support set alone (:mod:`~lfa_index.core.solvers.beta` for β,
:mod:`~lfa_index.core.solvers.selection` for the step count and the options). With every option off and
``keep_zero_shot=False`` it is the paper's algorithm: the text prototypes as the classifier, β by
random-split CV, one full cosine run; ``LFA.paper()`` adds one guard (``text_check=True``, see
:func:`checks_names`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import InvalidInputError
from ..config import FitOptions, RefineConfig
from ..state import FittedState
from .beta import BetaChoice, identity_is_informative, select_beta, select_new_class_map
from .geometry import geometry_is_informative
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
    Selection,
    SupportRows,
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
from .unit_rows import unit_rows

CENTRING_MIN_NORM = 1e-3
"""Unit rows closer than this to their mean lose their direction when centred."""


@dataclass(frozen=True)
class WarmStart:
    """The previous fit a warm start continues from (its state as tensors on the fit's device)."""

    W: torch.Tensor  # task map
    W_ema: torch.Tensor
    mean: torch.Tensor  # feature mean (zero without centring)
    beta: float
    steps: int
    candidate: Candidate
    blend_share: float | None = None  # the discriminant's share in the previous fit's served average (None: none)

    @classmethod
    def of(cls, previous: FittedState, device: torch.device) -> "WarmStart":
        """The warm start of a previous fitted state."""
        return cls(
            W=torch.as_tensor(previous.task_map(), device=device),
            W_ema=torch.as_tensor(previous.W_ema_, device=device),
            mean=torch.as_tensor(previous.feature_mean_, device=device), beta=float(previous.beta_),
            steps=int(previous.steps_),
            candidate=Candidate(Variant(bool(previous.center_), bool(previous.refine_prototypes_)),
                                int(previous.steps_), previous.mapping_, float(previous.prototype_mix_),
                                previous.support_kind_ or "discriminant"),
            blend_share=previous.blend_share(),
        )


def first_view(x: torch.Tensor) -> torch.Tensor:
    """View 0 of multi-view rows (N, V, d), or the rows themselves."""
    return x[:, 0] if x.ndim == 3 else x


def choose_beta(x0: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, options: FitOptions,
                informative: bool, seed: int) -> BetaChoice:
    """β as the options ask: fixed, or by CV (with the zero-shot guard when ``options.keep_zero_shot``)."""
    if options.beta is not None:
        return BetaChoice(float(options.beta), "fixed")
    return select_beta(x0, labels, prototypes, identity_informative=informative, guard=options.keep_zero_shot,
                       n_splits=options.cv_splits, val_size=options.cv_val_size, random_state=seed)


def variant_rows(x: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, options: FitOptions,
                 informative: bool, seed: int, mean: torch.Tensor,
                 warm: WarmStart | None) -> dict[bool, tuple[SupportRows, BetaChoice]]:
    """The support rows (and their β) without and/or with centring, as far as ``options.centers`` needs."""
    out = {}
    for centred in options.centers:
        if centred and warm is None and float((x - mean).norm(dim=-1).min()) < CENTRING_MIN_NORM:
            if options.centers == (True,):
                raise InvalidInputError(
                    "center=True needs support rows that differ in direction, but centring sends some of them to "
                    "(almost) zero: the support lies along one direction. Set center=False (or 'auto')."
                )
            continue  # "auto": a centring that erases rows is not a candidate
        fit_rows = unit_rows(x - mean) if centred else x
        served = first_view(x) - mean if centred else first_view(x)
        if warm is not None:
            beta = BetaChoice(warm.beta, "warm-start")
        else:
            beta = choose_beta(first_view(fit_rows), labels, prototypes, options, informative and not centred, seed)
        out[centred] = (SupportRows(fit_rows, served, beta.beta), beta)
    return out


def checks_names(options: FitOptions) -> bool:
    """Whether the fit tests the names' geometry (``text_check``): "auto" where it chooses its own
    options with the support's prototypes among them (the default), True always, False never."""
    if options.text_check != "auto":
        return bool(options.text_check)
    return not options.paper_classifier and options.steps is None and options.beta is None \
        and 1.0 in options.mixes and len(options.mixes) > 1


def names_informative(x0: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor, options: FitOptions,
                      seed: int) -> bool:
    """Whether the text has anything to teach the map: the names' geometry beyond chance (the estimator's
    verdict on the unprojected rows where it took one), or zero-shot beyond chance where one space holds
    both sides (asked here only where the options did not already ask it: ``LFA.paper()``)."""
    geometry = options.names_informative if options.names_informative is not None else \
        geometry_is_informative(x0, labels, prototypes, random_state=seed)
    if geometry:
        return True
    return options.same_space and not options.asks_zero_shot and identity_is_informative(x0, labels, prototypes)


def solve_supervised(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    options: FitOptions,
    config: RefineConfig,
    seed: int,
    generator: torch.Generator,
    coin: torch.Generator,
    progress: Any = None,
    previous: FittedState | None = None,
) -> FittedState:
    """Fit the map and the classifier on L2-normalised rows ``x`` (n, d) or (n, V, d), from β-Procrustes
    or, for a warm start, from the ``previous`` fitted state."""
    device = x.device
    n_classes = prototypes.shape[0]
    x0 = first_view(x)
    warm = None if previous is None else WarmStart.of(previous, device)
    # only the zero-shot guard and the new-class map ask (the paper's preset has neither)
    identity_informative = options.same_space and options.asks_zero_shot \
        and identity_is_informative(x0, labels, prototypes)
    # the names' geometry no better than chance (and no zero-shot): the text has nothing to teach the map
    text_uninformative = warm is None and checks_names(options) and not identity_informative \
        and not names_informative(x0, labels, prototypes, options, seed)
    if text_uninformative:  # the support's own classifier, through an orthogonal map, without refinement
        options = replace(options, beta=0.0, steps=None, mixes=(1.0,), mappings=("task",), centers=(False,),
                          refines=(False,), blend=False)
    mean = x0.mean(dim=0) if warm is None or not warm.candidate.variant.center else warm.mean
    rows = variant_rows(x, labels, prototypes, options, identity_informative, seed, mean, warm)
    if text_uninformative:
        rows = {c: (r, BetaChoice(0.0, "procrustes, text uninformative")) for c, (r, _) in rows.items()}
    plain = Variant(options.centers[0] if len(options.centers) == 1 else False,
                    options.refines[0] if len(options.refines) == 1 else False)
    variants = {Variant(c, r): rows[c][0] for c in options.centers if c in rows for r in options.refines}
    y_np = labels.cpu().numpy()
    # held-out folds: not for a warm start or the paper's classifier (they hold nothing out)
    folds = None if warm is not None or options.paper_classifier else support_folds(y_np, config.folds, seed)

    selection: Selection | None = None
    step_trials: list[tuple[int, float, float]] | None = None
    if warm is not None:
        candidate, horizon = warm.candidate, warm.steps
        selection = Selection(candidate, "warm-start", horizon, blend_share=warm.blend_share)
    elif options.paper_classifier:
        candidate, horizon, step_trials = _paper_steps(rows[plain.center][0], labels, prototypes, options, config,
                                                       seed, progress)
    elif folds is None:  # one row per class: nothing can be held out
        steps = options.steps if options.steps is not None else (0 if n_classes <= config.k + 1 else ONE_SHOT_STEPS)
        # a kept zero-shot map keeps its text prototypes too; otherwise the single row enters lightly
        kept = rows[plain.center][1].beta == 1.0 and identity_informative
        mix = (0.0 if kept else ONE_SHOT_MIX) if len(options.mixes) > 1 else options.mixes[0]
        kind, how = options.kinds[0], "one-shot"
        if text_uninformative:  # one row per class: its class mean
            steps, mix, how = 0, 1.0, "one-shot, text uninformative"
            kind = "mean" if "mean" in options.kinds else kind
        candidate, horizon = Candidate(plain, int(steps), options.mappings[0] if len(options.mappings) == 1 else "task",
                                       float(mix), kind), int(steps)
        selection = Selection(candidate, how, horizon)
    elif options.steps is not None and \
            len(variants) == len(options.mixes) == len(options.mappings) == len(options.kinds) == 1:
        candidate = Candidate(plain, int(options.steps), options.mappings[0], float(options.mixes[0]), options.kinds[0])
        horizon = int(options.steps)
        selection = Selection(candidate, "fixed", horizon)
    else:
        horizon = options.steps if options.steps is not None else \
            0 if text_uninformative else horizon_for(len(y_np), n_classes, config.k)
        marks = (horizon,) if options.steps is not None else checkpoints_for(horizon)
        if progress is not None:  # the clock starts with the steps it counts (β's cross-validation is done)
            fused_adamw_supported(x.device)  # torch's first optimiser step imports for seconds: not a step's cost
            progress.reset(total=len(variants) * len(folds) * horizon + horizon)
            progress.set_postfix_str(f"{len(variants) * len(folds)} held-out fold run(s), then the final fit")
        # without refinement the folds cost one SVD each; with uninformative text only the support side is chosen
        repeats = [folds] if horizon > 0 else [support_folds(y_np, CLOSED_FORM_FOLDS, seed + r)
                                                for r in range(1 if text_uninformative else CLOSED_FORM_REPEATS)]
        evidence = Evidence.mean([cross_fitted_evidence(
            variants, labels, prototypes, folds=f, horizon=horizon, checkpoints=marks, mixes=options.mixes,
            mappings=options.mappings, kinds=options.kinds, config=config, random_state=seed,
            progress=progress, blend=options.blend,
        ) for f in repeats])
        selection = choose(evidence, plain, options.mappings[0] if len(options.mappings) == 1 else "task")
        selection.runs = len(variants) * len(folds) * len(repeats) if horizon > 0 else 0
        if horizon == 0:
            selection.how = "no-refinement, text uninformative" if text_uninformative else "no-refinement"
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
    share = None if selection is None else selection.blend_share  # set by choose() when options.blend, or kept warm
    vectors, bias, weight = served_classifier(source.served @ served_map, labels, base, candidate.mix, candidate.kind,
                                              share=share, unit_rows=config.unit_rows)
    if bias is None:
        bias = torch.zeros(n_classes, dtype=prototypes.dtype, device=device)

    new_beta = None
    if options.new_class_map == "ema":
        w_new = result.W_tt
    else:
        new_beta = select_new_class_map(fit0, labels, prototypes, random_state=seed,
                                        identity_informative=identity_informative and not candidate.variant.center)
        w_new = new_beta.W
    hubness_init = hubness(F.normalize(fit0 @ w_init, dim=1), prototypes, labels)
    hubness_final = hubness(F.normalize(fit0 @ served_map, dim=1), prototypes, labels)
    heldout = None if selection is None else selection.heldout_scores
    return FittedState(
        W_=to_numpy(served_map), W_tt_=to_numpy(w_new), W_ema_=to_numpy(result.W_tt),
        W_avg_=to_numpy((result.W + result.W_tt) / 2),
        prototypes_=to_numpy(vectors), intercept_=to_numpy(bias), refined_prototypes_=to_numpy(result.prototypes),
        feature_mean_=to_numpy(mean if candidate.variant.center else torch.zeros_like(mean)),
        center_=candidate.variant.center, refine_prototypes_=candidate.variant.refine_prototypes,
        prototype_mix_=candidate.mix, support_kind_=candidate.kind, mapping_=candidate.mapping, steps_=candidate.steps,
        beta_=beta.beta, beta_selection_=beta.how, beta_scores_=beta.scores,
        new_class_beta_=None if new_beta is None else new_beta.beta, step_trials_=step_trials,
        selection_=None if selection is None else {
            **selection.as_dict(), "new_class_map": options.new_class_map,
            "new_class_beta": None if new_beta is None else new_beta.beta,
            "new_class_beta_selection": None if new_beta is None else new_beta.how,
        },
        heldout_scores_=None if heldout is None else np.asarray(heldout, dtype=np.float32),
        discriminant_weight_=weight, loss_curve_=result.loss_curve, hubness_init_=hubness_init,
        hubness_=hubness_final, assignments_=None,
    )


def to_numpy(t: torch.Tensor | None) -> np.ndarray | None:
    """A tensor (or None) as a numpy array on the CPU."""
    return None if t is None else t.detach().cpu().numpy()


def _paper_steps(source: SupportRows, labels: torch.Tensor, prototypes: torch.Tensor, options: FitOptions,
                 config: RefineConfig, seed: int,
                 progress: Progress | None) -> tuple[Candidate, int, list[tuple[int, float, float]] | None]:
    """The paper's classifier: a fixed step count, or one held-out run (a full cosine run follows)."""
    plain = Variant(False, False)
    if options.steps is not None:
        return Candidate(plain, int(options.steps), "task", 0.0), int(options.steps), None
    if progress is not None:
        fused_adamw_supported(labels.device)
        progress.reset(total=max(PAPER_CHECKPOINTS) * 2)
        progress.set_postfix_str("held-out run, then the final fit")
    steps, trials = select_paper_steps(source.fit, labels, prototypes, beta=source.beta, config=config,
                                       random_state=seed, progress=progress)
    return Candidate(plain, steps, "task", 0.0), steps, trials
