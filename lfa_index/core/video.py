"""Video clips as one embedding: max-pooling of per-frame embeddings (paper, section 5)."""

from __future__ import annotations

import numpy as np
import torch

from .validation import as_float_tensor


def max_pool_frames(frames: np.ndarray | torch.Tensor) -> np.ndarray:
    """Max-pool per-frame embeddings into one L2-normalised clip embedding.

    Parameters
    ----------
    frames : array of shape (T, d) for one clip or (N, T, d) for N clips.

    Returns
    -------
    ndarray of shape (d,) or (N, d), float32, rows L2-normalised.

    Example
    -------
    >>> clip = max_pool_frames(np.random.rand(8, 512))   # 8 frames -> one (512,) embedding
    """
    x = as_float_tensor(frames, name="frames", ndims=(2, 3))
    pooled = x.amax(dim=-2)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()
