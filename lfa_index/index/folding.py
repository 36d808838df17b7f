"""What an aligned index ranks by, as pure functions over numpy arrays: the scores and rankings of
folded class vectors and the exact re-rank of corpus candidates.

The query map itself (``z = normalize(x̂ G + o)``, folded class vectors ``[q Gᵀ, q·o + b]``,
prepared queries ``[x, ||x||]`` and the query norms) is :class:`lfa_index.core.query_map.QueryMap`.
Dividing the inner products of prepared queries and folded vectors by the query norms gives the
aligned scores (:func:`aligned_scores`). The index, the vector stores and the framework
integrations all call these functions.

Example
-------
>>> folded = query_map.fold(prototypes, bias)          # what a store holds, (C, d_in [+1])
>>> raw = prepare_queries(x, augmented=folded.shape[1] == query_map.n_features_in + 1) @ folded.T
>>> scores = aligned_scores(raw, query_map.norms(x))
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..arrays import CHUNK_ROWS

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]
"""One group's search: raw inner products (n, m), query norms (n,) and class positions (n, m)."""


# ------------------------------------------------------------------ class vectors
def pad(folded: np.ndarray, width: int) -> np.ndarray:
    """Folded vectors with zero columns appended up to ``width`` (one layout for several maps)."""
    if folded.shape[1] == width:
        return folded
    return np.hstack([folded, np.zeros((len(folded), width - folded.shape[1]), dtype=np.float32)])


# ------------------------------------------------------------------ scores and rankings
def aligned_scores(raw: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Inner products of prepared queries with folded vectors, divided by
    the query norms (:meth:`~lfa_index.core.query_map.QueryMap.norms`): the
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
