"""Array conventions every layer shares (``core/`` included): the names of LFA's maps, the row
chunk of memory-bound passes, and L2 normalisation.

Example
-------
>>> l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
array([[0.6, 0.8],
       [0. , 0. ]], dtype=float32)
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

Mapping = Literal["task", "tt", "average"]
"""A map of a fitted LFA: ``"task"`` (W, the fitted classes), ``"tt"`` (W_tt, classes added from
text, paper §4.5) or ``"average"`` (their mean)."""
MAPPINGS: tuple[str, ...] = ("task", "tt", "average")
CHUNK_ROWS = 65536
"""Rows per pass where a step allocates (rows, d) temporaries (aligning, norms, re-ranking)."""


def l2_normalize(x: Any) -> np.ndarray:
    """float32 ``x`` with its last axis L2-normalised (all-zero vectors stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, np.finfo(np.float32).tiny)
