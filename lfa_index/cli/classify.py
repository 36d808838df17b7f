"""``lfa-index classify``: classify every row of a vector store with a saved index.

The labels are printed as CSV (``id,label,class_name,score``) or written back into a field of
the store (:func:`lfa_index.stores.classify_rows`): the engine's partial update writes that one
field, and leaves each row's vector and other fields as they are.
"""

from __future__ import annotations

import argparse

from lfa_index.stores import classify_rows

from .console import Console
from .inputs import load_index, opened_store, save_store
from .options import STORE_URI_FORMS, add_command, add_reject_below, given_threshold, positive_int, rejection_threshold
from .output import csv_text, label_name, write_output

DEFAULT_BATCH = 4096


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``classify`` sub-command to ``commands``."""
    p = add_command(commands, "classify", epilog=STORE_URI_FORMS,
                    help="classify every row of a vector store with a saved index",
                    description="Classify every row of a vector store of raw embeddings with a saved index. Prints "
                                "CSV\n(id, label, class_name, score: the aligned score), or with --write-field F "
                                "writes each row's\nlabel into field F of the store (that field alone: vectors and "
                                "other fields stay as they are).")
    p.add_argument("store", metavar="URI", help="the store of raw embeddings (store URI, see below)")
    p.add_argument("--index", required=True, metavar="INDEX", help="directory written by `lfa-index fit`")
    p.add_argument("--write-field", metavar="F",
                   help="write each row's label into field F of the store instead of printing CSV "
                        "(rejected rows: '' for named classes, -1 for class indices)")
    add_reject_below(p, "rows")
    p.add_argument("--batch-size", default=DEFAULT_BATCH, help=f"rows read per request (default {DEFAULT_BATCH})")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here (also with --write-field)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Classify the store's rows; print or write the CSV, or write the labels into the store."""
    tau = given_threshold(args)
    batch_size = positive_int(args.batch_size, "--batch-size")
    index = load_index(args.index, args.device)
    tau = rejection_threshold(args, index, tau, console)
    with opened_store(args.store) as store:
        ids, labels, scores = classify_rows(index, store, write_field=args.write_field, reject_below=tau,
                                            batch_size=batch_size)
        if args.write_field:
            save_store(store)
            console.note(f"wrote the labels of {len(ids)} rows into field {args.write_field!r} of {store.location}")
    if args.write_field and not args.output:
        return 0
    rejected = labels if tau is None else index.label_space_.reject(labels, scores, tau, unknown=None)
    rows = []
    for row_id, label, score in zip(ids.tolist(), rejected.tolist(), scores.tolist()):
        rows.append([row_id, "" if label is None else label,
                     "unknown" if label is None else label_name(index, label), f"{score:.6f}"])
    write_output(csv_text(["id", "label", "class_name", "score"], rows), args.output, console)
    return 0
