"""What a fit is asked to learn: the class labels, their codes and the prototype of each class.

scikit-learn's conventions: any hashable labels (``classes_``), a column-vector ``y`` flattened
with a warning, continuous targets refused. Integer labels 0..C-1 index the prototype rows;
other labels need ``classes`` naming each row, or no prototypes at all, in which case the
L2-normalised class means of the support are the prototypes (uni-modal alignment, no text).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import InvalidInputError, LabelError, ShapeError
from .validation import check_embeddings


def encode_targets(y: Any, x: np.ndarray, prototypes: Any, classes: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """Label codes 0..C-1 (or None), the labels of the C classes, and the (C, d) prototypes."""
    if y is None:
        if prototypes is None:
            raise InvalidInputError(
                "LFA requires y to be passed, but the target y is None; unsupervised LFA (y=None) needs "
                "prototypes=(C, d) class prototypes."
            )
        p = check_embeddings(prototypes, name="prototypes")
        return None, _class_labels(classes, len(p)), p
    y = check_targets(y, len(x))
    if prototypes is None:
        labels_of, codes = np.unique(y, return_inverse=True)
        if len(labels_of) < 2:
            raise InvalidInputError(f"y holds one class ({labels_of[0]!r}); LFA needs at least 2 classes.")
        first = x[:, 0] if x.ndim == 3 else x
        unit = first / np.linalg.norm(first, axis=1, keepdims=True)
        means = np.zeros((len(labels_of), unit.shape[1]), dtype=np.float64)
        np.add.at(means, codes, unit)
        return codes.astype(np.int64), labels_of, check_embeddings(means, name="class means of the support")
    p = check_embeddings(prototypes, name="prototypes")
    if len(p) < 2:
        raise InvalidInputError(
            f"prototypes has {len(p)} row(s); LFA needs at least 2 classes (one prototype row per class)."
        )
    labels_of = _class_labels(classes, len(p))
    position = {c: i for i, c in enumerate(labels_of.tolist())}
    codes = np.fromiter((position.get(v, -1) for v in y.tolist()), dtype=np.int64, count=len(y))
    if (codes < 0).any():
        unknown = sorted({repr(v) for v, c in zip(y.tolist(), codes) if c < 0})[:5]
        hint = "integers 0..C-1 index the prototype rows" if classes is None else "classes names the rows"
        raise LabelError(f"labels {', '.join(unknown)} name no prototype row ({hint}); pass classes=[...] "
                         "naming each prototype row, or labels that index them.")
    return codes, labels_of, p

def _class_labels(classes: Any, n_rows: int) -> np.ndarray:
    """The label of each of ``n_rows`` prototype rows: ``classes`` (each row named once) or 0..C-1."""
    if classes is None:
        return np.arange(n_rows)
    labels_of = np.asarray(classes)
    if labels_of.ndim != 1 or len(labels_of) != n_rows or len(np.unique(labels_of)) != n_rows:
        raise LabelError(f"classes must name each of the {n_rows} prototype rows once, got {labels_of.shape}.")
    return labels_of


def check_targets(y: Any, n_rows: int) -> np.ndarray:
    """``y`` as a 1-D array of class labels (a column vector is flattened with a warning)."""
    arr = np.asarray(y.detach().cpu().numpy() if hasattr(y, "detach") else y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        from sklearn.exceptions import DataConversionWarning

        warnings.warn("A column-vector y was passed when a 1d array was expected; pass y of shape "
                      "(n_samples,), e.g. y.ravel().", DataConversionWarning, stacklevel=3)
        arr = arr.ravel()
    if arr.ndim != 1 or len(arr) != n_rows:
        raise ShapeError(f"y must be 1-D with one label per row of X ({n_rows}), got shape {arr.shape}; "
                         "pass exactly one label per embedding row.")
    from sklearn.utils.multiclass import type_of_target

    kind = type_of_target(arr)
    if kind not in ("binary", "multiclass"):
        raise LabelError(f"Unknown label type: {kind!r}; LFA classifies, so y must hold class labels "
                         "(integers or strings), not continuous values.")
    return arr
