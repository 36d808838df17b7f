"""``lfa-index predict``: classify queries with a saved index (CSV out)."""

from __future__ import annotations

import argparse

import numpy as np

from lfa_index import AlignedIndex, LFAIndexError
from lfa_index.reporting import class_positions

from .console import Console
from .errors import CLIError
from .inputs import load_index, query_items
from .options import add_command, add_query_args, add_reject_below, given_threshold, positive_int, rejection_threshold
from .output import csv_text, label_name, write_output


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``predict`` sub-command to ``commands``."""
    p = add_command(commands, "predict",
                    help="classify queries with a saved index (CSV out)",
                    description="Classify queries with a saved index. Output CSV: query, rank, label, class_name, "
                                "score (aligned cosine).\nWith labelled queries the accuracy is noted on stderr.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    add_query_args(p)
    p.add_argument("--top-k", default=1, help="classes per query, best first (default 1)")
    add_reject_below(p, "queries")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Write the top-k classes of each query as CSV; note the accuracy of labelled queries."""
    tau = given_threshold(args)
    index = load_index(args.index, args.device)
    items = query_items(args, console)
    if items is None:
        raise CLIError("give queries: --queries FILE, --images PATH..., --texts FILE or --text TEXT...")
    top_k = positive_int(args.top_k, "--top-k")
    scores, labels = index.search(items.embeddings, k=top_k)
    tau = rejection_threshold(args, index, tau)
    if tau is not None:
        labels = index.label_space_.reject(labels, scores, tau, unknown=None)
        console.note(f"rejecting queries whose aligned cosine is below {tau:.4f}")
    rows = []
    for i, row_id in enumerate(items.ids):
        for r in range(labels.shape[1]):
            name = "unknown" if labels[i, r] is None else label_name(index, labels[i, r])
            label = "" if labels[i, r] is None else labels[i, r]
            rows.append([row_id, r + 1, label, name, f"{scores[i, r]:.6f}"])
    write_output(csv_text(["query", "rank", "label", "class_name", "score"], rows), args.output, console)
    if items.labels is not None:
        _note_accuracy(index, items.labels, labels[:, 0], console)
    return 0


def _note_accuracy(index: AlignedIndex, truth_labels: np.ndarray, best: np.ndarray, console: Console) -> None:
    """Note the top-1 accuracy of labelled queries (rejected queries count as wrong)."""
    try:
        truth = class_positions(index, truth_labels)
    except LFAIndexError as err:
        console.warn(f"the labels of the queries do not match the index's classes ({err}); no accuracy reported.")
        return
    predicted = np.asarray([-1 if v is None else class_positions(index, np.asarray([v]))[0] for v in best])
    console.note(f"accuracy on the {len(truth)} labelled queries: {100 * np.mean(predicted == truth):.1f}%")
