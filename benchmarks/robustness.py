"""The encoder-pair matrix of issue 21: does the default hold on any pair of encoders, and at what cost?

For each encoder pair (:mod:`benchmarks.pairs`), shot count (1, 4, 16) and seed (1..10) one support
is drawn from the pool (:func:`benchmarks.data.sample_support`) and every method fits on it alone
and is scored once on the eval rows:

* ``lfa``: the default, ``LFA(random_state=seed)``; its ``summary_`` and ``beta_selection_`` are
  recorded so that a collapse can be traced;
* ``lfa_paper``: ``LFA.paper(random_state=seed)``; ``lfa_paper200``: ``LFA.paper(steps=200,
  random_state=seed)``, the reference of the cost budget (fitted right before the default);
  ``lfa_paper200_auto``: the same fit in the default's arithmetic (``precision="auto"``: bf16-mixed on
  a CPU with native bf16, where :meth:`LFA.paper` pins float32), so that the cost ratio can also be
  read at equal arithmetic;
* baselines: zero-shot (one model on both sides only), the class mean, the CV-tuned probe, GDA and
  the ProKeR-style kernel ridge (:mod:`benchmarks.baselines`);
* ``linear_ridge`` (opt-in): evidence, not a baseline: the kernel ridge with a linear kernel
  (:func:`benchmarks.baselines.linear_kernel`), same targets, base and leave-one-out search. Where
  the kernel ridge leads the default, this says whether a linear classifier, which a map could fold
  into one inner-product search, would lead too, or whether the lead is the kernel's non-linearity;
* ``lfa_kernel``: evidence, not a baseline: the default's scores and the kernel ridge's logits, each
  row standardised over its classes, averaged half and half. Where the kernel ridge wins, this says
  what a classifier that no longer folds into one inner-product search (the kernel needs every
  support row at query time) would add to the default; it needs ``lfa`` and ``kernel_ridge`` run.

The table gives, per cell, each method's mean and (in brackets) its worst seed, the best baseline
and the default's margin over it, and the checks of issue 21:

* **(a) no collapse**: no seed below ``max(class mean, zero-shot where one model embeds both
  sides) − 2`` points, both on the same support (paired), checked for the default and for
  ``LFA.paper()``;
* **(b)** at 4 and 16 shots, the default's mean ≥ the best baseline's mean − 0.3;
* **cost**: mean fit seconds of the default against ``LFA.paper(steps=200)`` on the same supports,
  in the same process, on ``--threads`` threads (torch and BLAS): ≤ 3× in total over the matrix,
  ≤ 5× in every cell. One untimed warm-up fit of each LFA variant runs first.

Writes ``benchmarks/results/<name>.json`` (records, meta, cells, cost) and ``<name>.md``, after
each cell, atomically; prints the Markdown. Fill the embedding caches first (see
:mod:`benchmarks.pairs`).

Usage
-----
    python -m benchmarks.robustness --pairs static64~minilm --shots 4 --seeds 1 --name robustness_smoke
    # the full matrix (6 pairs x 3 shots x 10 seeds) in two parts, then one table
    python -m benchmarks.robustness --pairs minilm~minilm e5~minilm static64~minilm --name robustness_a
    python -m benchmarks.robustness --pairs paraphrase~minilm clip~minilm:dtd mobilenet~minilm --name robustness_b
    python -m benchmarks.robustness --merge robustness_a robustness_b --name robustness
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.files import atomic_write

from .accuracy import CELL_TIME_BUDGET, FIT_TIME_BUDGET, TARGET_MARGIN, core_fingerprint, fit_times, summarize
from .baselines import (
    BASELINES,
    LINEAR_OFFSETS,
    FewShotTask,
    kernel_ridge_logits,
    linear_kernel,
    linear_probe,
    select_kernel_ridge,
    select_linear_probe_C,
    standardised_average,
)
from .data import DataRootError, describe, sample_support
from .pairs import DEFAULT_PAIRS, MissingFeaturesError, add_pair_arguments, load_pair, pair_argument

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_SHOTS = (1, 4, 16)
DEFAULT_SEEDS = tuple(range(1, 11))
TARGET_SHOTS = (4, 16)
COLLAPSE_MARGIN = 2.0  # points below max(class mean, zero-shot) that count as a collapse

METHODS: dict[str, str] = {
    "lfa": "Default",
    "lfa_paper": "Paper",
    "lfa_paper200": "Paper, 200 steps",
    "lfa_paper200_auto": "Paper, 200 steps, default arithmetic",
    "zero_shot": "Zero-shot",
    "nearest_class_mean": "Class mean",
    "linear_probe_cv": "Probe (CV)",
    "gda": "GDA",
    "kernel_ridge": "Kernel ridge",
    "linear_ridge": "Linear ridge (evidence)",
    "lfa_kernel": "Default ⊕ kernel ridge",
    "lfa_paper_code": "Paper's public code",
    "lfa_paper_beta0": "Paper, β = 0",
}
"""Method key → column label, in table order."""
OPT_IN_METHODS: tuple[str, ...] = ("lfa_paper_code", "lfa_paper_beta0", "linear_ridge")
"""Run only when ``--methods`` names them: the paper's public code as it runs (the preset without its
guard, ``text_check=False``, and with the code's projection of the wider side down to the narrower
width, ``projection="shrink"``, where the preset follows the paper's text: the image rows into the text
width), the preset with β fixed at 0, a rule it does not take (``docs/algorithm.md``), and the linear
ridge (evidence, never counted as a baseline)."""
LFA_MODELS = {
    "lfa_paper200": lambda seed: LFA.paper(steps=200, random_state=seed),
    "lfa": lambda seed: LFA(random_state=seed),
    "lfa_paper": lambda seed: LFA.paper(random_state=seed),
    "lfa_paper200_auto": lambda seed: LFA.paper(steps=200, precision="auto", random_state=seed),
    "lfa_paper_code": lambda seed: LFA.paper(text_check=False, projection="shrink", random_state=seed),
    "lfa_paper_beta0": lambda seed: LFA.paper(beta=0.0, random_state=seed),
}
"""The LFA fits, in the order they run on each support (the cost reference right before the default)."""
BASELINE_METHODS: tuple[str, ...] = ("zero_shot", "nearest_class_mean", "linear_probe_cv", "gda", "kernel_ridge")
EVIDENCE_METHODS: tuple[str, ...] = ("linear_ridge",)
"""Run beside the baselines but never counted among them (module docstring)."""
COMBINED = "lfa_kernel"
"""Not a baseline: the default and the kernel ridge averaged (module docstring); needs both runs."""
COMBINED_SHARE = 0.5
FLOOR_METHODS: tuple[str, ...] = ("nearest_class_mean", "zero_shot")


# ---------------------------------------------------------------------------- one support
def fit_lfa(method: str, task: FewShotTask) -> tuple[np.ndarray, dict[str, Any]]:
    """Eval scores (N_eval, C) of one LFA variant, its fit seconds (wall and CPU) and what it chose."""
    model = LFA_MODELS[method](task.seed)
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(task.X, task.y, task.prototypes)
    fit_seconds, fit_cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    chosen = {key: getattr(model, f"{key}_", None) for key in ("beta", "steps", "beta_selection", "summary")}
    extras = {"fit_seconds": fit_seconds, "fit_cpu_seconds": fit_cpu_seconds, **chosen}
    return model.decision_function(task.X_eval), extras


def run_method(method: str, task: FewShotTask) -> tuple[np.ndarray, dict[str, Any]]:
    """Eval predictions of ``method`` on ``task`` (or its scores (N_eval, C), for LFA and the kernel
    ridge) and what it chose (LFA's β and summary, C, kernel ridge's grid)."""
    if method in LFA_MODELS:
        return fit_lfa(method, task)
    if method == "linear_probe_cv":
        C, _ = select_linear_probe_C(task.X, task.y, random_state=task.seed)
        return linear_probe(task.X, task.y, task.X_eval, C=C), {"C": C}
    if method == "kernel_ridge":
        choice = select_kernel_ridge(task.X, task.y, task.text_prototypes)
        logits = kernel_ridge_logits(task.X, task.y, task.X_eval, task.text_prototypes, choice=choice)
        return logits, {"width": choice.width, "lam": choice.lam, "scale": choice.scale, "loo_error": choice.loo_error}
    if method == "linear_ridge":
        choice = select_kernel_ridge(task.X, task.y, task.text_prototypes, widths=LINEAR_OFFSETS, kernel=linear_kernel)
        logits = kernel_ridge_logits(task.X, task.y, task.X_eval, task.text_prototypes, choice=choice,
                                     kernel=linear_kernel)
        return logits, {"offset": choice.width, "lam": choice.lam, "scale": choice.scale, "loo_error": choice.loo_error}
    return BASELINES[method](task), {}


def run_support(data: Any, shots: int, seed: int, methods: Sequence[str]) -> list[dict[str, Any]]:
    """One record per method on the support of (``shots``, ``seed``): accuracy (fraction), seconds, choices."""
    idx = sample_support(data.pool_labels, shots, seed)
    task = FewShotTask(X=data.pool_features[idx], y=data.pool_labels[idx], prototypes=data.prototypes,
                       X_eval=data.eval_features, same_model=data.same_model, seed=seed)
    ordered = [m for m in (*LFA_MODELS, *BASELINE_METHODS, *EVIDENCE_METHODS) if m in methods]
    records, scores = [], {}

    def record(method: str, pred: np.ndarray, seconds: float, extras: dict[str, Any]) -> None:
        records.append({"set": data.name, "shots": shots, "seed": seed, "method": method,
                        "same_model": data.same_model, "n_support": int(len(idx)),
                        "accuracy": float(np.mean(pred == data.eval_labels)), "seconds": seconds, **extras})

    for method in ordered:
        if method == "zero_shot" and not data.same_model:
            continue
        start = time.perf_counter()
        pred, extras = run_method(method, task)
        if pred.ndim == 2:  # scores
            scores[method], pred = pred, np.argmax(pred, axis=1)
        record(method, pred, time.perf_counter() - start, extras)
    if COMBINED in methods and {"lfa", "kernel_ridge"} <= scores.keys():
        start = time.perf_counter()
        combined = standardised_average(scores["lfa"], scores["kernel_ridge"], COMBINED_SHARE)
        record(COMBINED, np.argmax(combined, axis=1), time.perf_counter() - start, {"share": COMBINED_SHARE})
    return records


def run_cell(data: Any, shots: int, seeds: Sequence[int], methods: Sequence[str]) -> list[dict[str, Any]]:
    """:func:`run_support` for each seed, with one progress line per seed."""
    records = []
    for seed in seeds:
        start = time.perf_counter()
        new = run_support(data, shots, seed, methods)
        scores = " ".join(f"{r['method']}={100 * r['accuracy']:.1f}" for r in new)
        print(f"[{data.name} {shots}-shot seed {seed} {time.perf_counter() - start:.0f}s] {scores}", flush=True)
        records += new
    return records


def warm_up(methods: Sequence[str]) -> None:
    """Fit each LFA variant in ``methods`` once on a tiny random problem, so no timed fit pays first-call costs."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 16)).astype(np.float32), np.repeat(np.arange(4), 3)
    for method in LFA_MODELS:
        if method in methods:
            LFA_MODELS[method](0).fit(X, y, rng.normal(size=(4, 8)).astype(np.float32))


