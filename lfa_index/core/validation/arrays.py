"""Array checks at the public boundary: convert once, check once, then trust.

Functions here take whatever users hold (numpy arrays of any real dtype, torch tensors,
non-contiguous or read-only views, nested lists) and return clean float32 / int64 numpy arrays;
they never modify their input. numpy only: answering queries needs no torch.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import (
    InputTypeError,
    InvalidInputError,
    LabelError,
    NonFiniteError,
    ShapeError,
    ZeroNormError,
)

ArrayLike = Any  # numpy array, torch tensor or nested sequence of numbers

# Rows are rescaled by their largest entry before float32 sees them when that entry is outside
# this range: norms are then finite and non-denormal, and a row's direction (all LFA uses) is kept.
_SAFE_MAX = 1e15
_SAFE_MIN = 1e-15


def _to_numpy(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a numpy array without importing torch (a torch tensor is detached and copied)."""
    module = type(x).__module__ or ""
    if module.startswith("torch") and hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    if module.startswith("scipy.sparse") or hasattr(x, "tocsr"):
        raise InvalidInputError(
            f"{name} is a sparse matrix; LFA needs dense embeddings: pass {name}.toarray() instead."
        )
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as err:
        raise InvalidInputError(f"{name} must be a numeric array; could not convert it: {err}") from err


def as_real_array(x: ArrayLike, name: str) -> np.ndarray:
    """``x`` as a numpy array of real numbers (no copy when it already is one); typed errors otherwise."""
    arr = _to_numpy(x, name)
    if np.iscomplexobj(arr):
        raise InvalidInputError(f"Complex data not supported: {name} must hold real numbers, got dtype {arr.dtype}.")
    if arr.dtype == object:  # numbers in an object array (e.g. from pandas) are numbers
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise InputTypeError(f"{name} holds values that are not numbers ({err}); pass a float array.") from err
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {arr.dtype}; pass a float array.")
    return arr


def check_array(x: ArrayLike, *, name: str, ndims: Sequence[int] = (2,), copy: bool = True) -> np.ndarray:
    """A C-contiguous float32 array of ``x`` (a new one unless ``copy=False``), checked: the one validator of
    every array input.

    Accepts numpy arrays of any real dtype, torch tensors, nested lists and read-only or
    non-contiguous views; never modifies the input. Raises :class:`InvalidInputError` for
    non-numeric or sparse input, :class:`ShapeError` for a wrong number of dimensions or an empty
    array and :class:`NonFiniteError` for NaN/inf. Rows whose largest entry is above 1e15 or
    below 1e-15 are divided by it (their direction is all LFA uses), so norms never overflow or
    fall into the denormal range. ``copy=False``: ``x`` itself where it already is such an array,
    writeable, with nothing to rescale (for callers that never write to it).
    """
    return _checked(x, name, ndims, copy)[0]


