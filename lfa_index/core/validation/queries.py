"""Inputs at the public boundary of an AlignedIndex: queries (one conversion and one check per call),
class prototypes added later, and the support rows of ``partial_fit``."""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from ...errors import DimensionMismatchError, LabelError, NonFiniteError, ShapeError, ZeroNormError
from .arrays import as_real_array, check_embeddings

# Squared row norms outside this range lose bits in float32 (overflow, or squares in the denormal
# range): such rows are rescaled to a largest entry of 1, which leaves every answer unchanged.
_SAFE_SQUARED = (1e-30, 1e30)


def check_query_matrix(X: Any, *, name: str, dim: int, allow_zero: bool = False) -> np.ndarray:
    """Convert queries to a C-contiguous float32 (n, dim) array without copying when they already are.

    One parallel pass over the data (FAISS's squared row norms) checks finiteness and zero rows, so
    validation costs a small fraction of the search itself. Rows of huge or tiny norm (any dtype)
    come back divided by their largest entry in a copy: scores and rankings do not depend on a
    query's norm. Raises :class:`ShapeError`, :class:`DimensionMismatchError`,
    :class:`NonFiniteError` or :class:`ZeroNormError`.
    """
    arr = as_real_array(X, name)
    if arr.ndim != 2:
        hint = f" e.g. {name}.reshape(1, -1) for a single query" if arr.ndim == 1 else ""
        raise ShapeError(f"{name} must have shape (n_queries, {dim}), got an array of shape {arr.shape};{hint}.")
    if arr.shape[0] == 0:
        raise ShapeError(f"{name} is an empty batch (shape {arr.shape}); pass at least one row.")
    if arr.shape[1] != dim:
        raise DimensionMismatchError(
            f"{name} has {arr.shape[1]} dimensions but the index aligns {dim}-d image embeddings; "
            "embed the queries with the same image model as the support set."
        )
    with np.errstate(over="ignore"):  # float64 beyond float32's range: rescaled below
        x = np.ascontiguousarray(arr, dtype=np.float32)
    # FAISS's multi-threaded squared norms: NaN/inf propagate, so one pass checks every trap
    squared = np.empty(len(x), dtype=np.float32)
    faiss.fvec_norms_L2sqr(faiss.swig_ptr(squared), faiss.swig_ptr(x), x.shape[1], x.shape[0])
    low, high = _SAFE_SQUARED
    odd = ~((squared >= low) & (squared <= high))
    if not odd.any():
        return x
    rows = np.flatnonzero(odd)
    exact = arr[rows].astype(np.float64)
    nonfinite = ~np.isfinite(exact).all(axis=1)
    if nonfinite.any():
        raise NonFiniteError(
            f"{name} holds NaN or infinite values in {int(nonfinite.sum())} row(s) (first: "
            f"{rows[nonfinite][:5].tolist()}); drop or repair those rows first."
        )
    peak = np.abs(exact).max(axis=1)
    zero = peak == 0
    if zero.any() and not allow_zero:
        raise ZeroNormError(
            f"{name} has {int(zero.sum())} zero-norm row(s) (first: {rows[zero][:5].tolist()}); an all-zero "
            "embedding has no direction to search with: remove those rows or re-embed them."
        )
    x = x.copy() if np.shares_memory(x, arr) else x  # never write into the caller's array
    x[rows[~zero]] = (exact[~zero] / peak[~zero, None]).astype(np.float32)
    return x


def check_text_matrix(text_emb: Any, *, name: str, dim: int) -> np.ndarray:
    """Class prototypes (n, ``dim``) from the text model the index was fitted with: checked embeddings,
    or :class:`DimensionMismatchError`."""
    text = check_embeddings(text_emb, name=name)
    if text.shape[1] != dim:
        raise DimensionMismatchError(
            f"{name} has {text.shape[1]} dimensions but the index was fitted on {dim}-d prototypes; "
            "embed text with the same text model."
        )
    return text


def check_more_support(X: Any, y: Any, seen: np.ndarray, seen_labels: np.ndarray | None) -> np.ndarray:
    """Support rows ``X`` for ``partial_fit``: shaped as the support set ``seen`` so far (same model and views),
    with labels ``y`` exactly when it had them; :class:`ShapeError` or :class:`LabelError` otherwise."""
    support = check_embeddings(X, name="X", ndims=(seen.ndim,))
    if support.shape[1:] != seen.shape[1:]:
        raise ShapeError(
            f"X has rows of shape {support.shape[1:]} but the support set has {seen.shape[1:]}; "
            "pass embeddings from the same model with the same number of views."
        )
    if (y is None) != (seen_labels is None):
        raise LabelError(
            "partial_fit needs labels exactly when fit had them: pass y=None for an unsupervised index, "
            "labels otherwise."
        )
    return support
