"""The supports that the selection benchmarks refit, each with its reference baselines.

A cell is ``"set:shots"``; each of its seeds 1..N draws one support (:func:`sample_support`, as
:mod:`benchmarks.accuracy`) and scores the CV-tuned probe and GDA on the eval rows, the
baselines a change to the default has to keep up with.

Example
-------
>>> for data, X, y, record in cell_supports(["dtd:4"], seeds=3, root=None):
...     model = LFA(random_state=record["seed"]).fit(X, y, data.prototypes)
...     record["default"] = 100 * model.score(data.eval_features, data.eval_labels)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .baselines import BASELINES, FewShotTask
from .data import FewShotSet, load_set, sample_support

REFERENCES = (("probe", "linear_probe_cv"), ("gda", "gda"))
"""Record key and baseline name of each reference baseline."""


def cell_supports(cells: Sequence[str], seeds: int, root: Path | None
                  ) -> Iterator[tuple[FewShotSet, np.ndarray, np.ndarray, dict[str, Any]]]:
    """``(set, support rows, labels, record)`` per cell and seed; the record holds set, shots, seed
    and the reference baselines' eval accuracy (%)."""
    for cell in cells:
        name, shots = cell.split(":")
        data = load_set(name, root=root)
        for seed in range(1, seeds + 1):
            idx = sample_support(data.pool_labels, int(shots), seed)
            X, y = data.pool_features[idx], data.pool_labels[idx]
            task = FewShotTask(X=X, y=y, prototypes=data.prototypes, X_eval=data.eval_features,
                               same_model=data.same_model, seed=seed)
            yield data, X, y, {"set": name, "shots": int(shots), "seed": seed, **{
                key: 100 * float(np.mean(BASELINES[method](task) == data.eval_labels)) for key, method in REFERENCES}}
