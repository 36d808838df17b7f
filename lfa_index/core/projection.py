"""Seeded random projections that bridge embedding spaces of different dimensions.

The paper projects 2048-d self-supervised vision features into the 1536-d text space with
scikit-learn's ``GaussianRandomProjection`` before Procrustes (section 5 and appendix, "Aligning
Disjoint Modalities"): the image rows are mapped to the text width (``projection="to_text"``; a
narrower image encoder is mapped up, a wider one down where :func:`keeps_distances` holds, else
widened); ``projection="shrink"`` maps the larger side down. Mapping
the smaller side up with a seeded isometric embedding (``projection="widen"``, the default) loses
nothing: it keeps every dimension of the wider encoder and every inner product of the
narrower one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

DISTANCE_TOLERANCE = 0.5
"""The distortion ε of pairwise distances up to which ``projection="to_text"`` projects image rows down."""


def random_projection_matrix(n_features: int, n_components: int, random_state: int | None) -> np.ndarray:
    """The (n_components, n_features) Gaussian projection matrix for this seed (float32).

    Entries are drawn N(0, 1/n_components) by scikit-learn; the same seed gives the same matrix.
    ``n_components`` may exceed ``n_features`` (the paper's projection of a narrower image encoder
    into the text width): scikit-learn's warning that nothing is reduced is then expected and muted.
    """
    import warnings

    from sklearn.exceptions import DataDimensionalityWarning  # a fit-time dependency
    from sklearn.random_projection import GaussianRandomProjection

    proj = GaussianRandomProjection(n_components=n_components, random_state=random_state)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DataDimensionalityWarning)
        proj.fit(np.zeros((1, n_features), dtype=np.float32))
    return np.asarray(proj.components_, dtype=np.float32)


def isometric_embedding_matrix(n_features: int, n_components: int, random_state: int | None) -> np.ndarray:
    """A seeded (n_components, n_features) matrix with orthonormal columns, n_components ≥ n_features.

    ``x @ M.T`` embeds rows in the wider space and keeps every inner product: ``(x Mᵀ)(y Mᵀ)ᵀ = x yᵀ``.
    The columns are the Q factor of a seeded Gaussian matrix (a Haar-random orientation).
    """
    if n_components < n_features:
        raise ValueError(f"an isometric embedding needs n_components >= n_features, got {n_components} < {n_features}")
    gaussian = np.random.default_rng(random_state).standard_normal((n_components, n_features))
    q, r = np.linalg.qr(gaussian)
    return np.ascontiguousarray(q * np.sign(np.diag(r)), dtype=np.float32)


def project(x: Any, components: Any) -> Any:
    """Project rows (or views) of the torch tensor ``x`` with ``components`` (k, d) and L2-normalise them."""
    import torch.nn.functional as F

    return F.normalize(x @ components.T, dim=-1)


def keeps_distances(n_rows: int, n_components: int, eps: float = DISTANCE_TOLERANCE) -> bool:
    """Whether a Gaussian projection to ``n_components`` dimensions keeps the pairwise distances of
    ``n_rows`` rows within a factor 1 ± ``eps``, by the Johnson-Lindenstrauss bound (scikit-learn's
    ``johnson_lindenstrauss_min_dim``): ``n_components ≥ 4 ln n / (ε²/2 − ε³/3)``.

    The paper's projection (2,048-d image features into 1,536-d text) keeps them for any few-shot
    support; 512-d image rows into 64-d names do not, from 4 rows on.
    """
    from sklearn.random_projection import johnson_lindenstrauss_min_dim

    return n_rows < 2 or n_components >= int(johnson_lindenstrauss_min_dim(n_rows, eps=eps))


def to_text_widens(d_img: int, d_txt: int, n_rows: int) -> bool:
    """Whether ``projection="to_text"`` widens instead: ``n_rows`` image rows wider than the text, whose
    distances the text width cannot keep (:func:`keeps_distances`)."""
    return d_txt < d_img and not keeps_distances(n_rows, d_txt)
