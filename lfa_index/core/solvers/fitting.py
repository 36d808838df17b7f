"""Running a fit on torch tensors and returning the fitted attributes (imported when a fit runs).

:meth:`LFA.fit <lfa_index.core.estimator.LFA.fit>` validates its inputs, fits the projection and
hands L2-normalised tensors to :func:`fit_supervised` or :func:`fit_unsupervised`, which call the
module-level solvers and return the estimator's fitted attributes as numpy arrays and values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .beta import identity_is_informative
from .selection import Candidate, Variant
from .supervised import Asked, Warm
from .supervised import fit_supervised as solve_supervised
from .unsupervised import fit_unsupervised as solve_unsupervised


def _numpy(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy()


def _task_map(lfa: Any) -> np.ndarray:
    """The refined (task) map of a fitted ``lfa``: ``W_``, unless ``W_`` serves the average with ``W_ema_``."""
    if lfa.mapping_ == "task":
        return np.asarray(lfa.W_)
    return 2 * np.asarray(lfa.W_avg_) - np.asarray(lfa.W_ema_)


def _blend_share(lfa: Any) -> float | None:
    """The discriminant's share in ``lfa``'s served average (None: no average)."""
    if getattr(lfa, "discriminant_weight_", None) is None:
        return None
    return float(lfa.selection_["blend_share"])


def fit_supervised(lfa: Any, x: torch.Tensor, labels: torch.Tensor, protos: torch.Tensor, *, seed: int,
                   generator: torch.Generator, coin: torch.Generator, warm: bool, progress: Any) -> dict[str, Any]:
    """The fitted attributes of a supervised fit of ``lfa`` (its parameters; its state when ``warm``)."""
    counts = torch.bincount(labels)
    asked: Asked = lfa._asked(int(counts[counts > 0].min()))
    # only the zero-shot guard and the new-class map ask (the paper's preset has neither)
    informative = lfa.projection_side_ is None and (asked.keep_zero_shot or asked.new_class_map == "auto") \
        and identity_is_informative(x[:, 0] if x.ndim == 3 else x, labels, protos)
    previous = None
    if warm:
        previous = Warm(
            W=torch.as_tensor(_task_map(lfa), device=x.device), W_ema=torch.as_tensor(lfa.W_ema_, device=x.device),
            mean=torch.as_tensor(lfa.feature_mean_, device=x.device), beta=float(lfa.beta_), steps=int(lfa.steps_),
            candidate=Candidate(Variant(bool(lfa.center_), bool(lfa.refine_prototypes_)), int(lfa.steps_),
                                lfa.mapping_, float(lfa.prototype_mix_), lfa.support_kind_ or "discriminant"),
            blend_share=_blend_share(lfa),
        )
        asked = Asked(**{**asked.__dict__, "centers": (bool(lfa.center_),)})
    fit = solve_supervised(x, labels, protos, asked=asked, config=lfa.refine_config(),
                           identity_informative=informative, seed=seed, generator=generator, coin=coin,
                           progress=progress, warm=previous)
    chosen = fit.candidate
    new_class = fit.new_class_beta
    selection = None if fit.selection is None else {
        **fit.selection.as_dict(), "new_class_map": lfa.new_class_map,
        "new_class_beta": None if new_class is None else new_class.beta,
        "new_class_beta_selection": None if new_class is None else new_class.how,
    }
    heldout = None if fit.selection is None else fit.selection.heldout_scores
    return dict(
        W_=_numpy(fit.W), W_tt_=_numpy(fit.W_new), W_ema_=_numpy(fit.W_ema),
        W_avg_=_numpy((fit.W_task + fit.W_ema) / 2),
        prototypes_=_numpy(fit.prototypes), intercept_=_numpy(fit.intercept),
        refined_prototypes_=_numpy(fit.refined_prototypes), feature_mean_=_numpy(fit.feature_mean),
        center_=chosen.variant.center, refine_prototypes_=chosen.variant.refine_prototypes,
        prototype_mix_=chosen.mix, support_kind_=chosen.kind, mapping_=chosen.mapping, steps_=chosen.steps,
        beta_=fit.beta.beta, beta_selection_=fit.beta.how, beta_scores_=fit.beta.scores,
        new_class_beta_=None if new_class is None else new_class.beta, step_trials_=fit.step_trials,
        selection_=selection, heldout_scores_=None if heldout is None else np.asarray(heldout, dtype=np.float32),
        discriminant_weight_=fit.discriminant_weight,
        loss_curve_=fit.loss_curve, hubness_init_=fit.hubness_init, hubness_=fit.hubness, assignments_=None,
    )


def fit_unsupervised(lfa: Any, x: torch.Tensor, labels: None, protos: torch.Tensor, *, seed: int,
                     generator: torch.Generator, coin: torch.Generator, warm: bool, progress: Any) -> dict[str, Any]:
    """The fitted attributes of an unsupervised fit (U-LFA, the paper's algorithm)."""
    fit = solve_unsupervised(
        x, protos, beta=None if lfa.beta == "auto" else float(lfa.beta),
        steps=None if lfa.steps == "auto" else int(lfa.steps), n_rounds=lfa.n_rounds,
        sinkhorn_reg=lfa.sinkhorn_reg, cv_splits=lfa.cv_splits, cv_val_size=lfa.cv_val_size,
        config=lfa.refine_config(), seed=seed, generator=generator, coin=coin, progress=progress,
        warm=(torch.as_tensor(_task_map(lfa), device=x.device), float(lfa.beta_)) if warm else None,
    )
    task, ema = _numpy(fit.W), _numpy(fit.W_ema)
    average = (task + ema) / 2
    mapping = "average" if lfa.mapping == "average" else "task"
    n_classes = protos.shape[0]
    return dict(
        W_=average if mapping == "average" else task, W_tt_=ema, W_ema_=ema, W_avg_=average,
        prototypes_=_numpy(protos), intercept_=np.zeros(n_classes, dtype=np.float32),
        feature_mean_=np.zeros(task.shape[0], dtype=np.float32), refined_prototypes_=None,
        center_=False, refine_prototypes_=False, prototype_mix_=0.0, support_kind_=None, mapping_=mapping,
        beta_=fit.beta.beta, beta_selection_=fit.beta.how, beta_scores_=fit.beta.scores, new_class_beta_=None,
        steps_=fit.steps, step_trials_=fit.step_trials, selection_=None, heldout_scores_=None,
        discriminant_weight_=None,
        loss_curve_=fit.loss_curve, hubness_init_=fit.hubness_init, hubness_=fit.hubness,
        assignments_=_numpy(fit.assignments),
    )
