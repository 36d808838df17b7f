"""Queries at the public boundary of an AlignedIndex: one conversion and one check per call."""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np
import torch

from ..errors import DimensionMismatchError, InvalidInputError, NonFiniteError, ShapeError, ZeroNormError


def check_query_matrix(X: Any, *, name: str, dim: int, allow_zero: bool = False) -> np.ndarray:
    """Convert queries to a C-contiguous float32 (n, dim) array without copying when they already are.

    One parallel pass over the data (FAISS's squared row norms) checks finiteness and zero rows, so
    validation costs a small fraction of the search itself. Raises :class:`ShapeError`,
    :class:`DimensionMismatchError`, :class:`NonFiniteError` or :class:`ZeroNormError`.
    """
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu()
        X = (X.float() if X.dtype == torch.bfloat16 else X).numpy()
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"{name} must be a numeric array; could not convert it: {err}") from err
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {arr.dtype}; pass a float array.")
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
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    # FAISS's multi-threaded squared norms: NaN/inf propagate, so one pass checks both traps
    squared = np.empty(len(arr), dtype=np.float32)
    faiss.fvec_norms_L2sqr(faiss.swig_ptr(squared), faiss.swig_ptr(arr), arr.shape[1], arr.shape[0])
    bad = ~np.isfinite(squared)
    if bad.any():
        rows = np.flatnonzero(bad)
        if not np.isfinite(arr[rows]).all():
            nonfinite = rows[~np.isfinite(arr[rows]).all(axis=1)]
            raise NonFiniteError(
                f"{name} holds NaN or infinite values in {len(nonfinite)} row(s) (first: {nonfinite[:5].tolist()}); "
                "drop or repair those rows first."
            )
        raise InvalidInputError(
            f"{name} has row(s) {rows[:5].tolist()} whose values are too large for float32 arithmetic; "
            "L2-normalise the embeddings first."
        )
    if not allow_zero and not squared.all():
        zero = np.flatnonzero(squared == 0)
        raise ZeroNormError(
            f"{name} has {len(zero)} zero-norm row(s) (first: {zero[:5].tolist()}); an all-zero embedding has no "
            "direction to search with: remove those rows or re-embed them."
        )
    return arr
