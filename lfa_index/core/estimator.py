"""The LFA estimator: orthogonal Procrustes -> beta-Procrustes -> ARerank refinement, plus options.

Supervised (paper section 4.4, "Supervised Alignment"), unsupervised (U-LFA, Sinkhorn pseudo-
assignments alternated with refinement), base-to-new (a second map W_tt, paper eq. 9) and
disjoint encoders (a seeded projection when the dimensions differ). The estimator builds the fit's
options and hands them, with the tensors, to one solver (:mod:`~lfa_index.core.solvers.supervised`
or :mod:`~lfa_index.core.solvers.unsupervised`, torch, imported when a fit runs), which returns one
:class:`~lfa_index.core.state.FittedState`; the query side is numpy (:mod:`~lfa_index.core.serving`).

Beyond the paper, chosen on the support set alone within a fixed budget (see
:mod:`~lfa_index.core.solvers.selection`): hybrid prototypes (:mod:`~lfa_index.core.solvers.prototypes`), the
average of the two maps, the step count, a zero-shot guard on β and a map for new classes chosen
for unseen classes (:mod:`~lfa_index.core.solvers.beta`). Centring and prototypes trained with W are
available as options. :meth:`LFA.paper` is the paper's algorithm with every option off.
"""

from __future__ import annotations

import sys
import time
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..compat import BaseEstimator, ClassifierMixin, TransformerMixin
from ..errors import (
    DimensionMismatchError,
    InvalidParameterError,
    MissingExtraError,
)
from .config import CLASS_MAPPINGS, MIX_GRID, PRECISIONS, SUPPORT_KINDS, FitOptions, RefineConfig
from .memory import check_fit_memory
from .projection import isometric_embedding_matrix, random_projection_matrix, to_text_widens
from .query_map import project_rows
from .serving import AlignedClassifierMixin
from .state import FittedState, fit_or_restore, summary_line
from .targets import encode_targets
from .validation import BOOLEAN, Interval, StrOptions, check_embeddings, options, validate_params

_DEFAULT = RefineConfig()
PROJECTIONS = ("auto", "widen", "shrink", "to_text", False)
TRAINED_PROTOTYPES_MIN_ROWS = 8
"""``refine_prototypes="auto"`` trains the prototypes where every class has at least this many rows."""
PAPER_OPTIONS: dict[str, Any] = dict(
    steps=200, projection="to_text", prototype_mix=0.0, refine_prototypes=False, center=False, mapping="task",
    keep_zero_shot=False, new_class_map="ema", precision="float32", text_check=True,
)
"""The options of :meth:`LFA.paper`: the paper's algorithm as its public code runs it (β by random-split
cross-validation with no preference for the identity, 200 refinement steps), every option off, one guard on."""


