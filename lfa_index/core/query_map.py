"""The query map of a fitted LFA: normalise, project, centre, multiply by W (numpy only).

A raw query ``x`` is aligned as ``z = (normalize(proj(x̂)) − μ) W``, ``proj(u) = normalize(u Rᵀ)``
with the image-side projection R (if any) and μ the support mean (with centring). One
:class:`QueryMap` answers every consumer: the estimator scores ``z`` exactly in float64
(:meth:`QueryMap.mapped`); a FAISS index or a vector store serves the same map folded into the raw
query space, ``z ∝ x̂ G + o`` with ``G = Rᵀ W`` and ``o = −μ W`` in float32.

Folding: since ``(x G)·q = x·(q Gᵀ)`` and a positive per-query factor leaves a ranking unchanged,
class ``c`` is stored as ``q_c Gᵀ``. With class biases ``b`` or an offset the folded vectors gain
one coordinate, ``[q Gᵀ, q·o + b]``, and the queries their norm, ``[x, ||x||]``:
``[x, ||x||]·[q Gᵀ, q·o + b] = ||x||(ẑ·q + b)`` with ``ẑ = x̂ G + o``, the LFA score times a
positive per-query factor. Dividing by :meth:`QueryMap.norms` gives the aligned scores.

Example
-------
>>> query_map = lfa.query_map("task")
>>> query_map.align(x)                                    # ≈ lfa.transform(x), in float32
>>> folded = query_map.fold(lfa.prototypes_, lfa.intercept_)
>>> raw = prepare_queries(x, augmented=folded.shape[1] == query_map.n_features_in + 1) @ folded.T
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..arrays import CHUNK_ROWS, l2_normalize
from ..errors import ZeroNormError


@dataclass(frozen=True, eq=False)
class QueryMap:
    """One map of a fitted LFA as queries see it.

    Parameters
    ----------
    weights : (d, d_out) array, the map W.
    projection : (d, d_in) array or None, the image-side projection R.
    mean : (d,) array or None, the support mean μ rows are centred on.
    """

    weights: np.ndarray
    projection: np.ndarray | None = None
    mean: np.ndarray | None = None

    @property
    def n_features_in(self) -> int:
        """Width ``d_in`` of the raw queries."""
        return int(self.matrix.shape[0])

    @property
    def n_features_out(self) -> int:
        """Width ``d_out`` of the aligned space."""
        return int(np.shape(self.weights)[1])

    # ------------------------------------------------------------------ exact (the estimator's)
    def mapped(self, x: np.ndarray) -> np.ndarray:
        """``(normalize(proj(x̂)) − μ) @ W`` (..., d_out), unnormalised, of checked rows ``x`` (..., d_in).

        In float64, so that a row's result does not depend on the rows batched with it.
        """
        w = np.asarray(self.weights, dtype=np.float64)
        mean = None if self.mean is None else np.asarray(self.mean, dtype=np.float64)
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty((len(flat), w.shape[1]), dtype=np.float64)
        for start in range(0, len(flat), CHUNK_ROWS):
            rows = unit_rows(flat[start:start + CHUNK_ROWS].astype(np.float64))
            if self.projection is not None:
                rows = unit_rows(rows @ np.asarray(self.projection, dtype=rows.dtype).T)
            out[start:start + CHUNK_ROWS] = (rows if mean is None else rows - mean) @ w
        return out.reshape(*x.shape[:-1], w.shape[1])

    # ------------------------------------------------------------------ folded (float32 serving)
    @cached_property
    def matrix(self) -> np.ndarray:
        """G = Rᵀ W (d_in, d_out), float32 C-contiguous.

        ``normalize(normalize(x Rᵀ) W) = normalize(x Rᵀ W)``, so the projection folds into the map
        (exact with an offset too: LFA only centres when R is an isometry, ``||x̂ Rᵀ|| = 1``).
        """
        g = np.asarray(self.weights, dtype=np.float32)
        if self.projection is not None:
            g = np.asarray(self.projection, dtype=np.float32).T @ g
        return np.ascontiguousarray(g)

    @cached_property
    def offset(self) -> np.ndarray | None:
        """o = −μ W (d_out,), float32 (computed in float64); None without centring."""
        if self.mean is None:
            return None
        offset = -(np.asarray(self.mean, dtype=np.float64) @ np.asarray(self.weights, dtype=np.float64))
        return np.ascontiguousarray(offset, dtype=np.float32)

    def align(self, x: np.ndarray) -> np.ndarray:
        """Aligned unit rows ``normalize(x @ G)``, or ``normalize(x̂ @ G + o)`` with an offset, of raw
        float32 rows (float32, C-contiguous), in chunks of :data:`~lfa_index.arrays.CHUNK_ROWS` rows."""
        g, offset = self.matrix, self.offset
        out = np.empty((len(x), g.shape[1]), dtype=np.float32)
        for start in range(0, len(x), CHUNK_ROWS):
            chunk = x[start : start + CHUNK_ROWS]
            z = chunk @ g if offset is None else l2_normalize(chunk) @ g + offset
            out[start : start + CHUNK_ROWS] = l2_normalize(z)
        return out

    def raw_norms(self, x: np.ndarray) -> np.ndarray:
        """``||x G + ||x|| o||`` row by row (= ``||x||·||x̂ G + o||``; ``||x G||`` without an offset)."""
        g, offset = self.matrix, self.offset
        out = np.empty(len(x), dtype=np.float32)
        for start in range(0, len(x), CHUNK_ROWS):
            chunk = x[start : start + CHUNK_ROWS]
            z = chunk @ g
            if offset is not None:
                z += row_norms(chunk)[:, None] * offset
            out[start : start + CHUNK_ROWS] = np.linalg.norm(z, axis=1)
        return out

    def norms(self, x: np.ndarray) -> np.ndarray:
        """:meth:`raw_norms` (n,), what turns folded inner products into aligned scores.

        Raises :class:`ZeroNormError` for rows the map sends to zero (a singular map, or rows along
        the mean it centres on): they have no aligned direction, so no finite score.
        """
        norms = self.raw_norms(x)
        if not norms.all():
            rows = np.flatnonzero(norms == 0)
            raise ZeroNormError(
                f"query row(s) {rows[:5].tolist()} map to the zero vector in the aligned space (the map is singular "
                "along them, or they point along the support mean it centres on): they have no aligned direction "
                "to score; drop them."
            )
        return norms

    def fold(self, prototypes: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Class vectors folded into the raw query space: ``q Gᵀ`` (c, d_in), or ``[q Gᵀ, q·o + b]``
        (c, d_in + 1) when there is an offset or a nonzero bias; float32 C-contiguous."""
        g, offset = self.matrix, self.offset
        bias = np.asarray(bias, dtype=np.float64)
        if offset is None and not bias.any():
            return np.ascontiguousarray(np.asarray(prototypes, dtype=np.float32) @ g.T, dtype=np.float32)
        folded = np.asarray(prototypes, dtype=np.float64) @ np.asarray(g, dtype=np.float64).T
        if offset is not None:
            bias = bias + np.asarray(prototypes, dtype=np.float64) @ np.asarray(offset, dtype=np.float64)
        return np.ascontiguousarray(np.hstack([folded, bias[:, None]]), dtype=np.float32)

    def unalign(self, t: np.ndarray) -> np.ndarray:
        """Aligned queries mapped back to the raw space, ``t Gᵀ`` (n, d_in): ranking raw unit rows by
        it is ranking them by ``x·(t Gᵀ) = (x G)·t``, the candidate step of an exact re-rank."""
        return np.ascontiguousarray(t @ self.matrix.T, dtype=np.float32)


