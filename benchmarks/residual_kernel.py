"""Issue 21, item 3: a kernel ridge on the *residual of the default*, ProKeR's point with LFA as the base.

ProKeR (Bendou et al., CVPR 2025) regresses one-hot targets on the residual of a training-free base
learner (zero-shot) with an RBF kernel on cosine, its hyper-parameters chosen by the closed-form
leave-one-out error. Our kernel ridge baseline (:func:`benchmarks.baselines.kernel_ridge_logits`)
does that with zero-shot (or no base where the encoders differ). Here the base is the default
``LFA`` instead, a far better learner; this measures whether the kernel on its residual beats both,
at 4 and 16 shots of the encoder-pair matrix, as evidence (a kernel needs every support row at query
time, so it does not fold into one inner-product search).

On each support (the matrix's own draw, :func:`benchmarks.data.sample_support`):

* ``lfa``: ``LFA(random_state=seed)`` on every support row, scored on the eval rows;
* the base on the support rows must not have seen them (leave-one-out needs a base that did not fit
  the row it leaves out): out-of-fold scores of two ``LFA(random_state=seed)`` fits, each on one half
  of a stratified split (so the base there is a half-support model);
* both score matrices standardised per row over the classes (their scale is the served average's,
  not a cosine);
* ``lfa_residual_kernel``: ``s · z(base) + k(x, X)(K + λI)⁻¹(Y − s · z(base_oof))`` with the kernel width
  b, λ and the base's weight s (0: the kernel alone on one-hot targets) chosen by the same closed-form
  leave-one-out error (:func:`benchmarks.baselines.kernel_ridge_loo`) as the baseline;
* ``lfa_kernel_average``: the standardised half-and-half average of the default and the kernel ridge
  baseline (the matrix's "Default ⊕ kernel ridge"), for comparison;
* ``lfa_kernel_stacked``: that average with the kernel's share (0, ¼, ½, ¾, 1) chosen on the support:
  the share whose average of the two out-of-fold score matrices (the default and the kernel ridge, each
  fitted on the other half of the same split) classifies the support rows best, ties to the smaller;
* ``kernel_ridge``: the baseline itself.

The best baseline of each cell and the (b) check (mean ≥ best baseline − 0.3) come from the matrix's
records (``--matrix``, default ``benchmarks/results/robustness.json``: same supports, same seeds).

    python -m benchmarks.residual_kernel --pairs minilm~minilm e5~minilm static64~minilm --name residual_kernel_a
    python -m benchmarks.residual_kernel --pairs paraphrase~minilm 'clip~minilm:dtd' mobilenet~minilm \
        --name residual_kernel_b
    python -m benchmarks.residual_kernel --merge residual_kernel_a residual_kernel_b --name residual_kernel
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.files import atomic_write

from .accuracy import core_fingerprint
from .baselines import kernel_ridge_logits, select_kernel_ridge, standardise_rows, standardised_average
from .data import sample_support
from .pairs import PAIR_NAMES, add_pair_arguments, load_pair, pair_argument

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BASE_WEIGHTS: tuple[float, ...] = (0.0, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
"""Weights s of the standardised base: the true class stands some 3-9 standard deviations above the
others' mean, so s ≈ 1/8 puts it on the scale of the one-hot target; 0 is the kernel alone."""
SHARES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The kernel's shares of the stacked average that the support chooses from."""
METHODS = {"lfa": "Default", "kernel_ridge": "Kernel ridge", "lfa_kernel_average": "Default ⊕ kernel ridge (average)",
           "lfa_residual_kernel": "Kernel ridge on the default's residual",
           "lfa_kernel_stacked": "Default ⊕ kernel ridge, share chosen out of fold"}
BASELINES = ("nearest_class_mean", "zero_shot", "linear_probe_cv", "gda", "kernel_ridge")


