"""The maps of a fitted LFA as raw queries see them: ``z = normalize(x̂ G + o)`` per mapping.

This is where the index reads the LFA's maps and class vectors (and checks them when an index is
loaded); the folding itself is in :mod:`.folding`.

Example
-------
>>> maps = query_maps(lfa)
>>> maps["task"].align(x)                    # == lfa.transform(x)
>>> maps["tt"].fold(new_prototypes, bias=np.zeros(len(new_prototypes)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import MAPPINGS
from ..errors import ZeroNormError
from . import folding


@dataclass(frozen=True)
class QueryMap:
    """One map of an LFA folded for raw queries: G (d_in, d) and, with centring, o (d,)."""

    matrix: np.ndarray
    offset: np.ndarray | None = None

    def align(self, x: np.ndarray) -> np.ndarray:
        """Aligned unit rows (n, d) of raw float32 rows."""
        return folding.align(x, self.matrix, self.offset)

    def norms(self, x: np.ndarray) -> np.ndarray:
        """``||x G + ||x|| o||`` (n,): what turns folded inner products into aligned scores.

        Raises :class:`ZeroNormError` for rows the map sends to zero (a singular map, or rows along
        the mean it centres on): they have no aligned direction, so no finite score.
        """
        norms = folding.query_norms(x, self.matrix, self.offset)
        if not norms.all():
            rows = np.flatnonzero(norms == 0)
            raise ZeroNormError(
                f"query row(s) {rows[:5].tolist()} map to the zero vector in the aligned space (the map is singular "
                "along them, or they point along the support mean it centres on): they have no aligned direction "
                "to score; drop them."
            )
        return norms

    def fold(self, prototypes: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """Class vectors folded with this map (c, d_in [+1])."""
        return folding.fold(prototypes, self.matrix, self.offset, bias)


def query_maps(lfa: Any) -> dict[str, QueryMap]:
    """G and o of each map ("task", "tt", "average") of a fitted LFA."""
    projection = lfa.projection_ if lfa.projection_side_ == "image" else None
    maps = {"task": lfa.W_, "tt": lfa.W_tt_, "average": lfa.W_avg_}
    return {
        mapping: QueryMap(
            folding.query_map(w, projection), folding.query_offset(w, lfa.feature_mean_) if lfa.center_ else None
        )
        for mapping, w in maps.items()
    }


def check_lfa(lfa: Any) -> None:
    """Raise ValueError, saying what is wrong, unless the maps and class vectors the index reads
    from a restored LFA have consistent shapes, float dtypes and finite values."""
    n_in = lfa.n_features_in_
    if isinstance(n_in, bool) or not isinstance(n_in, int) or n_in < 1:
        raise ValueError(f"n_features_in_ must be a positive integer, got {n_in!r}")
    side = lfa.projection_side_
    if side not in (None, "image", "text"):
        raise ValueError(f"projection_side_ must be None, 'image' or 'text', got {side!r}")
    if not isinstance(lfa.center_, bool):
        raise ValueError(f"center_ must be true or false, got {lfa.center_!r}")
    w = _float_array(lfa.W_, "W_", ndim=2)
    d = w.shape[0]
    for name, value in (("W_", w), ("W_tt_", lfa.W_tt_), ("W_avg_", lfa.W_avg_)):
        _float_array(value, name, shape=(d, d))
    if side == "image":
        _float_array(lfa.projection_, "projection_", shape=(d, n_in))
    elif d != n_in:
        raise ValueError(f"W_ is {d}×{d} but the image embeddings are {n_in}-d and projection_side_ is {side!r}")
    _float_array(lfa.feature_mean_, "feature_mean_", shape=(d,))
    n_classes = len(np.asarray(lfa.classes_))
    _float_array(lfa.prototypes_, "prototypes_", shape=(n_classes, d))
    _float_array(lfa.intercept_, "intercept_", shape=(n_classes,))


def check_mapping(mapping: Any) -> str:
    """``mapping`` if it names a map, else ValueError."""
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {list(MAPPINGS)}, got {mapping!r}")
    return mapping


def _float_array(value: Any, name: str, *, ndim: int | None = None, shape: tuple[int, ...] | None = None) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        kind = type(value).__name__ if not isinstance(value, np.ndarray) else f"a {value.dtype} array"
        raise ValueError(f"{name} must be a float array, got {kind}")
    if (ndim is not None and value.ndim != ndim) or (shape is not None and value.shape != shape):
        raise ValueError(f"{name} has shape {value.shape}, expected {shape or f'{ndim} dimensions'}")
    if not np.isfinite(value).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return value
