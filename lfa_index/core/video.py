"""Video clips as one embedding: max-pooling of per-frame embeddings (paper, section 5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import l2_normalize
from .validation import check_array


def max_pool_frames(frames: Any) -> np.ndarray:
    """Max-pool per-frame embeddings into one L2-normalised clip embedding.

    Parameters
    ----------
    frames : array of shape (T, d) for one clip or (N, T, d) for N clips (numpy or torch).

    Returns
    -------
    ndarray of shape (d,) or (N, d), float32, rows L2-normalised.

    Example
    -------
    >>> clip = max_pool_frames(np.random.rand(8, 512))   # 8 frames -> one (512,) embedding
    """
    x = check_array(frames, name="frames", ndims=(2, 3))
    return l2_normalize(x.max(axis=-2))
