"""The LFA estimator: orthogonal Procrustes -> beta-Procrustes -> ARerank refinement, plus options.

Supervised (paper section 4.4, "Supervised Alignment"), unsupervised (U-LFA, Sinkhorn pseudo-
assignments alternated with refinement), base-to-new (a second map W_tt, paper eq. 9) and
disjoint encoders (a seeded projection when the dimensions differ). The fitting itself lives in
module-level solvers (:mod:`~lfa_index.core.supervised`, :mod:`~lfa_index.core.unsupervised`);
this class holds the parameters, runs one of them and serves the fitted classifier.

Beyond the paper, chosen on the support set alone within a fixed budget (see
:mod:`~lfa_index.core.selection`): hybrid prototypes (:mod:`~lfa_index.core.prototypes`), the
average of the two maps, the step count, a zero-shot guard on β and a map for new classes chosen
for unseen classes (:mod:`~lfa_index.core.beta`). Centring and prototypes trained with W are
available as options. :meth:`LFA.paper` is the paper's algorithm with every option off.

The classifier is always a nearest-vector search: a query ``x`` is mapped to
``z = (normalize(proj(normalize(x))) − μ) W`` and class c scores ``z·q_c + b_c``, where ``q_c``
are ``prototypes_``, ``b_c`` ``intercept_`` and μ ``feature_mean_`` (zero without centring, and b
is zero unless the discriminant mix is on). ``decision_function`` reports ``(z·q_c + b_c)/||z||``,
the aligned cosine when ``b = 0``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from .beta import identity_is_informative
from .config import RefineConfig
from .errors import DimensionMismatchError, InvalidInputError, InvalidParameterError
from .projection import isometric_embedding_matrix, project, random_projection_matrix
from .prototypes import SUPPORT_KINDS
from .selection import MAPPINGS, MIX_GRID, Candidate, Variant
from .supervised import Asked, SupervisedFit, Warm, fit_supervised
from .unsupervised import fit_unsupervised
from .validation import (
    check_choice,
    check_embeddings,
    check_labels,
    check_number,
    resolve_device,
)

Mapping = Literal["task", "tt", "average"]
_CHUNK = 65536
_DEFAULT = RefineConfig()
PROJECTIONS = ("auto", "widen", "shrink", False)
PAPER_OPTIONS: dict[str, Any] = dict(
    projection="shrink", prototype_mix=0.0, refine_prototypes=False, center=False, mapping="task",
    keep_zero_shot=False, new_class_map="ema",
)
"""The options of :meth:`LFA.paper`: the paper's algorithm, every option beyond it off."""


