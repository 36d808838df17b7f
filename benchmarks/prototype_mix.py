"""Eval accuracy against the prototype mix λ, from one fit per seed (a diagnostic for issue 4).

The default LFA picks λ of its hybrid prototypes ``(1 − λ)·text + λ·support`` on held-out support
rows. This script shows what each λ would have scored on the eval split: it fits
``LFA(prototype_mix=1.0, center=False, refine_prototypes=False, mapping="task")`` once per seed
(β and steps chosen on the support) and scores every λ of the grid with that W. Eval data are
used for the report only.

Usage
-----
    .venv/bin/python -m benchmarks.prototype_mix --set dtd --shots 16
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from lfa_index import LFA
from lfa_index.core.solvers.prototypes import class_scores, hybrid_prototypes, support_prototypes
from lfa_index.core.solvers.selection import MIX_GRID

from .data import SET_NAMES, add_data_argument, load_set, sample_support


def accuracy_by_mix(set_name: str, shots: int, seed: int, root: Path | None = None) -> list[float]:
    """Eval top-1 (%) for each λ of :data:`MIX_GRID`, with the W of one fit on the seed's support."""
    data = load_set(set_name, root=root)
    idx = sample_support(data.pool_labels, shots, seed)
    x, y = data.pool_features[idx], data.pool_labels[idx]
    lfa = LFA(random_state=seed, prototype_mix=1.0, center=False, refine_prototypes=False, mapping="task")
    lfa.fit(x, y, data.prototypes)
    task_map = lfa.query_map("task")  # aligned rows in float64, as the fit's selection sees them
    text = torch.as_tensor(lfa.text_prototypes_, dtype=torch.float64)
    support = support_prototypes(torch.as_tensor(task_map.mapped(x)), torch.as_tensor(y), text.shape[0], "discriminant")
    queries = torch.as_tensor(task_map.mapped(data.eval_features))
    out = []
    for mix in MIX_GRID:
        prototypes, bias = hybrid_prototypes(text, *support, mix)
        predicted = class_scores(queries, prototypes, bias).argmax(dim=1).numpy()
        out.append(100 * float(np.mean(predicted == data.eval_labels)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SET_NAMES, default="dtd")
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--threads", type=int, default=1)
    add_data_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    print(f"{args.set}, {args.shots} shots: eval top-1 (%) by λ = " + " / ".join(f"{m:g}" for m in MIX_GRID))
    for seed in args.seeds:
        rows.append(accuracy_by_mix(args.set, args.shots, seed, args.data))
        print(f"  seed {seed}: " + " / ".join(f"{a:.2f}" for a in rows[-1]), flush=True)
    print("  mean:   " + " / ".join(f"{a:.2f}" for a in np.mean(rows, axis=0)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
