"""The LFA estimator: orthogonal Procrustes -> beta-Procrustes -> ARerank refinement, plus options.

Supervised (paper section 4.4, "Supervised Alignment"), unsupervised (U-LFA, Sinkhorn pseudo-
assignments alternated with refinement), base-to-new (a second map W_tt, paper eq. 9) and
disjoint encoders (a seeded random projection when the dimensions differ).

Beyond the paper, each switchable and chosen on the support set alone ("auto", see
:mod:`~lfa_index.core.selection`): hybrid prototypes (:mod:`~lfa_index.core.prototypes`),
prototypes trained jointly with W, centred rows before Procrustes, and the average of the two
maps. Every option can fall back to the paper's plain run; :meth:`LFA.paper` is that run.

The classifier is always a nearest-vector search: a query ``x`` is mapped to
``z = (normalize(proj(normalize(x))) − μ) W`` and class c scores ``z·q_c + b_c``, where ``q_c``
are ``prototypes_``, ``b_c`` ``intercept_`` and μ ``feature_mean_`` (zero without centring, and b
is zero unless the discriminant mix is on). ``decision_function`` reports ``(z·q_c + b_c)/||z||``,
the aligned cosine when ``b = 0``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .errors import DimensionMismatchError, InvalidInputError, InvalidParameterError
from .metrics import hubness
from .procrustes import beta_procrustes, orthogonal_procrustes, select_beta
from .projection import isometric_embedding_matrix, project, random_projection_matrix
from .prototypes import SUPPORT_KINDS, hybrid_prototypes, support_prototypes
from .refine import refine
from .selection import MAPPINGS, MIX_GRID, Config, Rows, Selection, map_for, select_options
from .sinkhorn import sinkhorn_assignments
from .steps import select_steps
from .validation import (
    check_choice,
    check_embeddings,
    check_labels,
    check_number,
    resolve_device,
)

Mapping = Literal["task", "tt", "average"]
_CHUNK = 65536
BETA_GRID = np.round(np.linspace(0.0, 1.0, 21), 2)
PROJECTIONS = ("auto", "widen", "shrink", False)
PAPER_OPTIONS: dict[str, Any] = dict(
    projection="shrink", prototype_mix=0.0, refine_prototypes=False, center=False, mapping="task"
)
"""The options of :meth:`LFA.paper`: the paper's algorithm, every option beyond it off."""


