"""The folding math of an aligned index, as pure functions over numpy arrays.

An LFA map aligns a raw query ``x`` as ``z = normalize(x̂ G + o)`` (``G = Rᵀ W``, ``R`` the
image-side projection if any; ``o = −μ W`` with centring, else absent). Since
``(x G)·q = x·(q Gᵀ)`` and a positive per-query factor leaves a ranking unchanged, class ``c`` is
stored folded, ``q_c Gᵀ``, and classification is one inner-product search of the raw query.

With class biases ``b`` or an offset the folded vectors gain one coordinate, ``[q Gᵀ, q·o + b]``,
and the queries their norm, ``[x, ||x||]``: ``[x, ||x||]·[q Gᵀ, q·o + b] = ||x||(ẑ·q + b)`` with
``ẑ = x̂ G + o``, the LFA score times a positive per-query factor (:func:`augment`). Dividing the
inner products by :func:`query_norms` gives the aligned scores (:func:`aligned_scores`).

The index, the vector stores and the framework integrations all call these functions.

Example
-------
>>> folded = fold(prototypes, g, offset, bias)          # what a store holds, (C, d_in [+1])
>>> raw = prepare_queries(x, augmented=folded.shape[1] == g.shape[0] + 1) @ folded.T
>>> scores = aligned_scores(raw, query_norms(x, g, offset))
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..arrays import CHUNK_ROWS, l2_normalize

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]
"""One group's search: raw inner products (n, m), query norms (n,) and class positions (n, m)."""


# ------------------------------------------------------------------ maps
def query_map(w: np.ndarray, projection: np.ndarray | None = None) -> np.ndarray:
    """G = Rᵀ W (d_in, d), float32 C-contiguous; ``projection`` R (d, d_in) of the image side, if any.

    ``normalize(normalize(x Rᵀ) W) = normalize(x Rᵀ W)``, so the projection folds into the map
    (exact with an offset too: LFA only centres when R is an isometry, ``||x̂ Rᵀ|| = 1``).
    """
    g = np.asarray(w, dtype=np.float32)
    if projection is not None:
        g = np.asarray(projection, dtype=np.float32).T @ g
    return np.ascontiguousarray(g)


