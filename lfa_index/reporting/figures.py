"""The report's figures as PNG bytes (matplotlib, Agg backend: no display needed).

* :func:`modality_gap_figure` — PCA of rows and class prototypes at each stage (paper Fig. 1).
* :func:`hubness_figure` — rank of the true prototype, before and after refinement (paper Fig. 3).
* :func:`similarity_figure` — cosine of each row to its own prototype (paper Fig. 1 (2)).
* :func:`per_class_figure` — per-class accuracy of LFA and the baselines.
"""

from __future__ import annotations

import io
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402

from .alignment import AlignmentStages  # noqa: E402

ROW_COLOR = "indianred"
PROTOTYPE_COLOR = "royalblue"
STAGE_COLORS = {"identity": "#9e9e9e", "beta_procrustes": "#f28e2b", "lfa": "#2c7fb8"}
METHOD_MARKERS = ("o", "s", "D", "^", "v")
RANK_BINS: tuple[tuple[int, int], ...] = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 9), (10, 19), (20, 10**9))
DPI = 110


def _png(fig: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _split_name(split: str) -> str:
    return "support rows, fitted on" if split == "support" else "held-out eval rows"


def modality_gap_figure(
    stages: AlignmentStages, *, split: str = "support", title: str = "", classifier_accuracy: float | None = None
) -> bytes:
    """Three panels (no alignment, β-Procrustes, LFA): rows and prototypes in 2-D by PCA.

    Each panel fits its own PCA on the rows and the prototypes of the classes present; a thin
    line joins each row to its class prototype. Panel titles give the modality gap
    ‖mean(rows) − mean(paired prototypes)‖ with the norms of the two means, and an accuracy (on the
    eval split when there is one): the share of rows nearest to their own prototype, or for LFA
    ``classifier_accuracy`` when given (the index's own classifier, the number the page reports).
    """
    labels = stages.labels[split]
    present = np.unique(labels)
    gaps, row_norms = stages.modality_gap(split), stages.mean_row_norm(split)
    prototype_norm = stages.mean_prototype_norm(split)
    score_split = "eval" if "eval" in stages.rows else split
    accuracy = stages.accuracy(score_split)
    fig, axes = plt.subplots(1, len(stages.rows[split]), figsize=(5.2 * len(stages.rows[split]), 5.0))
    for ax, (stage, rows) in zip(np.atleast_1d(axes), stages.rows[split].items()):
        protos = stages.prototypes[present]
        coords = PCA(n_components=2, random_state=0).fit_transform(np.concatenate([rows, protos]))
        r2, p2 = coords[: len(rows)], coords[len(rows) :]
        lookup = np.searchsorted(present, labels)
        ax.add_collection(
            LineCollection(np.stack([r2, p2[lookup]], axis=1), colors="0.55", linewidths=0.4, alpha=0.18, zorder=1)
        )
        ax.scatter(r2[:, 0], r2[:, 1], s=9, c=ROW_COLOR, alpha=0.7, linewidths=0, label="support rows", zorder=2)
        ax.scatter(p2[:, 0], p2[:, 1], s=60, c=PROTOTYPE_COLOR, marker="*", edgecolors="white", linewidths=0.4,
                   label="class prototypes", zorder=3)
        served = stage == "lfa" and classifier_accuracy is not None
        shown = classifier_accuracy if served else accuracy[stage]
        ax.set_title(
            f"{stages.stage_label(stage)}\ngap {gaps[stage]:.2f} (‖mean row‖ {row_norms[stage]:.2f}, ‖mean "
            f"prototype‖ {prototype_norm:.2f})\n{'classifier' if served else 'nearest-prototype'} acc. "
            f"{100 * shown:.1f}% ({'eval' if score_split == 'eval' else 'support'})",
            fontsize=10,
        )
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.2)
    np.atleast_1d(axes)[0].legend(loc="best", fontsize=8, framealpha=0.8)
    fig.suptitle(title or f"Modality gap: {_split_name(split)} and class prototypes (PCA)", fontsize=12)
    fig.tight_layout()
    return _png(fig)


def _rank_histogram(ranks: np.ndarray, n_classes: int) -> tuple[list[str], np.ndarray]:
    names, shares = [], []
    for low, high in RANK_BINS:
        if low >= n_classes:
            break
        high = min(high, n_classes - 1)
        if low == high:
            names.append(str(low))
        else:
            names.append(f"{low}+" if high == n_classes - 1 and high - low > 9 else f"{low}–{high}")
        shares.append(np.mean((ranks >= low) & (ranks <= high)))
    return names, 100 * np.asarray(shares)


