"""Issue 21, item 4: the default's fit time against what a user would pick instead, on the same embeddings.

Rows: Banking77 MiniLM embeddings (the cached ones of :func:`benchmarks.data.load_banking77`),
77 intents × 16 and × 31 shots drawn from train.csv with :func:`sample_support` (31 shots is
2,387 texts, the size of the issue's 2,400-text example; no 150-intent set is available offline).
``--set`` takes any set of :func:`benchmarks.data.load_set` instead, e.g. ``caltech101`` (100
classes: the logistic models' cost grows with the classes, LFA's mostly with the rows and width).
On each support, one after the other in one process on ``--threads`` threads:

* ``lfa``: ``LFA(random_state=seed).fit(X, y, prototypes)``, prototypes = MiniLM of the readable
  intent names;
* ``lfa_paper200``: ``LFA.paper(steps=200, random_state=seed)``, the reference of the cost budget;
* ``logreg_cv``: scikit-learn ``LogisticRegressionCV(Cs=5, cv=4, scoring="accuracy",
  max_iter=1000)``: C from its own grid ``logspace(-4, 4, 5)`` by the accuracy of 4-fold
  stratified CV (unshuffled, scikit-learn's default for ``cv=4``; accuracy is its default scoring
  until 1.11), then refitted on every row;
* ``logreg``: ``LogisticRegression(C=1, max_iter=1000)``, the plain probe.

The logistic models fit L2-normalised rows, as the probes of :mod:`benchmarks.baselines`. Fit
seconds, wall-clock and CPU (median over ``--repeats``), and accuracy on test.csv (3,080 texts) are reported.

    python -m benchmarks.fit_cost                        # 16 and 31 shots, seed 1, 1 thread
    python -m benchmarks.fit_cost --shots 31 --repeats 3
    python -m benchmarks.fit_cost --set caltech101 --shots 16 --name fit_cost_caltech101

Prints a table and writes ``benchmarks/results/fit_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.arrays import l2_normalize
from lfa_index.baselines import LINEAR_PROBE_MAX_ITER
from lfa_index.files import atomic_write

from .accuracy import core_fingerprint
from .data import SET_NAMES, add_data_argument, load_set, sample_support
from .robustness import warm_up

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LOGREG_CV_CS = 5
LOGREG_CV_FOLDS = 4

METHODS: dict[str, str] = {
    "lfa": "LFA default",
    "lfa_paper200": "LFA.paper(steps=200)",
    "logreg_cv": f"LogisticRegressionCV(Cs={LOGREG_CV_CS}, cv={LOGREG_CV_FOLDS})",
    "logreg": "LogisticRegression(C=1)",
}


Predictor = Callable[[np.ndarray], np.ndarray]


def fit(method: str, X: np.ndarray, y: np.ndarray, prototypes: np.ndarray, seed: int
        ) -> tuple[Predictor, dict[str, Any]]:
    """Fit ``method`` on the support rows (timed by the caller); return its predictor and what it chose."""
    if method in ("lfa", "lfa_paper200"):
        model = LFA(random_state=seed) if method == "lfa" else LFA.paper(steps=200, random_state=seed)
        model.fit(X, y, prototypes)
        return model.predict, {"summary": getattr(model, "summary_", None)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.9 announces new defaults and attributes
        if method == "logreg_cv":
            probe = LogisticRegressionCV(Cs=LOGREG_CV_CS, cv=LOGREG_CV_FOLDS, scoring="accuracy",
                                         max_iter=LINEAR_PROBE_MAX_ITER)
        else:
            probe = LogisticRegression(C=1.0, max_iter=LINEAR_PROBE_MAX_ITER)
        probe.fit(l2_normalize(X), y)
    chosen = {"C": float(np.ravel(probe.C_)[0])} if method == "logreg_cv" else {"C": 1.0}
    return (lambda X_eval: probe.predict(l2_normalize(X_eval))), chosen


def measure(data: Any, shots: int, seed: int, methods: Sequence[str], repeats: int) -> list[dict[str, Any]]:
    """One record per method on the (``shots``, ``seed``) support: fit seconds (each repeat), accuracy (%)."""
    idx = sample_support(data.pool_labels, shots, seed)
    X, y = data.pool_features[idx], data.pool_labels[idx]
    records = []
    for method in methods:
        seconds, cpu_seconds = [], []
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            predict, chosen = fit(method, X, y, data.prototypes, seed)
            seconds.append(time.perf_counter() - start)
            cpu_seconds.append(time.process_time() - cpu)
        accuracy = 100 * float(np.mean(predict(data.eval_features) == data.eval_labels))
        records.append({"shots": shots, "seed": seed, "rows": int(len(idx)), "classes": data.n_classes,
                        "method": method, "fit_seconds": seconds, "median_s": statistics.median(seconds),
                        "fit_cpu_seconds": cpu_seconds, "median_cpu_s": statistics.median(cpu_seconds),
                        "accuracy": accuracy, **chosen})
        print(f"[{shots} shots, {len(idx)} rows, seed {seed}] {METHODS[method]}: {statistics.median(seconds):.2f} s, "
              f"{accuracy:.2f} %", flush=True)
    return records


def markdown(records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Fit seconds and accuracy side by side, with each method's time relative to the default's."""
    stand_in = (" There is no 150-intent set offline: 77 × 31 shots stands for the issue's 2,400 texts."
                if meta["set"] == "banking77" else "")
    lines = ["# Fit cost against what a user would pick instead (issue 21, item 4)", "",
             f"Command: `{meta['command']}`  ",
             f"{meta['description']}; {meta['n_eval']} eval rows; {meta['threads']} thread(s); "
             f"median of {meta['repeats']} fit(s). LFA core: git {str(meta['core']['git_head'])[:10]}, core sha256 "
             f"{meta['core']['core_sha256']}.{stand_in}", "",
             "| Shots | Rows | Seed | Method | Fit (s) | × the default | Fit (CPU s) | × the default (CPU) | "
             "Accuracy (%) | C |", "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    default = {(r["shots"], r["seed"]): r for r in records if r["method"] == "lfa"}

    def times(r: dict[str, Any], key: str) -> str:
        ref = default.get((r["shots"], r["seed"]), {}).get(key)
        return f"{r[key]:.2f} | " + ("–" if not ref else f"{r[key] / ref:.2f}")

    for r in records:
        C = f"{r['C']:g}" if r.get("C") is not None else "–"
        lines.append(f"| {r['shots']} | {r['rows']} | {r['seed']} | {METHODS[r['method']]} | {times(r, 'median_s')} | "
                     f"{times(r, 'median_cpu_s')} | {r['accuracy']:.2f} | {C} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SET_NAMES, default="banking77",
                        help="the few-shot set (default banking77, the issue's texts; e.g. caltech101: 100 classes "
                             "of 512-d CLIP images against MiniLM names)")
    parser.add_argument("--shots", nargs="+", type=int, default=[16, 31])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--repeats", type=int, default=1, help="fits per method and support; the median counts")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="fit_cost", help="results file stem")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    add_data_argument(parser)
    args = parser.parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    data = load_set(args.set, root=args.data)
    meta = {"command": "python -m benchmarks.fit_cost " + " ".join(shlex.quote(str(w)) for w in words),
            "set": args.set, "description": data.description,
            "threads": args.threads, "repeats": args.repeats, "n_eval": int(len(data.eval_labels)),
            "core": core_fingerprint(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    torch.set_num_threads(args.threads)
    records: list[dict[str, Any]] = []
    with threadpool_limits(limits=args.threads):
        warm_up(args.methods)
        for shots in args.shots:
            for seed in args.seeds:
                records += measure(data, shots, seed, args.methods, args.repeats)
    text = markdown(records, meta)
    atomic_write(args.out_dir / f"{args.name}.json", json.dumps({"meta": meta, "records": records}, indent=1))
    atomic_write(args.out_dir / f"{args.name}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