def row_norms(x: np.ndarray) -> np.ndarray:
    """``||x||`` row by row."""
    return np.sqrt(np.einsum("ij,ij->i", x, x))


def prepare_queries(x: np.ndarray, augmented: bool) -> np.ndarray:
    """Raw float32 queries as folded vectors expect them: ``[x, ||x||]`` when ``augmented`` (ranks as
    ``[x̂, 1]`` without a division pass; float32, C-contiguous), else ``x``."""
    if not augmented:
        return x
    out = np.empty((len(x), x.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = x
    out[:, -1] = row_norms(x)
    return out


def project_rows(x: np.ndarray, side: str, projection: np.ndarray | None, projection_side: str | None) -> np.ndarray:
    """``normalize(x Rᵀ)`` when ``side`` is the one the projection R bridges, else ``x`` (in ``x``'s float dtype)."""
    if projection_side != side:
        return x
    return unit_rows(x @ np.asarray(projection, dtype=x.dtype).T)


def align_text(text: np.ndarray, projection: np.ndarray | None) -> np.ndarray:
    """Text rows (n, d_txt) as an LFA aligns its prototypes: L2-normalised, projected by ``projection``
    (when the text side was the projected one, else None) and L2-normalised again (float32)."""
    side = None if projection is None else "text"
    return l2_normalize(project_rows(l2_normalize(text), "text", projection, side))


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` L2-normalised in their own float dtype (all-zero rows stay zero)."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), np.finfo(x.dtype).tiny)