def _checked(x: ArrayLike, name: str, ndims: Sequence[int], copy: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_array`'s array, and a mask of its all-zero vectors (last axis).

    One pass reads each vector's sum of squares; only vectors whose sum is non-finite, zero or
    outside the safe range are read again for their largest absolute entry (NaN and ±inf reach it),
    which says which are finite, all zero or to be rescaled. Then one copy (see ``copy``).
    """
    arr = as_real_array(x, name)
    if arr.ndim not in ndims:
        shapes = " or ".join(_shape_hint(n) for n in ndims)
        hint = " Reshape your data: a single row is x.reshape(1, -1)." if arr.ndim == 1 else ""
        raise ShapeError(f"{name} must have shape {shapes}, got an array of shape {arr.shape}.{hint}")
    if arr.shape[0] == 0:
        raise ShapeError(f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required: "
                         f"{name} is empty.")
    if arr.size == 0:
        raise ShapeError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required: "
                         f"{name} has rows without features.")
    work = arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float64)
    vectors = work.reshape(-1, work.shape[-1])
    with np.errstate(over="ignore", invalid="ignore"):  # NaN, inf and overflow land among the odd ones
        squares = np.einsum("ij,ij->i", vectors, vectors)
        odd = np.flatnonzero(~((squares >= 4 * vectors.shape[1] * _SAFE_MIN**2) & (squares <= _SAFE_MAX**2 / 4)))
        scale = np.maximum(vectors[odd].max(axis=1), -vectors[odd].min(axis=1))
    finite = np.ones(len(vectors), dtype=bool)
    finite[odd] = np.isfinite(scale)
    if not finite.all():
        bad = int((~finite).reshape(arr.shape[0], -1).any(axis=1).sum())
        raise NonFiniteError(f"{name} holds NaN or infinite values in {bad} row(s); drop or repair those rows first.")
    rescale = (scale > _SAFE_MAX) | ((scale < _SAFE_MIN) & (scale > 0))
    if not copy and work.dtype == np.float32 and work.flags.c_contiguous and work.flags.writeable \
            and not rescale.any():  # writeable: torch.from_numpy warns on a read-only array
        out = work
    else:
        with np.errstate(over="ignore"):  # rows beyond float32's range are rescaled just below
            out = np.array(work, dtype=np.float32, order="C", copy=True)
    flat = out.reshape(-1, out.shape[-1])
    if rescale.any():
        rows = odd[rescale]
        flat[rows] = (vectors[rows].astype(np.float64) / scale[rescale, None]).astype(np.float32)
    zero = np.zeros(len(vectors), dtype=bool)
    zero[odd] = scale == 0
    return out, zero


def _shape_hint(ndim: int) -> str:
    return {1: "(n,)", 2: "(n_rows, dim)", 3: "(n_rows, n_views, dim)"}.get(ndim, f"{ndim}-D")


def check_embeddings(x: ArrayLike, *, name: str, ndims: Sequence[int] = (2,), copy: bool = True) -> np.ndarray:
    """As :func:`check_array`, and reject all-zero rows (they have no direction)."""
    arr, zero = _checked(x, name, ndims, copy)
    if zero.any():
        rows = np.flatnonzero(zero.reshape(arr.shape[0], -1).any(axis=1))[:5].tolist()
        raise ZeroNormError(
            f"{name} has {int(zero.sum())} zero-norm row(s) (first at row(s) {rows}); "
            "an all-zero embedding cannot be aligned: remove those rows or re-embed them."
        )
    return arr


def check_index_labels(y: ArrayLike, *, n_rows: int, name: str = "labels") -> np.ndarray:
    """Check that ``y`` holds ``n_rows`` integer labels (class indices; int64 copy). Whether each names a class
    is :func:`~lfa_index.core.targets.encode_labels`'s to say."""
    try:
        arr = _to_numpy(y, name)
    except InvalidInputError as err:
        raise LabelError(str(err)) from err
    if arr.ndim != 1:
        raise ShapeError(f"{name} must be 1-D of shape (n_rows,), got shape {arr.shape}.")
    if arr.shape[0] != n_rows:
        raise ShapeError(
            f"{name} has {arr.shape[0]} entries but the embeddings have {n_rows} rows; "
            "pass exactly one label per embedding row."
        )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise LabelError(
                f"{name} must be integers (class indices into text_emb); got non-integer values. "
                "Map class names to indices first, or use AlignedIndex with class_names."
            )
    elif arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise LabelError(
            f"{name} must be integers (class indices into text_emb), got dtype {arr.dtype}. "
            "Map class names to indices first, or use AlignedIndex with class_names."
        )
    return arr.astype(np.int64, copy=True)


def check_ids(
    ids: Any, n_rows: int, *, per: str = "row", duplicate_error: type[InvalidInputError] = InvalidInputError
) -> np.ndarray:
    """Distinct non-negative int64 ids, one per row (``per`` names a row in messages).

    Repeats within the batch raise ``duplicate_error``; -1 is reserved for "no result".
    """
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise ShapeError(f"ids must be 1-D with one id per {per} ({n_rows}), got shape {arr.shape}.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"ids must be integers (int64), got dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise InvalidInputError(f"ids must be non-negative (-1 marks 'no result'); got {arr[arr < 0][:5].tolist()}.")
    unique, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        raise duplicate_error(f"ids repeat within this batch: {unique[counts > 1][:5].tolist()}; pass distinct ids.")
    return arr



def check_stored_array(value: Any, name: str, *, ndim: int | None = None,
                       shape: tuple[int | None, ...] | None = None, kind: str = "f") -> np.ndarray:
    """``value`` if it is a numpy array of dtype ``kind`` ("f" float, "iu" integer, "iub" integer or bool),
    of ``ndim`` dimensions / ``shape`` (None: any length), finite when float: a restored array as a fit left it.

    Raises :class:`InputTypeError`, :class:`ShapeError` or :class:`NonFiniteError`.
    """
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kind:
        got = type(value).__name__ if not isinstance(value, np.ndarray) else f"a {value.dtype} array"
        wanted = {"f": "a float array", "iu": "an integer array"}.get(kind, "an integer or boolean array")
        raise InputTypeError(f"{name} must be {wanted}, got {got}")
    if shape is not None:
        ndim = len(shape)
    if (ndim is not None and value.ndim != ndim) or (
            shape is not None and any(s is not None and s != v for s, v in zip(shape, value.shape))):
        expected = tuple("N" if s is None else s for s in shape) if shape is not None else f"{ndim} dimensions"
        raise ShapeError(f"{name} has shape {value.shape}, expected {expected}")
    if kind == "f" and not np.isfinite(value).all():
        raise NonFiniteError(f"{name} holds NaN or infinite values")
    return value


def weighted_accuracy(predicted: np.ndarray, truth: Any, sample_weight: Any) -> float:
    """Share of ``predicted`` labels equal to ``truth``, weighted by ``sample_weight`` (None: all equal).

    Raises :class:`ShapeError` unless ``truth`` holds one label per prediction and ``sample_weight``
    one finite non-negative weight per prediction, with a positive sum."""
    truth = np.asarray(truth)
    if truth.ndim != 1 or len(truth) != len(predicted):
        raise ShapeError(f"y must be 1-D with one label per row of X ({len(predicted)}), got shape {truth.shape}.")
    right = (predicted == truth).astype(np.float64)
    if sample_weight is None:
        return float(right.mean())
    weights = as_real_array(sample_weight, "sample_weight").astype(np.float64)
    if weights.shape != right.shape or not np.isfinite(weights).all() or (weights < 0).any() or weights.sum() <= 0:
        raise ShapeError(
            f"sample_weight must be {len(right)} finite non-negative weights with a positive sum, got shape "
            f"{weights.shape}; pass one weight per row of X."
        )
    return float(np.sum(weights * right) / np.sum(weights))