class LFA(ClassifierMixin, BaseEstimator):
    """Linear Feature Alignment of image embeddings to class prototypes (Ouali et al., ICCV 2023).

    Parameters
    ----------
    beta : "auto" or float in [0, 1], default="auto"
        Pull of the Procrustes map towards the identity (β=1: identity, β=0: orthogonal
        Procrustes). "auto" cross-validates the grid 0, 0.05, ..., 1 on the support set.
    steps : "auto" or int > 0, default="auto"
        Refinement steps. "auto" picks them on a held-out part of the support set.
    projection : {"auto", "widen", "shrink", False}, default="auto"
        How differing image/text dimensions are bridged. "shrink" (the paper) maps the wider side
        down with a seeded Gaussian random projection; "widen" maps the narrower side up with a
        seeded isometric embedding, which loses nothing (W then has the wider dimension);
        "auto" is "widen". False raises when the dimensions differ.
    prototype_mix : "auto" or float in [0, 1], default="auto"
        λ of the hybrid prototypes ``(1 − λ)·text + λ·support`` in the aligned space (0: the
        paper's text prototypes). "auto" picks λ in {0, 0.25, 0.5, 0.75, 1} on held-out support
        rows.
    support_prototypes : {"discriminant", "mean"}, default="discriminant"
        The support side of the mix: the class's linear discriminant in the aligned space (class
        mean under GDA's shared shrunk precision, with its bias), or its L2-normalised mean.
    refine_prototypes : "auto" or bool, default="auto"
        Train the prototypes jointly with W (from the text prototypes, same loss). "auto" keeps
        it when held-out support rows say it helps.
    center : "auto" or bool, default="auto"
        Subtract the support mean from the (projected) image rows before Procrustes and
        refinement. "auto" keeps it when held-out support rows say it helps.
    mapping : {"auto", "task", "average"}, default="auto"
        Map of the fitted classes: the refined task map or the average of it and W_tt (paper
        §4.5, Table 7). "auto" picks on held-out support rows.
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
        ``torch.autocast`` (float32 weights, optimiser and norms): several times faster on CPUs
        with native bf16 (AVX512-BF16/AMX) and on GPUs, at bf16 resolution in the loss.
    warm_start : bool, default=False
        Refit from the current W and W_tt (β and the chosen options kept) instead of from
        β-Procrustes.
    device : str, default="auto"
        "auto" (CUDA when available), "cpu", "cuda" or "cuda:N". Computation is float32.
    random_state : int or None, default=None
        Seed of every random choice (splits, batches, noise, dropout, projection).
    verbose : bool, default=False
        Show a progress bar during refinement.

    The options need labels and a query side that stays affine: with ``projection="shrink"`` and
    wider image embeddings, "auto" keeps centring and the discriminant mix off, and asking for
    them raises. Unsupervised fits (``y=None``) run the paper's algorithm ("auto" means off).

    Attributes
    ----------
    W_ : ndarray (d, d)                 map of the fitted classes: the task map, or its average
                                        with W_tt when ``mapping_ == "average"``.
    W_tt_ : ndarray (d, d)              base-to-new map, the EMA of W during refinement.
    W_avg_ : ndarray (d, d)             (W_ + W_tt_) / 2.
    prototypes_ : ndarray (C, d)        class vectors q of the fitted classes in the aligned space
                                        (the text prototypes for the paper; hybrid otherwise).
    intercept_ : ndarray (C,)           class biases b (zero unless the discriminant mix is on).
    text_prototypes_ : ndarray (C, d)   L2-normalised (projected) text prototypes, the paper's Y.
    refined_prototypes_ : ndarray (C, d) or None   prototypes after joint training.
    feature_mean_ : ndarray (d,)        μ subtracted from the rows (zero without centring).
    center_, prototype_mix_, refine_prototypes_, mapping_ : the options used.
    selection_ : dict or None           how the options were chosen (held-out candidates).
    beta_ : float                       β used.   beta_scores_ : mean CV accuracy per β (or None).
    beta_selection_ : str               "cv", "class-disjoint-cv", "procrustes-fallback" (1 shot,
                                        zero-shot at chance), "fixed" or "warm-start".
    steps_ : int                        refinement steps used (per round for U-LFA).
    step_trials_ : list                 held-out (steps, accuracy, loss) of the plain classifier
                                        when steps="auto"; empty at 1 shot (100 steps).
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
        refine_prototypes: bool | str = "auto",
        center: bool | str = "auto",
        mapping: str = "auto",
        k: int = 3,
        margin_scale: float = 4.0,
        lr: float = 5e-4,
        weight_decay: float = 5e-4,
        final_lr: float = 1e-7,
        noise_std: float = 0.035,
        dropout: float = 0.025,
        batch_fraction: float = 0.75,
        cv_splits: int = 3,
        cv_val_size: float = 0.2,
        n_rounds: int = 5,
        sinkhorn_reg: float = 0.0025,
        temperature: float = 0.01,
        precision: str = "float32",
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
            check_number(self.steps, "steps", low=1, integer=True)
        check_choice(self.projection, "projection", PROJECTIONS)
        if self.prototype_mix != "auto":
            check_number(self.prototype_mix, "prototype_mix", low=0.0, high=1.0)
        check_choice(self.support_prototypes, "support_prototypes", SUPPORT_KINDS)
        check_choice(self.refine_prototypes, "refine_prototypes", ["auto", True, False])
        check_choice(self.center, "center", ["auto", True, False])
        check_choice(self.mapping, "mapping", ("auto",) + MAPPINGS)
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

    def _refine_options(self) -> dict[str, Any]:
        return dict(
            lr=self.lr, weight_decay=self.weight_decay, final_lr=self.final_lr, k=self.k,
            scale=self.margin_scale, noise_std=self.noise_std, dropout=self.dropout,
            batch_fraction=self.batch_fraction,
            precision=self.precision,
        )

    def _options_off(self) -> bool:
        """True when no option can turn on: the paper's code path, bit for bit."""
        return (
            self.prototype_mix != "auto" and float(self.prototype_mix) == 0.0 and self.refine_prototypes is False
            and self.center is False and self.mapping == "task"
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

        gen = torch.Generator(device=device)
        coin = torch.Generator()
        seed = self.random_state if self.random_state is not None else int(torch.seed() % (2**31))
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
        self.prototypes_ = self.text_prototypes_
        if labels is None:
            self._check_unsupervised_options()
            self._fit_unsupervised(x, protos, seed, gen, coin, warm)
        else:
            self.assignments_ = None
            if self._options_off() and not (warm and getattr(self, "selection_", None) is not None):
                self._fit_supervised(x, labels, protos, seed, gen, coin, warm)
            else:
                self._fit_with_options(x, labels, protos, seed, gen, coin, warm)
        self.W_avg_ = (self.W_ + self.W_tt_) / 2
        return self

    def _prototype_dim(self) -> int:
        return self.projection_.shape[1] if self.projection_side_ == "text" else self.prototypes_.shape[1]

    def _fit_projection(self, d_img: int, d_txt: int, seed: int) -> None:
        self.projection_side_ = None
        self.projection_ = None
        self.projection_kind_ = None
        if d_img == d_txt:
            return
        if self.projection is False:
            raise DimensionMismatchError(
                f"image embeddings have {d_img} dimensions but prototypes have {d_txt}; "
                "set projection='auto' to bridge them with a seeded random projection, or embed both with models of the same width."
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
        return not (getattr(self, "projection_kind_", None) == "shrink" and self.projection_side_ == "image")

    def _project_image(self, x: torch.Tensor) -> torch.Tensor:
        if getattr(self, "projection_side_", None) != "image":
            return x
        return project(x, torch.as_tensor(self.projection_, device=x.device))

    def _project_text(self, p: torch.Tensor) -> torch.Tensor:
        if getattr(self, "projection_side_", None) != "text":
            return p
        return project(p, torch.as_tensor(self.projection_, device=p.device))

    def _choose_beta(self, x0, labels, protos, seed) -> tuple[float, np.ndarray | None, str]:
        if self.beta != "auto":
            return float(self.beta), None, "fixed"
        return select_beta(
            x0, labels, protos, betas=BETA_GRID, n_splits=self.cv_splits,
            val_size=self.cv_val_size, random_state=seed,
        )

    def _choose_steps(self, x, labels, protos, beta, seed, gen, coin) -> int:
        if self.steps != "auto":
            self.step_trials_ = None
            return int(self.steps)
        steps, trials = select_steps(
            x, labels, protos, beta=beta, refine_options=self._refine_options(),
            generator=gen, coin=coin, random_state=seed,
        )
        self.step_trials_ = [(t.steps, t.accuracy, t.loss) for t in trials]
        return steps

    def _fit_supervised(self, x, labels, protos, seed, gen, coin, warm) -> None:
        """The paper's algorithm (every option off)."""
        x0 = x[:, 0] if x.ndim == 3 else x
        if warm:
            beta, self.beta_scores_, self.beta_selection_ = self.beta_, None, "warm-start"
            w_init = torch.as_tensor(self.W_, device=x.device)
            w_tt_init = torch.as_tensor(self.W_tt_, device=x.device)
        else:
            beta, self.beta_scores_, self.beta_selection_ = self._choose_beta(x0, labels, protos, seed)
            w_init = beta_procrustes(orthogonal_procrustes(x0, protos[labels]), beta)
            w_tt_init = None
        steps = self._choose_steps(x, labels, protos, beta, seed, gen, coin)
        self.hubness_init_ = hubness(F.normalize(x0 @ w_init, dim=1), protos, labels)
        result = refine(
            w_init, x, labels, protos, steps=steps, w_tt_init=w_tt_init, generator=gen, coin=coin,
            progress=self.verbose, **self._refine_options(),
        )
        self.hubness_ = hubness(F.normalize(x0 @ result.W, dim=1), protos, labels)
        self._store(result, beta, steps)
        self._store_plain_options()

    # ------------------------------------------------------------------ options
    def _requested(self) -> dict[str, Any]:
        """The options as asked for, with those that need an affine query side checked."""
        affine = self._affine_queries()
        bias_mix = self.support_prototypes == "discriminant" and self.prototype_mix != "auto" and float(self.prototype_mix) > 0
        if not affine and (self.center is True or bias_mix):
            raise InvalidParameterError(
                "center=True and the discriminant prototype_mix need queries that reach W by an affine map, but "
                "projection='shrink' normalises the projected image rows; use projection='widen' (or 'auto')."
            )
        if self.prototype_mix == "auto":
            mixes = MIX_GRID if affine or self.support_prototypes == "mean" else (0.0,)
        else:
            mixes = (float(self.prototype_mix),)
        return dict(
            mixes=mixes,
            mappings=MAPPINGS if self.mapping == "auto" else (self.mapping,),
            refine=self.refine_prototypes,
            center=self.center if affine else False,
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

    def _fit_with_options(self, x, labels, protos, seed, gen, coin, warm) -> None:
        """β-Procrustes and refinement with the options chosen on the support set.

        With every option off this is :meth:`_fit_supervised` bit for bit: the same β, the same
        step search on the same random streams, the same final run.
        """
        x0 = x[:, 0] if x.ndim == 3 else x
        asked = self._requested()
        betas: dict[bool, tuple[float, np.ndarray | None, str]] = {}
        rows: dict[bool, Rows] = {}
        if warm:
            center_asked = bool(self.center_)
            mean = torch.as_tensor(self.feature_mean_, device=x.device)
            betas[center_asked] = (self.beta_, None, "warm-start")
            mixes, mappings, refine_asked = (self.prototype_mix_,), (self.mapping_,), self.refine_prototypes_
        else:
            mean = x0.mean(dim=0)
            center_asked = asked["center"]
            if center_asked is not True:
                betas[False] = self._choose_beta(x0, labels, protos, seed)
            if center_asked is not False:
                betas[True] = self._choose_beta(F.normalize(x0 - mean, dim=-1), labels, protos, seed)
            mixes, mappings, refine_asked = asked["mixes"], asked["mappings"], asked["refine"]
        for centred, (beta_c, _, _) in betas.items():
            fit_rows = F.normalize(x - mean, dim=-1) if centred else x
            rows[centred] = Rows(fit_rows, x0 - mean if centred else x0, beta_c)

        fixed_steps = None if self.steps == "auto" else int(self.steps)
        if fixed_steps is not None and len(mixes) == 1 and len(mappings) == 1 and isinstance(refine_asked, bool) \
                and isinstance(center_asked, bool):
            config = Config(center_asked, refine_asked, mappings[0], float(mixes[0]))
            selection = Selection(fixed_steps, config, "fixed")
        else:
            selection = select_options(
                rows, labels, protos, refine_options=self._refine_options(), generator=gen, coin=coin,
                random_state=seed, steps=fixed_steps, mixes=mixes, mappings=mappings, refine_prototypes=refine_asked,
                center=center_asked, support_kind=self.support_prototypes,
            )
        config = selection.config
        chosen = rows[config.center]
        beta, self.beta_scores_, self.beta_selection_ = betas[config.center]
        fit0 = chosen.fit[:, 0] if chosen.fit.ndim == 3 else chosen.fit
        if warm:
            w_init = torch.as_tensor(self.W_, device=x.device)
            w_tt_init = torch.as_tensor(self.W_tt_, device=x.device)
        else:
            w_init = beta_procrustes(orthogonal_procrustes(fit0, protos[labels]), beta)
            w_tt_init = None
        start = protos
        if warm and config.refine_prototypes and getattr(self, "refined_prototypes_", None) is not None:
            start = protos.clone()
            kept = min(len(self.refined_prototypes_), len(start))
            start[:kept] = torch.as_tensor(self.refined_prototypes_[:kept], device=x.device)
        self.hubness_init_ = hubness(F.normalize(fit0 @ w_init, dim=1), protos, labels)
        result = refine(
            w_init, chosen.fit, labels, start, steps=selection.steps, w_tt_init=w_tt_init, generator=gen, coin=coin,
            train_prototypes=config.refine_prototypes, progress=self.verbose, **self._refine_options(),
        )
        self.hubness_ = hubness(F.normalize(fit0 @ result.W, dim=1), protos, labels)
        w = map_for(result, config.mapping)
        base = result.prototypes if config.refine_prototypes else protos
        if config.mix > 0:
            support = support_prototypes(chosen.served @ w, labels, protos.shape[0], self.support_prototypes)
            vectors, intercept = hybrid_prototypes(base, *support, config.mix)
        else:
            vectors, intercept = base, torch.zeros(protos.shape[0], dtype=protos.dtype, device=protos.device)
        self._store(result, beta, selection.steps)
        self.W_ = w.cpu().numpy()
        self.prototypes_ = vectors.cpu().numpy()
        self.intercept_ = intercept.cpu().numpy()
        self.refined_prototypes_ = None if result.prototypes is None else result.prototypes.cpu().numpy()
        self.feature_mean_ = (mean if config.center else torch.zeros_like(mean)).cpu().numpy()
        self.center_ = bool(config.center)
        self.prototype_mix_ = float(config.mix)
        self.refine_prototypes_ = bool(config.refine_prototypes)
        self.mapping_ = config.mapping
        self.step_trials_ = list(selection.step_trials) if self.steps == "auto" else None
        self.selection_ = selection.as_dict()

    def _store_plain_options(self) -> None:
        d = self.W_.shape[0]
        self.intercept_ = np.zeros(len(self.text_prototypes_), dtype=np.float32)
        self.feature_mean_ = np.zeros(d, dtype=np.float32)
        self.refined_prototypes_ = None
        self.center_ = False
        self.prototype_mix_ = 0.0
        self.refine_prototypes_ = False
        self.mapping_ = "task"
        self.selection_ = None

    def _fit_unsupervised(self, x, protos, seed, gen, coin, warm) -> None:
        x0 = x[:, 0] if x.ndim == 3 else x
        assign = sinkhorn_assignments(x0, protos, reg=self.sinkhorn_reg)
        pseudo = assign.argmax(dim=1)
        if warm:
            beta, self.beta_scores_, self.beta_selection_ = self.beta_, None, "warm-start"
            w = torch.as_tensor(self.W_, device=x.device)
        else:
            beta, self.beta_scores_, self.beta_selection_ = self._choose_beta(x0, pseudo, protos, seed)
            w = beta_procrustes(orthogonal_procrustes(x0, protos[pseudo]), beta)
        self.hubness_init_ = hubness(F.normalize(x0 @ w, dim=1), protos, pseudo)
        steps = None
        result = None
        for _ in range(self.n_rounds):
            assign = sinkhorn_assignments(F.normalize(x0 @ w, dim=1), protos, reg=self.sinkhorn_reg)
            pseudo = assign.argmax(dim=1)
            if steps is None:
                steps = self._choose_steps(x, pseudo, protos, beta, seed, gen, coin)
            result = refine(w, x, pseudo, protos, steps=steps, generator=gen, coin=coin,
                            progress=self.verbose, **self._refine_options())
            w = result.W
        self.assignments_ = sinkhorn_assignments(F.normalize(x0 @ w, dim=1), protos, reg=self.sinkhorn_reg).cpu().numpy()
        self.hubness_ = hubness(F.normalize(x0 @ w, dim=1), protos, torch.as_tensor(self.assignments_.argmax(1), device=x.device))
        self._store(result, beta, steps)
        self._store_plain_options()
        if self.mapping == "average":
            self.W_ = ((result.W + result.W_tt) / 2).cpu().numpy()
            self.mapping_ = "average"

    def _store(self, result, beta: float, steps: int) -> None:
        self.W_ = result.W.cpu().numpy()
        self.W_tt_ = result.W_tt.cpu().numpy()
        self.beta_ = float(beta)
        self.steps_ = int(steps)
        self.loss_curve_ = result.loss_curve

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
        mean = getattr(self, "feature_mean_", None)
        centred = bool(getattr(self, "center_", False)) and mean is not None
        mean_t = torch.as_tensor(mean, device=self._device()) if centred else None
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
        intercept = getattr(self, "intercept_", None)
        if intercept is not None and np.any(intercept):
            scores = scores + np.asarray(intercept)[None, :] / norms.cpu().numpy()
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
