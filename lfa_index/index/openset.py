"""The open-set score of an AlignedIndex (``score_samples``): higher means more likely a known class.

Two signals, each standardised on held-out support rows, then added:

* the best aligned score over the classes (what ``predict`` ranks by), with the held-out
  support scores of :func:`~lfa_index.index.calibration.heldout_scores`;
* the cosine of the aligned query to its nearest aligned support row (the task map), with each
  support row's nearest *other* row as its held-out value (leave-one-out).

The first says how well a query fits a class vector, the second whether anything like it was
seen: an out-of-scope query can sit close to one class vector and still far from every support
row. Measured on Banking77's open-intent protocol (``benchmarks/openset.py``), the sum separates
known from unknown classes better than either alone, than the energy (log-sum-exp) of the
class scores, than a Mahalanobis distance in the aligned space, than GDA's Mahalanobis score
and than a linear probe's max probability.

Classes added from text alone (``add_classes``) have no support rows to be near: while an index
holds any, the score is the standardised best aligned score alone.

Example
-------
>>> novelty = NoveltyScore.build(table, support_rows, heldout_best)
>>> novelty.score(x, best_scores)          # (n,) float32, higher = more likely known
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from ..core.query_map import QueryMap
from .classes import ClassTable
from .faiss_device import FaissDevice


@dataclass(frozen=True)
class Standardiser:
    """``(v − mean) / std`` of one signal, its mean and std taken on held-out support rows."""

    mean: float
    std: float

    @classmethod
    def fit(cls, heldout: np.ndarray) -> "Standardiser":
        values = np.asarray(heldout, dtype=np.float64)
        std = float(values.std())
        return cls(float(values.mean()), std if std > 0 else 1.0)  # no spread: keep the raw scale

    def __call__(self, values: np.ndarray) -> np.ndarray:
        return (np.asarray(values, dtype=np.float64) - self.mean) / self.std


@dataclass(frozen=True)
class NoveltyScore:
    """The fitted open-set score of one class table and support set.

    Attributes
    ----------
    best : Standardiser of the best aligned score.
    nearest : Standardiser of the nearest-support-row cosine, or None (classes added from text).
    heldout : (N,) float32 held-out score of each support row (what τ is calibrated on).
    """

    best: Standardiser
    nearest: Standardiser | None
    heldout: np.ndarray
    query_map: QueryMap  # the task map: aligns queries as the support rows were
    support_index: faiss.Index | None
    device: FaissDevice

    @classmethod
    def build(cls, table: ClassTable, support_rows: np.ndarray, heldout_best: np.ndarray) -> "NoveltyScore":
        """The score of ``table``: ``support_rows`` (N, d_in) raw float32 rows (view 0), ``heldout_best``
        (N,) their best aligned scores under models fitted without them."""
        best = Standardiser.fit(heldout_best)
        query_map = table.maps["task"]
        if table.is_new.any() or len(support_rows) < 2:
            return cls(best, None, best(heldout_best).astype(np.float32), query_map, None, table.device)
        aligned = query_map.align(support_rows)
        support_index = table.device.flat_index(aligned)
        heldout_nearest = _nearest_other(table.device, support_index, aligned)
        nearest = Standardiser.fit(heldout_nearest)
        heldout = (best(heldout_best) + nearest(heldout_nearest)).astype(np.float32)
        return cls(best, nearest, heldout, query_map, support_index, table.device)

    def nearest_support(self, x: np.ndarray) -> np.ndarray:
        """Cosine (n,) of each aligned query to its nearest aligned support row."""
        scores, _ = self.device.search(self.support_index, self.query_map.align(x), 1)
        return scores[:, 0]

    def score(self, x: np.ndarray, best_scores: np.ndarray) -> np.ndarray:
        """Open-set score (n,) float32 of raw float32 queries ``x`` whose best aligned scores are ``best_scores``."""
        out = self.best(best_scores)
        if self.nearest is not None:
            out = out + self.nearest(self.nearest_support(x))
        return out.astype(np.float32)


def _nearest_other(device: FaissDevice, index: faiss.Index, rows: np.ndarray) -> np.ndarray:
    """Cosine of each indexed row to its nearest other row (a duplicate counts as a neighbour)."""
    scores, ids = device.search(index, rows, 2)
    own = ids[:, 0] == np.arange(len(rows))
    return np.where(own, scores[:, 1], scores[:, 0]).astype(np.float32)
