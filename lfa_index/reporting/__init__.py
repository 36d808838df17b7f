"""Reports of a fitted index: PNG figures of what the paper's figures show, an HTML page, and
k-shot accuracy tables against the baselines.

Example
-------
>>> section = alignment_section(index, "lfa_report", name="dtd", title="DTD, 16 shots",
...                             eval_embeddings=X_test, eval_labels=y_test)
>>> write_report("lfa_report", [section], title="lfa-index report")   # lfa_report/index.html
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..baselines import BASELINES
from ..extras import import_extra
from ..files import atomic_write
from ..index import AlignedIndex
from .alignment import STAGES, AlignmentStages, alignment_stages, class_positions
from .evaluation import FewShotResults, FewShotTask, run_few_shot, sample_support
from .openset import format_open_set, open_set_metrics
from .page import Section, render_page

__all__ = [
    "AlignmentStages",
    "FewShotResults",
    "FewShotTask",
    "STAGES",
    "Section",
    "alignment_section",
    "alignment_stages",
    "atomic_write",
    "class_positions",
    "format_open_set",
    "open_set_metrics",
    "render_page",
    "run_few_shot",
    "sample_support",
    "write_report",
]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name).strip("_") or "index"


def alignment_section(
    index: AlignedIndex,
    out_dir: str | os.PathLike,
    *,
    name: str = "index",
    title: str | None = None,
    lines: Sequence[str] = (),
    eval_embeddings: Any = None,
    eval_labels: Any = None,
) -> Section:
    """Write the figures of one fitted index under ``out_dir`` and return its page :class:`Section`.

    Figures (file names prefixed by ``name``): ``_modality_gap.png``, ``_hubness.png``,
    ``_similarity.png`` and, with eval rows, ``_per_class.png`` (LFA against nearest class mean
    and a linear probe fitted on the same support, and zero-shot where rows and prototypes share
    one space). ``eval_labels`` are in the index's label space (integers or class names).
    """
    figures = import_extra(f"{__name__}.figures", "plots", package="matplotlib")  # imported only to draw

    out = Path(out_dir)
    stages = alignment_stages(index, eval_embeddings, eval_labels)
    slug = _slug(name)
    section = Section(title or name, list(lines))
    hub = {s: float(np.mean(r > 0)) for s, r in stages.true_prototype_ranks("support").items()}
    section.lines.append(
        f"β = {stages.beta:g}, {index.lfa_.steps_} refinement steps, {len(stages.labels['support'])} support rows, "
        f"{len(stages.prototypes)} classes. Support hubness (own prototype not the nearest): "
        + ", ".join(f"{stages.stage_label(s)} {100 * h:.1f}%" for s, h in hub.items())
        + "."
        + (" Support labels are U-LFA pseudo-labels." if stages.pseudo_labels else "")
        + ("" if stages.same_space
           else " Rows and prototypes have different widths: 'no alignment' is the seeded random projection alone.")
    )

    def add(suffix: str, png: bytes, caption: str) -> None:
        file = f"{slug}_{suffix}.png"
        atomic_write(out / file, png)
        section.figures.append((file, caption))

    split = "eval" if "eval" in stages.rows else "support"
    x_scored = _first_view(eval_embeddings if split == "eval" else index.support_embeddings_)
    classifier = float(np.mean(class_positions(index, index.predict(x_scored)) == stages.labels[split]))
    gap_figure = figures.modality_gap_figure(stages, title=f"{title or name}: modality gap (support rows, PCA)",
                                             classifier_accuracy=classifier)
    add("modality_gap", gap_figure,
        "Support rows (red) and class prototypes (blue stars) projected to 2-D by PCA, without alignment, after "
        "β-Procrustes and after refinement; grey lines join each row to its class prototype. 'gap' is the distance "
        "between the mean row and the mean of their prototypes (Liang et al., 2022). β-Procrustes fits the rows "
        "onto their prototypes by least squares, which matches the two means: the gap closes. Refinement ranks each "
        "row's prototype above the others (the ARerank loss), which a component shared by all rows barely changes: "
        "it spreads the rows out (‖mean row‖ drops) while the prototypes keep their shared component, so the gap "
        "between the means opens again as the ranking, and accuracy, improve. The LFA panel gives the accuracy of "
        "the index's classifier (its class vectors and biases), the number reported below; the other panels, and "
        "the hubness and similarity figures, rank the text prototypes.")
    add("hubness", figures.hubness_figure(stages, title=f"{title or name}: rank of the true class prototype"),
        "Rank of each row's own class prototype among all prototypes (0 = nearest, as in the paper's hubness figure), "
        "on the support rows the map was fitted on" + (" and on held-out eval rows." if "eval" in stages.rows else "."))
    add("similarity", figures.similarity_figure(stages, title=f"{title or name}: similarity to the true prototype"),
        "Left: cosine similarity between each row and its own class prototype at each stage. Right: that cosine "
        "minus the cosine to the closest other prototype; a row is classified right when its margin is above 0"
        + (" (held-out eval rows)." if "eval" in stages.rows else " (support rows)."))
    if "eval" in stages.rows:
        y_eval = stages.labels["eval"]
        x_eval = _first_view(eval_embeddings)
        support = _first_view(index.support_embeddings_)
        y_support = stages.labels["support"]
        predictions: dict[str, np.ndarray] = {}
        if stages.same_space:
            predictions["zero-shot"] = BASELINES["zero_shot"].predict(None, None, index.text_embeddings_, x_eval)
        for method in ("nearest_class_mean", "linear_probe"):
            predictions[BASELINES[method].label] = BASELINES[method].predict(support, y_support, None, x_eval)
        predictions["LFA"] = class_positions(index, index.predict(x_eval))
        per_class_title = f"{title or name}: per-class accuracy ({len(y_eval)} eval rows)"
        add("per_class", figures.per_class_figure(y_eval, predictions, stages.class_names, title=per_class_title),
            "Accuracy of each class on the eval rows, classes sorted by LFA's accuracy; the grey bar runs from the "
            "best baseline to LFA. Baselines are fitted on the index's support set"
            + (" (zero-shot uses no support)." if stages.same_space else "."))
        accuracies = ", ".join(f"{m} {100 * np.mean(p == y_eval):.1f}%" for m, p in predictions.items())
        section.lines.append(f"Eval accuracy: {accuracies}.")
    return section


def _first_view(x: Any) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x[:, 0] if x.ndim == 3 else x


def write_report(
    out_dir: str | os.PathLike,
    sections: Sequence[Section],
    *,
    title: str = "lfa-index report",
    notes: Sequence[str] = (),
    results: dict[str, Any] | None = None,
) -> Path:
    """Write ``index.html`` (and ``results.json`` when ``results`` is given) under ``out_dir``."""
    out = Path(out_dir)
    if results is not None:
        atomic_write(out / "results.json", json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return atomic_write(out / "index.html", render_page(title, list(sections), notes=list(notes)))
