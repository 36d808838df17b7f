"""``lfa-index predict``: classify queries with a saved index (CSV out)."""

from __future__ import annotations

import argparse

import numpy as np

from lfa_index import AlignedIndex
from lfa_index.errors import CLIError
from lfa_index.reporting import format_open_set, open_set_metrics

from .console import Console
from .inputs import check_labels, embed_items, encoder_from_args, load_index, unembedded_queries
from .options import (
    add_command,
    add_force,
    add_query_args,
    add_reject_below,
    add_unknown_label,
    given_threshold,
    positive_int,
    rejection_threshold,
)
from .output import csv_text, label_name, write_output


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``predict`` sub-command to ``commands``."""
    p = add_command(commands, "predict",
                    help="classify queries with a saved index (CSV out)",
                    description="Classify queries with a saved index. Output CSV: query, rank, label, class_name, "
                                "score (aligned score\nof the class), and open_set_score when queries are rejected "
                                "below a threshold.\nTexts and images are embedded with the encoder the index was "
                                "fitted with.\nWith labelled queries the accuracy (with --unknown-label: the "
                                "open-set metrics) is noted on stderr.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    add_query_args(p)
    add_force(p)
    p.add_argument("--top-k", default=1, help="classes per query, best first (default 1)")
    add_reject_below(p, "queries")
    add_unknown_label(p, "queries")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Write the top-k classes of each query as CSV; note the accuracy (or open-set metrics) of labelled queries."""
    tau = given_threshold(args)
    top_k = positive_int(args.top_k, "--top-k")
    index = load_index(args.index, args.device)
    items = unembedded_queries(args, index)
    if items is None:
        raise CLIError("give queries: --queries FILE, --images PATH..., --texts FILE or --text TEXT...")
    if args.unknown_label is not None and items.labels is None:
        raise CLIError("--unknown-label needs labelled queries: a --texts CSV with a label column, or --labels FILE.")
    truth = None if items.labels is None else check_labels(index.label_space_, items.labels, "the queries",
                                                          args.unknown_label)
    items = embed_items(items, encoder_from_args(args, console, args.model), console, strict=args.strict)
    scores, labels = index.search(items.embeddings, k=top_k)
    tau = rejection_threshold(args, index, tau, console, open_set=args.unknown_label is not None)
    known = None if tau is None else index.score_samples(items.embeddings)
    if known is not None:
        labels = index.label_space_.reject(labels, np.repeat(known[:, None], labels.shape[1], axis=1), tau,
                                           unknown=None)
    header = ["query", "rank", "label", "class_name", "score"] + ([] if known is None else ["open_set_score"])
    rows = []
    for i, row_id in enumerate(items.ids):
        for r in range(labels.shape[1]):
            name = "unknown" if labels[i, r] is None else label_name(index, labels[i, r])
            label = "" if labels[i, r] is None else labels[i, r]
            rows.append([row_id, r + 1, label, name, f"{scores[i, r]:.6f}"]
                        + ([] if known is None else [f"{known[i]:.6f}"]))
    write_output(csv_text(header, rows), args.output, console)
    if truth is not None:
        _note_accuracy(index, items.embeddings, truth, labels[:, 0], tau, known, args.unknown_label, console)
    return 0


def _note_accuracy(
    index: AlignedIndex, x: np.ndarray, truth: np.ndarray, best: np.ndarray, tau: float | None,
    known: np.ndarray | None, unknown_label: str | None, console: Console,
) -> None:
    """Note the top-1 accuracy of labelled queries (rejected queries count as wrong), or with
    ``unknown_label`` the open-set metrics."""
    if unknown_label is not None:
        _, found = index.search(x, k=1)
        scores = index.score_samples(x) if known is None else known
        metrics = open_set_metrics(truth, index.label_space_.lookup(found[:, 0]), scores, tau)
        console.note(format_open_set(metrics))
        return
    accepted = np.array([v is not None for v in best], dtype=bool)
    predicted = np.full(len(best), -1, dtype=np.int64)
    if accepted.any():
        predicted[accepted] = index.label_space_.lookup(best[accepted].tolist())
    console.note(f"accuracy on the {len(truth)} labelled queries: {100 * np.mean(predicted == truth):.1f}%")