class LFA(AlignedClassifierMixin, ClassifierMixin, TransformerMixin, BaseEstimator):
    """Linear Feature Alignment of image embeddings to class prototypes (Ouali et al., ICCV 2023).

    Parameters
    ----------
    beta : "auto" or float in [0, 1], default="auto"
        Pull of the Procrustes map towards the identity (β=1: identity, β=0: orthogonal
        Procrustes). "auto" cross-validates the grid 0, 0.05, ..., 1 on the support set.
    steps : "auto" or int >= 0, default="auto"
        Refinement steps. "auto" picks them on held-out support rows (checkpoints of one
        schedule, see :mod:`~lfa_index.core.solvers.selection`).
    projection : {"auto", "widen", "shrink", "to_text", False}, default="auto"
        How differing image/text dimensions are bridged: "to_text" (the paper) maps the image rows into
        the text width with a seeded Gaussian random projection, up, or down where that keeps the rows'
        distances within ±50 % (Johnson-Lindenstrauss; otherwise "widen"); "shrink" maps the wider side
        down with one; "widen" maps the narrower side up with a seeded isometric embedding, which loses
        nothing (W then has the wider dimension); "auto" is "widen". False raises on differing widths.
    prototype_mix : "auto" or float in [0, 1], default="auto"
        λ of the hybrid prototypes ``(1 − λ)·text + λ·support`` in the aligned space (0: the
        paper's text prototypes). "auto" picks λ in {0, 0.25, 0.5, 0.75, 1} on held-out support
        rows (at 1 shot, where nothing can be held out: ¼, or 0 where zero-shot is kept), and
        serves it averaged with the discriminant alone (equal weight on standardised scores, a
        quarter when the held-out rows show the discriminant significantly worse;
        ``discriminant_weight_``) as a hedge against held-out noise.
    support_prototypes : {"auto", "discriminant", "mean"}, default="auto"
        The support side of the mix: the class's linear discriminant in the aligned space (class
        mean under GDA's shared shrunk precision, with its bias), or its L2-normalised mean.
        "auto" scores both on the held-out rows of the same runs (no extra run).
    refine_prototypes : bool, "auto" or "held-out", default="auto"
        Train the prototypes jointly with W (from the text prototypes, same loss). "auto": where
        every class has at least 8 support rows (enough to train a class vector; at 16 shots it
        gained 0.5–2.2 points on four text encoder pairs and was level on image sets, at 4 shots
        it lost 0.2: ``benchmarks/robustness.py``); "held-out" tries it on held-out rows (one
        more run per fold).
    center : bool or "auto", default=False
        Subtract the support mean from the (projected) image rows before Procrustes and
        refinement. "auto" tries it on held-out rows (one more run per fold).
    mapping : {"auto", "task", "average"}, default="auto"
        Map of the fitted classes: the refined task map or the average of it and the paper's
        W_tt (§4.5, Table 7). "auto" keeps the average only on a significant held-out gain.
    keep_zero_shot : bool, default=True
        Where images and prototypes share a space (zero-shot ranks the rows' own classes above a
        random class permutation, see :func:`~lfa_index.core.solvers.beta.identity_is_informative`),
        keep β = 1 (zero-shot) unless a smaller β shows a significant held-out gain; where they do
        not, plain CV (β = 0 at 1 shot). The paper takes the best β of its CV (False).
    new_class_map : {"auto", "ema"}, default="auto"
        Map for classes added from text alone (``W_tt_``): "ema" is the paper's moving average of
        W over the first half of refinement; "auto" is chosen on folds that hold out whole
        classes among β-Procrustes maps, with and without the directions shared by all support
        rows and all fitted prototypes; zero-shot unless a candidate beats it.
    text_check : bool or "auto", default="auto"
        Test the names' geometry against the support's class means (a Mantel test,
        :mod:`~lfa_index.core.solvers.geometry`) and, in one space, zero-shot. Where neither is beyond
        chance, serve the support's own classifier (class means at one shot) through an orthogonal map,
        unrefined, on rows widened rather than shrunk. "auto": where the fit chooses its own options;
        True: always (:meth:`paper`); False: never (``LFA.paper(text_check=False)``, see :meth:`paper`).
    k : int, default=3
        Nearest prototypes in the ARerank loss.
    margin_scale : float, default=4.0
        s in the adaptive margin ``(1 − y_ciᵀ y_j)/s``.
    lr, weight_decay, final_lr : float, defaults 5e-4, 5e-4, 1e-7
        AdamW learning rate and weight decay; the cosine schedule ends at ``final_lr``.
    noise_std : float, default=0.035
        Std of the Gaussian noise added (with probability ½) to the support rows at each step.
    dropout : float, default=0.025
        Dropout rate applied (with probability ½) to the support rows at each step. The paper's
        text says 0.025 (the default here); its public code uses 0.05.
    batch_fraction : float, default=0.75
        Share of single-view support rows drawn per step (multi-view input draws one view per
        image instead).
    cv_splits, cv_val_size : int, float, defaults 3, 0.2
        Random (class-stratified where possible) splits for choosing β.
    n_rounds : int, default=5
        Sinkhorn/refinement rounds of unsupervised LFA (``fit(X, None, text_emb)``).
    sinkhorn_reg : float, default=0.0025
        Entropic regularisation of the U-LFA transport problem (blur 0.05 squared).
    temperature : float, default=0.01
        Softmax temperature of ``predict_proba`` over aligned scores (CLIP's logit scale 100).
    precision : {"auto", "float32", "bf16-mixed"}, default="auto"
        Arithmetic of refinement. "bf16-mixed" runs the loss's matrix products in bfloat16 under
        ``torch.autocast`` (float32 weights and optimiser), at bf16 resolution in the loss.
        "auto" takes it on a CPU that multiplies bf16 natively (AVX512-BF16/AMX), where a step
        takes 1.3–2.8× less time per step at the same accuracy, and float32 elsewhere (CUDA included).
        :meth:`paper` pins "float32", the arithmetic of the paper's code.
    warm_start : bool, default=False
        Refit from the current maps (β, step count and options kept) instead of from
        β-Procrustes.
    device : str, default="auto"
        "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
    random_state : int or None, default=None
        Seed of every random choice (splits, batches, noise, dropout, projection).
    verbose : bool, default=False
        Show one progress bar for the whole fit and print a one-line summary at the end.

    The options need labels and a query side that stays affine: with ``projection="to_text"`` (or
    ``"shrink"`` and wider image embeddings), "auto" keeps centring and the discriminant mix off, and
    asking for them raises. Unsupervised fits (``y=None``) run the paper's algorithm ("auto" means off).

    Attributes
    ----------
    W_ : ndarray (d, d)                 map of the fitted classes: the task map, or the average
                                        ``W_avg_`` when ``mapping_ == "average"``.
    W_tt_ : ndarray (d, d)              map of classes added from text alone (``new_class_map``).
    W_ema_ : ndarray (d, d)             the paper's W_tt: moving average of W during refinement.
    W_avg_ : ndarray (d, d)             (task map + ``W_ema_``) / 2.
    prototypes_ : ndarray (C, d)        class vectors q of the fitted classes in the aligned space
                                        (the text prototypes for the paper; hybrid otherwise).
    intercept_ : ndarray (C,)           class biases b (zero unless the discriminant mix is on).
    text_prototypes_ : ndarray (C, d)   L2-normalised (projected) text prototypes, the paper's Y.
    refined_prototypes_ : ndarray (C, d) or None   prototypes after joint training.
    feature_mean_ : ndarray (d,)        μ subtracted from the rows (zero without centring).
    center_, prototype_mix_, support_kind_, refine_prototypes_, mapping_ : the options used.
    discriminant_weight_ : float or None   weight w of the discriminant alone in the served class
                                        vectors ``(1 − w)·hybrid(λ) + w·discriminant`` (the default's
                                        hedge on a held-out λ, see :mod:`~lfa_index.core.solvers.selection`);
                                        None when the hybrid is served as chosen.
    selection_ : dict or None           how the step count and options were chosen (held-out
                                        candidates and scores).
    summary_ : str                      one line: what was chosen, the held-out evidence, the time.
    fit_seconds_ : float                wall-clock time of the fit.
    beta_ : float                       β used.   beta_scores_ : mean CV accuracy per β (or None).
    beta_selection_ : str               how β was chosen ("cv", "cv, identity kept",
                                        "class-disjoint-cv", "procrustes, identity uninformative",
                                        "fixed", "warm-start", ...).
    new_class_beta_ : float or None     β of ``W_tt_`` when ``new_class_map="auto"``.
    steps_ : int                        refinement steps of the final run (per round for U-LFA).
    step_trials_ : list or None         held-out (steps, accuracy, loss) of the paper's step search.
    projection_ : ndarray (k, d_in) or None, projection_side_ : "image", "text" or None,
    projection_kind_ : "to_text", "shrink", "widen" or None.
    loss_curve_ : list[float]           ARerank loss per refinement step (last round for U-LFA).
    hubness_init_, hubness_ : float     support hubness after β-Procrustes and with the served map W_.
    assignments_ : ndarray (N, C)       U-LFA soft assignments (None when supervised).
    heldout_scores_ : ndarray (N,) or None   each support row's best score under a model fitted
                                        without it (cross-fitted; calibrates rejection thresholds).
    classes_ : ndarray (C,)             the class labels, in prototype-row order.
    n_features_in_ : int                image dimension.

    Example
    -------
    >>> lfa = LFA(random_state=0).fit(X, y, text_emb)
    >>> lfa.predict(X_test), lfa.score(X_test, y_test)
    >>> LFA.paper(random_state=0).fit(X, y, text_emb)     # the paper's algorithm, options off
    >>> LFA(random_state=0).fit(X, ["cat", "dog", ...])     # no text: class means as prototypes
    """

    _parameter_constraints: dict[str, list[Any]] = {
        "beta": [StrOptions({"auto"}), Interval(Real, 0.0, 1.0, closed="both")],
        "steps": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "projection": options(*PROJECTIONS),
        "prototype_mix": [StrOptions({"auto"}), Interval(Real, 0.0, 1.0, closed="both")],
        "support_prototypes": [StrOptions({"auto", *SUPPORT_KINDS})],
        "refine_prototypes": [StrOptions({"auto", "held-out"}), BOOLEAN],
        "center": [StrOptions({"auto"}), BOOLEAN],
        "mapping": [StrOptions({"auto", *CLASS_MAPPINGS})],
        "keep_zero_shot": [BOOLEAN],
        "new_class_map": [StrOptions({"auto", "ema"})],
        "text_check": [StrOptions({"auto"}), BOOLEAN],
        "k": [Interval(Integral, 1, None, closed="left")],
        "margin_scale": [Interval(Real, 0.0, None, closed="neither")],
        "lr": [Interval(Real, 0.0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0.0, None, closed="left")],
        "final_lr": [Interval(Real, 0.0, None, closed="left")],
        "noise_std": [Interval(Real, 0.0, None, closed="left")],
        "dropout": [Interval(Real, 0.0, 1.0, closed="left")],
        "batch_fraction": [Interval(Real, 0.0, 1.0, closed="right")],
        "cv_splits": [Interval(Integral, 1, None, closed="left")],
        "cv_val_size": [Interval(Real, 0.0, 1.0, closed="neither")],
        "n_rounds": [Interval(Integral, 1, None, closed="left")],
        "sinkhorn_reg": [Interval(Real, 0.0, None, closed="neither")],
        "temperature": [Interval(Real, 0.0, None, closed="neither")],
        "precision": [StrOptions(set(PRECISIONS))],
        "warm_start": [BOOLEAN],
        "device": [str],
        "random_state": [None, Interval(Integral, 0, 2**32 - 1, closed="both")],  # numpy's seed range
        "verbose": [BOOLEAN],
    }
    """What each parameter may be (checked at :meth:`fit`)."""

    def __init__(
        self,
        beta: float | str = "auto",
        steps: int | str = "auto",
        *,
        projection: str | bool = "auto",
        prototype_mix: float | str = "auto",
        support_prototypes: str = "auto",
        refine_prototypes: bool | str = "auto",
        center: bool | str = False,
        mapping: str = "auto",
        keep_zero_shot: bool = True,
        new_class_map: str = "auto",
        text_check: bool | str = "auto",
        k: int = _DEFAULT.k,
        margin_scale: float = _DEFAULT.margin_scale,
        lr: float = _DEFAULT.lr,
        weight_decay: float = _DEFAULT.weight_decay,
        final_lr: float = _DEFAULT.final_lr,
        noise_std: float = _DEFAULT.noise_std,
        dropout: float = _DEFAULT.dropout,
        batch_fraction: float = _DEFAULT.batch_fraction,
        cv_splits: int = 3,
        cv_val_size: float = 0.2,
        n_rounds: int = 5,
        sinkhorn_reg: float = 0.0025,
        temperature: float = 0.01,
        precision: str = _DEFAULT.precision,
        warm_start: bool = False,
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.beta = beta
        self.steps = steps
        self.projection = projection
        self.prototype_mix = prototype_mix
        self.support_prototypes = support_prototypes
        self.refine_prototypes = refine_prototypes
        self.center = center
        self.mapping = mapping
        self.keep_zero_shot = keep_zero_shot
        self.new_class_map = new_class_map
        self.text_check = text_check
        self.k = k
        self.margin_scale = margin_scale
        self.lr = lr
        self.weight_decay = weight_decay
        self.final_lr = final_lr
        self.noise_std = noise_std
        self.dropout = dropout
        self.batch_fraction = batch_fraction
        self.cv_splits = cv_splits
        self.cv_val_size = cv_val_size
        self.n_rounds = n_rounds
        self.sinkhorn_reg = sinkhorn_reg
        self.temperature = temperature
        self.precision = precision
        self.warm_start = warm_start
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]  # aligned embeddings are float32, as FAISS takes them
        return tags

    @classmethod
    def paper(cls, **params: Any) -> "LFA":
        """The paper's algorithm as its public code runs it: 200 steps, β by random-split CV with no
        preference for the identity, every option off, float32; the image rows projected into the text
        width (the paper's text; the code projects the wider side down: ``projection="shrink"``), unless
        that loses their distances (then widened); one guard the code lacks (``text_check=True``): where
        the names' geometry and zero-shot are both at chance, the support's own classifier in the rows'
        own space, never below the class means. Other parameters (``beta``, ``steps``, ...) pass through:
        ``LFA.paper(random_state=0).fit(X, y, text_emb)``.
        """
        return cls(**{**PAPER_OPTIONS, **params})

    # ------------------------------------------------------------------ parameters
    def _validate_params(self) -> None:
        validate_params(self.get_params(deep=False), self._parameter_constraints, type(self).__name__)

    def refine_config(self) -> RefineConfig:
        """The refinement settings of these parameters."""
        return RefineConfig(
            lr=self.lr, weight_decay=self.weight_decay, final_lr=self.final_lr, k=self.k,
            margin_scale=self.margin_scale, noise_std=self.noise_std, dropout=self.dropout,
            batch_fraction=self.batch_fraction, precision=self.precision,
        )

    def _fit_options(self, min_rows: int, affine: bool, same_space: bool,
                     previous: FittedState | None, names_informative: bool | None = None) -> FitOptions:
        """The options of a supervised fit as asked for (``min_rows``: the support rows of the smallest
        class; ``affine``: whether queries reach W by an affine map, which centring and class biases
        need; ``same_space``: no projection; ``previous``: the state a warm start keeps its centring of;
        ``names_informative``: the verdict of ``text_check=True`` on the unprojected rows)."""
        mix = self.prototype_mix
        bias_mix = self.support_prototypes == "discriminant" and mix != "auto" and float(mix) > 0
        if not affine and (self.center is True or bias_mix):
            raise InvalidParameterError(
                "center=True and the discriminant prototype_mix need queries that reach W by an affine map, but the "
                "image rows are projected and normalised (projection='to_text' or 'shrink'); use projection='widen'."
            )
        if mix == "auto":
            mixes = MIX_GRID if affine or self.support_prototypes != "discriminant" else (0.0,)
        else:
            mixes = (float(mix),)
        centers = ((False, True) if affine else (False,)) if self.center == "auto" else (bool(self.center),)
        return FitOptions(
            beta=None if self.beta == "auto" else float(self.beta),
            steps=None if self.steps == "auto" else int(self.steps),
            mixes=tuple(mixes),
            mappings=CLASS_MAPPINGS if self.mapping == "auto" else (self.mapping,),
            centers=centers if previous is None else (bool(previous.center_),),
            refines=(False, True) if self.refine_prototypes == "held-out"
            else (min_rows >= TRAINED_PROTOTYPES_MIN_ROWS,) if self.refine_prototypes == "auto"
            else (bool(self.refine_prototypes),),
            kinds=(SUPPORT_KINDS if affine else ("mean",)) if self.support_prototypes == "auto"
            else (self.support_prototypes,),
            keep_zero_shot=bool(self.keep_zero_shot),
            new_class_map=self.new_class_map, cv_splits=int(self.cv_splits), cv_val_size=float(self.cv_val_size),
            blend=mix == "auto" and len(mixes) > 1 and affine and self.support_prototypes in ("auto", "discriminant"),
            same_space=same_space, text_check=self.text_check, names_informative=names_informative,
        )

    def _check_unsupervised_options(self) -> None:
        on = [name for name, value in (("center", self.center), ("refine_prototypes", self.refine_prototypes))
              if value is True]
        if self.prototype_mix != "auto" and float(self.prototype_mix) > 0:
            on.append("prototype_mix")
        if on:
            raise InvalidParameterError(
                f"{', '.join(on)} need labels, but fit got y=None (unsupervised LFA); leave them at 'auto' or off."
            )

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any = None, text_emb: Any = None, class_names: Any = None) -> "LFA":
        """Learn W (and the chosen options) from support embeddings ``X``, labels ``y`` and ``text_emb``.

        Parameters
        ----------
        X : (N, d_img) or (N, V, d_img) image embeddings (V views per image, view 0 = the main
            view, e.g. the centre crop). Any real dtype, numpy or torch.
        y : (N,) class labels, or None for unsupervised LFA (which needs ``text_emb``). Integers
            in 0..C-1 index the rows of ``text_emb``; other labels (any hashable) need
            ``class_names`` naming each row, or no ``text_emb`` at all.
        text_emb : (C, d_txt) class prototypes (e.g. text embeddings of the class names), or
            None: the L2-normalised class means of the support (uni-modal alignment, no text).
        class_names : C labels, one per row of ``text_emb`` (default: 0..C-1, or the sorted labels
            of ``y`` when there is no ``text_emb``).

        A fit that raises leaves the estimator as it was (a fitted one keeps answering as before).
        """
        return fit_or_restore(self, self._fit, X, y, text_emb, class_names)

    def _fit(self, X: Any, y: Any, text_emb: Any, class_names: Any) -> "LFA":
        started = time.perf_counter()
        self._validate_params()
        try:
            import torch
            import torch.nn.functional as F
            from tqdm.auto import tqdm

            from .device import resolve_device
            from .solvers.geometry import names_at_chance
            from .solvers.supervised import first_view, solve_supervised
            from .solvers.unit_rows import unit_rows
            from .solvers.unsupervised import solve_unsupervised
        except ImportError as err:
            raise MissingExtraError(
                f"fitting LFA needs torch ({err}); `pip install lfa-index` brings it (a serving-only install "
                "answers queries of a saved index without it)."
            ) from err
        device = resolve_device(self.device)
        previous = self._fitted() if self.warm_start and hasattr(self, "W_") else None
        x_np = check_embeddings(X, name="X", ndims=(2, 3), copy=False)  # read, never written
        codes, classes, p_np = encode_targets(y, x_np, text_emb, class_names)
        if previous is not None and (x_np.shape[-1] != self.n_features_in_ or p_np.shape[1] != self._prototype_dim()):
            raise DimensionMismatchError(
                "warm_start needs X and text_emb of the same dimensions as the previous fit "
                f"({self.n_features_in_} and {self._prototype_dim()}); set warm_start=False to fit from scratch."
            )
        # a fresh seed without touching torch's global generator (the caller's seeded code stays seeded)
        seed = self.random_state if self.random_state is not None else int(np.random.SeedSequence().entropy % 2**31)
        labels = None if codes is None else torch.from_numpy(codes).to(device)
        names_informative = None  # text_check=True: the names' geometry, read before any projection
        if self.text_check is True and codes is not None and previous is None:
            names_informative = not names_at_chance(
                F.normalize(first_view(torch.from_numpy(x_np)).to(device), dim=-1), labels,
                F.normalize(torch.from_numpy(p_np).to(device), dim=-1), random_state=seed)
        widths = (x_np.shape[-1], p_np.shape[1])
        kind = self._projection_kind(*widths, len(x_np), names_informative)
        width = widths[1] if kind == "to_text" else min(widths) if kind == "shrink" else max(widths)
        check_fit_memory(len(x_np), x_np.shape[1] if x_np.ndim == 3 else 1, width, p_np.shape[0])
        gen, coin = torch.Generator(device=device).manual_seed(seed), torch.Generator().manual_seed(seed + 1)
        d_img = int(x_np.shape[-1])
        if previous is None:
            matrix, side, kind = self._fit_projection(d_img, p_np.shape[1], seed, kind)
        else:
            matrix, side, kind = previous.projection_, previous.projection_side_, previous.projection_kind_
        x = unit_rows(torch.from_numpy(project_rows(x_np, "image", matrix, side)).to(device))
        protos = unit_rows(torch.from_numpy(project_rows(p_np, "text", matrix, side)).to(device))
        text_prototypes = protos.cpu().numpy()
        if codes is None:
            self._check_unsupervised_options()
        # counts every refinement step, held-out fold runs included; its rate is the mean since the
        # first step (smoothing=0), so its estimate does not swing with the checkpoints' scoring
        bar = tqdm(total=0, desc="LFA fit", unit="step", smoothing=0, disable=not self.verbose, leave=False)
        shared = dict(config=self.refine_config(), seed=seed, generator=gen, coin=coin, progress=bar, previous=previous)
        try:
            if codes is None:
                state = solve_unsupervised(
                    x, protos, beta=None if self.beta == "auto" else float(self.beta),
                    steps=None if self.steps == "auto" else int(self.steps), n_rounds=self.n_rounds,
                    sinkhorn_reg=self.sinkhorn_reg, cv_splits=self.cv_splits, cv_val_size=self.cv_val_size,
                    mapping="average" if self.mapping == "average" else "task", **shared,
                )
            else:
                counts = np.bincount(codes)
                options = self._fit_options(int(counts[counts > 0].min()), affine_queries(kind, side), side is None,
                                            previous, names_informative)
                state = solve_supervised(x, labels, protos, options=options, **shared)
        finally:
            bar.close()
        state.classes_, state.n_features_in_, state.text_prototypes_ = classes, d_img, text_prototypes
        state.projection_, state.projection_side_, state.projection_kind_ = matrix, side, kind
        state.fit_seconds_ = time.perf_counter() - started
        state.summary_ = summary_line(state, self.n_rounds)
        self._set_fitted(state)
        if self.verbose:
            print(self.summary_, file=sys.stderr)
        return self

    def _fit_projection(self, d_img: int, d_txt: int, seed: int, kind: str
                        ) -> tuple[np.ndarray | None, str | None, str | None]:
        """The ``kind`` of projection of differing widths: (matrix, side it maps, kind); None for equal ones."""
        if d_img == d_txt:
            return None, None, None
        if self.projection is False:
            raise DimensionMismatchError(
                f"X has {d_img} dimensions but text_emb has {d_txt}; set projection='auto' "
                "to bridge them with a seeded random projection, or embed both with models of the same width."
            )
        image_wider = d_img > d_txt
        if kind == "to_text":  # the paper: the image rows into the text width, down or up
            return random_projection_matrix(d_img, d_txt, seed), "image", kind
        if kind == "shrink":
            side, d_in, d_out = ("image", d_img, d_txt) if image_wider else ("text", d_txt, d_img)
            return random_projection_matrix(d_in, d_out, seed), side, kind
        side, d_in, d_out = ("text", d_txt, d_img) if image_wider else ("image", d_img, d_txt)
        return isometric_embedding_matrix(d_in, d_out, seed), side, kind

    def _projection_kind(self, d_img: int, d_txt: int, n_rows: int, names_informative: bool | None = None) -> str:
        """How differing widths are bridged (``projection="auto"``: "widen"; "widen" too where
        ``text_check=True`` found the names at chance, and where "to_text" would project ``n_rows``
        image rows down beyond what keeps their distances: nothing is lost)."""
        if self.projection == "auto" or names_informative is False:
            return "widen"
        if self.projection == "to_text" and to_text_widens(d_img, d_txt, n_rows):
            return "widen"
        return str(self.projection)


def affine_queries(projection_kind: str | None, projection_side: str | None) -> bool:
    """Whether queries reach W by an affine map (needed for centring and class biases): not when the
    image rows are projected by a Gaussian matrix (to the text width, or down) and normalised."""
    return not (projection_kind in ("shrink", "to_text") and projection_side == "image")