def out_of_fold_scores(X: np.ndarray, y: np.ndarray, prototypes: np.ndarray, text: np.ndarray | None, seed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Scores (n, C) of each support row by the default and by the kernel ridge baseline, each fitted on
    the other half of one stratified split (the same rows for both)."""
    lfa, kr = np.zeros((len(X), len(prototypes))), np.zeros((len(X), len(prototypes)))
    for train, held in StratifiedKFold(2, shuffle=True, random_state=seed).split(X, y):
        lfa[held] = LFA(random_state=seed).fit(X[train], y[train], prototypes).decision_function(X[held])
        kr[held] = kernel_ridge_logits(X[train], y[train], X[held], text)
    return lfa, kr


def stacked_share(oof_lfa: np.ndarray, oof_kr: np.ndarray, y: np.ndarray) -> float:
    """The kernel's share of the standardised average that classifies the support rows best out of fold
    (ties: the smaller share, i.e. more of the default, which folds into one search)."""
    hits = [float(np.mean(np.argmax(standardised_average(oof_lfa, oof_kr, share), axis=1) == y)) for share in SHARES]
    return SHARES[int(np.argmax(hits))]


def residual_kernel(X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, base_oof: np.ndarray, base_eval: np.ndarray
                    ) -> tuple[np.ndarray, dict[str, float]]:
    """Eval logits of the kernel ridge on the residual of ``s · base`` and its leave-one-out choice."""
    choice = select_kernel_ridge(X, y, scales=BASE_WEIGHTS, base=base_oof)
    logits = kernel_ridge_logits(X, y, X_eval, choice=choice, base=base_oof, base_eval=base_eval)
    return logits, {"width": choice.width, "lam": choice.lam, "scale": choice.scale, "loo_error": choice.loo_error}


def run_support(data: Any, shots: int, seed: int) -> list[dict[str, Any]]:
    """One record per method on the (shots, seed) support: eval accuracy and what was chosen."""
    idx = sample_support(data.pool_labels, shots, seed)
    X, y = data.pool_features[idx], data.pool_labels[idx]
    text = data.prototypes if data.same_model else None
    start = time.perf_counter()
    lfa_scores = LFA(random_state=seed).fit(X, y, data.prototypes).decision_function(data.eval_features)
    choice = select_kernel_ridge(X, y, text)
    kr = kernel_ridge_logits(X, y, data.eval_features, text, choice=choice)
    oof_lfa, oof_kr = out_of_fold_scores(X, y, data.prototypes, text, seed)
    residual, chosen = residual_kernel(X, y, data.eval_features, standardise_rows(oof_lfa),
                                       standardise_rows(lfa_scores))
    share = stacked_share(oof_lfa, oof_kr, y)
    chosen["share"] = share
    scores = {"lfa": lfa_scores, "kernel_ridge": kr, "lfa_kernel_average": standardised_average(lfa_scores, kr, 0.5),
              "lfa_residual_kernel": residual, "lfa_kernel_stacked": standardised_average(lfa_scores, kr, share)}
    seconds = time.perf_counter() - start
    return [{"set": data.name, "shots": shots, "seed": seed, "method": m, "seconds": seconds,
             "accuracy": float(np.mean(np.argmax(s, axis=1) == data.eval_labels)),
             **(chosen if m in ("lfa_residual_kernel", "lfa_kernel_stacked") else {})} for m, s in scores.items()]


def table(records: Sequence[dict[str, Any]], matrix: dict[str, Any]) -> str:
    """Per (pair, shots): each method's mean (worst seed), the matrix's best baseline and the (b) check."""
    base: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in matrix["records"]:
        if r["method"] in BASELINES:
            base.setdefault((r["set"], r["shots"]), {}).setdefault(r["method"], []).append(100 * r["accuracy"])
    ours: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in records:
        ours.setdefault((r["set"], r["shots"]), {}).setdefault(r["method"], []).append(100 * r["accuracy"])
    checked = [m for m in METHODS if m != "kernel_ridge"]
    head = ["Pair", "Shots", *METHODS.values(), "Best baseline (matrix)", *(f"(b) {METHODS[m]}" for m in checked)]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(METHODS) + "---|" + "---|" * len(checked)]
    fails = dict.fromkeys(checked, 0)
    for (pair, shots), got in ours.items():
        means = [(m, float(np.mean(v))) for m, v in base.get((pair, shots), {}).items()]
        best_name, best = max(means, key=lambda t: t[1])
        cells = [f"{np.mean(got[m]):.2f} ({min(got[m]):.1f})" for m in METHODS]
        checks = []
        for m in checked:
            ok = float(np.mean(got[m])) >= best - 0.3
            fails[m] += not ok
            checks.append("yes" if ok else f"**no** ({np.mean(got[m]) - best:+.2f})")
        lines.append(f"| {pair} | {shots} | " + " | ".join(cells) + f" | {best_name} {best:.2f} | "
                     + " | ".join(checks) + " |")
    lines += ["", "Cells failing (b): " + ", ".join(f"{METHODS[m]} {fails[m]} of {len(ours)}" for m in checked)]
    return "\n".join(lines)


def save(records: list[dict[str, Any]], meta: dict[str, Any], out_dir: Path, name: str) -> str:
    """Write ``{name}.json`` and ``{name}.md``; return the Markdown."""
    matrix = json.loads(Path(meta["matrix"]).read_text())
    md = "\n".join(["# Kernel ridge on the default's residual (issue 21, item 3)", "",
                    f"Command: `{meta['command']}`  ", f"Seeds {meta['seeds']}, 1 thread, runtime "
                    f"{meta.get('runtime_s', 0) / 60:.1f} min. LFA core: {meta['core']}. Best baselines from "
                    f"`{Path(meta['matrix']).name}` (same supports). Mean accuracy (%) over seeds (worst seed).", "",
                    table(records, matrix), ""])
    atomic_write(out_dir / f"{name}.json", json.dumps({"meta": meta, "records": records}, indent=1).encode())
    atomic_write(out_dir / f"{name}.md", md.encode())
    return md


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", nargs="+", type=pair_argument, default=list(PAIR_NAMES), metavar="ROWS~NAMES",
                        help="encoder pairs ROWS~NAMES[:SET] (benchmarks/pairs.py; default: the matrix's)")
    parser.add_argument("--shots", nargs="+", type=int, default=[4, 16])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(1, 11)))
    parser.add_argument("--matrix", type=Path, default=RESULTS_DIR / "robustness.json")
    parser.add_argument("--name", default="residual_kernel")
    parser.add_argument("--merge", nargs="+", metavar="STEM")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    add_pair_arguments(parser)
    args = parser.parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    command = "python -m benchmarks.residual_kernel " + " ".join(shlex.quote(w) for w in words)
    meta: dict[str, Any] = {"command": command,
                            "seeds": args.seeds, "core": core_fingerprint(), "matrix": str(args.matrix)}
    records: list[dict[str, Any]] = []
    if args.merge:
        for stem in args.merge:
            records += json.loads((args.out_dir / f"{stem}.json").read_text())["records"]
        print(save(records, meta, args.out_dir, args.name))
        return 0
    start = time.perf_counter()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        for pair in args.pairs:
            data = load_pair(pair, root=args.data, cache_dir=args.cache_dir, fashion_mnist=args.fashion_mnist)
            for shots in args.shots:
                for seed in args.seeds:
                    records += run_support(data, shots, seed)
                    got = {r["method"]: 100 * r["accuracy"] for r in records[-len(METHODS):]}
                    print(f"[{pair} {shots}-shot seed {seed}] " + " ".join(f"{m}={v:.1f}" for m, v in got.items()),
                          flush=True)
                meta["runtime_s"] = time.perf_counter() - start
                save(records, meta, args.out_dir, args.name)
    print(save(records, meta, args.out_dir, args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
