"""Where the rows of a fitted index sit relative to the class prototypes, before and after LFA.

Three stages of the paper's pipeline, all in the prototype space (after the random projection,
where there is one): no alignment (identity map), β-Procrustes (paper eq. 5, recomputed from the
index's support set with the fitted β) and the refined map W (the index's task map).

Example
-------
>>> stages = alignment_stages(index, eval_embeddings=X_test, eval_labels=y_test)
>>> ranks = stages.true_prototype_ranks("support")     # {"identity": (N,), "beta_procrustes": ..., "lfa": ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.projection import project
from ..core.solvers.metrics import true_prototype_rank
from ..core.solvers.procrustes import beta_procrustes, orthogonal_procrustes
from ..errors import DimensionMismatchError, InvalidInputError, ShapeError
from ..index import AlignedIndex

STAGES: tuple[str, ...] = ("identity", "beta_procrustes", "lfa")


@dataclass(frozen=True)
class AlignmentStages:
    """Unit rows of the support (and eval) set at each stage, with the prototypes they are ranked against.

    Attributes
    ----------
    prototypes : (C, d) L2-normalised prototypes in the aligned space (``index.prototypes_``).
    class_names : C readable class names.
    rows : {"support" | "eval": {stage: (n, d) unit rows}}.
    labels : {"support" | "eval": (n,) int64 class positions}.
    beta : β of the index.   same_space : no random projection bridges rows and prototypes.
    pseudo_labels : the support labels are U-LFA's assignments (unsupervised index).
    """

    prototypes: np.ndarray
    class_names: list[str]
    rows: dict[str, dict[str, np.ndarray]]
    labels: dict[str, np.ndarray]
    beta: float
    same_space: bool
    pseudo_labels: bool

    def stage_label(self, stage: str) -> str:
        """Human-readable name of a stage."""
        return {
            "identity": "no alignment",
            "beta_procrustes": f"β-Procrustes (β={self.beta:g})",
            "lfa": "LFA (refined W)",
        }[stage]

    def true_prototype_ranks(self, split: str) -> dict[str, np.ndarray]:
        """Rank (0 = nearest) of each row's own prototype among all C, per stage."""
        protos = torch.as_tensor(self.prototypes)
        labels = torch.as_tensor(self.labels[split])
        return {s: true_prototype_rank(torch.as_tensor(x), protos, labels).numpy() for s, x in self.rows[split].items()}

    def accuracy(self, split: str) -> dict[str, float]:
        """Share of rows whose own prototype is the nearest, per stage."""
        return {s: float(np.mean(r == 0)) for s, r in self.true_prototype_ranks(split).items()}

    def modality_gap(self, split: str) -> dict[str, float]:
        """‖mean of the rows − mean of their class prototypes‖ per stage (Liang et al., 2022)."""
        paired = self.prototypes[self.labels[split]].mean(axis=0)
        return {s: float(np.linalg.norm(x.mean(axis=0) - paired)) for s, x in self.rows[split].items()}

    def mean_row_norm(self, split: str) -> dict[str, float]:
        """‖mean of the unit rows‖ per stage: their shared component (1 = all alike, 0 = spread evenly).

        Refinement ranks each row's prototype against the others, which a component shared by every
        row barely changes: it spreads the rows out (this drops) while their prototypes keep theirs
        (:meth:`mean_prototype_norm`), so the gap between the two means grows back after β-Procrustes
        closed it, as accuracy rises."""
        return {s: float(np.linalg.norm(x.mean(axis=0))) for s, x in self.rows[split].items()}

    def mean_prototype_norm(self, split: str) -> float:
        """‖mean of the rows' class prototypes‖ (the same at every stage)."""
        return float(np.linalg.norm(self.prototypes[self.labels[split]].mean(axis=0)))


def class_positions(index: AlignedIndex, labels: Any) -> np.ndarray:
    """Labels in the index's label space (ints or class names) as positions in ``classes_``."""
    return index.label_space_.lookup(labels)


def alignment_stages(index: AlignedIndex, eval_embeddings: Any = None, eval_labels: Any = None) -> AlignmentStages:
    """Compute :class:`AlignmentStages` of a fitted index (support rows, and eval rows if given)."""
    lfa = index.lfa_
    if eval_embeddings is not None and np.asarray(eval_embeddings).shape[-1] != index.n_features_in_:
        raise DimensionMismatchError(
            f"eval embeddings have {np.asarray(eval_embeddings).shape[-1]} dimensions but the index aligns "
            f"{index.n_features_in_}-d rows; embed them with the support set's model."
        )
    # the text prototypes in the aligned space (LFA's hybrid class vectors are a classifier, not a stage)
    protos = torch.as_tensor(lfa.transform_text(index.text_embeddings_))
    support = np.asarray(index.support_embeddings_, dtype=np.float32)
    support = support[:, 0] if support.ndim == 3 else support
    pseudo = index.support_labels_ is None
    if pseudo:
        if lfa.assignments_ is None:
            raise InvalidInputError("this unsupervised index has no stored assignments to label its support rows.")
        support_labels = np.asarray(lfa.assignments_).argmax(axis=1).astype(np.int64)
    else:
        support_labels = np.asarray(index.support_labels_, dtype=np.int64)

    def unaligned(x: np.ndarray) -> torch.Tensor:
        z = F.normalize(torch.as_tensor(np.asarray(x, dtype=np.float32)), dim=1)
        if lfa.projection_side_ == "image":
            z = project(z, torch.as_tensor(np.asarray(lfa.projection_, dtype=np.float32)))
        return F.normalize(z, dim=1)

    mean = torch.as_tensor(np.asarray(lfa.feature_mean_, dtype=np.float32)) if lfa.center_ else None

    def centred(z: torch.Tensor) -> torch.Tensor:
        """The rows W sees: centred on the support mean when the LFA centres (an option of the default)."""
        return z if mean is None else F.normalize(z - mean, dim=1)

    z_support = unaligned(support)
    labels_t = torch.as_tensor(support_labels)
    maps = {
        "identity": None,
        "beta_procrustes": beta_procrustes(
            orthogonal_procrustes(centred(z_support), protos[labels_t]), float(lfa.beta_)),
        "lfa": torch.as_tensor(np.asarray(lfa.W_, dtype=np.float32)),
    }

    def staged(z: torch.Tensor) -> dict[str, np.ndarray]:
        return {s: (z if w is None else F.normalize(centred(z) @ w, dim=1)).numpy() for s, w in maps.items()}

    rows = {"support": staged(z_support)}
    labels = {"support": support_labels}
    if eval_embeddings is not None:
        x_eval = np.asarray(eval_embeddings, dtype=np.float32)
        x_eval = x_eval[:, 0] if x_eval.ndim == 3 else x_eval
        y_eval = class_positions(index, eval_labels)
        if len(y_eval) != len(x_eval):
            raise ShapeError(f"got {len(y_eval)} eval labels for {len(x_eval)} eval rows.")
        rows["eval"] = staged(unaligned(x_eval))
        labels["eval"] = y_eval
    names = index.class_names_ if index.class_names_ is not None else [str(c) for c in index.classes_]
    return AlignmentStages(
        prototypes=protos.numpy(), class_names=list(names), rows=rows, labels=labels, beta=float(lfa.beta_),
        same_space=lfa.projection_side_ is None, pseudo_labels=pseudo,
    )
