"""No collapse across seeds at 1 shot: one support, many ``random_state``s, the worst against the median.

A 1-shot rule that flips on a chance test can turn a seed's fit into the identity between two
unrelated spaces. For each set, one 1-shot support is drawn (``--support-seed``) and the default
``LFA`` and ``LFA.paper()`` are fitted on it with ``random_state`` 0..N-1; the table gives the
median, the worst and their gap (target: the worst no more than 5 points below the median).

Usage
-----
    .venv/bin/python -m benchmarks.one_shot_seeds                 # dtd, oxford_pets, 100 seeds
    .venv/bin/python -m benchmarks.one_shot_seeds --seeds 20

Prints a table and writes ``benchmarks/results/one_shot_seeds.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.files import atomic_write

from .data import CLIP_SETS, SET_NAMES, add_data_argument, load_set, sample_support

RESULTS = Path(__file__).parent / "results"
TARGET_GAP = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", choices=SET_NAMES, default=["dtd", "oxford_pets"])
    parser.add_argument("--seeds", type=int, default=100, help="random_state 0..N-1")
    parser.add_argument("--support-seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    add_data_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = {}
    lines = ["| Set | Method | Median | Worst | Worst − median | Best | β choices |",
             "|---|---|---:|---:|---:|---:|---|"]
    with threadpool_limits(limits=args.threads):
        for name in args.sets:
            data = load_set(name, root=args.data)
            idx = sample_support(data.pool_labels, 1, args.support_seed)
            X, y = data.pool_features[idx], data.pool_labels[idx]
            for method in ("lfa", "lfa_paper"):
                accuracies, betas = [], Counter()
                for seed in range(args.seeds):
                    model = LFA(random_state=seed) if method == "lfa" else LFA.paper(random_state=seed)
                    model.fit(X, y, data.prototypes)
                    accuracies.append(100 * model.score(data.eval_features, data.eval_labels))
                    betas[f"{model.beta_:g} ({model.beta_selection_})"] += 1
                acc = np.array(accuracies)
                median = float(np.median(acc))
                out[f"{name}/{method}"] = {"accuracies": accuracies, "median": median, "worst": float(acc.min()),
                                           "best": float(acc.max()), "betas": dict(betas)}
                flag = "" if median - acc.min() <= TARGET_GAP else " (over)"
                lines.append(f"| {name} | {method} | {median:.2f} | {acc.min():.2f} | {acc.min() - median:+.2f}{flag} "
                             f"| {acc.max():.2f} | {', '.join(f'{k}: {v}' for k, v in betas.items())} |")
                print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    atomic_write(RESULTS / "one_shot_seeds.json", json.dumps({
        "command": "python -m benchmarks.one_shot_seeds " + " ".join(argv or []), "sets": args.sets,
        "support_seed": args.support_seed, "seeds": args.seeds, "clip_sets": [s for s in args.sets if s in CLIP_SETS],
        "results": out, "table": text}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