class LFA(ClassifierMixin, BaseEstimator):
    """Linear Feature Alignment of image embeddings to class prototypes (Ouali et al., ICCV 2023).

    Parameters
    ----------
    beta : "auto" or float in [0, 1], default="auto"
        Pull of the Procrustes map towards the identity (β=1: identity, β=0: orthogonal
        Procrustes). "auto" cross-validates the grid 0, 0.05, ..., 1 on the support set.
    steps : "auto" or int >= 0, default="auto"
        Refinement steps. "auto" picks them on held-out support rows (checkpoints of one
        schedule, see :mod:`~lfa_index.core.selection`).
    projection : {"auto", "widen", "shrink", False}, default="auto"
        How differing image/text dimensions are bridged. "shrink" (the paper) maps the wider side
        down with a seeded Gaussian random projection; "widen" maps the narrower side up with a
        seeded isometric embedding, which loses nothing (W then has the wider dimension);
        "auto" is "widen". False raises when the dimensions differ.
    prototype_mix : "auto" or float in [0, 1], default="auto"
        λ of the hybrid prototypes ``(1 − λ)·text + λ·support`` in the aligned space (0: the
        paper's text prototypes). "auto" picks λ in {0, 0.25, 0.5, 0.75, 1} on held-out support
        rows (¼ at 1 shot, where nothing can be held out).
    support_prototypes : {"discriminant", "mean"}, default="discriminant"
        The support side of the mix: the class's linear discriminant in the aligned space (class
        mean under GDA's shared shrunk precision, with its bias), or its L2-normalised mean.
    refine_prototypes : bool or "auto", default=False
        Train the prototypes jointly with W (from the text prototypes, same loss). "auto" tries
        it on held-out rows (one more run per fold).
    center : bool or "auto", default=False
        Subtract the support mean from the (projected) image rows before Procrustes and
        refinement. "auto" tries it on held-out rows (one more run per fold).
    mapping : {"auto", "task", "average"}, default="auto"
        Map of the fitted classes: the refined task map or the average of it and the paper's
        W_tt (§4.5, Table 7). "auto" keeps the average only on a significant held-out gain.
    keep_zero_shot : bool, default=True
        Where images and prototypes share a space (the identity beats chance on the support),
        keep β = 1 (zero-shot) unless a smaller β shows a significant held-out gain. The paper
        takes the best β of its CV (False).
    new_class_map : {"auto", "ema"}, default="auto"
        Map for classes added from text alone (``W_tt_``): "ema" is the paper's moving average of
        W over the first half of refinement; "auto" is β-Procrustes with β chosen on folds that
        hold out whole classes (how the map carries over to unseen classes), zero-shot kept
        unless a smaller β shows a significant gain.
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
        Sinkhorn/refinement rounds of unsupervised LFA (``fit(X, None, prototypes)``).
    sinkhorn_reg : float, default=0.0025
        Entropic regularisation of the U-LFA transport problem (blur 0.05 squared).
    temperature : float, default=0.01
        Softmax temperature of ``predict_proba`` over aligned scores (CLIP's logit scale 100).
    precision : {"float32", "bf16-mixed"}, default="float32"
        Arithmetic of refinement. "bf16-mixed" runs the matrix products in bfloat16 under
        ``torch.autocast`` (float32 weights, optimiser and norms): faster on CPUs with native
        bf16 (AVX512-BF16/AMX) and on GPUs, at bf16 resolution in the loss.
    warm_start : bool, default=False
        Refit from the current maps (β, step count and options kept) instead of from
        β-Procrustes.
    device : str, default="auto"
        "auto" (CUDA when available), "cpu", "cuda" or "cuda:N". Computation is float32.
    random_state : int or None, default=None
        Seed of every random choice (splits, batches, noise, dropout, projection).
    verbose : bool, default=False
        Show one progress bar for the whole fit and print a one-line summary at the end.

    The options need labels and a query side that stays affine: with ``projection="shrink"`` and
    wider image embeddings, "auto" keeps centring and the discriminant mix off, and asking for
    them raises. Unsupervised fits (``y=None``) run the paper's algorithm ("auto" means off).

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
    center_, prototype_mix_, refine_prototypes_, mapping_ : the options used.
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
    projection_kind_ : "shrink", "widen" or None.
    loss_curve_ : list[float]           ARerank loss per refinement step (last round for U-LFA).
    hubness_init_, hubness_ : float     support hubness after β-Procrustes and after refinement.
    assignments_ : ndarray (N, C)       U-LFA soft assignments (None when supervised).
    classes_ : ndarray (C,)             0..C-1.  n_features_in_ : image dimension.

    Example
    -------
    >>> lfa = LFA(random_state=0).fit(X, y, prototypes)
    >>> lfa.predict(X_test), lfa.score(X_test, y_test)
    >>> LFA.paper(random_state=0).fit(X, y, prototypes)   # the paper's algorithm, options off
    """

    def __init__(
        self,
        beta: float | str = "auto",
        steps: int | str = "auto",
        *,
        projection: str | bool = "auto",
        prototype_mix: float | str = "auto",
        support_prototypes: str = "discriminant",
        refine_prototypes: bool | str = False,
        center: bool | str = False,
        mapping: str = "auto",
        keep_zero_shot: bool = True,
        new_class_map: str = "auto",
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

    @classmethod
    def paper(cls, **params: Any) -> "LFA":
        """LFA exactly as the paper runs it: every option off, the wider side projected down.

        Other parameters (``beta``, ``steps``, ``random_state``, ...) pass through.

        Example
        -------
        >>> LFA.paper(random_state=0).fit(X, y, prototypes)
        """
        return cls(**{**PAPER_OPTIONS, **params})

    # ------------------------------------------------------------------ parameters
    def _validate_params(self) -> None:
        if self.beta != "auto":
            check_number(self.beta, "beta", low=0.0, high=1.0)
        if self.steps != "auto":
            check_number(self.steps, "steps", low=0, integer=True)
        check_choice(self.projection, "projection", PROJECTIONS)
        if self.prototype_mix != "auto":
            check_number(self.prototype_mix, "prototype_mix", low=0.0, high=1.0)
        check_choice(self.support_prototypes, "support_prototypes", SUPPORT_KINDS)
        check_choice(self.refine_prototypes, "refine_prototypes", ["auto", True, False])
        check_choice(self.center, "center", ["auto", True, False])
        check_choice(self.mapping, "mapping", ("auto",) + MAPPINGS)
        check_choice(self.keep_zero_shot, "keep_zero_shot", [True, False])
        check_choice(self.new_class_map, "new_class_map", ["auto", "ema"])
        check_number(self.k, "k", low=1, integer=True)
        check_number(self.margin_scale, "margin_scale", low=0.0, low_inclusive=False)
        check_number(self.lr, "lr", low=0.0, low_inclusive=False)
        check_number(self.weight_decay, "weight_decay", low=0.0)
        check_number(self.final_lr, "final_lr", low=0.0)
        check_number(self.noise_std, "noise_std", low=0.0)
        check_number(self.dropout, "dropout", low=0.0, high=1.0, high_inclusive=False)
        check_number(self.batch_fraction, "batch_fraction", low=0.0, high=1.0, low_inclusive=False)
        check_number(self.cv_splits, "cv_splits", low=1, integer=True)
        check_number(self.cv_val_size, "cv_val_size", low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        check_number(self.n_rounds, "n_rounds", low=1, integer=True)
        check_number(self.sinkhorn_reg, "sinkhorn_reg", low=0.0, low_inclusive=False)
        check_number(self.temperature, "temperature", low=0.0, low_inclusive=False)
        check_choice(self.precision, "precision", ["float32", "bf16-mixed"])
        check_choice(self.warm_start, "warm_start", [True, False])
        if self.random_state is not None:
            check_number(self.random_state, "random_state", low=0, integer=True)

    def refine_config(self) -> RefineConfig:
        """The refinement settings of these parameters."""
        return RefineConfig(
            lr=self.lr, weight_decay=self.weight_decay, final_lr=self.final_lr, k=self.k,
            margin_scale=self.margin_scale, noise_std=self.noise_std, dropout=self.dropout,
            batch_fraction=self.batch_fraction, precision=self.precision,
        )

    def _asked(self) -> Asked:
        """The options as asked for, with those that need an affine query side checked."""
        affine = self._affine_queries()
        mix = self.prototype_mix
        bias_mix = self.support_prototypes == "discriminant" and mix != "auto" and float(mix) > 0
        if not affine and (self.center is True or bias_mix):
            raise InvalidParameterError(
                "center=True and the discriminant prototype_mix need queries that reach W by an affine map, but "
                "projection='shrink' normalises the projected image rows; use projection='widen' (or 'auto')."
            )
        if mix == "auto":
            mixes = MIX_GRID if affine or self.support_prototypes == "mean" else (0.0,)
        else:
            mixes = (float(mix),)
        return Asked(
            beta=None if self.beta == "auto" else float(self.beta),
            steps=None if self.steps == "auto" else int(self.steps),
            mixes=tuple(mixes),
            mappings=MAPPINGS if self.mapping == "auto" else (self.mapping,),
            centers=((False, True) if affine else (False,)) if self.center == "auto" else (bool(self.center),),
            refines=(False, True) if self.refine_prototypes == "auto" else (bool(self.refine_prototypes),),
            support_kind=self.support_prototypes, keep_zero_shot=bool(self.keep_zero_shot),
            new_class_map=self.new_class_map, cv_splits=int(self.cv_splits), cv_val_size=float(self.cv_val_size),
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
    def fit(self, X: Any, y: Any, prototypes: Any) -> "LFA":
        """Learn W (and the chosen options) from support embeddings ``X``, labels ``y`` and ``prototypes``.

        Parameters
        ----------
        X : (N, d_img) or (N, V, d_img) image embeddings (V views per image, view 0 = the main
            view, e.g. the centre crop). Any float dtype, numpy or torch.
        y : (N,) int labels in 0..C-1, or None for unsupervised LFA.
        prototypes : (C, d_txt) class prototypes (e.g. text embeddings of the class names).
        """
        started = time.perf_counter()
        self._validate_params()
        device = resolve_device(self.device)
        warm = self.warm_start and hasattr(self, "W_")
        x = check_embeddings(X, name="X", ndims=(2, 3), device=device)
        protos = check_embeddings(prototypes, name="prototypes", ndims=(2,), device=device)
        if protos.shape[0] < 2:
            raise InvalidInputError(
                f"prototypes has {protos.shape[0]} row(s); LFA needs at least 2 classes (one prototype row per class)."
            )
        labels = None if y is None else check_labels(y, n_rows=x.shape[0], n_classes=protos.shape[0], device=device)
        if warm and (x.shape[-1] != self.n_features_in_ or protos.shape[1] != self._prototype_dim()):
            raise DimensionMismatchError(
                "warm_start needs image and prototype embeddings of the same dimensions as the previous fit "
                f"({self.n_features_in_} and {self._prototype_dim()}); set warm_start=False to fit from scratch."
            )
        seed = self.random_state if self.random_state is not None else int(torch.seed() % (2**31))
        gen, coin = torch.Generator(device=device), torch.Generator()
        gen.manual_seed(seed)
        coin.manual_seed(seed + 1)

        d_img = int(x.shape[-1])
        if not warm:
            self._fit_projection(d_img, protos.shape[1], seed)
        x, protos = self._project_image(x), self._project_text(protos)
        x, protos = F.normalize(x, dim=-1), F.normalize(protos, dim=-1)

        self.n_features_in_ = d_img
        self.classes_ = np.arange(protos.shape[0])
        self.text_prototypes_ = protos.cpu().numpy()
        bar = tqdm(total=0, desc="LFA fit", unit="step", disable=not self.verbose, leave=False)
        try:
            if labels is None:
                self._check_unsupervised_options()
                self._fit_unsupervised(x, protos, seed, gen, coin, warm, bar)
            else:
                self._fit_supervised(x, labels, protos, seed, gen, coin, warm, bar)
        finally:
            bar.close()
        self.fit_seconds_ = time.perf_counter() - started
        self.summary_ = self._summary()
        if self.verbose:
            print(self.summary_, file=sys.stderr)
        return self

    def _fit_supervised(self, x, labels, protos, seed, gen, coin, warm, bar) -> None:
        asked = self._asked()
        informative = self.projection_side_ is None and identity_is_informative(
            x[:, 0] if x.ndim == 3 else x, labels, protos)
        previous = None
        if warm:
            ema = self.W_ema_ if getattr(self, "W_ema_", None) is not None else self.W_tt_
            task = self.W_ if self.mapping_ == "task" else 2 * np.asarray(self.W_avg_) - np.asarray(ema)
            previous = Warm(
                W=torch.as_tensor(task, device=x.device), W_ema=torch.as_tensor(ema, device=x.device),
                mean=torch.as_tensor(self.feature_mean_, device=x.device), beta=float(self.beta_),
                steps=int(self.steps_),
                candidate=Candidate(Variant(bool(self.center_), bool(self.refine_prototypes_)), int(self.steps_),
                                    self.mapping_, float(self.prototype_mix_)),
            )
            asked = Asked(**{**asked.__dict__, "centers": (bool(self.center_),)})
        fit = fit_supervised(x, labels, protos, asked=asked, config=self.refine_config(),
                             identity_informative=informative, seed=seed, generator=gen, coin=coin, progress=bar,
                             warm=previous)
        self._store_supervised(fit)

    def _store_supervised(self, fit: SupervisedFit) -> None:
        numpy = lambda t: None if t is None else t.detach().cpu().numpy()  # noqa: E731
        self.W_, self.W_tt_, self.W_ema_ = numpy(fit.W), numpy(fit.W_new), numpy(fit.W_ema)
        self.W_avg_ = numpy((fit.W_task + fit.W_ema) / 2)
        self.prototypes_, self.intercept_ = numpy(fit.prototypes), numpy(fit.intercept)
        self.refined_prototypes_ = numpy(fit.refined_prototypes)
        self.feature_mean_ = numpy(fit.feature_mean)
        chosen = fit.candidate
        self.center_, self.refine_prototypes_ = chosen.variant.center, chosen.variant.refine_prototypes
        self.prototype_mix_, self.mapping_, self.steps_ = chosen.mix, chosen.mapping, chosen.steps
        self.beta_, self.beta_selection_, self.beta_scores_ = fit.beta.beta, fit.beta.how, fit.beta.scores
        self.new_class_beta_ = None if fit.new_class_beta is None else fit.new_class_beta.beta
        self.step_trials_ = fit.step_trials
        self.selection_ = None if fit.selection is None else {
            **fit.selection.as_dict(), "new_class_map": self.new_class_map,
            "new_class_beta": self.new_class_beta_,
            "new_class_beta_selection": None if fit.new_class_beta is None else fit.new_class_beta.how,
        }
        self.loss_curve_, self.hubness_init_, self.hubness_ = fit.loss_curve, fit.hubness_init, fit.hubness
        self.assignments_ = None

    def _fit_unsupervised(self, x, protos, seed, gen, coin, warm, bar) -> None:
        fit = fit_unsupervised(
            x, protos, beta=None if self.beta == "auto" else float(self.beta),
            steps=None if self.steps == "auto" else int(self.steps), n_rounds=self.n_rounds,
            sinkhorn_reg=self.sinkhorn_reg, cv_splits=self.cv_splits, cv_val_size=self.cv_val_size,
            config=self.refine_config(), seed=seed, generator=gen, coin=coin, progress=bar,
            warm=(torch.as_tensor(self.W_, device=x.device), float(self.beta_)) if warm else None,
        )
        task, ema = fit.W.cpu().numpy(), fit.W_ema.cpu().numpy()
        self.W_avg_ = (task + ema) / 2
        self.mapping_ = "average" if self.mapping == "average" else "task"
        self.W_ = self.W_avg_ if self.mapping_ == "average" else task
        self.W_tt_ = self.W_ema_ = ema
        self.prototypes_ = self.text_prototypes_
        self.intercept_ = np.zeros(len(self.text_prototypes_), dtype=np.float32)
        self.feature_mean_ = np.zeros(task.shape[0], dtype=np.float32)
        self.refined_prototypes_ = None
        self.center_, self.refine_prototypes_, self.prototype_mix_ = False, False, 0.0
        self.beta_, self.beta_selection_, self.beta_scores_ = fit.beta.beta, fit.beta.how, fit.beta.scores
        self.new_class_beta_ = None
        self.steps_, self.step_trials_, self.selection_ = fit.steps, fit.step_trials, None
        self.loss_curve_, self.hubness_init_, self.hubness_ = fit.loss_curve, fit.hubness_init, fit.hubness
        self.assignments_ = fit.assignments.cpu().numpy()

    def _summary(self) -> str:
        """One line: β, steps, options, held-out evidence, time."""
        parts = [f"β={self.beta_:g} ({self.beta_selection_})", f"{self.steps_} steps"]
        options = [f"λ={self.prototype_mix_:g}"] if self.prototype_mix_ else []
        options += ["average map"] if self.mapping_ == "average" else []
        options += ["centred"] if self.center_ else []
        options += ["trained prototypes"] if self.refine_prototypes_ else []
        parts.append(", ".join(options) if options else "paper's classifier")
        sel = self.selection_ or {}
        if sel.get("accuracy") is not None:
            ref = sel.get("reference")
            versus = f" vs {100 * ref:.1f}% for the paper's classifier" if ref is not None else ""
            parts.append(f"held-out {100 * sel['accuracy']:.1f}%{versus} ({sel['rows']} rows, {sel['folds']} folds)")
        elif self.step_trials_:
            best = max(t[1] for t in self.step_trials_)
            parts.append(f"held-out {100 * best:.1f}% ({len(self.step_trials_)} checkpoints)")
        elif sel.get("how"):
            parts.append(sel["how"])
        if self.assignments_ is not None:
            parts.append(f"unsupervised, {self.n_rounds} rounds")
        parts.append(f"{self.fit_seconds_:.1f} s")
        return "LFA fit: " + "; ".join(parts)

    def _prototype_dim(self) -> int:
        return self.projection_.shape[1] if self.projection_side_ == "text" else self.text_prototypes_.shape[1]

    def _fit_projection(self, d_img: int, d_txt: int, seed: int) -> None:
        self.projection_side_ = None
        self.projection_ = None
        self.projection_kind_ = None
        if d_img == d_txt:
            return
        if self.projection is False:
            raise DimensionMismatchError(
                f"image embeddings have {d_img} dimensions but prototypes have {d_txt}; set projection='auto' "
                "to bridge them with a seeded random projection, or embed both with models of the same width."
            )
        kind = "widen" if self.projection == "auto" else self.projection
        image_wider = d_img > d_txt
        if kind == "shrink":
            side, d_in, d_out = ("image", d_img, d_txt) if image_wider else ("text", d_txt, d_img)
            self.projection_ = random_projection_matrix(d_in, d_out, seed)
        else:
            side, d_in, d_out = ("text", d_txt, d_img) if image_wider else ("image", d_img, d_txt)
            self.projection_ = isometric_embedding_matrix(d_in, d_out, seed)
        self.projection_side_ = side
        self.projection_kind_ = kind

    def _affine_queries(self) -> bool:
        """Whether queries reach W by an affine map (needed for centring and class biases)."""
        return not (self.projection_kind_ == "shrink" and self.projection_side_ == "image")

    def _project_image(self, x: torch.Tensor) -> torch.Tensor:
        if self.projection_side_ != "image":
            return x
        return project(x, torch.as_tensor(self.projection_, device=x.device))

    def _project_text(self, p: torch.Tensor) -> torch.Tensor:
        if self.projection_side_ != "text":
            return p
        return project(p, torch.as_tensor(self.projection_, device=p.device))

    # ------------------------------------------------------------------ inference
    def _map(self, mapping: str) -> np.ndarray:
        check_choice(mapping, "mapping", ["task", "tt", "average"])
        return {"task": self.W_, "tt": self.W_tt_, "average": self.W_avg_}[mapping]

    def _device(self) -> torch.device:
        return resolve_device(self.device)

    def _mapped(self, X: Any, mapping: str) -> torch.Tensor:
        """``(normalize(proj(normalize(x))) − μ) @ W`` for the chosen map, unnormalised (same shape as X minus d)."""
        check_is_fitted(self, "W_")
        w = torch.as_tensor(self._map(mapping), device=self._device())
        x = check_embeddings(X, name="X", ndims=(2, 3), device=self._device())
        if x.shape[-1] != self.n_features_in_:
            raise DimensionMismatchError(
                f"X has {x.shape[-1]} features but this LFA was fitted on {self.n_features_in_}-d image embeddings; "
                "embed the queries with the same model as the support set."
            )
        centred = bool(self.center_)
        mean_t = torch.as_tensor(self.feature_mean_, device=self._device()) if centred else None
        out = []
        for c in x.split(_CHUNK):
            rows = self._project_image(F.normalize(c, dim=-1))
            out.append((rows - mean_t if centred else rows) @ w)
        return torch.cat(out)

    def transform(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """Aligned, L2-normalised embeddings ``normalize((proj(x) − μ) @ W)``, same shape as X minus d."""
        return F.normalize(self._mapped(X, mapping), dim=-1).cpu().numpy()

    def transform_prototypes(self, prototypes: Any) -> np.ndarray:
        """Bring new class prototypes (d_txt) into the aligned space (projected, L2-normalised)."""
        check_is_fitted(self, "W_")
        p = check_embeddings(prototypes, name="prototypes", ndims=(2,), device=self._device())
        expected = self._prototype_dim()
        if p.shape[1] != expected:
            raise DimensionMismatchError(
                f"prototypes have {p.shape[1]} dimensions but this LFA was fitted on {expected}-d prototypes; "
                "embed new class names with the same text model."
            )
        return F.normalize(self._project_text(F.normalize(p, dim=1)), dim=1).cpu().numpy()

    def decision_function(self, X: Any, mapping: Mapping = "task", prototypes: Any = None) -> np.ndarray:
        """Aligned score (N, C) of each row for each class: ``(z·q_c + b_c) / ||z||``.

        With the fitted classes and ``mapping="task"`` this is the served classifier (the aligned
        cosine when ``intercept_`` is zero). Other maps, or ``prototypes`` (C', d_txt) of other
        classes (e.g. new ones, with ``mapping="tt"``), are scored by aligned cosine to the text
        prototypes. Multi-view input (N, V, d) averages the aligned views.
        """
        z = self._mapped(X, mapping)
        if z.ndim == 3:
            z = F.normalize(z, dim=-1).mean(dim=1)
        norms = z.norm(dim=1, keepdim=True)
        unit = (z / norms).cpu().numpy()
        if prototypes is not None:
            return unit @ self.transform_prototypes(prototypes).T
        if mapping != "task":
            return unit @ np.asarray(self.text_prototypes_).T
        scores = unit @ np.asarray(self.prototypes_).T
        if np.any(self.intercept_):
            scores = scores + np.asarray(self.intercept_)[None, :] / norms.cpu().numpy()
        return scores

    def predict(self, X: Any, mapping: Mapping = "task", prototypes: Any = None) -> np.ndarray:
        """Index of the best-scoring class in the aligned space (N,)."""
        return self.decision_function(X, mapping, prototypes).argmax(axis=1)

    def predict_proba(self, X: Any, mapping: Mapping = "task", prototypes: Any = None) -> np.ndarray:
        """``softmax(aligned score / temperature)`` (N, C)."""
        logits = torch.as_tensor(self.decision_function(X, mapping, prototypes)) / self.temperature
        return torch.softmax(logits, dim=1).numpy()

    def score(self, X: Any, y: Any, sample_weight: Any = None, mapping: Mapping = "task") -> float:
        """Top-1 accuracy of :meth:`predict` on ``(X, y)``."""
        check_is_fitted(self, "W_")
        pred = self.predict(X, mapping)
        truth = check_labels(y, n_rows=len(pred), n_classes=len(self.classes_)).numpy()
        if sample_weight is None:
            return float(np.mean(pred == truth))
        w = np.asarray(sample_weight, dtype=np.float64)
        return float(np.sum(w * (pred == truth)) / np.sum(w))

    # ------------------------------------------------------------------ state
    _FITTED_ARRAYS: tuple[str, ...] = (
        "W_", "W_tt_", "W_ema_", "W_avg_", "prototypes_", "intercept_", "text_prototypes_", "feature_mean_",
        "refined_prototypes_", "projection_", "beta_scores_", "assignments_",
    )
    """Fitted attributes saved as arrays (None allowed: the array is then left out)."""
    _FITTED_VALUES: tuple[str, ...] = (
        "classes_", "n_features_in_", "beta_", "beta_selection_", "steps_", "step_trials_", "projection_side_",
        "projection_kind_", "center_", "prototype_mix_", "refine_prototypes_", "mapping_", "selection_",
        "loss_curve_", "hubness_init_", "hubness_", "new_class_beta_", "summary_", "fit_seconds_",
    )
    """Fitted attributes saved as JSON values."""

    def fitted_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted state as (JSON-ready values, arrays), from the declared attribute lists.

        :meth:`from_fitted_state` restores an equal estimator from them.
        """
        check_is_fitted(self, "W_")
        arrays = {name: np.ascontiguousarray(getattr(self, name)) for name in self._FITTED_ARRAYS
                  if getattr(self, name, None) is not None}
        values = {name: _plain(getattr(self, name, None)) for name in self._FITTED_VALUES}
        return values, arrays

    @classmethod
    def from_fitted_state(cls, params: dict[str, Any], values: dict[str, Any], arrays: dict[str, np.ndarray]) -> "LFA":
        """An LFA with constructor ``params`` and the fitted state written by :meth:`fitted_state`."""
        lfa = cls(**params)
        for name in cls._FITTED_ARRAYS:
            setattr(lfa, name, arrays.get(name))
        for name in cls._FITTED_VALUES:
            setattr(lfa, name, values.get(name))
        lfa.classes_ = np.asarray(values["classes_"])
        if lfa.step_trials_ is not None:
            lfa.step_trials_ = [tuple(t) for t in lfa.step_trials_]
        return lfa


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as plain Python values (JSON-ready)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
