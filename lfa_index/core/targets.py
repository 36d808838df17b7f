"""Class labels of a fit, and the one encoding of labels as class positions.

scikit-learn's conventions: any hashable labels (``classes_``), a column-vector ``y`` flattened
with a warning, continuous targets refused. Integer labels 0..C-1 index the rows of ``text_emb``;
other labels need ``class_names`` naming each row, or no ``text_emb`` at all, in which case the
L2-normalised class means of the support are the class prototypes (uni-modal alignment, no text).
:func:`encode_labels` is the one place a label becomes a position in ``classes_``: LFA's fit and an
index's :class:`~lfa_index.index.labels.LabelSpace` both call it.

Example
-------
>>> codes, classes, text = encode_targets(["dog", "cat"], X, T, ["cat", "dog", "owl"])
>>> codes.tolist(), classes.tolist()
([1, 0], ['cat', 'dog', 'owl'])
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import InvalidInputError, LabelError, ShapeError
from .validation import check_embeddings


def encode_targets(y: Any, x: np.ndarray, text_emb: Any, class_names: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """Label codes 0..C-1 (or None), the labels of the C classes, and the (C, d) class prototypes."""
    if y is None:
        if text_emb is None:
            raise InvalidInputError(
                "LFA requires y to be passed, but the target y is None; unsupervised LFA (y=None) needs "
                "text_emb=(C, d) class prototypes."
            )
        p = check_embeddings(text_emb, name="text_emb")
        return None, class_labels(class_names, len(p)), p
    y = check_targets(y, len(x))
    if text_emb is None:
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise InvalidInputError(f"y holds one class ({classes[0]!r}); LFA needs at least 2 classes.")
        first = x[:, 0] if x.ndim == 3 else x
        unit = first / np.linalg.norm(first, axis=1, keepdims=True)
        means = np.zeros((len(classes), unit.shape[1]), dtype=np.float64)
        np.add.at(means, codes, unit)
        return codes.astype(np.int64), classes, check_embeddings(means, name="class means of the support")
    p = check_embeddings(text_emb, name="text_emb")
    if len(p) < 2:
        raise InvalidInputError(
            f"text_emb has {len(p)} row(s); LFA needs at least 2 classes (one text_emb row per class)."
        )
    classes = class_labels(class_names, len(p))
    hint = (f"integers 0..{len(p) - 1} index the text_emb rows; pass class_names=[...] naming each text_emb row, "
            "or labels that index them" if class_names is None else "class_names names the text_emb rows")
    return encode_labels(y, classes, name="y", hint=hint), classes, p


def encode_labels(y: np.ndarray, classes: np.ndarray, *, name: str, hint: str) -> np.ndarray:
    """Position (int64) of each label of the 1-D ``y`` in ``classes``; a :class:`LabelError` lists labels of no class.

    ``name`` is what the message calls ``y``; ``hint`` says how to fix it.
    """
    position = {c: i for i, c in enumerate(classes.tolist())}
    labels = y.tolist()
    codes = np.fromiter((position.get(v, -1) for v in labels), dtype=np.int64, count=len(labels))
    if (codes < 0).any():
        unknown = sorted({repr(v) for v, c in zip(labels, codes) if c < 0})[:5]
        raise LabelError(f"{name} hold label(s) of no class: {', '.join(unknown)}; {hint}.")
    return codes


def class_labels(class_names: Any, n_rows: int) -> np.ndarray:
    """The label of each of ``n_rows`` class rows: ``class_names`` (each row named once) or 0..C-1."""
    if class_names is None:
        return np.arange(n_rows)
    classes = np.asarray(class_names)
    if classes.ndim != 1 or len(classes) != n_rows or len(np.unique(classes)) != n_rows:
        raise LabelError(f"class_names must name each of the {n_rows} text_emb rows once, got {classes.shape}.")
    return classes


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

    try:
        kind = type_of_target(arr)
        np.unique(arr)  # labels of several types (str and int) cannot be ordered into classes
    except (ValueError, TypeError) as err:
        raise LabelError(f"y cannot be read as class labels ({err}); pass labels of one type (all integers or "
                         "all strings), with no missing values.") from err
    if kind not in ("binary", "multiclass"):
        raise LabelError(f"Unknown label type: {kind!r}; LFA classifies, so y must hold class labels "
                         "(integers or strings), not continuous values.")
    return arr
