"""The LFA estimator: orthogonal Procrustes -> beta-Procrustes -> ARerank refinement.

Supervised (paper section 4.4, "Supervised Alignment"), unsupervised (U-LFA, Sinkhorn pseudo-
assignments alternated with refinement), base-to-new (a second map W_tt, paper eq. 9) and
disjoint encoders (a seeded Gaussian random projection when the dimensions differ).
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
from .projection import project, random_projection_matrix
from .refine import refine
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


class LFA(ClassifierMixin, BaseEstimator):
    """Linear Feature Alignment of image embeddings to class prototypes (Ouali et al., ICCV 2023).

    Parameters
    ----------
    beta : "auto" or float in [0, 1], default="auto"
        Pull of the Procrustes map towards the identity (β=1: identity, β=0: orthogonal
        Procrustes). "auto" cross-validates the grid 0, 0.05, ..., 1 on the support set.
    steps : "auto" or int > 0, default="auto"
        Refinement steps. "auto" picks them on a held-out part of the support set.
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
    projection : "auto" or False, default="auto"
        "auto" bridges differing image/text dimensions with a seeded Gaussian random projection
        of the larger side; False raises when they differ.
    temperature : float, default=0.01
        Softmax temperature of ``predict_proba`` over aligned cosines (CLIP's logit scale 100).
    precision : {"float32", "bf16-mixed"}, default="float32"
        Arithmetic of refinement. "bf16-mixed" runs the matrix products in bfloat16 under
        ``torch.autocast`` (float32 weights, optimiser and norms): several times faster on CPUs
        with native bf16 (AVX512-BF16/AMX) and on GPUs, at bf16 resolution in the loss.
    warm_start : bool, default=False
        Refit from the current W and W_tt (β kept) instead of from β-Procrustes.
    device : str, default="auto"
        "auto" (CUDA when available), "cpu", "cuda" or "cuda:N". Computation is float32.
    random_state : int or None, default=None
        Seed of every random choice (splits, batches, noise, dropout, projection).
    verbose : bool, default=False
        Show a progress bar during refinement.

    Attributes
    ----------
    W_ : ndarray (d, d)                 task map (aligned row = normalize(x @ W_)).
    W_tt_ : ndarray (d, d)              base-to-new map, the EMA of W during refinement.
    W_avg_ : ndarray (d, d)             (W_ + W_tt_) / 2.
    beta_ : float                       β used.   beta_scores_ : mean CV accuracy per β (or None).
    beta_selection_ : str               "cv", "class-disjoint-cv", "procrustes-fallback" (1 shot,
                                        zero-shot at chance), "fixed" or "warm-start".
    steps_ : int                        refinement steps used (per round for U-LFA).
    step_trials_ : list                 held-out (steps, accuracy, loss) when steps="auto"; empty
                                        at 1 shot, where the count falls back to 100.
    prototypes_ : ndarray (C, d)        L2-normalised prototypes in the aligned space.
    projection_ : ndarray (k, d_in) or None, projection_side_ : "image", "text" or None.
    loss_curve_ : list[float]           ARerank loss per refinement step (last round for U-LFA).
    hubness_init_, hubness_ : float     support hubness after β-Procrustes and after refinement.
    assignments_ : ndarray (N, C)       U-LFA soft assignments (None when supervised).
    classes_ : ndarray (C,)             0..C-1.  n_features_in_ : image dimension.

    Example
    -------
    >>> lfa = LFA(random_state=0).fit(X, y, prototypes)
    >>> lfa.predict(X_test), lfa.score(X_test, y_test)
    """

    def __init__(
        self,
        beta: float | str = "auto",
        steps: int | str = "auto",
        *,
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
        projection: str | bool = "auto",
        temperature: float = 0.01,
        precision: str = "float32",
        warm_start: bool = False,
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.beta = beta
        self.steps = steps
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
        self.projection = projection
        self.temperature = temperature
        self.precision = precision
        self.warm_start = warm_start
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ parameters
    def _validate_params(self) -> None:
        if self.beta != "auto":
            check_number(self.beta, "beta", low=0.0, high=1.0)
        if self.steps != "auto":
            check_number(self.steps, "steps", low=1, integer=True)
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
        check_choice(self.projection, "projection", ["auto", False])
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

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, y: Any, prototypes: Any) -> "LFA":
        """Learn W from support embeddings ``X``, labels ``y`` and class ``prototypes``.

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
        self.prototypes_ = protos.cpu().numpy()
        if labels is None:
            self._fit_unsupervised(x, protos, seed, gen, coin, warm)
        else:
            self.assignments_ = None
            self._fit_supervised(x, labels, protos, seed, gen, coin, warm)
        self.W_avg_ = (self.W_ + self.W_tt_) / 2
        return self

    def _prototype_dim(self) -> int:
        return self.projection_.shape[1] if self.projection_side_ == "text" else self.prototypes_.shape[1]

    def _fit_projection(self, d_img: int, d_txt: int, seed: int) -> None:
        self.projection_side_ = None
        self.projection_ = None
        if d_img == d_txt:
            return
        if self.projection is False:
            raise DimensionMismatchError(
                f"image embeddings have {d_img} dimensions but prototypes have {d_txt}; "
                "set projection='auto' to bridge them with a seeded random projection, or embed both with models of the same width."
            )
        side, d_in, d_out = ("image", d_img, d_txt) if d_img > d_txt else ("text", d_txt, d_img)
        self.projection_side_ = side
        self.projection_ = random_projection_matrix(d_in, d_out, seed)

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
            x0, labels, protos, betas=np.round(np.linspace(0.0, 1.0, 21), 2), n_splits=self.cv_splits,
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

    def transform(self, X: Any, mapping: Mapping = "task") -> np.ndarray:
        """Aligned, L2-normalised embeddings ``normalize(proj(x) @ W)``, same shape as X minus d."""
        check_is_fitted(self, "W_")
        w = torch.as_tensor(self._map(mapping), device=self._device())
        x = check_embeddings(X, name="X", ndims=(2, 3), device=self._device())
        if x.shape[-1] != self.n_features_in_:
            raise DimensionMismatchError(
                f"X has {x.shape[-1]} features but this LFA was fitted on {self.n_features_in_}-d image embeddings; "
                "embed the queries with the same model as the support set."
            )
        out = [F.normalize(self._project_image(F.normalize(c, dim=-1)) @ w, dim=-1) for c in x.split(_CHUNK)]
        return torch.cat(out).cpu().numpy()

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
        """Aligned cosine similarity (N, C) of each row to each class prototype.

        ``prototypes`` (C', d_txt) scores other classes (e.g. new ones, with ``mapping="tt"``).
        Multi-view input (N, V, d) averages the aligned views.
        """
        z = self.transform(X, mapping)
        if z.ndim == 3:
            z = z.mean(axis=1)
            z /= np.linalg.norm(z, axis=1, keepdims=True)
        protos = self.prototypes_ if prototypes is None else self.transform_prototypes(prototypes)
        return z @ protos.T

    def predict(self, X: Any, mapping: Mapping = "task", prototypes: Any = None) -> np.ndarray:
        """Index of the nearest prototype in the aligned space (N,)."""
        return self.decision_function(X, mapping, prototypes).argmax(axis=1)

    def predict_proba(self, X: Any, mapping: Mapping = "task", prototypes: Any = None) -> np.ndarray:
        """``softmax(aligned cosine / temperature)`` (N, C)."""
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
