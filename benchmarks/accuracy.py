"""Top-1 accuracy of LFA and the baselines on the real few-shot sets (1 / 4 / 16 shots, 3 seeds).

For each set, shot count and seed a support set is drawn from the pool
(:func:`benchmarks.data.sample_support`); every method fits on it alone (hyper-parameters
included) and is scored once on the eval split. LFA runs with its defaults,
``LFA(random_state=seed)`` (β="auto", steps="auto"); its chosen ``beta_`` / ``steps_`` and fit
times are recorded. Prints a table and writes ``accuracy.json`` and ``accuracy.md`` under
``benchmarks/results/`` (``accuracy_quick.*`` with ``--quick``).

Usage
-----
    .venv/bin/python -m benchmarks.accuracy                      # everything (5 sets x 3 shots x 3 seeds)
    .venv/bin/python -m benchmarks.accuracy --quick              # dtd, seed 1, 1/4/16 shots
    .venv/bin/python -m benchmarks.accuracy --sets banking77 --shots 16 --seeds 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import sklearn
import torch
from threadpoolctl import threadpool_limits

from lfa_index import LFA

from .baselines import (
    BASELINES,
    GDA_ALPHA_ONE_SHOT,
    TIP_ALPHA,
    TIP_BETA,
    FewShotTask,
    fit_beta_procrustes,
    knn_neighbors,
    linear_probe,
    select_gda_alpha,
    select_linear_probe_C,
)
from .data import SET_NAMES, FewShotSet, load_set, sample_support

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_SHOTS = (1, 4, 16)
DEFAULT_SEEDS = (1, 2, 3)
QUICK_SET = "dtd"

METHODS: dict[str, str] = {
    "zero_shot": "Zero-shot (same model only)",
    "nearest_class_mean": "Nearest class mean",
    "knn": "kNN (k = min(16, N/C))",
    "linear_probe": "Linear probe (C=1, paper)",
    "linear_probe_cv": "Linear probe (C by CV)",
    "gda": "GDA",
    "tip_adapter": "Tip-Adapter (α=1, β=5.5)",
    "beta_procrustes": "β-Procrustes alone",
    "lfa": "LFA (defaults)",
}
"""Method key → row label, in table order."""

PROTOCOL = {
    "support": "k shots per class drawn from the pool with numpy default_rng(seed), capped at the class size",
    "eval": "top-1 accuracy on the eval split, used for nothing else",
    "std": "population std (ddof=0) over seeds",
    "features": "every method L2-normalises its inputs",
    "zero_shot": "cosine to the class prototypes; only where features and prototypes share a model",
    "nearest_class_mean": "cosine to the L2-normalised mean of each class's support rows",
    "knn": "sklearn KNeighborsClassifier (uniform vote, Euclidean on unit rows), k = min(16, N_support // C)",
    "linear_probe": "sklearn LogisticRegression, L2, lbfgs, C=1, max_iter=1000",
    "linear_probe_cv": "same, C from logspace(-2, 3, 11) by stratified K-fold on the support "
                       "(K = min(5, smallest class count); ties: smaller C); C=1 at 1 shot",
    "gda": "class means + shared precision d((n-1)S + tr(S)I)^-1 (GDA's public code), equal priors; identity "
           "precision at 1 shot. Same-model sets add 100*cos zero-shot logits with weight alpha from "
           "{1e-4..100} by stratified K-fold on the support (alpha=%g at 1 shot); other sets: GDA alone"
           % GDA_ALPHA_ONE_SHOT,
    "tip_adapter": "training-free cache exp(-beta(1-cos)) @ one-hot, alpha=%g, beta=%g (paper defaults, no "
                   "search); + 100*cos zero-shot logits on same-model sets, cache alone otherwise" % (TIP_ALPHA, TIP_BETA),
    "beta_procrustes": "LFA's projection + orthogonal Procrustes + beta by LFA's CV, no refinement",
    "lfa": "LFA(random_state=seed): beta='auto', steps='auto', all other parameters default",
}


def core_fingerprint() -> dict[str, Any]:
    """Which LFA core produced the numbers: git HEAD, whether lfa_index/ has local edits, a hash of core/*.py."""
    root = Path(__file__).resolve().parents[1]
    core = sorted((root / "lfa_index" / "core").glob("*.py"))
    digest = hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in core)).hexdigest()[:16]

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    dirty = git("status", "--porcelain", "--", "lfa_index")
    return {"git_head": git("rev-parse", "HEAD"), "lfa_index_locally_modified": bool(dirty) if dirty is not None else None,
            "core_sha256": digest}


# ---------------------------------------------------------------------------- one run
def _run_method(name: str, task: FewShotTask) -> tuple[np.ndarray, dict[str, Any]]:
    """Eval predictions of one method and what it chose (β, C, α, steps ...)."""
    if name == "lfa":
        start = time.perf_counter()
        model = LFA(random_state=task.seed).fit(task.X, task.y, task.prototypes)
        fit_seconds = time.perf_counter() - start
        extras = {
            "beta": model.beta_,
            "steps": model.steps_,
            "fit_seconds": fit_seconds,
            "beta_cv_best": float(np.max(model.beta_scores_)) if model.beta_scores_ is not None else None,
            "step_trials": [[int(s), float(a), float(l)] for s, a, l in (model.step_trials_ or [])],
            "hubness_init": float(model.hubness_init_),
            "hubness": float(model.hubness_),
        }
        return model.predict(task.X_eval), extras
    if name == "beta_procrustes":
        fitted = fit_beta_procrustes(task.X, task.y, task.prototypes, random_state=task.seed)
        return fitted.predict(task.X_eval), {"beta": fitted.beta}
    if name == "linear_probe_cv":
        C, _ = select_linear_probe_C(task.X, task.y, random_state=task.seed)
        return linear_probe(task.X, task.y, task.X_eval, C=C), {"C": C}
    extras: dict[str, Any] = {}
    if name == "knn":
        extras["k"] = knn_neighbors(task.y)
    if name == "gda" and task.same_model:
        extras["alpha"] = select_gda_alpha(task.X, task.y, task.prototypes, random_state=task.seed)[0]
    return BASELINES[name](task), extras


def evaluate(data: FewShotSet, shots: int, seed: int, methods: Sequence[str]) -> list[dict[str, Any]]:
    """Accuracy records of ``methods`` on one support draw of ``data``."""
    idx = sample_support(data.pool_labels, shots, seed)
    task = FewShotTask(
        X=data.pool_features[idx], y=data.pool_labels[idx], prototypes=data.prototypes,
        X_eval=data.eval_features, same_model=data.same_model, seed=seed,
    )
    records = []
    for name in methods:
        if name == "zero_shot" and not data.same_model:
            continue
        start = time.perf_counter()
        pred, extras = _run_method(name, task)
        seconds = time.perf_counter() - start
        records.append({
            "set": data.name, "shots": shots, "seed": seed, "n_support": int(len(idx)), "method": name,
            "accuracy": float(np.mean(pred == data.eval_labels)), "seconds": seconds, **extras,
        })
    return records


# ---------------------------------------------------------------------------- summaries
def summarize(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``summary[set][shots][method] = {mean, std, accuracies, seeds}`` (accuracies in %)."""
    summary: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for r in records:
        cell = summary.setdefault(r["set"], {}).setdefault(str(r["shots"]), {}).setdefault(
            r["method"], {"accuracies": [], "seeds": []})
        cell["accuracies"].append(100.0 * r["accuracy"])
        cell["seeds"].append(r["seed"])
    for per_shots in summary.values():
        for per_method in per_shots.values():
            for cell in per_method.values():
                cell["mean"] = float(np.mean(cell["accuracies"]))
                cell["std"] = float(np.std(cell["accuracies"]))
    return summary


def lfa_choices(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, list]]]:
    """``choices[set][shots] = {seed, beta, steps, fit_seconds, bp_beta}`` lists over seeds."""
    out: dict[str, dict[str, dict[str, list]]] = {}
    for r in records:
        if r["method"] not in ("lfa", "beta_procrustes"):
            continue
        cell = out.setdefault(r["set"], {}).setdefault(
            str(r["shots"]), {"seed": [], "beta": [], "steps": [], "fit_seconds": [], "bp_beta": []})
        if r["method"] == "lfa":
            cell["seed"].append(r["seed"])
            cell["beta"].append(r["beta"])
            cell["steps"].append(r["steps"])
            cell["fit_seconds"].append(round(r["fit_seconds"], 2))
        else:
            cell["bp_beta"].append(r["beta"])
    return out


def _sets_in(records: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["set"] for r in records))


def markdown(records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The results as Markdown: one accuracy table per shot count, LFA's choices, LFA's margins."""
    summary = summarize(records)
    sets = _sets_in(records)
    shots_list = sorted({r["shots"] for r in records})
    lines = [
        "# Few-shot top-1 accuracy (%) on real embeddings",
        "",
        f"Command: `{meta['command']}`  ",
        f"Seeds {meta['seeds']}; mean ± std over seeds. Runtime {meta.get('runtime_s', 0) / 60:.1f} min "
        f"on {meta['threads']} CPU thread(s). Raw numbers: `{meta['json_name']}`. "
        f"LFA core: git {str(meta['core']['git_head'])[:10]}"
        f"{' + local edits' if meta['core']['lfa_index_locally_modified'] else ''}, core sha256 {meta['core']['core_sha256']}.",
        "",
        "Sets: " + "; ".join(f"**{s}**: {meta['sets'][s]['description']}" for s in sets) + ".",
        "",
    ]
    for shots in shots_list:
        lines += [f"## {shots} shot{'s' if shots > 1 else ''} per class", ""]
        lines.append("| Method | " + " | ".join(sets) + " |")
        lines.append("|---|" + "---:|" * len(sets))
        for method, label in METHODS.items():
            cells = []
            for s in sets:
                cell = summary.get(s, {}).get(str(shots), {}).get(method)
                cells.append("–" if cell is None else f"{cell['mean']:.2f} ± {cell['std']:.2f}")
            if any(c != "–" for c in cells):
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")

    lines += ["## LFA minus each method (points, mean over seeds)", "",
              "| Set | Shots | − zero-shot | − β-Procrustes | − LP (C=1) | − LP (CV) | − best other |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for s in sets:
        for shots in shots_list:
            cell = summary.get(s, {}).get(str(shots), {})
            if "lfa" not in cell:
                continue
            lfa = cell["lfa"]["mean"]

            def gap(method: str) -> str:
                return f"{lfa - cell[method]['mean']:+.2f}" if method in cell else "–"

            others = {m: c["mean"] for m, c in cell.items() if m != "lfa"}
            best = max(others, key=others.get) if others else None
            best_txt = f"{lfa - others[best]:+.2f} ({best})" if best else "–"
            lines.append(f"| {s} | {shots} | {gap('zero_shot')} | {gap('beta_procrustes')} | "
                         f"{gap('linear_probe')} | {gap('linear_probe_cv')} | {best_txt} |")
    lines.append("")

    choices = lfa_choices(records)
    if choices:
        lines += ["## What LFA chose (per seed)", "",
                  "| Set | Shots | β (LFA) | β (β-Procrustes baseline) | steps | LFA fit (s) |",
                  "|---|---:|---|---|---|---|"]
        for s in sets:
            for shots in shots_list:
                c = choices.get(s, {}).get(str(shots))
                if not c or not c["beta"]:
                    continue
                fmt = lambda xs: ", ".join(f"{x:g}" for x in xs)  # noqa: E731
                lines.append(f"| {s} | {shots} | {fmt(c['beta'])} | {fmt(c['bp_beta'])} | "
                             f"{fmt(c['steps'])} | {fmt(c['fit_seconds'])} |")
        lines.append("")
    lines += ["## Protocol", ""] + [f"- **{k}**: {v}" for k, v in PROTOCOL.items()] + [""]
    return "\n".join(lines)


def print_table(records: Sequence[dict[str, Any]]) -> None:
    """Methods × (set, shots) accuracy table on stdout."""
    summary = summarize(records)
    columns = [(s, sh) for s in _sets_in(records) for sh in sorted({r["shots"] for r in records if r["set"] == s})]
    width = 13
    print(f"{'method':28s}" + "".join(f"{s[:8] + ' ' + str(sh):>{width}s}" for s, sh in columns))
    for method, label in METHODS.items():
        row = []
        for s, sh in columns:
            cell = summary.get(s, {}).get(str(sh), {}).get(method)
            row.append(f"{'–':>{width}s}" if cell is None else f"{cell['mean']:>7.2f}±{cell['std']:<4.1f}".rjust(width))
        print(f"{label[:28]:28s}" + "".join(row))


# ---------------------------------------------------------------------------- I/O + CLI
def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def save(records: Sequence[dict[str, Any]], meta: dict[str, Any], out_dir: Path, name: str) -> None:
    """Write ``{name}.json`` (meta, summary, LFA choices, per-run records) and ``{name}.md``."""
    payload = {
        "meta": meta,
        "summary": summarize(records),
        "lfa_choices": lfa_choices(records),
        "records": list(records),
    }
    _write_atomic(out_dir / f"{name}.json", json.dumps(payload, indent=1))
    _write_atomic(out_dir / f"{name}.md", markdown(records, meta))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", choices=SET_NAMES, default=None, help="default: all five")
    parser.add_argument("--shots", nargs="+", type=int, default=list(DEFAULT_SHOTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 1 2 3")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {QUICK_SET} and seed 1 unless --sets/--seeds say otherwise; "
                             "writes accuracy_quick.*")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--name", default=None, help="output file stem (default accuracy / accuracy_quick)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and BLAS/OpenMP threads (1 avoids oversubscription on shared CPUs)")
    args = parser.parse_args(argv)
    if args.sets is None:
        args.sets = [QUICK_SET] if args.quick else list(SET_NAMES)
    if args.seeds is None:
        args.seeds = [1] if args.quick else list(DEFAULT_SEEDS)
    if args.name is None:
        args.name = "accuracy_quick" if args.quick else "accuracy"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python -m benchmarks.accuracy " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    meta: dict[str, Any] = {
        "command": command.strip(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "sets_requested": args.sets, "shots": args.shots, "seeds": args.seeds, "methods": args.methods,
        "threads": args.threads, "json_name": f"{args.name}.json",
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                     "sklearn": sklearn.__version__},
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "core": core_fingerprint(),
        "protocol": PROTOCOL,
        "sets": {},
    }
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    with threadpool_limits(limits=args.threads):
        for set_name in args.sets:
            data = load_set(set_name)
            meta["sets"][set_name] = {
                "description": data.description, "same_model": data.same_model, "n_classes": data.n_classes,
                "n_pool": int(len(data.pool_labels)), "n_eval": int(len(data.eval_labels)),
                "feature_dim": int(data.pool_features.shape[1]), "prototype_dim": int(data.prototypes.shape[1]),
            }
            for shots in args.shots:
                for seed in args.seeds:
                    t0 = time.perf_counter()
                    new = evaluate(data, shots, seed, args.methods)
                    records += new
                    accs = " ".join(f"{r['method']}={100 * r['accuracy']:.1f}" for r in new)
                    print(f"[{set_name} {shots}-shot seed {seed} {time.perf_counter() - t0:.0f}s] {accs}", flush=True)
                meta["runtime_s"] = time.perf_counter() - start
                save(records, meta, args.out_dir, args.name)  # after each cell, so a cut run leaves a table
    meta["runtime_s"] = time.perf_counter() - start
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save(records, meta, args.out_dir, args.name)
    print()
    print_table(records)
    print(f"\nwrote {args.out_dir / (args.name + '.json')} and .md in {meta['runtime_s'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