def hubness_figure(stages: AlignmentStages, *, title: str = "") -> bytes:
    """Histogram of the true prototype's rank (0 = nearest), one bar per stage, per split.

    The legend gives the hubness of each stage: the share of rows whose own prototype is not
    the nearest one.
    """
    splits = list(stages.rows)
    n_classes = len(stages.prototypes)
    fig, axes = plt.subplots(1, len(splits), figsize=(6.4 * len(splits), 4.4), squeeze=False)
    for ax, split in zip(axes[0], splits):
        ranks = stages.true_prototype_ranks(split)
        width = 0.8 / len(ranks)
        for i, (stage, r) in enumerate(ranks.items()):
            names, shares = _rank_histogram(r, n_classes)
            x = np.arange(len(names)) + (i - (len(ranks) - 1) / 2) * width
            ax.bar(x, shares, width=width, color=STAGE_COLORS[stage],
                   label=f"{stages.stage_label(stage)}: hubness {100 * np.mean(r > 0):.0f}%")
        ax.set_xticks(np.arange(len(names)), names)
        ax.set_xlabel(f"rank of the true class prototype among {n_classes} (0 = nearest)")
        ax.set_ylabel("% of rows")
        ax.set_ylim(0, 105)
        ax.set_title(f"{_split_name(split)} ({len(stages.labels[split])})", fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(axis="y", alpha=0.25)
    fig.suptitle(title or "Hubness: rank of the true class prototype, before and after refinement", fontsize=12)
    fig.tight_layout()
    return _png(fig)


def similarity_figure(stages: AlignmentStages, *, title: str = "") -> bytes:
    """Two histograms per stage: the cosine between each row and its own class prototype, and
    the margin of that cosine over the closest other prototype (> 0: the row is classified right)."""
    split = "eval" if "eval" in stages.rows else "support"
    labels = stages.labels[split]
    fig, (ax_cos, ax_margin) = plt.subplots(1, 2, figsize=(12.0, 4.2))
    for stage, rows in stages.rows[split].items():
        sims = rows @ stages.prototypes.T
        own = sims[np.arange(len(labels)), labels]
        sims[np.arange(len(labels)), labels] = -np.inf
        margin = own - sims.max(axis=1)
        style = dict(histtype="step", color=STAGE_COLORS[stage], linewidth=1.8)
        ax_cos.hist(own, bins=np.linspace(-0.2, 1.0, 61),
                    label=f"{stages.stage_label(stage)}: median {np.median(own):.2f}", **style)
        ax_margin.hist(margin, bins=np.linspace(-0.5, 0.5, 61),
                       label=f"{stages.stage_label(stage)}: {100 * np.mean(margin > 0):.1f}% > 0", **style)
    ax_cos.set_xlabel("cosine similarity to the true class prototype")
    ax_margin.set_xlabel("cosine to the true prototype − cosine to the closest other prototype")
    ax_margin.axvline(0.0, color="0.3", linewidth=0.8, linestyle="--")
    for ax in (ax_cos, ax_margin):
        ax.set_ylabel("rows")
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.2)
    fig.suptitle(title or f"Similarity to the true prototype ({_split_name(split)})", fontsize=12)
    fig.tight_layout()
    return _png(fig)


def per_class_figure(
    labels: np.ndarray,
    predictions: Mapping[str, np.ndarray],
    class_names: Sequence[str],
    *,
    title: str = "",
) -> bytes:
    """Per-class accuracy of each method on the eval rows, one line per class, sorted by the
    last method's accuracy (LFA), with a thin bar from the best other method to it."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    acc = {
        m: np.array([np.mean(np.asarray(p)[labels == c] == c) for c in classes]) * 100 for m, p in predictions.items()
    }
    methods = list(predictions)
    main = methods[-1]
    order = np.argsort(acc[main], kind="stable")
    others = methods[:-1]
    best_other = np.max([acc[m] for m in others], axis=0) if others else acc[main]
    height = max(3.0, 0.19 * len(classes) + 1.6)
    fig, ax = plt.subplots(figsize=(8.0, height))
    y = np.arange(len(classes))
    ax.hlines(y, best_other[order], acc[main][order], colors="0.75", linewidth=2.5, zorder=1)
    for i, m in enumerate(methods):
        filled = m == main
        ax.scatter(
            acc[m][order], y, marker=METHOD_MARKERS[i % len(METHOD_MARKERS)], s=34 if filled else 26,
            zorder=3 if filled else 2, facecolors=STAGE_COLORS["lfa"] if filled else "none",
            edgecolors=STAGE_COLORS["lfa"] if filled else f"C{i + 1}",
            linewidths=1.1, label=f"{m}: mean {np.mean(acc[m]):.1f}%",
        )
    ax.set_yticks(y, [class_names[c] for c in classes[order]], fontsize=7 if len(classes) > 40 else 9)
    ax.set_ylim(-0.8, len(classes) - 0.2)
    ax.set_xlim(-3, 103)
    ax.set_xlabel("accuracy on the eval rows of the class (%)")
    ax.grid(axis="x", alpha=0.25)
    # above the axes: inside, it would hide the classes in one corner
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    ax.set_title(title or "Per-class accuracy", fontsize=11, pad=38)
    fig.tight_layout()
    return _png(fig)
