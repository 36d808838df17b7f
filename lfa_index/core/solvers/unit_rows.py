"""Unit rows for the fit's arithmetic: L2-normalised, with entries too small to matter set to zero.

Some encoders leave a dimension all but dead: all-MiniLM-L6-v2 writes values of 1e-33 to 1e-37
in two of its 384 dimensions for every text. Such an entry changes no cosine (it is far below the
rounding step of any sum it enters), but its products with a gradient of 1e-5 are subnormal
numbers, which x86 CPUs multiply and add 10-100 times slower than normal ones: on 2,387 MiniLM
texts, one refinement step's weight-gradient product took 26 ms instead of 4. Entries below
:data:`NEGLIGIBLE` of a unit row are therefore held at exactly zero (flushing subnormals with
``torch.set_flush_denormal`` instead would reach only the calling thread, not the intra-op
threads that share a matrix product).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NEGLIGIBLE = 2.0**-64
"""Entries of a unit row below this (5.4e-20) are zero: a product of one with any value down to
1e-18 stays a normal float32, and a sum of products of unit rows is rounded at 2^-24 of its
largest partial sum, far above it."""


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` L2-normalised along its last axis, entries below :data:`NEGLIGIBLE` set to zero."""
    return without_negligible(F.normalize(x, dim=-1))


def without_negligible(rows: torch.Tensor) -> torch.Tensor:
    """Unit ``rows`` with their entries below :data:`NEGLIGIBLE` set to zero, in place."""
    return rows.masked_fill_(rows.abs() < NEGLIGIBLE, 0.0)
