"""The label space of an index: class labels ↔ positions in ``classes_``.

Labels are either the row indices of the class prototypes (``kind="index"``, int64) or class
names (``kind="name"``, str). An index answers in the space it was fitted in; a query rejected
by ``reject_below`` gets the unknown label: -1 for indices, None for names. Labels become
positions by :func:`~lfa_index.core.targets.encode_labels`, the encoding LFA's fit uses; the
index hands LFA its labels with :attr:`LabelSpace.classes` as ``class_names``, so the LFA's
``classes_`` are the index's fitted classes. What a space adds is the index's own: the two kinds,
the unknown label, rejection and classes added after the fit.

Example
-------
>>> space, y = LabelSpace.from_fit(["cat", "dog", "cat"], ["cat", "dog", "bird"], n_rows=3, n_classes=3)
>>> space.kind, y.tolist(), space.labels(np.array([2])).tolist()
('name', [0, 1, 0], ['bird'])
>>> space.reject(space.labels(np.array([0, 1])), np.array([0.9, 0.1]), 0.5).tolist()
['cat', None]
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np

from ..core.targets import encode_labels
from ..core.validation import check_index_labels
from ..errors import InvalidParameterError, LabelError, ShapeError

Kind = Literal["index", "name"]
KINDS: tuple[str, ...] = ("index", "name")


class LabelSpace:
    """Class labels ↔ positions: row indices (int64) or class names (str), and the unknown label.

    Parameters
    ----------
    kind : {"index", "name"}
        How labels were given to ``fit``.
    n_classes : int
        Number of classes C.
    names : sequence of C distinct str, or None
        Class names in position order; required for ``kind="name"``, optional for "index".
    """

    def __init__(self, kind: Kind, n_classes: int, names: Sequence[str] | None = None):
        if kind == "name" and names is None:
            raise InvalidParameterError("a label space of class names needs the names.")
        self.kind = kind
        self.names = None if names is None else list(names)
        self.classes = (
            np.array(self.names, dtype=object) if kind == "name" else np.arange(n_classes, dtype=np.int64)
        )
        self.classes.flags.writeable = False

    def __len__(self) -> int:
        return len(self.classes)

    def __repr__(self) -> str:
        return f"LabelSpace(kind={self.kind!r}, n_classes={len(self)}, names={self.names is not None})"

    @property
    def unknown_label(self) -> int | None:
        """What rejected queries get: -1 for indices, None for names."""
        return None if self.kind == "name" else -1

    # ------------------------------------------------------------------ building
    @classmethod
    def from_fit(
        cls, y: Any, class_names: Any, *, n_rows: int, n_classes: int
    ) -> tuple["LabelSpace", np.ndarray | None]:
        """The space of ``fit``'s labels ``y`` and their positions (None for unsupervised fits).

        String labels make a space of names (``class_names`` required); integers index the rows.
        The fitted LFA gets ``y`` with :attr:`classes` as its ``class_names``.
        """
        names = check_class_names(class_names, n_classes)
        if y is None:
            return cls("name" if names is not None else "index", n_classes, names), None
        arr = _as_array(y)
        if _is_name_array(arr):
            if names is None:
                raise LabelError("y holds strings but class_names is None; pass class_names (one per text_emb row).")
            space = cls("name", n_classes, names)
        else:
            space = cls("index", n_classes, names)
        return space, space.positions(arr, n_rows=n_rows, name="y")

    def extend(self, n_new: int, class_names: Any = None) -> "LabelSpace":
        """This space with ``n_new`` classes appended (their ``class_names`` when the space has names)."""
        if self.names is None and class_names is not None:
            raise InvalidParameterError(
                "this index was fitted without class_names, so new classes get integer labels; pass class_names=None."
            )
        if self.names is None:
            return LabelSpace(self.kind, len(self) + n_new)
        new = check_class_names(class_names, n_new, required=True)
        clash = sorted(set(new) & set(self.names))
        if clash:
            raise LabelError(f"class name(s) {clash[:5]} already exist; choose new names.")
        return LabelSpace(self.kind, len(self) + n_new, self.names + new)

    # ------------------------------------------------------------------ labels <-> positions
    def labels(self, positions: np.ndarray) -> np.ndarray:
        """Labels of class positions (any shape)."""
        return self.classes[positions]

    def positions(self, labels: Any, *, n_rows: int | None = None, name: str = "labels") -> np.ndarray:
        """Positions (int64) of labels given in this space: names for "name", integers for "index"."""
        arr = _as_array(labels)
        if self.kind == "index":
            arr = check_index_labels(arr, n_rows=len(arr) if n_rows is None else n_rows, name=name)
            return encode_labels(arr, self.classes, name=name, hint=self._index_hint())
        _check_rows(arr, n_rows, name)
        if not _is_name_array(arr):
            raise LabelError(f"{name} must be class names (strings) for this index, got dtype {arr.dtype}.")
        return encode_labels(arr, self.classes, name=name, hint=_NAME_HINT)

    def lookup(self, labels: Any, *, name: str = "labels") -> np.ndarray:
        """Positions of labels in this space, or of class names in a space of indices that has names."""
        arr = _as_array(labels)
        _check_rows(arr, None, name)
        if self.kind == "name" or _is_name_array(arr) or arr.dtype == object:
            known = self.names if self.names is not None else [str(c) for c in self.classes]
            texts = np.array([str(v) for v in arr.tolist()], dtype=object)
            return encode_labels(texts, np.array(known, dtype=object), name=name, hint=_NAME_HINT)
        return self.positions(arr, name=name)

    def _index_hint(self) -> str:
        return (f"they must lie in 0..{len(self) - 1} (one per text_emb row): check that text_emb holds one row "
                "per class, in label order")

    def name_of(self, label: Any) -> str:
        """Readable name of a label: its class name when the space has names, else its text ('' for None)."""
        if label is None:
            return ""
        if self.kind == "index" and self.names is not None and 0 <= int(label) < len(self):
            return self.names[int(label)]
        return str(label)

    def reject(self, labels: np.ndarray, scores: np.ndarray, threshold: float, unknown: Any = ...) -> np.ndarray:
        """``labels`` with those whose score is below ``threshold`` replaced by the unknown label.

        ``unknown`` defaults to :attr:`unknown_label`; the array becomes an object array when it
        is None. ``labels`` and ``scores`` have one shape (top-1 (n,) or top-k (n, k)).
        """
        unknown = self.unknown_label if unknown is ... else unknown
        rejected = np.asarray(scores) < threshold
        if not rejected.any():
            return labels
        out = labels.astype(object) if unknown is None else labels.copy()
        out[rejected] = unknown
        return out

    # ------------------------------------------------------------------ saving
    def to_json(self) -> dict[str, Any]:
        """``{"label_space": kind, "class_names": names or None}``."""
        return {"label_space": self.kind, "class_names": self.names}

    @classmethod
    def from_json(cls, doc: dict[str, Any], n_classes: int) -> "LabelSpace":
        """The space :meth:`to_json` described, for ``n_classes`` classes (checked)."""
        kind = doc["label_space"]
        if kind not in KINDS:
            raise ValueError(f"label_space must be one of {list(KINDS)}, got {kind!r}")
        return cls(kind, n_classes, check_class_names(doc["class_names"], n_classes, required=kind == "name"))


_NAME_HINT = "add them with add_classes() (or pass them in class_names at fit)"


def check_class_names(names: Any, n_classes: int, required: bool = False) -> list[str] | None:
    """``names`` as a list of ``n_classes`` distinct str (None when not given and not ``required``)."""
    if names is None:
        if required:
            raise InvalidParameterError("names are required: this index labels its classes by name.")
        return None
    if isinstance(names, str):
        raise InvalidParameterError("class names must be a sequence of strings, not a single string.")
    names = list(names)
    if not all(isinstance(n, (str, np.str_)) for n in names):
        raise InvalidParameterError("class names must be strings (they are stored as JSON).")
    names = [str(n) for n in names]
    if "" in names:  # a store field holds "" for a rejected row: an empty name would read as one
        raise LabelError("class names must not be empty: '' marks a rejected row in written labels; name the class.")
    if len(names) != n_classes:
        raise ShapeError(f"got {len(names)} class names for {n_classes} prototype rows; pass one name per row.")
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise LabelError(f"class names must be distinct; repeated: {dupes[:5]}.")
    return names


def _as_array(labels: Any) -> np.ndarray:
    return labels.detach().cpu().numpy() if type(labels).__module__.startswith("torch") else np.asarray(labels)


def _check_rows(arr: np.ndarray, n_rows: int | None, name: str) -> None:
    if arr.ndim != 1 or (n_rows is not None and arr.shape[0] != n_rows):
        rows = "" if n_rows is None else f" ({n_rows})"
        raise ShapeError(f"{name} must be 1-D with one label per row{rows}, got shape {arr.shape}.")


def _is_name_array(arr: np.ndarray) -> bool:
    return arr.dtype.kind in "US" or (arr.dtype == object and all(isinstance(v, (str, np.str_)) for v in arr.ravel()))
