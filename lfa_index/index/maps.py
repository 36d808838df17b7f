"""The maps of a fitted LFA as raw queries see them: ``z = normalize(x̂ G + o)`` per mapping.

This is where the index reads the LFA's maps and class vectors (``LFA.from_fitted_state`` checks
them when an index is loaded); the folding itself is in :mod:`.folding`.

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


def check_mapping(mapping: Any) -> str:
    """``mapping`` if it names a map, else ValueError."""
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {list(MAPPINGS)}, got {mapping!r}")
    return mapping
