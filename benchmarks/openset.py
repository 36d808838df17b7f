"""Open-set rejection of AlignedIndex on the real CLIP sets: seen vs unseen classes.

For each set, shot count and seed, a random half of the classes is "seen": the index is fitted on
their support shots and prototypes only. Every eval image is then scored by its best aligned
cosine (the score that ``predict(reject_below=τ)`` thresholds); the AUROC says how well that
score separates images of seen classes (positives) from images of unseen ones. Also reported:
the AUROC of the max softmax probability, closed-set accuracy on the seen classes, and the share
of seen / unseen images accepted at ``τ = rejection_threshold(0.95)``: τ from held-out support
rows (the default's cross-fitted ``heldout_scores_``, K-fold clones for ``--paper``), so about 95 %
of seen-class eval images should be accepted.

Usage
-----
    .venv/bin/python -m benchmarks.openset                # 3 sets x 4/16 shots x 3 seeds
    .venv/bin/python -m benchmarks.openset --quick        # dtd, 4 shots, 1 seed
    .venv/bin/python -m benchmarks.openset --paper        # the paper's LFA (LFA.paper options)

Prints a table and writes ``benchmarks/results/openset.json`` (``openset_quick.json``,
``openset_paper.json``). With the default's class biases the score is the aligned score
``(z·q + b)/||z||`` that ``predict(reject_below=τ)`` thresholds.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from benchmarks.data import CLIP_SETS, add_data_argument, load_set, sample_support
from lfa_index import LFA, AlignedIndex
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"


def run_one(data, shots: int, seed: int, options: dict[str, Any]) -> dict[str, Any]:
    n_classes = data.n_classes
    seen = np.sort(np.random.default_rng(seed).permutation(n_classes)[: n_classes // 2])
    remap = np.full(n_classes, -1)
    remap[seen] = np.arange(len(seen))
    support = sample_support(data.pool_labels, shots, seed)
    support = support[np.isin(data.pool_labels[support], seen)]
    start = time.perf_counter()
    index = AlignedIndex(lfa=LFA(random_state=seed, **options)).fit(
        data.pool_features[support], remap[data.pool_labels[support]], data.prototypes[seen]
    )
    fit_s = time.perf_counter() - start
    queries, truth = data.eval_features, data.eval_labels
    is_seen = np.isin(truth, seen)
    best = index.search(queries, 1)[0][:, 0]
    msp = index.predict_proba(queries).max(axis=1)
    calibration = (
        "cross-fitted" if index.lfa_.heldout_scores_ is not None
        else "k-fold clones" if np.bincount(index.support_labels_).max() >= 2 else "support (1 shot)"
    )
    tau = index.rejection_threshold(accept_rate=0.95)
    accepted = index.predict(queries, reject_below=tau) != -1
    pred = index.predict(queries[is_seen])
    return {
        "set": data.name, "shots": shots, "seed": seed, "n_seen": len(seen), "n_unseen": n_classes - len(seen),
        "auroc_max_cosine": float(roc_auc_score(is_seen, best)),
        "auroc_max_softmax": float(roc_auc_score(is_seen, msp)),
        "seen_accuracy": float(np.mean(pred == remap[truth[is_seen]])),
        "tau": tau, "calibration": calibration,
        "accepted_seen": float(accepted[is_seen].mean()), "accepted_unseen": float(accepted[~is_seen].mean()),
        "beta": index.lfa_.beta_, "steps": index.lfa_.steps_, "fit_s": fit_s,
    }


def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({(r["set"], r["shots"]) for r in records}, key=lambda k: (CLIP_SETS.index(k[0]), k[1]))
    rows = []
    for name, shots in keys:
        group = [r for r in records if r["set"] == name and r["shots"] == shots]
        row = {"set": name, "shots": shots, "seeds": len(group)}
        for metric in ("auroc_max_cosine", "auroc_max_softmax", "seen_accuracy", "accepted_seen", "accepted_unseen"):
            values = np.array([r[metric] for r in group])
            row[metric] = float(values.mean())
            row[metric + "_std"] = float(values.std())
        rows.append(row)
    return rows


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    header = (f"{'set':<12}{'shots':>6}{'AUROC cos':>12}{'AUROC MSP':>12}{'seen acc':>10}{'acc. seen':>11}"
              f"{'acc. unseen':>13}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['set']:<12}{r['shots']:>6}{r['auroc_max_cosine']:>8.3f}±{r['auroc_max_cosine_std']:.3f}"
            f"{r['auroc_max_softmax']:>12.3f}{r['seen_accuracy']:>10.3f}{r['accepted_seen']:>11.3f}"
            f"{r['accepted_unseen']:>13.3f}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(CLIP_SETS), choices=CLIP_SETS)
    parser.add_argument("--shots", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", default="auto", help="LFA refinement steps ('auto' or an int)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="dtd, 4 shots, seed 1, 50 steps")
    parser.add_argument("--paper", action="store_true", help="fit the paper's LFA (LFA.paper options)")
    parser.add_argument("--out", type=Path, default=None)
    add_data_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.sets, args.shots, args.seeds, args.steps = ["dtd"], [4], [1], "50"
    steps = args.steps if args.steps == "auto" else int(args.steps)
    options = {"steps": steps, "device": args.device, **(PAPER_OPTIONS if args.paper else {})}
    records = []
    for name in args.sets:
        data = load_set(name, root=args.data)
        for shots in args.shots:
            for seed in args.seeds:
                records.append(run_one(data, shots, seed, options))
                r = records[-1]
                print(f"  {name} {shots}-shot seed {seed}: AUROC {r['auroc_max_cosine']:.3f}, seen accepted "
                      f"{r['accepted_seen']:.3f} ({r['fit_s']:.1f} s fit, τ {r['calibration']})", flush=True)
    rows = summarize(records)
    print()
    print_table(rows)
    stem = "openset_quick" if args.quick else "openset_paper" if args.paper else "openset"
    out = args.out or RESULTS / f"{stem}.json"
    meta = {
        "command": "python -m benchmarks.openset " + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "protocol": "half of the classes seen (random per seed); score = best aligned cosine; "
                    "positives = eval images of seen classes",
        "options": options,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__},
    }
    atomic_write(out, json.dumps({"meta": meta, "summary": rows, "records": records}, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
