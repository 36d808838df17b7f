"""The refinement's settings (paper section 4.3 and appendix) and the option grids, each stated once.

:class:`~lfa_index.core.estimator.LFA` takes them as constructor parameters (scikit-learn style)
and hands one frozen :class:`RefineConfig` to :func:`~lfa_index.core.solvers.refine.refine`.
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS: tuple[str, ...] = ("auto", "float32", "bf16-mixed")
"""Arithmetic of refinement (:attr:`RefineConfig.precision`)."""

MIX_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Prototype mixes λ the default chooses from (0: the paper's text prototypes)."""
BLEND_SHARE = 0.5
"""The discriminant's share of the default's served average (of standardised scores)."""
BLEND_SHARE_OUTVOTED = 0.25
"""... when the held-out rows show the discriminant alone significantly worse than the chosen
candidate (see :mod:`~lfa_index.core.solvers.selection`)."""
CLASS_MAPPINGS: tuple[str, ...] = ("task", "average")
"""Maps the fitted classes can be served with (the refined map, or its average with W_tt)."""
SUPPORT_KINDS: tuple[str, ...] = ("discriminant", "mean")
"""The support side of a hybrid prototype (see :mod:`~lfa_index.core.solvers.prototypes`)."""
SCORE_BLOCK = 1 << 24
"""Scores (rows × classes) a fit holds at once: what grows with rows *and* classes goes in blocks of rows."""


def row_blocks(n_rows: int, per_row: int, block: int | None = None) -> list[slice]:
    """Slices of ``n_rows`` rows, each holding about ``block`` (default :data:`SCORE_BLOCK`) values at
    ``per_row`` values per row (at least one row per slice)."""
    size = max(1, (SCORE_BLOCK if block is None else block) // max(1, per_row))
    return [slice(start, min(n_rows, start + size)) for start in range(0, n_rows, size)]


@dataclass(frozen=True)
class RefineConfig:
    """How a fit refines the map W, and how the default's held-out selection uses the support.

    Attributes
    ----------
    lr, weight_decay, final_lr : AdamW learning rate and weight decay; the cosine schedule ends at
        ``final_lr``.
    k : nearest prototypes in the ARerank loss (paper: 3).
    margin_scale : s in the adaptive margin ``(1 − y_ciᵀ y_j)/s`` (paper: 4).
    noise_std : std of the Gaussian noise added (with probability ½) to the batch at each step.
    dropout : dropout rate applied (with probability ½) to the batch at each step (paper text:
        0.025; its public code uses 0.05).
    batch_fraction : share of single-view rows drawn per step (multi-view input draws one view
        per image instead).
    momentum_start : momentum of the W_tt moving average at step 0 (paper: 0.9, rising to 1).
    precision : "float32", "bf16-mixed" (matrix products in bfloat16 under ``torch.autocast``) or
        "auto": "bf16-mixed" on a CPU that multiplies bfloat16 natively (AVX512-BF16 or AMX), where it
        takes 1.3–2.8× less time per step (1.15× at d = 64), "float32" elsewhere
        (see :func:`~lfa_index.core.device.uses_bf16`).
    folds : class-stratified folds of the support that the held-out selection uses (capped at the
        smallest class count; see :mod:`~lfa_index.core.solvers.selection`).
    unit_rows : fit and score the support discriminant on unit aligned rows ``z/||z||`` (selection
        and final fit). An experiment: serving still scores ``z·q + b`` (``benchmarks/unit_rows.py``).
    """

    lr: float = 5e-4
    weight_decay: float = 5e-4
    final_lr: float = 1e-7
    k: int = 3
    margin_scale: float = 4.0
    noise_std: float = 0.035
    dropout: float = 0.025
    batch_fraction: float = 0.75
    momentum_start: float = 0.9
    precision: str = "auto"
    folds: int = 2
    unit_rows: bool = False


@dataclass(frozen=True)
class FitOptions:
    """What a supervised fit may choose from, as the estimator's parameters ask for it; a tuple of more
    than one value means "choose on the support set"."""

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
    same_space: bool = True  # images and prototypes reach W unprojected (the zero-shot guard may then apply)
    text_check: str | bool = "auto"  # the names' geometry test: "auto" (where the fit chooses), True, False
    names_informative: bool | None = None  # its verdict where the estimator took it (None: the solver takes it)

    @property
    def asks_zero_shot(self) -> bool:
        """Whether the options need zero-shot's evidence (its guard on β, or the new-class map's choice)."""
        return self.keep_zero_shot or self.new_class_map == "auto"

    @property
    def paper_classifier(self) -> bool:
        """Only the paper's classifier can come out (text prototypes, task map, no variant)."""
        return self.mixes == (0.0,) and self.mappings == ("task",) and self.centers == (False,) \
            and self.refines == (False,)
