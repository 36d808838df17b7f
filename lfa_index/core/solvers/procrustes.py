"""Orthogonal Procrustes (paper eq. 4) and beta-Procrustes (paper eq. 5).

Rows multiply on the right: an image row ``x`` is aligned as ``x @ W``.

Few rows leave eq. 4 open: ``M = XᵀY`` has rank r ≤ min(n, C) (C: distinct target rows), and any
orthogonal map of the (d − r)-dimensional rest maximises ``tr(WᵀM)`` as well. A full SVD fills it
in arbitrarily, which scrambles every direction the support never showed: harmless for the fitted
classes (their prototypes lie in the fitted part) but not for classes added later, nor for the
query norms. :func:`orthogonal_procrustes` takes the solution nearest the identity instead, and
computes it in the span of the data (O(d·n² + d²·r), not O(d³), when n ≪ d).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.model_selection import StratifiedShuffleSplit


def orthogonal_procrustes(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``argmax_{W orthogonal} tr(Wᵀ sourceᵀ target)``, the one nearest the identity.

    Eq. 4 of the paper: ``U Vᵀ`` with ``U Σ Vᵀ = SVD(sourceᵀ target)``, unique when that matrix has
    full rank. Otherwise ``W`` maps the singular directions with Σ > 0 as ``U Vᵀ`` does and is, of
    all orthogonal maps that do, the nearest the identity (max ``tr W``): it is the identity on
    every direction orthogonal to both the source and the target rows.

    Parameters
    ----------
    source : (n, d) tensor, the (L2-normalised) image rows X.
    target : (n, d) tensor, the matching prototypes PY.

    Returns
    -------
    (d, d) orthogonal tensor W_op, in ``source``'s dtype.
    """
    n, d = source.shape
    if 2 * n < d:  # the row space: M = Q₁ (R₁R₂ᵀ) Q₂ᵀ, one n × n SVD (float64: it is small)
        q1, r1 = torch.linalg.qr(source.double().T)
        q2, r2 = torch.linalg.qr(target.double().T)
        a, s, bh = torch.linalg.svd(r1 @ r2.T)
        u, v = q1 @ a, q2 @ bh.T
    else:
        u, s, vh = _svd(source.T @ target)
        v = vh.T
    # numerical rank of the (small or d × d) matrix decomposed, by numpy's rule
    size = n if 2 * n < d else d
    r = int((s > float(s.max()) * size * torch.finfo(source.dtype).eps).sum()) if n else 0
    if r == d:  # full rank: W_op is unique
        return (u @ v.T).to(source.dtype)
    basis, w = _nearest_identity(u[:, :r].double(), v[:, :r].double())
    if basis is None:
        return w.to(source.dtype)
    # W = I + B (w − I) Bᵀ, assembled once at the caller's precision
    eye = torch.eye(w.shape[0], dtype=w.dtype, device=w.device)
    b = basis.to(source.dtype)
    return torch.eye(d, dtype=source.dtype, device=source.device).addmm_(b @ (w - eye).to(source.dtype), b.T)


def _svd(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.linalg.svd(m)``; on CUDA by cuSOLVER's gesvda (4x faster on a 512 × 512 matrix on an H200,
    ``benchmarks/gpu_fit.py``), kept only where it converges (it refuses rank-deficient matrices
    with many repeated singular values) and reconstructs ``m`` to float32 precision."""
    if m.device.type == "cuda":
        try:
            u, s, vh = torch.linalg.svd(m, driver="gesvda")
        except torch.linalg.LinAlgError:
            return torch.linalg.svd(m)
        error = torch.linalg.matrix_norm((u * s) @ vh - m) / torch.linalg.matrix_norm(m).clamp(min=1e-30)
        if float(error) < 1e-5:
            return u, s, vh
    return torch.linalg.svd(m)


def _nearest_identity(u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The orthogonal map sending the orthonormal columns ``u`` (d, r) to ``v`` that is nearest the identity.

    Everything it changes lies in ``span(u, v)`` (m ≤ 2r dimensions), so it is returned as that
    span's orthonormal basis B (d, m) and the map w (m, m) within it: ``W = I + B (w − I) Bᵀ``
    (B None: m = d and ``W = w``).
    """
    d, r = u.shape
    basis = None if 2 * r >= d else torch.linalg.qr(torch.cat([u, v], 1))[0]
    u_in, v_in = (u, v) if basis is None else (basis.T @ u, basis.T @ v)
    u_rest, v_rest = _complement(u_in), _complement(v_in)
    w = u_in @ v_in.T
    if u_rest.shape[1]:
        e, _, fh = torch.linalg.svd(v_rest.T @ u_rest)  # Q = F Eᵀ maximises tr(Q v_restᵀ u_rest)
        w = w + u_rest @ (fh.T @ e.T) @ v_rest.T
    return basis, w


def _complement(q: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis (m, m − r) of the orthogonal complement of ``q``'s orthonormal columns (m, r)."""
    full, _ = torch.linalg.qr(q, mode="complete")
    return full[:, q.shape[1]:]


def beta_procrustes(w_op: torch.Tensor, beta: float) -> torch.Tensor:
    """``W_β = W_op − β (W_op − I)``: β=0 keeps W_op, β=1 gives the identity (paper eq. 5)."""
    eye = torch.eye(w_op.shape[0], dtype=w_op.dtype, device=w_op.device)
    return w_op - beta * (w_op - eye)


def support_splits(
    labels: np.ndarray, *, n_splits: int, val_size: float, random_state: int | None
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Random train/validation splits of the support rows, stratified by class.

    Only classes with at least two rows can sit on both sides: their rows are split with
    scikit-learn's ``StratifiedShuffleSplit`` (at least one row of each on each side), while
    classes with a single row always stay in the training part. Returns None when no class has
    two rows (1-shot support), where no split can tell how the map generalises to new rows of a
    seen class.
    """
    labels = np.asarray(labels)
    counts = np.bincount(labels)
    multi = np.flatnonzero(counts[labels] >= 2)
    if len(multi) == 0:
        return None
    singles = np.flatnonzero(counts[labels] < 2)
    n_classes = int(np.count_nonzero(counts >= 2))
    n_val = min(max(n_classes, int(round(val_size * len(multi)))), len(multi) - n_classes)
    splitter = StratifiedShuffleSplit(n_splits=n_splits, test_size=n_val, random_state=random_state)
    return [
        (np.sort(np.concatenate([multi[tr], singles])), multi[va])
        for tr, va in splitter.split(np.zeros(len(multi)), labels[multi])
    ]
