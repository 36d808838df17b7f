"""What a fit of LFA leaves behind: :class:`FittedState`, its field names, and the checks a restored one passes.

The solvers (:mod:`~lfa_index.core.solvers`) return one :class:`FittedState`; the estimator
sets its fields as its fitted attributes, saves them (:data:`FITTED_ARRAYS` as arrays,
:data:`FITTED_VALUES` as JSON values) and checks them on restore (:func:`check_fitted_state`).
numpy only, so a saved estimator is restored and served without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..errors import InvalidInputError, NonFiniteError, ShapeError
from .config import BLEND_SHARE_OUTVOTED, CLASS_MAPPINGS, SUPPORT_KINDS
from .validation import check_stored_array


def _array(default: Any = None) -> Any:
    return field(default=default, metadata={"array": True})


@dataclass(kw_only=True)
class FittedState:
    """Every fitted attribute of :class:`~lfa_index.core.estimator.LFA` (see its docstring for each).

    The solvers fill what they learn; the estimator adds what it fits itself (the projection, the
    classes, the time and the summary). Fields marked as arrays are ndarrays (or None), the others
    JSON values.
    """

    W_: np.ndarray = _array()
    W_tt_: np.ndarray = _array()
    W_ema_: np.ndarray = _array()
    W_avg_: np.ndarray = _array()
    prototypes_: np.ndarray = _array()
    intercept_: np.ndarray = _array()
    text_prototypes_: np.ndarray | None = _array()
    feature_mean_: np.ndarray = _array()
    refined_prototypes_: np.ndarray | None = _array()
    projection_: np.ndarray | None = _array()
    beta_scores_: np.ndarray | None = _array()
    assignments_: np.ndarray | None = _array()
    heldout_scores_: np.ndarray | None = _array()
    classes_: Any = None
    n_features_in_: int | None = None
    beta_: float
    beta_selection_: str
    steps_: int
    step_trials_: list[tuple[int, float, float]] | None
    projection_side_: str | None = None
    projection_kind_: str | None = None
    center_: bool
    prototype_mix_: float
    support_kind_: str | None
    discriminant_weight_: float | None
    refine_prototypes_: bool
    mapping_: str
    selection_: dict[str, Any] | None
    loss_curve_: list[float]
    hubness_init_: float
    hubness_: float
    new_class_beta_: float | None
    summary_: str | None = None
    fit_seconds_: float | None = None

    def task_map(self) -> np.ndarray:
        """The refined (task) map: ``W_``, unless ``W_`` serves the average with ``W_ema_``."""
        if self.mapping_ == "task":
            return np.asarray(self.W_)
        return 2 * np.asarray(self.W_avg_) - np.asarray(self.W_ema_)

    def blend_share(self) -> float | None:
        """The discriminant's share in the served average (None: no average)."""
        if self.discriminant_weight_ is None:
            return None
        return float(self.selection_["blend_share"])


FITTED_ARRAYS: tuple[str, ...] = tuple(f.name for f in fields(FittedState) if f.metadata.get("array"))
"""Fitted attributes saved as arrays (None allowed: the array is then left out)."""
FITTED_VALUES: tuple[str, ...] = tuple(f.name for f in fields(FittedState) if not f.metadata.get("array"))
"""Fitted attributes saved as JSON values."""
PROJECTION_SIDES = (None, "image", "text")
PROJECTION_KINDS = (None, "widen", "shrink", "to_text")