def query_offset(w: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """o = −μ W (d,), float32, of rows centred on ``mean`` μ (computed in float64)."""
    offset = -(np.asarray(mean, dtype=np.float64) @ np.asarray(w, dtype=np.float64))
    return np.ascontiguousarray(offset, dtype=np.float32)


# ------------------------------------------------------------------ class vectors and queries
def fold(prototypes: np.ndarray, g: np.ndarray, offset: np.ndarray | None, bias: np.ndarray) -> np.ndarray:
    """Class vectors folded into the raw query space: ``q Gᵀ`` (c, d_in), or ``[q Gᵀ, q·o + b]``
    (c, d_in + 1) when there is an offset or a nonzero bias; float32 C-contiguous."""
    bias = np.asarray(bias, dtype=np.float64)
    if offset is None and not bias.any():
        return np.ascontiguousarray(np.asarray(prototypes, dtype=np.float32) @ g.T, dtype=np.float32)
    folded = np.asarray(prototypes, dtype=np.float64) @ np.asarray(g, dtype=np.float64).T
    if offset is not None:
        bias = bias + np.asarray(prototypes, dtype=np.float64) @ np.asarray(offset, dtype=np.float64)
    return np.ascontiguousarray(np.hstack([folded, bias[:, None]]), dtype=np.float32)


def pad(folded: np.ndarray, width: int) -> np.ndarray:
    """Folded vectors with zero columns appended up to ``width`` (one layout for several maps)."""
    if folded.shape[1] == width:
        return folded
    return np.hstack([folded, np.zeros((len(folded), width - folded.shape[1]), dtype=np.float32)])


def row_norms(x: np.ndarray) -> np.ndarray:
    """``||x||`` row by row."""
    return np.sqrt(np.einsum("ij,ij->i", x, x))


def augment(x: np.ndarray) -> np.ndarray:
    """``[x, ||x||]`` (float32, C-contiguous): ranks as ``[x̂, 1]`` without a division pass."""
    out = np.empty((len(x), x.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = x
    out[:, -1] = row_norms(x)
    return out


def prepare_queries(x: np.ndarray, augmented: bool) -> np.ndarray:
    """Raw float32 queries as folded vectors expect them: ``[x, ||x||]`` when ``augmented``, else ``x``."""
    return augment(x) if augmented else x


def query_norms(x: np.ndarray, g: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """``||x G + ||x|| o||`` row by row (= ``||x||·||x̂ G + o||``; ``||x G||`` without an offset)."""
    out = np.empty(len(x), dtype=np.float32)
    for start in range(0, len(x), CHUNK_ROWS):
        chunk = x[start : start + CHUNK_ROWS]
        z = chunk @ g
        if offset is not None:
            z += row_norms(chunk)[:, None] * offset
        out[start : start + CHUNK_ROWS] = np.linalg.norm(z, axis=1)
    return out


def align(x: np.ndarray, g: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """Aligned unit rows ``normalize(x @ G)``, or ``normalize(x̂ @ G + o)`` with an offset (float32,
    C-contiguous), in chunks of :data:`~lfa_index.arrays.CHUNK_ROWS` rows."""
    out = np.empty((len(x), g.shape[1]), dtype=np.float32)
    for start in range(0, len(x), CHUNK_ROWS):
        chunk = x[start : start + CHUNK_ROWS]
        z = chunk @ g if offset is None else l2_normalize(chunk) @ g + offset
        out[start : start + CHUNK_ROWS] = l2_normalize(z)
    return out


def unalign_queries(t: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Aligned queries mapped back to the raw space, ``t Gᵀ`` (n, d_in): ranking raw unit rows by
    it is ranking them by ``x·(t Gᵀ) = (x G)·t``, the candidate step of an exact re-rank."""
    return np.ascontiguousarray(t @ g.T, dtype=np.float32)


# ------------------------------------------------------------------ scores and rankings
def aligned_scores(raw: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Inner products of prepared queries with folded vectors, divided by :func:`query_norms`: the
    aligned scores (the aligned cosine without class biases)."""
    return raw / norms[:, None]


def top_classes(hits: Sequence[Hits], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best classes over groups of classes searched apart: ``(scores, positions)``, (n, k).

    One group is ranked by its raw inner products (what a single search ranks by), several by
    their aligned scores. Exact ties go to the lowest class position, whatever order a search
    engine returned them in.
    """
    if len(hits) == 1:
        raw, norms, positions = hits[0]
        order = np.lexsort((positions, -raw), axis=-1)[:, :k]
        return aligned_scores(np.take_along_axis(raw, order, 1), norms), np.take_along_axis(positions, order, 1)
    scores = np.concatenate([aligned_scores(raw, norms) for raw, norms, _ in hits], axis=1)
    positions = np.concatenate([p for _, _, p in hits], axis=1)
    order = np.lexsort((positions, -scores), axis=-1)[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(positions, order, 1)


def rerank(
    queries: np.ndarray, candidates: np.ndarray, aligned_rows: Callable[[np.ndarray], np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of candidate ids by aligned cosine: ``(scores, ids)``, each (n, min(k, m)).

    ``queries`` (n, d) are aligned unit queries, ``candidates`` (n, m) ids (-1: none), and
    ``aligned_rows(ids)`` returns the aligned unit rows of sorted distinct ids. Ties keep the
    candidates' order; unfilled slots are id -1, score -inf.
    """
    scores = np.full(candidates.shape, -np.inf, dtype=np.float32)
    valid = candidates >= 0
    unique_ids = np.unique(candidates[valid])
    if len(unique_ids):
        aligned = aligned_rows(unique_ids)
        rows, cols = np.nonzero(valid)
        slots = np.searchsorted(unique_ids, candidates[rows, cols])
        for s in range(0, len(rows), CHUNK_ROWS):
            r, c, u = rows[s : s + CHUNK_ROWS], cols[s : s + CHUNK_ROWS], slots[s : s + CHUNK_ROWS]
            scores[r, c] = np.einsum("ij,ij->i", aligned[u], queries[r])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_scores = np.take_along_axis(scores, order, 1)
    top_ids = np.take_along_axis(candidates, order, 1)
    top_ids[~np.isfinite(top_scores)] = -1
    return top_scores, top_ids
