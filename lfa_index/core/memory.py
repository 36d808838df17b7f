"""What a fit holds in memory, estimated before it starts, and the limit it must stay within.

A supervised fit of N rows (V views each) of width d against C classes holds, at its peak:

* the rows, a few copies: O(N·V·d);
* the maps and the optimiser state, a dozen d × d matrices: O(d²), the term that dominates wide spaces;
* the class vectors: O(C·d);
* the scores that grow with rows *and* classes, taken in blocks of rows
  (:data:`~lfa_index.core.config.SCORE_BLOCK` values at a time): O(1) in N·C;
* where rows are fewer than dimensions, one N × N system (GDA's precision by Woodbury): O(N²).

:func:`check_fit_memory` refuses, before any work, a fit whose estimate exceeds the limit:
``$LFA_INDEX_MEMORY_LIMIT`` (bytes, or with a K/M/G/T suffix) or else 80 % of this machine's memory.
"""

from __future__ import annotations

import os

from ..errors import InvalidParameterError, MemoryLimitError
from .config import SCORE_BLOCK

MEMORY_LIMIT_ENV = "LFA_INDEX_MEMORY_LIMIT"
MAP_COPIES = 16  # W, its gradient, two Adam moments, W_tt, the initial maps, fold maps, float64 Procrustes work
ROW_COPIES = 6
CLASS_COPIES = 8
SCORE_COPIES = 6
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def fit_memory(n_rows: int, n_views: int, width: int, n_classes: int) -> int:
    """Bytes a fit holds at its peak, by the terms of the module docstring (an upper estimate)."""
    rows = ROW_COPIES * 4 * n_rows * n_views * width
    maps = MAP_COPIES * 8 * width * width
    classes = CLASS_COPIES * 8 * n_classes * width
    scores = SCORE_COPIES * 8 * SCORE_BLOCK
    system = 3 * 8 * n_rows * n_rows if n_rows < width else 0
    return rows + maps + classes + scores + system


def memory_limit() -> tuple[int, str]:
    """The limit in bytes and where it comes from."""
    given = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if given:
        number, unit = given.rstrip("BbiI"), ""
        if number and number[-1].upper() in _UNITS:
            number, unit = number[:-1], number[-1].upper()
        try:
            return int(float(number) * _UNITS[unit]), f"${MEMORY_LIMIT_ENV}={given}"
        except ValueError:
            raise InvalidParameterError(
                f"${MEMORY_LIMIT_ENV}={given!r} is not a size; give bytes or a number with K, M, G or T (e.g. 8G)."
            ) from None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): no limit known
        return 2**62, "no known limit"
    return int(0.8 * total), "80 % of this machine's memory"


def check_fit_memory(n_rows: int, n_views: int, width: int, n_classes: int) -> None:
    """Raise :class:`~lfa_index.errors.MemoryLimitError` when a fit of this size cannot stay within the limit."""
    needed = fit_memory(n_rows, n_views, width, n_classes)
    limit, source = memory_limit()
    if needed > limit:
        raise MemoryLimitError(
            f"fitting {n_rows} rows × {n_views} view(s) of width {width} against {n_classes} classes needs about "
            f"{_gib(needed)} (the d × d maps alone {_gib(MAP_COPIES * 8 * width * width)}), over the limit of "
            f"{_gib(limit)} ({source}); reduce the width (projection='shrink' maps the wider side down), the rows "
            f"or the classes, or raise ${MEMORY_LIMIT_ENV}."
        )


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.2f} GiB"