def check_fitted_state(state: FittedState) -> None:
    """Raise a typed error, saying what is wrong, unless ``state`` is one a fit could have left: known
    option values, float arrays of consistent shapes, finite numbers."""
    n_in = state.n_features_in_
    if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
        raise InvalidInputError(f"n_features_in_ must be a positive integer, got {n_in!r}")
    for name, allowed in (("projection_side_", PROJECTION_SIDES), ("projection_kind_", PROJECTION_KINDS),
                          ("mapping_", CLASS_MAPPINGS), ("support_kind_", (None, *SUPPORT_KINDS))):
        if getattr(state, name) not in allowed:
            raise InvalidInputError(f"{name} must be one of {list(allowed)}, got {getattr(state, name)!r}")
    for name in ("center_", "refine_prototypes_"):
        if not isinstance(getattr(state, name), bool):
            raise InvalidInputError(f"{name} must be true or false, got {getattr(state, name)!r}")
    for f in fields(state):
        value = getattr(state, f.name)
        if isinstance(value, float) and not np.isfinite(value):
            raise NonFiniteError(f"{f.name} is {value!r}, not a finite number")
    w = check_stored_array(state.W_, "W_", ndim=2)
    d = w.shape[0]
    for name in ("W_", "W_tt_", "W_avg_", "W_ema_"):
        check_stored_array(getattr(state, name), name, shape=(d, d))
    side = state.projection_side_
    if side == "image":
        check_stored_array(state.projection_, "projection_", shape=(d, n_in))
    elif d != n_in:
        raise ShapeError(f"W_ is {d}×{d} but the image embeddings are {n_in}-d and projection_side_ is {side!r}")
    if side == "text":
        check_stored_array(state.projection_, "projection_", ndim=2)
        if state.projection_.shape[0] != d:
            raise ShapeError(f"projection_ has shape {state.projection_.shape}, expected ({d}, d_txt)")
    n_classes = len(np.asarray(state.classes_))
    for name, shape in (("feature_mean_", (d,)), ("prototypes_", (n_classes, d)), ("intercept_", (n_classes,)),
                        ("text_prototypes_", (n_classes, d))):
        check_stored_array(getattr(state, name), name, shape=shape)
    for name, shape in (("refined_prototypes_", (n_classes, d)), ("assignments_", (None, n_classes)),
                        ("heldout_scores_", (None,)), ("beta_scores_", (None,))):
        if getattr(state, name) is not None:
            check_stored_array(getattr(state, name), name, shape=shape)


def summary_line(state: FittedState, n_rounds: int) -> str:
    """One line: β, steps, options, held-out evidence, time (``n_rounds``: the U-LFA rounds)."""
    sel = state.selection_ or {}
    runs = sel.get("runs") or 0
    held_out = f" (+ {runs} held-out run(s) of {sel['horizon']})" if runs else ""
    parts = [f"β={state.beta_:g} ({state.beta_selection_})", f"{state.steps_} steps{held_out}"]
    kind = " (class means)" if state.support_kind_ == "mean" else ""
    options = [f"λ={state.prototype_mix_:g}{kind}"] if state.prototype_mix_ else []
    alone = state.prototype_mix_ == 1 and state.support_kind_ == "discriminant"  # averaged with itself
    if state.discriminant_weight_ and not alone:
        options = options or ["λ=0"]
        lowered = (state.selection_ or {}).get("blend_share") == BLEND_SHARE_OUTVOTED
        why = ", lowered: it was significantly worse on held-out rows" if lowered else ""
        options.append(f"averaged with the discriminant (weight {state.discriminant_weight_:.2f}{why})")
    options += ["average map"] if state.mapping_ == "average" else []
    options += ["centred"] if state.center_ else []
    options += ["trained prototypes"] if state.refine_prototypes_ else []
    parts.append(", ".join(options) if options else "paper's classifier")
    if sel.get("accuracy") is not None:
        ref = sel.get("reference")
        versus = f" vs {100 * ref:.1f}% for the paper's classifier" if ref is not None else ""
        chosen = sel.get("chosen_accuracy")
        served = f" as served ({100 * chosen:.1f}% before the average)" if chosen is not None else ""
        parts.append(f"held-out {100 * sel['accuracy']:.1f}%{served}{versus} ({sel['rows']} rows, "
                     f"{sel['folds']} folds)")
    elif state.step_trials_:
        best = max(t[1] for t in state.step_trials_)
        parts.append(f"held-out {100 * best:.1f}% ({len(state.step_trials_)} checkpoints)")
    elif sel.get("how"):
        parts.append(sel["how"])
    if state.assignments_ is not None:
        parts.append(f"unsupervised, {n_rounds} rounds")
    parts.append(f"{state.fit_seconds_:.1f} s")
    return "LFA fit: " + "; ".join(parts)


def fit_or_restore(estimator: Any, fit: Any, *args: Any) -> Any:
    """``fit(*args)``, with the estimator's attributes put back as they were if it raises."""
    state = dict(estimator.__dict__)
    try:
        return fit(*args)
    except BaseException:
        estimator.__dict__.clear()
        estimator.__dict__.update(state)
        raise
