"""The classes of an AlignedIndex as one immutable snapshot: labels, prototypes, biases, maps, and
the folded prototypes in flat inner-product indexes, one group per map.

Fitted classes are scored with W ("task"), classes added from text with W_tt ("tt", paper §4.5).
Writers build a new :class:`ClassTable` and publish it with one assignment; readers take the
current one once per call, so every answer comes from a single consistent state.

Example
-------
>>> table = ClassTable.build(space, prototypes, intercept, is_new, text, fitted_maps(lfa), FaissDevice("cpu"))
>>> scores, positions = top_class_positions(table, x, 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np

from ..arrays import MAPPINGS
from ..core.query_map import QueryMap, align_text, prepare_queries
from ..core.validation import check_choice
from . import folding
from .faiss_device import FaissDevice
from .labels import LabelSpace


@dataclass(frozen=True)
class ClassGroup:
    """Classes scored with one map: their folded prototypes in a flat inner-product index."""

    mapping: str  # "task" for fitted classes, "tt" for classes added from text
    positions: np.ndarray  # (c,) int64 positions of these classes, increasing
    folded: np.ndarray  # (c, d_in), or (c, d_in + 1) with biases or centring
    query_map: QueryMap
    index: faiss.Index

    @property
    def augmented(self) -> bool:
        """Whether queries get their norm as a trailing coordinate (class biases or centring)."""
        return self.folded.shape[1] == self.query_map.n_features_in + 1

    def queries(self, x: np.ndarray) -> np.ndarray:
        return prepare_queries(x, self.augmented)


@dataclass(frozen=True)
class ClassTable:
    """Everything the index knows about its classes, at one instant. Arrays have one row per class."""

    labels: LabelSpace
    prototypes: np.ndarray  # (C, d) float32 class vectors in the aligned space
    intercept: np.ndarray  # (C,) float32 class biases (0 for classes from text)
    is_new: np.ndarray  # (C,) bool: added from text, scored with W_tt
    text_embeddings: np.ndarray  # (C, d_txt) the prototypes as given
    maps: dict[str, QueryMap]
    groups: tuple[ClassGroup, ...]
    device: FaissDevice  # where the groups' indexes live
    text_projection: np.ndarray | None = None  # (d, d_txt) when the text side was projected, else None

    @classmethod
    def build(
        cls, labels: LabelSpace, prototypes: np.ndarray, intercept: np.ndarray, is_new: np.ndarray,
        text_embeddings: np.ndarray, maps: dict[str, QueryMap], device: FaissDevice,
        folded: dict[str, np.ndarray] | None = None, text_projection: np.ndarray | None = None,
    ) -> "ClassTable":
        """Fold each group of classes with its map (or take ``folded``, as saved) and index it."""
        groups = []
        for mapping, mask in group_masks(is_new):
            positions = np.flatnonzero(mask).astype(np.int64)
            if folded is not None:
                vectors = folded[mapping]
            else:
                bias = intercept[positions] if mapping == "task" else np.zeros(len(positions), dtype=np.float32)
                vectors = maps[mapping].fold(prototypes[positions], bias)
            groups.append(ClassGroup(mapping, positions, vectors, maps[mapping], device.flat_index(vectors)))
        return cls(labels, prototypes, intercept, is_new, text_embeddings, maps, tuple(groups), device, text_projection)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) as its arrays; the FAISS indexes are built again, on the copy's device."""
        folded = {group.mapping: group.folded for group in self.groups}
        parts = (self.labels, self.prototypes, self.intercept, self.is_new, self.text_embeddings, self.maps)
        return _rebuilt, (*parts, self.device, folded, self.text_projection)

    def transform_text(self, text: np.ndarray) -> np.ndarray:
        """Text rows (n, d_txt) aligned as the class prototypes were: L2-normalised, projected, L2-normalised."""
        return align_text(text, self.text_projection)

    @property
    def n_features(self) -> int:
        return self.maps["task"].n_features_in

    @property
    def augmented(self) -> bool:
        """Whether any class vector carries the bias coordinate (queries: ``[x, ||x||]``)."""
        return any(group.augmented for group in self.groups)

    def decision_function(self, x: np.ndarray) -> np.ndarray:
        """Aligned score of each raw float32 query for each class, (n, C), columns in position order."""
        out = np.empty((len(x), len(self.labels)), dtype=np.float32)
        for group in self.groups:
            raw = group.queries(x) @ group.folded.T
            out[:, group.positions] = folding.aligned_scores(raw, group.query_map.norms(x))
        return out

    def query_map(self, mapping: str) -> QueryMap:
        """The query map named ``mapping`` ("task", "tt" or "average"); a typed error for another name."""
        check_choice(mapping, "mapping", MAPPINGS)
        return self.maps[mapping]

    def aligned_prototypes(self) -> np.ndarray:
        """Every class folded with its own map, (C, d_in [+1]), in position order."""
        out = np.zeros((len(self.labels), self.n_features + int(self.augmented)), dtype=np.float32)
        for group in self.groups:
            out[group.positions, : group.folded.shape[1]] = group.folded
        return out


def _rebuilt(*parts: Any) -> ClassTable:
    return ClassTable.build(*parts[:7], folded=parts[7], text_projection=parts[8])


def text_projection(lfa: Any) -> np.ndarray | None:
    """The projection a fitted LFA applies to text rows, or None (equal widths, or the image side projected)."""
    return lfa.projection_ if lfa.projection_side_ == "text" else None


def fitted_maps(lfa: Any) -> dict[str, QueryMap]:
    """Every query map of a fitted LFA, by name ("task", "tt", "average")."""
    return {mapping: lfa.query_map(mapping) for mapping in MAPPINGS}


def group_masks(is_new: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``(mapping, mask)`` of the non-empty groups: fitted classes ("task"), then added ones ("tt")."""
    return [(m, mask) for m, mask in (("task", ~is_new), ("tt", is_new)) if mask.any()]


def class_vectors(lfa: Any, is_new: np.ndarray, added: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prototypes (C, d) and biases (C,) of every class: the LFA's classes (biases kept where the
    class was fitted on images), then the ``added`` prototypes of classes added from text since (bias 0)."""
    fitted = np.asarray(lfa.prototypes_, dtype=np.float32)
    intercept = np.where(is_new[: len(fitted)], 0.0, np.asarray(lfa.intercept_)).astype(np.float32)
    return (
        np.concatenate([fitted, np.asarray(added, dtype=np.float32).reshape(-1, fitted.shape[1])]),
        np.concatenate([intercept, np.zeros(len(added), dtype=np.float32)]),
    )


def top_class_positions(table: ClassTable, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` classes of raw float32 queries: ``(aligned scores, positions)``, each (n, min(k, C)),
    best first; exact ties go to the lowest position."""
    k = min(k, len(table.labels))
    hits = []
    for group in table.groups:
        raw, nearest = table.device.search(group.index, group.queries(x), min(k, len(group.positions)))
        hits.append((raw, group.query_map.norms(x), group.positions[nearest]))
    return folding.top_classes(hits, k)


def nearest_classes(table: ClassTable, x: np.ndarray) -> np.ndarray:
    """Position of the best class of each query (n,), as ``top_class_positions(...)[1][:, 0]``; with one
    group no query norm is computed (FAISS keeps the lowest id among exact ties)."""
    if len(table.groups) > 1:
        return top_class_positions(table, x, 1)[1][:, 0]
    group = table.groups[0]
    _, nearest = table.device.search(group.index, group.queries(x), 1)
    return group.positions[nearest[:, 0]]
