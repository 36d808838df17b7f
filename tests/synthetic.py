"""Small planted problems for unit tests (real-data checks live in benchmarks/)."""

from __future__ import annotations

import numpy as np
import torch


def random_orthogonal(d: int, seed: int) -> np.ndarray:
    """A Haar-random d x d orthogonal matrix."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).numpy()


def normalize(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def planted_gap_problem(
    n_classes: int = 12,
    shots: int = 16,
    d: int = 32,
    noise: float = 0.35,
    rotation_mix: float = 0.6,
    seed: int = 0,
    n_test: int = 0,
):
    """Image rows = rotated class prototypes + a shared offset (the modality gap) + noise.

    Returns (X, y, prototypes, X_test, y_test) as float32 numpy arrays.
    """
    rng = np.random.default_rng(seed)
    protos = normalize(rng.standard_normal((n_classes, d)))
    rot = random_orthogonal(d, seed + 1)
    mix = (1 - rotation_mix) * np.eye(d) + rotation_mix * rot
    offset = normalize(rng.standard_normal(d)) * 0.8

    def draw(n_per_class):
        y = np.repeat(np.arange(n_classes), n_per_class)
        x = protos[y] @ mix + offset + noise * rng.standard_normal((len(y), d))
        return normalize(x).astype(np.float32), y

    x, y = draw(shots)
    x_test, y_test = draw(n_test) if n_test else (None, None)
    return x, y, protos.astype(np.float32), x_test, y_test
