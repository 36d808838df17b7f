"""``lfa-index report``: PNG figures and an HTML page about a saved index."""

from __future__ import annotations

import argparse
from pathlib import Path

from lfa_index.reporting import alignment_section, write_report

from .console import Console
from .inputs import (
    check_labels,
    collect_items,
    embed_items,
    encoder_from_args,
    load_index,
    require_model,
    use_saved_encoders,
)
from .options import DEFAULT_REPORT_DIR, add_command, add_encoder_args, add_eval_set_args, add_force, add_text_columns


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``report`` sub-command to ``commands``."""
    p = add_command(commands, "report",
                    help="PNG figures and an HTML page about a saved index",
                    description="Figures of a saved index (PNG) and an HTML page showing them: the modality gap "
                                "before and\nafter alignment (PCA), the rank of the true prototype (hubness) before "
                                "and after refinement,\nsimilarity to the true prototype and, with an eval set, "
                                "per-class accuracy.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    add_eval_set_args(p, purpose=", for per-class accuracy")
    add_text_columns(p)
    add_encoder_args(p, text_model=False)
    add_force(p)
    p.add_argument("-o", "--output", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help=f"report folder (default {DEFAULT_REPORT_DIR})")
    p.add_argument("--title", help="report title (default: the index folder name)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Write the figures and the HTML page of a saved index."""
    index = load_index(args.index, args.device)
    eval_items = collect_items(args, file="eval", images="eval_images", texts="eval_texts", labels="eval_labels",
                               need_labels=True, what="eval set")
    x_eval = y_eval = None
    if eval_items is not None:
        if eval_items.kind != "embeddings":
            use_saved_encoders(args, index)
        require_model(eval_items, args)
        check_labels(index.label_space_, eval_items.labels, "the eval rows")
        eval_items = embed_items(eval_items, encoder_from_args(args, console, args.model), console, strict=args.strict)
        x_eval, y_eval = eval_items.embeddings, eval_items.labels
    name = Path(args.index).name
    section = alignment_section(index, args.output, name=name, title=args.title or name,
                                eval_embeddings=x_eval, eval_labels=y_eval)
    page = write_report(args.output, [section], title=f"lfa-index report: {args.title or name}")
    console.note(f"wrote {page} and {len(section.figures)} figure(s)")
    for line in section.lines:
        console.note(line)
    return 0
