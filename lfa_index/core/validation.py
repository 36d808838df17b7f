"""Input checks at the public boundary: convert once, check once, then trust.

Functions here take whatever users hold (numpy arrays of any float dtype, torch tensors,
non-contiguous views, nested lists) and return clean float32 / int64 torch tensors. They never
modify their input in place.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from .errors import (
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    NonFiniteError,
    ShapeError,
    ZeroNormError,
)

ArrayLike = Any  # numpy array, torch tensor or nested sequence of numbers


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` picks CUDA when torch sees a GPU, else the CPU; anything else is passed to torch."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise InvalidParameterError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}."
        )
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise InvalidParameterError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}."
        ) from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError(
            f"device={device!r} was asked for but torch sees no CUDA GPU; use device='cpu' or 'auto'."
        )
    return resolved


def as_float_tensor(
    x: ArrayLike,
    *,
    name: str,
    ndims: Sequence[int] = (2,),
    device: torch.device | None = None,
) -> torch.Tensor:
    """Convert ``x`` to a contiguous float32 tensor and check its shape and values.

    Accepts float16/32/64 (and integer) numpy arrays, torch tensors and nested lists. Raises
    :class:`ShapeError` for a wrong number of dimensions or an empty array and
    :class:`NonFiniteError` for NaN/inf values. The input is never modified.
    """
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as err:
            raise InvalidInputError(f"{name} must be a numeric array; could not convert it: {err}") from err
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
        ):
            raise InvalidInputError(
                f"{name} must hold real numbers, got dtype {arr.dtype}; pass a float array."
            )
        t = torch.from_numpy(np.ascontiguousarray(arr))
    if t.is_complex() or t.dtype == torch.bool:
        raise InvalidInputError(f"{name} must hold real numbers, got dtype {t.dtype}.")
    if t.ndim not in ndims:
        shapes = " or ".join(_shape_hint(n) for n in ndims)
        raise ShapeError(f"{name} must have shape {shapes}, got an array of shape {tuple(t.shape)}.")
    if t.numel() == 0:
        raise ShapeError(
            f"{name} is empty (shape {tuple(t.shape)}); pass at least one row with at least one feature."
        )
    # .to() copies whenever dtype or device change; .clone() guarantees a copy otherwise, so no
    # later step can ever write into the caller's memory.
    out = t.to(device=device or t.device, dtype=torch.float32)
    if out.data_ptr() == t.data_ptr():
        out = out.clone()
    out = out.contiguous()
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).reshape(out.shape[0], -1).any(dim=1).sum())
        raise NonFiniteError(
            f"{name} holds NaN or infinite values in {bad} row(s); drop or repair those rows first."
        )
    return out


def _shape_hint(ndim: int) -> str:
    return {1: "(n,)", 2: "(n_rows, dim)", 3: "(n_rows, n_views, dim)"}.get(ndim, f"{ndim}-D")


def check_embeddings(
    x: ArrayLike,
    *,
    name: str,
    ndims: Sequence[int] = (2,),
    device: torch.device | None = None,
) -> torch.Tensor:
    """As :func:`as_float_tensor`, and reject zero-norm rows (they have no direction)."""
    t = as_float_tensor(x, name=name, ndims=ndims, device=device)
    norms = torch.linalg.vector_norm(t, dim=-1)
    zero = norms <= torch.finfo(torch.float32).tiny
    if bool(zero.any()):
        rows = torch.nonzero(zero.reshape(t.shape[0], -1).any(dim=1)).flatten()[:5].tolist()
        raise ZeroNormError(
            f"{name} has {int(zero.sum())} zero-norm row(s) (first at row(s) {rows}); "
            "an all-zero embedding cannot be aligned: remove those rows or re-embed them."
        )
    return t


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise the last dimension (returns a new tensor)."""
    return torch.nn.functional.normalize(x, dim=-1)


def check_labels(y: ArrayLike, *, n_rows: int, n_classes: int, device: torch.device | None = None) -> torch.Tensor:
    """Check that ``y`` holds ``n_rows`` integer labels in ``0 .. n_classes - 1``."""
    if isinstance(y, torch.Tensor):
        arr = y.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(y)
        except (TypeError, ValueError) as err:
            raise LabelError(f"labels must be a 1-D array of integers; could not convert them: {err}") from err
    if arr.ndim != 1:
        raise ShapeError(f"labels must be 1-D of shape (n_rows,), got shape {arr.shape}.")
    if arr.shape[0] != n_rows:
        raise ShapeError(
            f"labels has {arr.shape[0]} entries but the embeddings have {n_rows} rows; "
            "pass exactly one label per embedding row."
        )
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise LabelError(
                "labels must be integers (class indices into the prototypes); got non-integer values. "
                "Map class names to indices first, or use AlignedIndex with class_names."
            )
        arr = arr.astype(np.int64)
    elif arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise LabelError(
            f"labels must be integers (class indices into the prototypes), got dtype {arr.dtype}. "
            "Map class names to indices first, or use AlignedIndex with class_names."
        )
    arr = arr.astype(np.int64, copy=True)
    if arr.size and (arr.min() < 0 or arr.max() >= n_classes):
        bad = arr[(arr < 0) | (arr >= n_classes)]
        raise LabelError(
            f"labels must lie in 0..{n_classes - 1} (one per prototype row); got {bad[:5].tolist()}. "
            "Check that the prototypes hold one row per class, in label order."
        )
    return torch.from_numpy(arr).to(device or "cpu")


# --- parameter checks -------------------------------------------------------------------------

def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    integer: bool = False,
) -> None:
    """Raise :class:`InvalidParameterError` unless ``value`` is a real (or integer) number in range."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidParameterError(
            f"{name} must be {'an integer' if integer else 'a number'}, got {value!r} ({type(value).__name__})."
        )
    if not np.isfinite(float(value)):
        raise InvalidParameterError(f"{name} must be finite, got {value!r}.")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and (value > high if high_inclusive else value >= high)
    if too_low or too_high:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'[' if low_inclusive else '('}{lo}, {hi}{']' if high_inclusive else ')'}"
        raise InvalidParameterError(f"{name} must lie in {interval}, got {value!r}.")


def check_choice(value: Any, name: str, choices: Iterable[Any]) -> None:
    """Raise :class:`InvalidParameterError` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise InvalidParameterError(f"{name} must be one of {choices}, got {value!r}.")


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
