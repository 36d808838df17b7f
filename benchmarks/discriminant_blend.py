"""How much of the discriminant should the default serve? Weights of the average, on the same fits.

The default chooses a hybrid classifier (text prototypes mixed with a support discriminant, λ on
held-out rows, :mod:`lfa_index.core.solvers.selection`) and serves it averaged with the discriminant alone,
each classifier's scores standardised on the support rows, at equal weight
(:func:`lfa_index.core.solvers.prototypes.blend_with_discriminant`). The choice does not depend on the
average, so one fit per support gives every weight: this script rebuilds the chosen hybrid and the
discriminant from the fitted map and scores the eval rows with

    (1 − ω)·S_chosen/σ_chosen + ω·S_discriminant/σ_discriminant,   ω ∈ {0, ¼, ½, ¾, 1},

ω = 0 being the classifier served before the average. The default serves ω = ½, or ω = ¼ when its
held-out rows show the discriminant alone significantly worse than the chosen hybrid (the
"served" column, checked against the fitted model's own predictions). The "raw GDA" column uses
GDA on the input rows (the benchmark baseline, before any map) as the partner at ω = ½ instead;
"ω ½, or 0 when outvoted" drops the average where the default lowers it.

Usage
-----
    .venv/bin/python -m benchmarks.discriminant_blend                                 # all cells, 10 seeds
    .venv/bin/python -m benchmarks.discriminant_blend --cells dtd:4 --seeds 3 --name blend_dtd
    .venv/bin/python -m benchmarks.discriminant_blend --merge blend_a blend_b --name discriminant_blend  # join parts

Prints a table (mean change against the best of GDA and the CV probe, ± the paired standard
error over seeds) and writes ``benchmarks/results/<name>.json`` (default ``discriminant_blend``).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import torch

from lfa_index import LFA
from lfa_index.core.config import BLEND_SHARE, BLEND_SHARE_OUTVOTED
from lfa_index.core.solvers.selection import classifier

from .baselines import gda_discriminant
from .cells import cell_benchmark, cell_supports

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
SERVED, OUTVOTED = BLEND_SHARE, BLEND_SHARE_OUTVOTED


def _scores(z: np.ndarray, pair: tuple[torch.Tensor, torch.Tensor | None]) -> np.ndarray:
    q, b = pair
    scores = z @ q.double().numpy().T
    return scores if b is None else scores + b.double().numpy()


def _spread(scores: np.ndarray) -> float:
    return float((scores - scores.mean(axis=1, keepdims=True)).std())


def blend_accuracies(model: LFA, X: np.ndarray, y: np.ndarray, X_eval: np.ndarray, y_eval: np.ndarray
                     ) -> dict[str, float]:
    """Eval accuracy (%) of every weight ω, and of raw-space GDA as the partner at ω = ½."""
    task_map = model.query_map("task")  # the aligned support rows, as the fit saw them
    z, z_eval = task_map.mapped(X), task_map.mapped(X_eval)
    labels = torch.as_tensor(np.searchsorted(model.classes_, y))
    truth = np.searchsorted(model.classes_, y_eval)
    base = torch.as_tensor(model.text_prototypes_, dtype=torch.float64)
    rows = torch.as_tensor(z)
    chosen = classifier(rows, labels, base, model.prototype_mix_, model.support_kind_ or "discriminant")
    disc = classifier(rows, labels, base, 1.0, "discriminant")
    s_chosen, s_disc = _scores(z_eval, chosen) / _spread(_scores(z, chosen)), \
        _scores(z_eval, disc) / _spread(_scores(z, disc))
    out = {f"w{w:g}": 100 * float(np.mean(((1 - w) * s_chosen + w * s_disc).argmax(1) == truth)) for w in WEIGHTS}
    weights, bias = gda_discriminant(X, labels.numpy(), len(model.classes_))
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    s_raw = unit(X_eval) @ weights.T + bias
    s_raw_support = unit(X) @ weights.T + bias
    raw = (1 - SERVED) * s_chosen + SERVED * s_raw / _spread(s_raw_support)
    out["raw_gda"] = 100 * float(np.mean(raw.argmax(1) == truth))
    return out


def run(cells: Sequence[str], seeds: int, root: Any) -> list[dict[str, Any]]:
    """One record per (cell, seed): GDA, the CV probe, the default and every weight of the average."""
    records = []
    for data, X, y, rec in cell_supports(cells, seeds, root):
        model = LFA(random_state=rec["seed"]).fit(X, y, data.prototypes)
        rec["default"] = 100 * model.score(data.eval_features, data.eval_labels)
        rec["mix"], rec["kind"], rec["weight"] = model.prototype_mix_, model.support_kind_, model.discriminant_weight_
        rec["share"] = (model.selection_ or {}).get("blend_share")
        rec.update(blend_accuracies(model, X, y, data.eval_features, data.eval_labels))
        records.append(rec)
        print(json.dumps(rec), flush=True)
    return records


def table(records: Sequence[dict[str, Any]]) -> str:
    """Per cell: change of each weight against the best reference baseline (mean ± paired s.e.)."""
    columns = [f"w{w:g}" for w in WEIGHTS] + ["raw_gda", "off_when_outvoted", "default"]
    names = {"raw_gda": "raw GDA, ω = ½", "off_when_outvoted": "ω ½, or 0 when outvoted",
             "default": "served: ω ½, or ¼ when outvoted"}
    value = {"off_when_outvoted": lambda r: r["w0"] if r.get("share") == OUTVOTED else r[f"w{SERVED:g}"]}
    header = " | ".join(f"ω = {c[1:]}" if c.startswith("w") else names[c] for c in columns)
    lines = [f"| Set | Shots | Seeds | best baseline | {header} | served reproduced |",
             "|---|---:|---:|---:|" + "---:|" * (len(columns) + 1)]
    totals = dict.fromkeys(columns, 0.0)
    for key in dict.fromkeys((r["set"], r["shots"]) for r in records):
        cell = [r for r in records if (r["set"], r["shots"]) == key]
        best = np.array([max(r["gda"], r["probe"]) for r in cell])
        parts = []
        for c in columns:
            change = np.array([value[c](r) if c in value else r[c] for r in cell]) - best
            se = change.std(ddof=1) / np.sqrt(len(change)) if len(change) > 1 else float("nan")
            totals[c] += change.mean()
            parts.append(f"{change.mean():+.2f} ± {se:.2f}")
        same = all(abs(r["default"] - r[f"w{r.get('share', SERVED) or 0:g}"]) < 1e-9 for r in cell)
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | {best.mean():.2f} | " + " | ".join(parts)
                     + f" | {'yes' if same else 'NO'} |")
    lines.append("| **sum over cells** | | | | " + " | ".join(f"{totals[c]:+.2f}" for c in columns) + " | |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return cell_benchmark("benchmarks.discriminant_blend", __doc__.split("\n\n")[0], "discriminant_blend", run, table,
                          argv)


if __name__ == "__main__":
    raise SystemExit(main())