# ---------------------------------------------------------------------------- checks
def _by_seed(cell: dict[str, Any] | None) -> dict[int, float]:
    return {} if cell is None else dict(zip(cell["seeds"], cell["accuracies"]))


def collapses(cell: dict[str, dict[str, Any]], method: str) -> list[dict[str, float]] | None:
    """Seeds where ``method`` falls more than 2 points below max(class mean, zero-shot) on the same support.

    None when the method or the class mean was not run.
    """
    if method not in cell or "nearest_class_mean" not in cell:
        return None
    class_mean, zero_shot = (_by_seed(cell.get(m)) for m in FLOOR_METHODS)
    out = []
    for seed, accuracy in _by_seed(cell[method]).items():
        if seed not in class_mean:
            continue
        floor = max(class_mean[seed], zero_shot.get(seed, -np.inf))
        if accuracy < floor - COLLAPSE_MARGIN:
            out.append({"seed": seed, "accuracy": accuracy, "floor": floor})
    return out


def cells(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (pair, shots): mean and worst seed per method, the best baseline, the default's margin, checks (a), (b)."""
    summary = summarize(records)
    out = []
    for pair in dict.fromkeys(r["set"] for r in records):
        for shots in sorted({r["shots"] for r in records if r["set"] == pair}):
            cell = summary[pair][str(shots)]
            row: dict[str, Any] = {"pair": pair, "shots": shots, "methods": {
                m: {"mean": c["mean"], "worst": min(c["accuracies"]), "seeds": len(c["seeds"])}
                for m, c in cell.items()}}
            baselines = {m: cell[m]["mean"] for m in BASELINE_METHODS if m in cell}
            best = max(baselines, key=baselines.get) if baselines else None
            row["best_baseline"], row["best"] = best, baselines.get(best)
            default = cell.get("lfa", {}).get("mean")
            row["margin"] = None if best is None or default is None else default - baselines[best]
            combined = cell.get(COMBINED, {}).get("mean")
            row["margin_combined"] = None if best is None or combined is None else combined - baselines[best]
            row["collapses_default"] = collapses(cell, "lfa")
            row["collapses_paper"] = collapses(cell, "lfa_paper")
            row["collapses"] = {m: collapses(cell, m) for m in LFA_MODELS if m in cell}
            row["b_met"] = None if shots not in TARGET_SHOTS or row["margin"] is None else \
                row["margin"] >= -TARGET_MARGIN
            row["b_met_combined"] = None if shots not in TARGET_SHOTS or row["margin_combined"] is None else \
                row["margin_combined"] >= -TARGET_MARGIN
            out.append(row)
    return out


def verdict(rows: Sequence[dict[str, Any]], cost: dict[str, Any]) -> dict[str, Any]:
    """The issue's criteria over the whole matrix: counts of failures and whether each is met."""
    def no_collapse(key: str, method: str) -> dict[str, Any]:
        checked = [r for r in rows if r[key] is not None]
        failing = sum(len(r[key]) for r in checked)
        return {"failing_seeds": failing, "seeds": sum(r["methods"][method]["seeds"] for r in checked),
                "met": failing == 0 if checked else None}

    b_rows = [r for r in rows if r["b_met"] is not None]
    combined_rows = [r for r in rows if r.get("b_met_combined") is not None]
    return {
        "a_default": no_collapse("collapses_default", "lfa"),
        "a_paper": no_collapse("collapses_paper", "lfa_paper"),
        "b": {"failing_cells": sum(not r["b_met"] for r in b_rows), "cells": len(b_rows),
              "met": all(r["b_met"] for r in b_rows) if b_rows else None},
        "b_combined": {"failing_cells": sum(not r["b_met_combined"] for r in combined_rows),
                       "cells": len(combined_rows),
                       "met": all(r["b_met_combined"] for r in combined_rows) if combined_rows else None},
        "cost_total": {"ratio": cost["total_ratio"], "budget": FIT_TIME_BUDGET,
                       "met": None if cost["total_ratio"] is None else cost["total_ratio"] <= FIT_TIME_BUDGET},
        "cost_cell": {"ratio": cost["max_cell_ratio"], "budget": CELL_TIME_BUDGET,
                      "met": None if cost["max_cell_ratio"] is None else cost["max_cell_ratio"] <= CELL_TIME_BUDGET},
    }


# ---------------------------------------------------------------------------- report
def _met(flag: bool | None) -> str:
    return "–" if flag is None else ("yes" if flag else "**no**")


def _collapse_cell(found: list[dict[str, float]] | None) -> str:
    if found is None:
        return "–"
    return "ok" if not found else "**" + ", ".join(f"s{c['seed']} {c['accuracy']:.1f}<{c['floor']:.1f}"
                                                    for c in found) + "**"


def markdown(records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The matrix, the checks, the cost and the default's choices, as Markdown."""
    rows, cost = cells(records), fit_times(records)
    v = verdict(rows, cost)
    core = meta["core"]
    lines = [
        "# Encoder-pair matrix (issue 21): top-1 accuracy (%) on the eval rows", "",
        f"Command: `{meta['command']}`  ",
        f"Seeds {meta['seeds']}, {meta['threads']} thread(s), runtime {meta.get('runtime_s', 0) / 60:.1f} min. "
        f"LFA core: git {str(core['git_head'])[:10]}{' + local edits' if core['lfa_index_locally_modified'] else ''}, "
        f"core sha256 {core['core_sha256']}. Raw records: `{meta['json_name']}`.", "",
        "Pairs: " + "; ".join(f"**{p}**: {d['description']} ({d['feature_dim']}-d rows, {d['prototype_dim']}-d "
                              f"names, {d['n_classes']} classes)" for p, d in meta["pairs"].items()) + ".", "",
        "## Checks", "",
        f"- (a) no seed more than {COLLAPSE_MARGIN:g} points below max(class mean, zero-shot where one model embeds "
        f"both sides), same support: default {_met(v['a_default']['met'])} ({v['a_default']['failing_seeds']} of "
        f"{v['a_default']['seeds']} seeds fail); `LFA.paper()` {_met(v['a_paper']['met'])} "
        f"({v['a_paper']['failing_seeds']} of {v['a_paper']['seeds']} seeds fail)",
        f"- (b) at {' and '.join(map(str, TARGET_SHOTS))} shots, default mean ≥ best baseline − {TARGET_MARGIN}: "
        f"{_met(v['b']['met'])} ({v['b']['failing_cells']} of {v['b']['cells']} cells fail); the same check for "
        f"the default ⊕ kernel ridge (evidence, not foldable into one search): {_met(v['b_combined']['met'])} "
        f"({v['b_combined']['failing_cells']} of {v['b_combined']['cells']} cells fail)",
        f"- cost, default / `LFA.paper(steps=200)`: total {_ratio(v['cost_total']['ratio'])} (≤ {FIT_TIME_BUDGET:g}×: "
        f"{_met(v['cost_total']['met'])}), worst cell {_ratio(v['cost_cell']['ratio'])} (≤ {CELL_TIME_BUDGET:g}×: "
        f"{_met(v['cost_cell']['met'])})",
        *same_arithmetic_line(records, cost),
        "- seeds more than " f"{COLLAPSE_MARGIN:g} points below that floor, per LFA fit run: " + ", ".join(
            f"{METHODS[m]} {sum(len(r['collapses'][m] or []) for r in rows if m in r['collapses'])}"
            for m in LFA_MODELS if any(m in r["collapses"] for r in rows)), "",
        "## Accuracy: mean over seeds (worst seed)", "",
    ]
    shown = [m for m in METHODS if any(m in r["methods"] for r in rows)]
    lines.append("| Pair | Shots | " + " | ".join(METHODS[m] for m in shown) +
                 " | Best baseline | Default − best | (a) default | (a) paper | (b) |")
    lines.append("|---|---:|" + "---:|" * len(shown) + "---|---:|---|---|---|")
    for r in rows:
        values = [f"{r['methods'][m]['mean']:.2f} ({r['methods'][m]['worst']:.1f})" if m in r["methods"] else "–"
                  for m in shown]
        best = "–" if r["best_baseline"] is None else METHODS[r["best_baseline"]]
        margin = "–" if r["margin"] is None else f"{r['margin']:+.2f}"
        lines.append(f"| {r['pair']} | {r['shots']} | " + " | ".join(values) + f" | {best} | {margin} | "
                     f"{_collapse_cell(r['collapses_default'])} | {_collapse_cell(r['collapses_paper'])} | "
                     f"{_met(r['b_met'])} |")
    lines.append("")
    if cost["cells"]:
        support = {(r["set"], r["shots"]): r["n_support"] for r in records if r["method"] == "lfa"}
        cpu = cpu_fit_times(records)
        cpu_ratio = {(c["set"], c["shots"]): c["ratio"] for c in cpu["cells"]}
        lines += ["## Cost: mean fit seconds over seeds, same supports, same process", "",
                  "Wall-clock seconds (the budget's measure); the last column is the same ratio in CPU seconds, "
                  "steadier where other jobs share the machine.", "",
                  "| Pair | Shots | Rows | Width d | Paper, 200 steps (s) | Paper (s) | Default (s) | Ratio | "
                  "Ratio, CPU s | Paper, 200 steps, default arithmetic (s) | Ratio to it |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        auto = same_arithmetic(records)
        auto_new = sum(c["new"] for c in cost["cells"] if (c["set"], c["shots"]) in auto)
        for c in cost["cells"]:
            over = "" if c["ratio"] <= CELL_TIME_BUDGET else " (over)"
            paper = "–" if c["paper"] is None else f"{c['paper']:.2f}"
            key = (c["set"], c["shots"])
            lines.append(f"| {c['set']} | {c['shots']} | {support.get(key, '–')} | "
                         f"{meta['pairs'][c['set']]['feature_dim']} | {c['paper200']:.2f} | {paper} | {c['new']:.2f} | "
                         f"{c['ratio']:.2f}{over} | {_ratio(cpu_ratio.get(key), '')} | "
                         + (f"{auto[key]:.2f} | {c['new'] / auto[key]:.2f} |" if key in auto else "– | – |"))
        lines += [f"| **all** | | | | {cost['total_paper200']:.1f} | {cost['total_paper']:.1f} | "
                  f"{cost['total_new']:.1f} | **{cost['total_ratio']:.2f}** | {_ratio(cpu['total_ratio'], '')} | "
                  + (f"{sum(auto.values()):.1f} | {auto_new / sum(auto.values()):.2f} |" if auto else "– | – |"), ""]
    lines += choices_section(records)
    return "\n".join(lines)


def same_arithmetic(records: Sequence[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """Mean fit seconds of ``LFA.paper(steps=200)`` in the default's arithmetic, per (pair, shots)."""
    times: dict[tuple[str, int], list[float]] = {}
    for r in records:
        if r["method"] == "lfa_paper200_auto":
            times.setdefault((r["set"], r["shots"]), []).append(r["fit_seconds"])
    return {key: float(np.mean(t)) for key, t in times.items()}


def same_arithmetic_line(records: Sequence[dict[str, Any]], cost: dict[str, Any]) -> list[str]:
    """The cost check against the paper's fit in the default's arithmetic (none without its records);
    ``cost``: :func:`fit_times` of the same records."""
    ref = same_arithmetic(records)
    cells = [c for c in cost["cells"] if (c["set"], c["shots"]) in ref]
    if not cells:
        return []
    total = sum(c["new"] for c in cells) / sum(ref[(c["set"], c["shots"])] for c in cells)
    worst = max(c["new"] / ref[(c["set"], c["shots"])] for c in cells)
    return [f"- the same, against `LFA.paper(steps=200, precision=\"auto\")` (the paper's fit in the default's "
            f"arithmetic): total {total:.2f}×, worst cell {worst:.2f}×"]


def cpu_fit_times(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:func:`benchmarks.accuracy.fit_times` on CPU seconds: steadier than wall time on a shared machine."""
    return fit_times([{**r, "fit_seconds": r["fit_cpu_seconds"]} for r in records if "fit_cpu_seconds" in r])


def _ratio(value: float | None, unit: str = "×") -> str:
    return "–" if value is None else f"{value:.2f}{unit}"


def choices_section(records: Sequence[dict[str, Any]]) -> list[str]:
    """How the default chose β per cell (counts over seeds), and the full summary of every collapsed seed."""
    default = [r for r in records if r["method"] == "lfa"]
    if not default:
        return []
    lines = ["## What the default chose: β (how) × seeds", "", "| Pair | Shots | β choices |", "|---|---:|---|"]
    for pair in dict.fromkeys(r["set"] for r in default):
        for shots in sorted({r["shots"] for r in default if r["set"] == pair}):
            counts = Counter(f"β={r['beta']:g} ({r['beta_selection']})" if r["beta"] is not None else "?"
                             for r in default if r["set"] == pair and r["shots"] == shots)
            lines.append(f"| {pair} | {shots} | " + "; ".join(f"{k} ×{n}" for k, n in counts.most_common()) + " |")
    lines.append("")
    failing = [(r, c) for r in cells(records) for c in (r["collapses_default"] or [])]
    if failing:
        lines += ["## Collapsed seeds of the default: its summary", ""]
        summaries = {(r["set"], r["shots"], r["seed"]): r["summary"] for r in default}
        lines += [f"- {row['pair']} {row['shots']}-shot seed {c['seed']} ({c['accuracy']:.1f} % against "
                  f"{c['floor']:.1f}): {summaries.get((row['pair'], row['shots'], c['seed']))}" for row, c in failing]
        lines.append("")
    return lines


# ---------------------------------------------------------------------------- I/O and CLI
def save(records: Sequence[dict[str, Any]], meta: dict[str, Any], out_dir: Path, name: str) -> str:
    """Write ``{name}.json`` (meta, cells, verdict, cost, records) and ``{name}.md``; return the Markdown."""
    meta = {**meta, "json_name": f"{name}.json"}
    rows, cost = cells(records), fit_times(records)
    text = markdown(records, meta)
    payload = {"meta": meta, "verdict": verdict(rows, cost), "cells": rows, "cost": cost,
               "cost_cpu": cpu_fit_times(records), "records": list(records)}
    atomic_write(out_dir / f"{name}.json", json.dumps(payload, indent=1))
    atomic_write(out_dir / f"{name}.md", text)
    return text


def merge(stems: Sequence[str], out_dir: Path, name: str, command: str) -> str:
    """One table from the records of several runs (disjoint pairs, shots or seeds)."""
    parts = [json.loads((out_dir / f"{stem}.json").read_text()) for stem in stems]
    records = [r for part in parts for r in part["records"]]
    keys = [(r["set"], r["shots"], r["seed"], r["method"]) for r in records]
    if len(set(keys)) != len(keys):
        raise SystemExit("the files to merge share (pair, shots, seed, method) runs; merge disjoint runs.")
    meta = dict(parts[0]["meta"])
    meta["command"] = " ; ".join([p["meta"]["command"] for p in parts] + [command])
    meta["pairs"] = {k: v for p in parts for k, v in p["meta"]["pairs"].items()}
    meta["seeds"] = sorted({s for p in parts for s in p["meta"]["seeds"]})
    meta["runtime_s"] = sum(p["meta"].get("runtime_s", 0.0) for p in parts)
    meta["merged_from"] = [f"{stem}.json" for stem in stems]
    cores = {p["meta"]["core"]["core_sha256"] for p in parts}
    if len(cores) > 1:
        print(f"warning: the parts ran on different LFA cores {sorted(cores)}", file=sys.stderr)
    return save(records, meta, out_dir, name)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", nargs="+", type=pair_argument, default=list(DEFAULT_PAIRS), metavar="ROWS~NAMES",
                        help="encoder pairs ROWS~NAMES[:SET] (benchmarks/pairs.py; default: the matrix's)")
    parser.add_argument("--shots", nargs="+", type=int, default=list(DEFAULT_SHOTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS))
    parser.add_argument("--methods", nargs="+", choices=list(METHODS),
                        default=[m for m in METHODS if m not in OPT_IN_METHODS])
    parser.add_argument("--threads", type=int, default=1, help="torch and BLAS threads (default 1)")
    parser.add_argument("--name", default=None, help="results file stem (default robustness; required with --merge)")
    parser.add_argument("--merge", nargs="+", metavar="STEM", help="join the records of earlier runs, run nothing")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    add_pair_arguments(parser)
    args = parser.parse_args(argv)
    if args.merge and args.name is None:
        parser.error("--merge needs --name, the stem of the merged files (e.g. --name robustness): a merge would "
                     "otherwise overwrite robustness.json")
    if not args.merge and COMBINED in args.methods and not {"lfa", "kernel_ridge"} <= set(args.methods):
        parser.error(f"--methods {COMBINED} averages the default and the kernel ridge: add lfa and kernel_ridge.")
    args.name = args.name or "robustness"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    command = "python -m benchmarks.robustness " + " ".join(shlex.quote(str(w)) for w in words)
    if args.merge:
        print(merge(args.merge, args.out_dir, args.name, command))
        return 0
    meta: dict[str, Any] = {"command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "shots": args.shots,
                            "seeds": args.seeds, "methods": args.methods, "threads": args.threads,
                            "core": core_fingerprint(), "pairs": {}}
    records: list[dict[str, Any]] = []
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        warm_up(args.methods)
        for pair in args.pairs:
            try:
                data = load_pair(pair, root=args.data, cache_dir=args.cache_dir, fashion_mnist=args.fashion_mnist)
            except (DataRootError, MissingFeaturesError) as err:  # say what to do, without a traceback
                raise SystemExit(f"error: {err}") from err
            meta["pairs"][pair] = describe(data)
            for shots in args.shots:
                records += run_cell(data, shots, args.seeds, args.methods)
                meta["runtime_s"] = time.perf_counter() - start
                save(records, meta, args.out_dir, args.name)  # after each cell: a cut run leaves a table
    meta["runtime_s"] = time.perf_counter() - start
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    print(save(records, meta, args.out_dir, args.name))
    print(f"\nwrote {args.out_dir / args.name}.json and .md in {meta['runtime_s'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
