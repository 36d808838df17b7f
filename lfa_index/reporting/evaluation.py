"""k-shot accuracy of LFA (through :class:`AlignedIndex`) against the baselines, as a table.

Example
-------
>>> task = FewShotTask("dtd", pool_X, pool_y, eval_X, eval_y, prototypes, class_names, same_model=False)
>>> results = run_few_shot(task, shots=(1, 4, 16), seeds=(0, 1, 2), lfa_options={"steps": 100})
>>> print(results.table())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..baselines import BASELINES
from ..core import LFA
from ..errors import InvalidParameterError
from ..index import AlignedIndex

LFA_METHOD = "lfa"
METHOD_LABELS = {**{name: b.label for name, b in BASELINES.items()}, LFA_METHOD: "LFA"}


def sample_support(labels: np.ndarray, shots: int, seed: int) -> np.ndarray:
    """Sorted pool indices of ``shots`` rows per class (all rows where a class has fewer), seeded.

    Classes are visited in label order with one ``np.random.default_rng(seed)`` (as the benchmarks).
    """
    if shots < 1:
        raise InvalidParameterError(f"shots must be >= 1, got {shots}.")
    rng = np.random.default_rng(seed)
    picked = [
        rng.choice(rows, size=min(shots, len(rows)), replace=False)
        for rows in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(picked))


@dataclass(frozen=True)
class FewShotTask:
    """A pool to draw k-shot support sets from, an eval split and the class prototypes.

    ``same_model`` says whether rows and prototypes share one embedding model (only then is
    zero-shot meaningful). Labels are int64 in 0..C-1.
    """

    name: str
    pool_features: np.ndarray
    pool_labels: np.ndarray
    eval_features: np.ndarray
    eval_labels: np.ndarray
    prototypes: np.ndarray
    class_names: list[str]
    same_model: bool
    description: str = ""


@dataclass
class FewShotResults:
    """Accuracies per (shots, method), one per seed; ``indexes`` keeps the first seed's LFA index per shot count."""

    task: FewShotTask
    shots: tuple[int, ...]
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    accuracy: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    indexes: dict[int, AlignedIndex] = field(default_factory=dict)
    lfa_options: dict[str, Any] = field(default_factory=dict)

    def mean(self, shots: int, method: str) -> float:
        """Mean accuracy over seeds (NaN for a method not run)."""
        values = self.accuracy.get((shots, method))
        return float(np.mean(values)) if values else float("nan")

    def table(self) -> str:
        """Plain-text table: one row per shot count, accuracy in % (mean ± std over seeds)."""
        headers = ["shots"] + [METHOD_LABELS[m] for m in self.methods]
        rows = []
        for k in self.shots:
            cells = [str(k)]
            for m in self.methods:
                values = self.accuracy.get((k, m))
                if not values:
                    cells.append("n/a")
                elif len(values) == 1:
                    cells.append(f"{100 * values[0]:.1f}")
                else:
                    cells.append(f"{100 * np.mean(values):.1f} ± {100 * np.std(values):.1f}")
            rows.append(cells)
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
        return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (accuracies per seed, means, settings)."""
        t = self.task
        return {
            "task": t.name,
            "description": t.description,
            "n_classes": len(t.class_names),
            "n_pool": int(len(t.pool_labels)),
            "n_eval": int(len(t.eval_labels)),
            "same_model": t.same_model,
            "shots": list(self.shots),
            "seeds": list(self.seeds),
            "lfa_options": dict(self.lfa_options),
            "accuracy": {
                str(k): {
                    m: {"per_seed": self.accuracy.get((k, m)), "mean": _none_if_nan(self.mean(k, m))}
                    for m in self.methods
                }
                for k in self.shots
            },
        }


def _none_if_nan(x: float) -> float | None:
    return None if np.isnan(x) else x


def default_methods(same_model: bool) -> tuple[str, ...]:
    """Every baseline (zero-shot only when ``same_model``), then LFA."""
    return tuple(n for n, b in BASELINES.items() if same_model or not b.same_model_only) + (LFA_METHOD,)


def run_few_shot(
    task: FewShotTask,
    *,
    shots: Sequence[int] = (1, 4, 16),
    seeds: Sequence[int] = (0, 1, 2),
    methods: Sequence[str] | None = None,
    lfa_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> FewShotResults:
    """Draw a support set per (shots, seed), fit every method on it and score it on the eval split.

    LFA is an ``AlignedIndex(lfa=LFA(**lfa_options, random_state=seed))``; zero-shot needs no support and
    is computed once. Returns :class:`FewShotResults`.
    """
    from tqdm.auto import tqdm

    methods = tuple(methods) if methods is not None else default_methods(task.same_model)
    unknown = [m for m in methods if m not in METHOD_LABELS]
    if unknown:
        raise InvalidParameterError(f"unknown method(s) {unknown}; choose from {sorted(METHOD_LABELS)}.")
    options = dict(lfa_options or {})
    results = FewShotResults(
        task, tuple(int(k) for k in shots), tuple(int(s) for s in seeds), methods, lfa_options=options
    )
    # zero-shot looks at no support row: one score, repeated for every (shots, seed)
    zero_shot_accuracy = None
    if "zero_shot" in methods:
        pred = BASELINES["zero_shot"].predict(None, None, task.prototypes, task.eval_features)
        zero_shot_accuracy = float(np.mean(pred == task.eval_labels))
    runs = [(k, s) for k in results.shots for s in results.seeds]
    for k, seed in tqdm(runs, desc=f"{task.name}: k-shot runs", unit="run", disable=not progress):
        idx = sample_support(task.pool_labels, k, seed)
        X, y = task.pool_features[idx], task.pool_labels[idx]
        for m in methods:
            if m == "zero_shot":
                accuracy = zero_shot_accuracy
            elif m == LFA_METHOD:
                lfa = LFA(**{**options, "random_state": seed})
                index = AlignedIndex(lfa=lfa).fit(X, y, task.prototypes, task.class_names)
                accuracy = float(np.mean(index.predict(task.eval_features) == task.eval_labels))
                if seed == results.seeds[0]:
                    results.indexes[k] = index
            else:
                pred = BASELINES[m].predict(X, y, task.prototypes, task.eval_features)
                accuracy = float(np.mean(pred == task.eval_labels))
            results.accuracy.setdefault((k, m), []).append(accuracy)
    return results
