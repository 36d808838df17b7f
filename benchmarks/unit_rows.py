"""Should the support discriminant see unit aligned rows? The default against that variant.

The default fits the support side of its hybrid prototypes (:mod:`lfa_index.core.solvers.prototypes`) on
the aligned rows ``z = x W`` as they are, whose norms vary by a few percent once refinement has
moved W away from an orthogonal map, and serves ``z·q + b`` (``(z·q + b)/||z||`` as a score).
GDA, the model behind the discriminant, is defined on unit rows. The variant fits the
discriminant on ``ẑ = z/||z||`` (held-out selection and final fit alike) and scores ``ẑ·q + b``.
Serving that would change every folded store: the bias column would need ``||z||`` on the query
side instead of ``||x||``, and indexes saved before would rank differently. This benchmark
measures whether the gain is worth that.

Both are fitted on the same supports, seeds 1..N, at 4 and 16 shots on the five shared sets, next
to GDA and the CV-tuned probe (:mod:`benchmarks.baselines`).

Usage
-----
    .venv/bin/python -m benchmarks.unit_rows                                   # all cells, 10 seeds
    .venv/bin/python -m benchmarks.unit_rows --cells dtd:4 --seeds 3 --name unit_rows_dtd
    .venv/bin/python -m benchmarks.unit_rows --merge unit_rows_a unit_rows_b --name unit_rows  # join parallel parts

Prints a table and writes ``benchmarks/results/<name>.json`` (default ``unit_rows``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lfa_index import LFA
from lfa_index.arrays import l2_normalize

from .cells import cell_benchmark, cell_supports, lfa_with

UnitRowsLFA = lfa_with(unit_rows=True)
"""The variant: the selection and the final fit both see unit aligned rows (``RefineConfig.unit_rows``),
so the held-out evidence judges the classifier that the variant serves."""


def unit_row_accuracy(model: LFA, X: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (%) of ``ẑ·q + b``, ẑ the unit aligned rows of the fitted task map."""
    z = l2_normalize(model.query_map("task").mapped(X))
    scores = z @ np.asarray(model.prototypes_, dtype=np.float64).T + np.asarray(model.intercept_, dtype=np.float64)
    return 100 * float(np.mean(np.asarray(model.classes_)[scores.argmax(axis=1)] == labels))


def run(cells: Sequence[str], seeds: int, root: Path | None) -> list[dict[str, Any]]:
    """One record per (cell, seed): GDA, the CV probe, the default and the unit-row variant."""
    records = []
    for data, X, y, rec in cell_supports(cells, seeds, root):
        seed = rec["seed"]
        start = time.perf_counter()
        model = LFA(random_state=seed).fit(X, y, data.prototypes)
        rec["default"] = {"accuracy": 100 * model.score(data.eval_features, data.eval_labels),
                          "seconds": time.perf_counter() - start, "mix": model.prototype_mix_}
        start = time.perf_counter()
        model = UnitRowsLFA(random_state=seed).fit(X, y, data.prototypes)
        seconds = time.perf_counter() - start
        rec["unit_rows"] = {"accuracy": unit_row_accuracy(model, data.eval_features, data.eval_labels),
                            "seconds": seconds, "mix": model.prototype_mix_}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    return records


def table(records: Sequence[dict[str, Any]]) -> str:
    """Means over seeds per cell, the variant's paired change (± its standard error) and λ per seed."""
    lines = ["| Set | Shots | Seeds | CV probe | GDA | Default | Unit rows | Change | λ per seed (default) "
             "| λ per seed (unit rows) |", "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for key in dict.fromkeys((r["set"], r["shots"]) for r in records):
        cell = [r for r in records if (r["set"], r["shots"]) == key]
        change = np.array([r["unit_rows"]["accuracy"] - r["default"]["accuracy"] for r in cell])
        se = change.std(ddof=1) / np.sqrt(len(change)) if len(change) > 1 else float("nan")
        means = [np.mean([r[k] for r in cell]) for k in ("probe", "gda")]
        means += [np.mean([r[k]["accuracy"] for r in cell]) for k in ("default", "unit_rows")]
        mixes = [", ".join(f"{r[k]['mix']:g}" for r in cell) for k in ("default", "unit_rows")]
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | " + " | ".join(f"{m:.2f}" for m in means)
                     + f" | {change.mean():+.2f} ± {se:.2f} | {mixes[0]} | {mixes[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return cell_benchmark("benchmarks.unit_rows", __doc__.split("\n\n")[0], "unit_rows", run, table, argv)


if __name__ == "__main__":
    raise SystemExit(main())
