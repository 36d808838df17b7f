"""Few-shot baselines LFA is compared against: each fits on a support set and predicts eval rows.

Every function takes the support rows ``X`` (N, d), their labels ``y`` (N,) in 0..C-1 and the
eval rows ``X_eval`` (M, d), plus class ``prototypes`` (C, d') where the method uses them, and
returns the predicted labels (M,). Nothing but the support set is looked at while fitting or
choosing hyper-parameters. Features are L2-normalised inside each function.

========================  ===================================================================
``zero_shot``             nearest prototype by cosine (only meaningful when X and prototypes
                          come from the same model).
``nearest_class_mean``    cosine to the L2-normalised mean of each class's support rows.
``knn``                   k nearest support rows (Euclidean on unit rows), k = min(16, N // C).
``linear_probe``          sklearn logistic regression, L2 penalty, lbfgs, C = 1 (LFA's code).
``linear_probe_cv``       same, C chosen by stratified K-fold CV on the support set.
``beta_procrustes_only``  LFA's first two steps (projection, Procrustes, β by CV), no refinement.
``gda``                   Gaussian discriminant analysis (Wang et al., ICLR 2024), + zero-shot
                          logits when ``prototypes`` is given.
``tip_adapter``           training-free Tip-Adapter cache (Zhang et al., ECCV 2022), + zero-shot
                          logits when ``prototypes`` is given.
``tip_adapter_cv``        same, with α and β chosen by stratified K-fold CV on the support (the
                          paper searches them on a validation set).
``kernel_ridge``          kernel ridge in the style of ProKeR (Bendou et al., CVPR 2025): one-hot
                          targets regressed on the residual of zero-shot logits (when
                          ``prototypes`` is given; else of nothing) with an RBF kernel on cosine;
                          kernel width, λ and the zero-shot scale by closed-form leave-one-out.
========================  ===================================================================

:data:`BASELINES` maps a name to a callable over a :class:`FewShotTask`, so a harness can run
them all alike.

Example
-------
>>> pred = linear_probe_cv(X, y, X_eval, random_state=0)
>>> pred = BASELINES["gda"](FewShotTask(X, y, prototypes, X_eval, same_model=True, seed=0))
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from lfa_index.arrays import l2_normalize

# the prototype-free baselines are the library's own (lfa_index.baselines, used by `lfa-index eval`)
from lfa_index.baselines import (  # noqa: F401  (re-exported for the harness and tests)
    LINEAR_PROBE_C,
    LINEAR_PROBE_MAX_ITER,
    knn,
    knn_neighbors,
    linear_probe,
    nearest_class_mean,
    zero_shot,
)
from lfa_index.core import LFA
from lfa_index.core.projection import isometric_embedding_matrix, project, random_projection_matrix, to_text_widens
from lfa_index.core.solvers.beta import BETA_GRID, identity_is_informative, select_beta
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes

LINEAR_PROBE_CS: tuple[float, ...] = tuple(np.logspace(-2, 3, 11))
CV_MAX_FOLDS = 5
# LFA's β grid (``LFA._choose_beta``); tests/test_benchmarks_smoke.py checks both pick the same β.
CLIP_LOGIT_SCALE = 100.0
# GDA's public code searches its ensemble weight on this grid (on a validation split; here on the
# support set by CV).
GDA_ALPHAS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
# At 1 shot CV is impossible and GDA's covariance falls back to the identity, which puts its
# logits on the cosine scale: weight them like the zero-shot logits (CLIP's logit scale).
GDA_ALPHA_ONE_SHOT = CLIP_LOGIT_SCALE
# Tip-Adapter's published defaults (ImageNet), used unchanged: no search on eval data.
TIP_ALPHA = 1.0
TIP_BETA = 5.5
# Tip-Adapter's search ranges (its configs sweep β in [1, 10] and α in [1, 10]), a coarse grid.
TIP_ALPHAS: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0)
TIP_BETAS: tuple[float, ...] = (1.0, 2.0, 3.5, 5.5, 7.5, 10.0)


# sklearn reads "more classes than half the rows" (every 1-shot support) as a hint of regression.
warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%", category=UserWarning)


def _cv_folds(y: np.ndarray, random_state: int | None) -> StratifiedKFold | None:
    """Stratified K-fold over the support (K = min(5, smallest class count)); None if K < 2."""
    n_folds = min(CV_MAX_FOLDS, int(np.bincount(y)[np.unique(y)].min()))
    if n_folds < 2:
        return None
    return StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=random_state)


def _logistic(C: float, warm_start: bool = False) -> LogisticRegression:
    # sklearn's defaults are the paper's probe: L2 penalty, lbfgs, multinomial.
    return LogisticRegression(C=C, max_iter=LINEAR_PROBE_MAX_ITER, warm_start=warm_start)


def select_linear_probe_C(
    X: np.ndarray, y: np.ndarray, Cs: Sequence[float] = LINEAR_PROBE_CS, random_state: int | None = 0
) -> tuple[float, np.ndarray | None]:
    """C with the best mean stratified-CV accuracy on the support (ties: the smallest C).

    Returns ``(C, mean accuracy per C)``; with a single shot in some class no fold can hold it
    out, so it returns ``(LINEAR_PROBE_C, None)`` (the paper's probe).
    """
    X, y = l2_normalize(X), np.asarray(y)
    folds = _cv_folds(y, random_state)
    if folds is None:
        return LINEAR_PROBE_C, None
    Cs = sorted(Cs)
    scores = np.zeros(len(Cs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for train, val in folds.split(X, y):
            model = _logistic(Cs[0], warm_start=True)  # walk up the C path from the last solution
            for i, C in enumerate(Cs):
                model.set_params(C=C).fit(X[train], y[train])
                scores[i] += np.mean(model.predict(X[val]) == y[val])
    scores /= folds.get_n_splits()
    return float(Cs[int(np.argmax(scores))]), scores


def linear_probe_cv(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, Cs: Sequence[float] = LINEAR_PROBE_CS,
    random_state: int | None = 0,
) -> np.ndarray:
    """:func:`linear_probe` with C from :func:`select_linear_probe_C` (logspace(-2, 3, 11))."""
    C, _ = select_linear_probe_C(X, y, Cs, random_state)
    return linear_probe(X, y, X_eval, C=C)


# ---------------------------------------------------------------------------- β-Procrustes alone
@dataclass
class BetaProcrustesMap:
    """LFA's initial map: W_β on projected, L2-normalised rows, and the aligned prototypes."""

    W: np.ndarray
    beta: float
    beta_scores: np.ndarray
    prototypes: np.ndarray
    projection: np.ndarray | None
    projection_side: str | None

    def decision_function(self, X_eval: np.ndarray) -> np.ndarray:
        """Cosine (M, C) of ``normalize(proj(x) @ W)`` to each aligned prototype."""
        x = F.normalize(torch.as_tensor(np.asarray(X_eval, dtype=np.float32)), dim=1)
        if self.projection_side == "image":
            x = project(x, torch.as_tensor(self.projection))
        z = F.normalize(x @ torch.as_tensor(self.W), dim=1)
        return (z @ torch.as_tensor(self.prototypes).T).numpy()

    def predict(self, X_eval: np.ndarray) -> np.ndarray:
        """Nearest aligned prototype (M,)."""
        return np.argmax(self.decision_function(X_eval), axis=1)


def fit_beta_procrustes(
    X: np.ndarray, y: np.ndarray, prototypes: np.ndarray, random_state: int = 0
) -> BetaProcrustesMap:
    """LFA's steps before refinement, from the core functions and LFA's own defaults.

    Same preprocessing as ``LFA.paper`` (float32, the image rows projected into the text width by a
    seeded Gaussian random projection when the widths differ, or the names widened where that would
    lose the rows' distances, L2 normalisation), orthogonal
    Procrustes on all support rows, β cross-validated on LFA's grid :data:`BETA_GRID` with LFA's
    default ``cv_splits`` / ``cv_val_size`` and ``random_state`` as seed, as ``LFA.paper`` does before
    it refines W_β.
    """
    defaults = LFA().get_params()
    x = torch.as_tensor(np.asarray(X, dtype=np.float32))
    p = torch.as_tensor(np.asarray(prototypes, dtype=np.float32))
    labels = torch.as_tensor(np.asarray(y, dtype=np.int64))
    d_img, d_txt = x.shape[1], p.shape[1]
    side, components = None, None
    if to_text_widens(d_img, d_txt, len(x)):  # LFA.paper widens: the names into the image width
        side, components = "text", isometric_embedding_matrix(d_txt, d_img, random_state)
        p = project(p, torch.as_tensor(components))
    elif d_img != d_txt:  # the paper's projection: the image rows into the text width, down or up
        side, components = "image", random_projection_matrix(d_img, d_txt, random_state)
        x = project(x, torch.as_tensor(components))
    x, p = F.normalize(x, dim=1), F.normalize(p, dim=1)
    informative = side is None and identity_is_informative(x, labels, p)
    choice = select_beta(
        x, labels, p, identity_informative=informative, guard=False, betas=BETA_GRID,
        n_splits=defaults["cv_splits"], val_size=defaults["cv_val_size"], random_state=random_state,
    )
    w = beta_procrustes(orthogonal_procrustes(x, p[labels]), choice.beta)
    return BetaProcrustesMap(w.numpy(), choice.beta, choice.scores, p.numpy(), components, side)


def beta_procrustes_only(
    X: np.ndarray, y: np.ndarray, prototypes: np.ndarray, X_eval: np.ndarray, random_state: int = 0
) -> np.ndarray:
    """Predictions of :func:`fit_beta_procrustes` (LFA without refinement)."""
    return fit_beta_procrustes(X, y, prototypes, random_state).predict(X_eval)


def _n_classes(y: np.ndarray, prototypes: np.ndarray | None) -> int:
    """C: one per prototype when there are prototypes, else the largest support label + 1."""
    return int(np.max(y)) + 1 if prototypes is None else prototypes.shape[0]


# ---------------------------------------------------------------------------- GDA
def gda_gaussians(X: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """GDA's class means (C, d) of the L2-normalised rows and shared precision (d, d), float64.

    The precision estimator of GDA's public code, ``d · ((n−1) S + tr(S) I)⁻¹`` with S the
    covariance of the class-centred rows (a shrinkage towards a scaled identity). With one shot
    per class there is no within-class spread (S = 0) and the precision falls back to the identity.
    """
    X = l2_normalize(X).astype(np.float64)
    means = np.stack([X[y == c].mean(axis=0) for c in range(n_classes)])
    d = X.shape[1]
    if len(X) - n_classes < 1:
        return means, np.eye(d)
    cov = np.cov(X - means[y], rowvar=False)
    return means, d * np.linalg.pinv((len(X) - 1) * cov + np.trace(cov) * np.eye(d), hermitian=True)


def gda_mahalanobis(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """GDA's open-set score: minus the Mahalanobis distance to the nearest class mean under the
    shared precision of :func:`gda_gaussians` (M,), and that class (M,) (GDA's prediction)."""
    means, precision = gda_gaussians(X, y, n_classes)
    q = l2_normalize(X_eval).astype(np.float64)
    qp = q @ precision
    distance = (np.einsum("nd,nd->n", qp, q)[:, None] - 2 * qp @ means.T
                + np.einsum("cd,cd->c", means @ precision, means)[None])
    return -distance.min(axis=1), distance.argmin(axis=1)


def gda_discriminant(X: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Linear discriminant ``(weights (C, d), bias (C,))`` of GDA with a shared covariance
    (:func:`gda_gaussians`), equal class priors. At one shot: nearest class mean by Euclidean distance.
    """
    means, precision = gda_gaussians(X, y, n_classes)
    weights = means @ precision
    bias = np.log(1.0 / n_classes) - 0.5 * np.einsum("cd,cd->c", weights, means)
    return weights, bias


def _gda_logits(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, n_classes: int) -> np.ndarray:
    weights, bias = gda_discriminant(X, y, n_classes)
    return l2_normalize(X_eval).astype(np.float64) @ weights.T + bias


def select_gda_alpha(
    X: np.ndarray, y: np.ndarray, prototypes: np.ndarray, alphas: Sequence[float] = GDA_ALPHAS,
    random_state: int | None = 0,
) -> tuple[float, np.ndarray | None]:
    """Weight α of the GDA logits next to the zero-shot logits, by stratified CV on the support.

    Returns ``(α, mean accuracy per α)``; at 1 shot, ``(GDA_ALPHA_ONE_SHOT, None)``. Ties: smallest α.
    """
    y = np.asarray(y)
    folds = _cv_folds(y, random_state)
    if folds is None:
        return GDA_ALPHA_ONE_SHOT, None
    n_classes = prototypes.shape[0]
    scores = np.zeros(len(alphas))
    for train, val in folds.split(X, y):
        zs = CLIP_LOGIT_SCALE * l2_normalize(X[val]) @ l2_normalize(prototypes).T
        g = _gda_logits(X[train], y[train], X[val], n_classes)
        for i, alpha in enumerate(alphas):
            scores[i] += np.mean(np.argmax(zs + alpha * g, axis=1) == y[val])
    scores /= folds.get_n_splits()
    return float(alphas[int(np.argmax(scores))]), scores


def gda(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, prototypes: np.ndarray | None = None,
    random_state: int | None = 0,
) -> np.ndarray:
    """GDA predictions; with ``prototypes`` (same model as X) the logits are
    ``100 · cos(x, prototypes) + α · GDA(x)`` with α from :func:`select_gda_alpha`."""
    n_classes = _n_classes(y, prototypes)
    logits = _gda_logits(X, y, X_eval, n_classes)
    if prototypes is not None:
        alpha, _ = select_gda_alpha(X, y, prototypes, random_state=random_state)
        logits = CLIP_LOGIT_SCALE * l2_normalize(X_eval) @ l2_normalize(prototypes).T + alpha * logits
    return np.argmax(logits, axis=1)


# ---------------------------------------------------------------------------- Tip-Adapter
def tip_adapter(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, prototypes: np.ndarray | None = None,
    alpha: float = TIP_ALPHA, beta: float = TIP_BETA,
) -> np.ndarray:
    """Training-free Tip-Adapter: ``100 · cos(x, prototypes) + α · exp(−β(1 − x·Kᵀ)) L``.

    Keys K are the L2-normalised support rows, values L their one-hot labels. Without
    ``prototypes`` (features and prototypes from unrelated models) the cache logits stand alone
    and α does not matter. α=1, β=5.5 are the paper's defaults, used as is.
    """
    n_classes = _n_classes(y, prototypes)
    keys, queries = l2_normalize(X), l2_normalize(X_eval)
    values = np.eye(n_classes, dtype=np.float32)[y]
    logits = alpha * (np.exp(-beta * (1.0 - queries @ keys.T)) @ values)
    if prototypes is not None:
        logits = logits + CLIP_LOGIT_SCALE * queries @ l2_normalize(prototypes).T
    return np.argmax(logits, axis=1)


def _tip_logits(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, zero_shot: np.ndarray | None,
                alpha: float, beta: float) -> np.ndarray:
    cache = np.exp(-beta * (1.0 - queries @ keys.T)) @ values
    return alpha * cache if zero_shot is None else zero_shot + alpha * cache


def select_tip_adapter(
    X: np.ndarray, y: np.ndarray, prototypes: np.ndarray | None = None,
    alphas: Sequence[float] = TIP_ALPHAS, betas: Sequence[float] = TIP_BETAS, random_state: int | None = 0,
) -> tuple[float, float, np.ndarray | None]:
    """α and β of Tip-Adapter by stratified K-fold CV on the support: ``(α, β, mean accuracy grid)``.

    Without ``prototypes`` only β matters (α = 1). At 1 shot no fold can hold a class out and the
    paper's defaults are returned. Ties: the first in grid order (small α, small β).
    """
    y = np.asarray(y)
    folds = _cv_folds(y, random_state)
    if prototypes is None:
        alphas = (TIP_ALPHA,)
    if folds is None:
        return TIP_ALPHA, TIP_BETA, None
    n_classes = _n_classes(y, prototypes)
    X = l2_normalize(X)
    scores = np.zeros((len(alphas), len(betas)))
    for train, val in folds.split(X, y):
        values = np.eye(n_classes, dtype=np.float32)[y[train]]
        zs = None if prototypes is None else CLIP_LOGIT_SCALE * X[val] @ l2_normalize(prototypes).T
        for i, alpha in enumerate(alphas):
            for j, beta in enumerate(betas):
                logits = _tip_logits(X[train], values, X[val], zs, alpha, beta)
                scores[i, j] += np.mean(np.argmax(logits, axis=1) == y[val])
    scores /= folds.get_n_splits()
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return float(alphas[i]), float(betas[j]), scores


def tip_adapter_cv(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, prototypes: np.ndarray | None = None,
    random_state: int | None = 0,
) -> np.ndarray:
    """:func:`tip_adapter` with α and β from :func:`select_tip_adapter`."""
    alpha, beta, _ = select_tip_adapter(X, y, prototypes, random_state=random_state)
    return tip_adapter(X, y, X_eval, prototypes, alpha=alpha, beta=beta)


# ---------------------------------------------------------------------------- kernel ridge (ProKeR)
# Grids of the leave-one-out search. ProKeR's code searches b in [0.5, 3] on CLIP features; rows of
# text encoders are less concentrated (lower cosines between unrelated rows), hence the wider range.
KERNEL_WIDTHS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
KERNEL_RIDGE_LAMBDAS: tuple[float, ...] = tuple(float(v) for v in np.logspace(-3, 1, 9))
# Weight of the zero-shot cosines next to one-hot targets: the right class leads by about 0.1 in
# cosine, so it takes a few units for the base to matter; 0 leaves the kernel alone.
ZERO_SHOT_SCALES: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# The linear kernel's constant (an intercept the ridge shrinks less than the weights): evidence only.
LINEAR_OFFSETS: tuple[float, ...] = (1.0,)


@dataclass(frozen=True)
class KernelRidgeChoice:
    """Hyper-parameters of :func:`kernel_ridge` and their leave-one-out error on the support."""

    width: float  # the kernel's parameter: b of the RBF, the constant of the linear kernel
    lam: float
    scale: float
    loo_error: float
    loo_mse: float


def cosine_rbf_kernel(A: np.ndarray, B: np.ndarray, width: float) -> np.ndarray:
    """``exp(−b(1 − a·b))`` between the unit rows of A (n, d) and B (m, d): (n, m)."""
    return np.exp(-width * (1.0 - A @ B.T))


def linear_kernel(A: np.ndarray, B: np.ndarray, offset: float) -> np.ndarray:
    """``a·b + offset`` between the unit rows of A (n, d) and B (m, d): (n, m). Ridge regression on it is
    a linear classifier of the rows, which a map folds into one inner-product search."""
    return A @ B.T + offset


Kernel = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def kernel_ridge_loo(
    K: np.ndarray, targets: np.ndarray, base: np.ndarray | None, lambdas: Sequence[float],
    scales: Sequence[float] = (0.0,),
) -> Iterator[tuple[float, float, np.ndarray]]:
    """Leave-one-out logits (N, C) of kernel ridge on the residual of ``scale · base``, per (λ, scale).

    The model is ``f = s·base + K (K + λI)⁻¹ (targets − s·base)``. Refitting without row i moves its
    residual to ``(r − H r)_i / (1 − H_ii)``, H = K (K + λI)⁻¹ the hat matrix, so one
    eigendecomposition of K serves every λ, and H r is linear in s. ``base=None`` is no base (s = 0).
    Yields ``(λ, s, logits)``, λ in the outer loop.
    """
    eigvals, U = np.linalg.eigh(K)
    eigvals = np.clip(eigvals, 0.0, None)  # K is PSD; round-off must not flip a sign of e/(e+λ)
    Ut_targets = U.T @ targets
    Ut_base = None if base is None else U.T @ base
    squares = U**2
    for lam in lambdas:
        shrink = eigvals / (eigvals + lam)
        leverage = squares @ shrink  # diag(H)
        fitted = U @ (shrink[:, None] * Ut_targets)
        fitted_base = None if Ut_base is None else U @ (shrink[:, None] * Ut_base)
        for s in scales if base is not None else (0.0,):
            residual = targets - fitted
            if s:
                residual = residual - s * (base - fitted_base)
            yield float(lam), float(s), targets - residual / (1.0 - leverage)[:, None]


def select_kernel_ridge(
    X: np.ndarray, y: np.ndarray, prototypes: np.ndarray | None = None,
    widths: Sequence[float] = KERNEL_WIDTHS, lambdas: Sequence[float] = KERNEL_RIDGE_LAMBDAS,
    scales: Sequence[float] = ZERO_SHOT_SCALES, base: np.ndarray | None = None,
    kernel: Kernel = cosine_rbf_kernel,
) -> KernelRidgeChoice:
    """Kernel width b, λ and the base's scale with the least leave-one-out error on the support.

    The error is the share of support rows that the closed-form leave-one-out logits
    (:func:`kernel_ridge_loo`) misclassify; ties (frequent at 1 shot, where a left-out row's class
    has no other row) go to the smaller mean squared leave-one-out error, then to grid order.
    The base is zero-shot's cosines to ``prototypes``, or ``base`` (n, C), another learner's scores
    of the support rows; with neither the scale is 0. ``kernel`` takes each of ``widths`` as its parameter
    (:func:`linear_kernel` with :data:`LINEAR_OFFSETS`: the same ridge, linear).
    """
    if not (widths and lambdas and scales):
        raise ValueError("select_kernel_ridge needs at least one width, one lambda and one scale.")
    X, y = l2_normalize(X).astype(np.float64), np.asarray(y)
    if base is None and prototypes is not None:
        base = X @ l2_normalize(prototypes).astype(np.float64).T
    targets = np.eye(_n_classes(y, prototypes) if base is None else base.shape[1])[y]
    best: tuple[tuple[float, float], KernelRidgeChoice] | None = None
    for width in widths:
        K = kernel(X, X, width)
        for lam, s, logits in kernel_ridge_loo(K, targets, base, lambdas, scales):
            error = float(np.mean(np.argmax(logits, axis=1) != y))
            mse = float(np.mean((logits - targets) ** 2))
            if best is None or (error, mse) < best[0]:
                best = ((error, mse), KernelRidgeChoice(float(width), lam, s, error, mse))
    return best[1]  # type: ignore[index]


def kernel_ridge(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, prototypes: np.ndarray | None = None,
    choice: KernelRidgeChoice | None = None,
) -> np.ndarray:
    """ProKeR-style predictions: the argmax of :func:`kernel_ridge_logits`."""
    return np.argmax(kernel_ridge_logits(X, y, X_eval, prototypes, choice), axis=1)


def kernel_ridge_logits(
    X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, prototypes: np.ndarray | None = None,
    choice: KernelRidgeChoice | None = None, base: np.ndarray | None = None, base_eval: np.ndarray | None = None,
    kernel: Kernel = cosine_rbf_kernel,
) -> np.ndarray:
    """ProKeR-style logits (N_eval, C): ``s · base(x) + k(x, X) (K + λI)⁻¹ (Y − s · base(X))``.

    Y is the one-hot support labels; the base is zero-shot's cosines to ``prototypes`` (from the model
    of X), or another learner's scores ``base`` (n, C) of the support rows and ``base_eval`` of the
    eval rows; with neither, none. ``choice`` defaults to :func:`select_kernel_ridge`.
    """
    if (base is None) != (base_eval is None):
        raise ValueError("kernel_ridge_logits takes the base's scores of the support rows (base) and of the eval "
                         "rows (base_eval) together: pass both, or neither for zero-shot's cosines.")
    choice = choice or select_kernel_ridge(X, y, prototypes, base=base, kernel=kernel)
    X, X_eval = l2_normalize(X).astype(np.float64), l2_normalize(X_eval).astype(np.float64)
    if base is None and prototypes is not None:
        P = l2_normalize(prototypes).astype(np.float64)
        base, base_eval = X @ P.T, X_eval @ P.T
    residual = np.eye(_n_classes(y, prototypes) if base is None else base.shape[1])[np.asarray(y)]
    logits = np.zeros((len(X_eval), residual.shape[1]))
    if base is not None and choice.scale:
        residual = residual - choice.scale * base
        logits += choice.scale * base_eval
    K = kernel(X, X, choice.width)
    dual = np.linalg.solve(K + choice.lam * np.eye(len(X)), residual)
    logits += kernel(X_eval, X, choice.width) @ dual
    return logits


def standardise_rows(scores: np.ndarray) -> np.ndarray:
    """Each row of scores (N, C) standardised over its classes (a flat row stays at 0)."""
    scores = np.asarray(scores, dtype=np.float64)
    spread = scores.std(axis=1, keepdims=True)
    return (scores - scores.mean(axis=1, keepdims=True)) / np.where(spread > 0, spread, 1.0)


def standardised_average(a: np.ndarray, b: np.ndarray, share_b: float = 0.5) -> np.ndarray:
    """``(1 − share_b) · z(a) + share_b · z(b)``, each row of scores (N, C) standardised over its classes."""
    return (1.0 - share_b) * standardise_rows(a) + share_b * standardise_rows(b)


# ---------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class FewShotTask:
    """One support set and its eval rows, as every entry of :data:`BASELINES` takes them."""

    X: np.ndarray
    y: np.ndarray
    prototypes: np.ndarray
    X_eval: np.ndarray
    same_model: bool
    seed: int = 0

    @property
    def text_prototypes(self) -> np.ndarray | None:
        """The prototypes where they share X's model (for zero-shot terms), else None."""
        return self.prototypes if self.same_model else None


BASELINES: dict[str, Callable[[FewShotTask], np.ndarray]] = {
    "zero_shot": lambda t: zero_shot(t.prototypes, t.X_eval),
    "nearest_class_mean": lambda t: nearest_class_mean(t.X, t.y, t.X_eval),
    "knn": lambda t: knn(t.X, t.y, t.X_eval),
    "linear_probe": lambda t: linear_probe(t.X, t.y, t.X_eval),
    "linear_probe_cv": lambda t: linear_probe_cv(t.X, t.y, t.X_eval, random_state=t.seed),
    "beta_procrustes": lambda t: beta_procrustes_only(t.X, t.y, t.prototypes, t.X_eval, random_state=t.seed),
    "gda": lambda t: gda(t.X, t.y, t.X_eval, t.text_prototypes, random_state=t.seed),
    "tip_adapter": lambda t: tip_adapter(t.X, t.y, t.X_eval, t.text_prototypes),
    "tip_adapter_cv": lambda t: tip_adapter_cv(t.X, t.y, t.X_eval, t.text_prototypes, random_state=t.seed),
    "kernel_ridge": lambda t: kernel_ridge(t.X, t.y, t.X_eval, t.text_prototypes),
}
"""Name → callable(task) → eval predictions. ``zero_shot`` needs ``task.same_model``."""

SAME_MODEL_ONLY: frozenset[str] = frozenset({"zero_shot"})
