"""How many folds the default's held-out selection should use: K = 2 (the default) against more.

The default chooses the step count and the prototype mix λ on ``K`` class-stratified folds of the
support (:mod:`lfa_index.core.solvers.selection`). With K = 2 each fold trains on half of the support, while
the final fit sees all of it; support-side prototypes gain more from the missing rows than text
prototypes do, so a small K could rate λ too low. This benchmark refits the default with other fold
counts (``RefineConfig.folds``, capped at the smallest class count as always) on the same supports
and reports accuracy, fit time and the chosen λ against GDA and the CV-tuned probe, computed as in
:mod:`benchmarks.accuracy`.

Cells where the default refines (C > k + 1); AG News keeps β-Procrustes on its own closed-form
folds and is not affected.

Usage
-----
    .venv/bin/python -m benchmarks.fold_count                          # seeds 1-10, K = 2 and 3
    .venv/bin/python -m benchmarks.fold_count --cells dtd:4 --folds 3 4 5 --seeds 3

Prints a table and writes ``benchmarks/results/fold_count.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lfa_index.core.config import RefineConfig
from lfa_index.files import atomic_write

from .cells import cell_supports, lfa_with
from .data import add_data_argument

RESULTS = Path(__file__).parent / "results"
CELLS = ("dtd:4", "dtd:16", "oxford_pets:4", "oxford_pets:16", "caltech101:4", "caltech101:16",
         "banking77:4", "banking77:16")


def run(cells: Sequence[str], folds: Sequence[int], seeds: int, root: Path | None) -> list[dict]:
    """One record per (cell, seed): baselines and the default fitted with each fold count."""
    records = []
    for data, X, y, rec in cell_supports(cells, seeds, root):
        for k in folds:
            start = time.perf_counter()
            model = lfa_with(folds=k)(random_state=rec["seed"]).fit(X, y, data.prototypes)
            rec[f"K{k}"] = {"accuracy": 100 * model.score(data.eval_features, data.eval_labels),
                            "seconds": time.perf_counter() - start, "mix": model.prototype_mix_,
                            "steps": model.steps_}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    return records


def table(records: Sequence[dict], folds: Sequence[int]) -> str:
    """Means over seeds per cell; λ per seed for each K."""
    lines = ["| Set | Shots | Seeds | CV probe | GDA | " + " | ".join(f"K={k} (s)" for k in folds)
             + " | " + " | ".join(f"λ per seed, K={k}" for k in folds) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(folds) + "---|" * len(folds)]
    for key in dict.fromkeys((r["set"], r["shots"]) for r in records):
        cell = [r for r in records if (r["set"], r["shots"]) == key]
        runs = [f"{np.mean([r[f'K{k}']['accuracy'] for r in cell]):.2f} "
                f"({np.mean([r[f'K{k}']['seconds'] for r in cell]):.1f})" for k in folds]
        mixes = [", ".join(f"{r[f'K{k}']['mix']:g}" for r in cell) for k in folds]
        probe, gda = (np.mean([r[key_] for r in cell]) for key_ in ("probe", "gda"))
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | {probe:.2f} | {gda:.2f} | "
                     + " | ".join(runs) + " | " + " | ".join(mixes) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", default=list(CELLS), help="set:shots pairs")
    parser.add_argument("--folds", nargs="+", type=int, default=[2, 3])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    parser.add_argument("--threads", type=int, default=1)
    add_data_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        records = run(args.cells, args.folds, args.seeds, args.data)
    text = table(records, args.folds)
    print(text)
    atomic_write(RESULTS / "fold_count.json", json.dumps({
        "command": "python -m benchmarks.fold_count " + " ".join(sys.argv[1:] if argv is None else argv),
        "default_folds": RefineConfig().folds, "records": records, "table": text}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
