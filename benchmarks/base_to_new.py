"""Base-to-new generalisation: fit on base classes, add new classes from their text alone.

Protocol (paper section 4.5, CoOp's base-to-new split): even class ids are *base*, odd ones are
*new*. The support holds k shots of the base classes only; LFA is fitted on them with the base
prototypes. Base accuracy: eval rows of base classes, classified among the base classes with the
fitted classifier (``predict``). New accuracy: eval rows of new classes, classified among the new
classes by their text prototypes under the base-to-new map ``W_tt_`` (what
``AlignedIndex.add_classes`` serves). H is the harmonic mean. Zero-shot (the identity) is scored the
same way where images and prototypes come from one model.

Usage
-----
    .venv/bin/python -m benchmarks.base_to_new                       # banking77, 4/16 shots, seeds 1-3
    .venv/bin/python -m benchmarks.base_to_new --sets banking77 dtd --shots 16

Prints a table and writes ``benchmarks/results/base_to_new.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.files import atomic_write

from .data import SET_NAMES, add_data_argument, load_set, sample_support

RESULTS = Path(__file__).parent / "results"
METHODS = {
    "zero_shot": "Zero-shot (same model only)",
    "lfa_paper200": "LFA.paper(steps=200)",
    "lfa_paper": "LFA.paper()",
    "lfa": "LFA() default",
}


def harmonic(a: float, b: float) -> float:
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def _within(scores: np.ndarray, truth: np.ndarray, classes: np.ndarray) -> float:
    """Accuracy of ``scores`` (n, len(classes)) against ``truth`` given as ids of ``classes``."""
    position = {c: i for i, c in enumerate(classes)}
    return float(np.mean(scores.argmax(axis=1) == np.array([position[t] for t in truth])))


def run_one(data, shots: int, seed: int, methods: Sequence[str]) -> list[dict[str, Any]]:
    n_classes = data.n_classes
    base, new = np.arange(0, n_classes, 2), np.arange(1, n_classes, 2)
    remap = np.full(n_classes, -1)
    remap[base] = np.arange(len(base))
    in_base = np.flatnonzero(np.isin(data.pool_labels, base))
    support = in_base[sample_support(remap[data.pool_labels[in_base]], shots, seed)]
    X, y = data.pool_features[support], remap[data.pool_labels[support]]
    eval_base = np.isin(data.eval_labels, base)
    eval_new = np.isin(data.eval_labels, new)
    out = []
    for method in methods:
        start = time.perf_counter()
        if method == "zero_shot":
            if not data.same_model:
                continue
            sims = data.eval_features @ data.prototypes.T
            base_acc = _within(sims[eval_base][:, base], data.eval_labels[eval_base], base)
            new_acc = _within(sims[eval_new][:, new], data.eval_labels[eval_new], new)
            extras: dict[str, Any] = {}
        else:
            model = {"lfa": LFA(random_state=seed), "lfa_paper": LFA.paper(random_state=seed),
                     "lfa_paper200": LFA.paper(steps=200, random_state=seed)}[method]
            model.fit(X, y, data.prototypes[base])
            base_acc = _within(model.decision_function(data.eval_features[eval_base]),
                               data.eval_labels[eval_base], base)
            new_scores = model.decision_function(data.eval_features[eval_new], mapping="tt",
                                                 text_emb=data.prototypes[new])
            new_acc = _within(new_scores, data.eval_labels[eval_new], new)
            extras = {"beta": model.beta_, "new_class_beta": model.new_class_beta_, "steps": model.steps_,
                      "summary": model.summary_}
        out.append({"set": data.name, "shots": shots, "seed": seed, "method": method, "base": 100 * base_acc,
                    "new": 100 * new_acc, "H": 100 * harmonic(base_acc, new_acc),
                    "seconds": time.perf_counter() - start, **extras})
    return out


def table(records: Sequence[dict[str, Any]]) -> str:
    lines = ["| Set | Shots | Method | Base | New | H | New per seed |", "|---|---:|---|---:|---:|---:|---|"]
    cells = sorted({(r["set"], r["shots"]) for r in records}, key=lambda c: (SET_NAMES.index(c[0]), c[1]))
    for s, shots in cells:
        for method, label in METHODS.items():
            rows = [r for r in records if (r["set"], r["shots"], r["method"]) == (s, shots, method)]
            if rows:
                mean = {k: np.mean([r[k] for r in rows]) for k in ("base", "new", "H")}
                per_seed = ", ".join(f"{r['new']:.1f}" for r in rows)
                lines.append(f"| {s} | {shots} | {label} | {mean['base']:.2f} | {mean['new']:.2f} | "
                             f"{mean['H']:.2f} | {per_seed} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", choices=SET_NAMES, default=["banking77"])
    parser.add_argument("--shots", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="base_to_new")
    add_data_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    records: list[dict[str, Any]] = []
    with threadpool_limits(limits=args.threads):
        for set_name in args.sets:
            data = load_set(set_name, root=args.data)
            for shots in args.shots:
                for seed in args.seeds:
                    records += run_one(data, shots, seed, args.methods)
                    print(f"[{set_name} {shots}-shot seed {seed}] " + " ".join(
                        f"{r['method']}: new {r['new']:.1f} H {r['H']:.1f}" for r in records[-len(args.methods):]),
                        flush=True)
    text = table(records)
    print(text)
    atomic_write(RESULTS / f"{args.name}.json",
                 json.dumps({"args": vars(args) | {"data": None}, "records": records, "table": text}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
