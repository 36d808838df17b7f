"""``lfa-index search``: top-k classes, or nearest corpus items, of item or prompt queries."""

from __future__ import annotations

import argparse

import numpy as np

from lfa_index import AlignedIndex
from lfa_index.adapters import load_embeddings, prompt_ensemble

from .console import Console
from .errors import CLIError
from .inputs import encoder_from_args, load_index, query_items
from .options import add_command, add_query_args, positive_int
from .output import csv_text, label_name, write_output
from .readers import read_texts


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``search`` sub-command to ``commands``."""
    p = add_command(commands, "search",
                    help="top-k classes, or nearest corpus items, of queries",
                    description="Search a saved index. Item queries (--queries/--images/--texts/--text) find their "
                                "top-k\nclasses (--target classes) or their nearest items in the aligned corpus "
                                "(--target corpus);\n--prompt queries (embedded like class names) find corpus items.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    add_query_args(p, text_model=True)
    p.add_argument("--prompt", action="append", metavar="TEXT", help="text query on the class-name side (repeatable)")
    p.add_argument("--prompt-file", metavar="FILE",
                   help="text queries on the class-name side (.txt one per line, or CSV)")
    p.add_argument("--corpus", metavar="FILE",
                   help="embeddings to search (added to the index in memory; ids = row numbers)")
    p.add_argument("--target", choices=("classes", "corpus"),
                   help="what item queries search (default classes, corpus with --corpus)")
    p.add_argument("-k", default=5, help="results per query (default 5)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Write the top-k classes or corpus items of each query as CSV."""
    index = load_index(args.index, args.device)
    k = positive_int(args.k, "-k")
    if args.corpus:
        _add_corpus(index, args.corpus, console)
    prompts = list(args.prompt or [])
    if args.prompt_file:
        prompts += read_texts(args.prompt_file, text_column=args.text_column, label_column=None,
                              need_labels=False).texts
    items = query_items(args, console)
    if prompts and items is not None:
        raise CLIError("give either item queries (--queries/--images/--texts/--text) or --prompt queries, not both.")
    if not prompts and items is None:
        raise CLIError(
            "give queries: --queries FILE, --images PATH..., --texts FILE, --text TEXT... or --prompt TEXT..."
        )
    target = args.target or ("corpus" if prompts or args.corpus else "classes")
    if target == "corpus" and index.corpus_size_ == 0:
        raise CLIError(
            f"{args.index} has no aligned corpus: pass --corpus FILE (embeddings to search) or fit with --corpus."
        )
    if prompts:
        if target != "corpus":
            raise CLIError("--prompt queries search the aligned corpus; drop --target classes.")
        encoder = encoder_from_args(args, console, args.text_model)
        if encoder is None:
            raise CLIError("--prompt needs --text-model SPEC (the model that embedded the class names).")
        queries = prompt_ensemble(prompts, encoder.embed_texts, tuple(args.template) if args.template else ("{}",))
        scores, ids = index.search_text(queries, k=k)
        query_ids = prompts
    elif target == "corpus":
        scores, ids = index.search_corpus(items.embeddings, k=k)
        query_ids = items.ids
    else:
        scores, labels = index.search(items.embeddings, k=k)
        rows = [[q, r + 1, labels[i, r], label_name(index, labels[i, r]), f"{scores[i, r]:.6f}"]
                for i, q in enumerate(items.ids) for r in range(labels.shape[1])]
        write_output(csv_text(["query", "rank", "label", "class_name", "score"], rows), args.output, console)
        return 0
    rows = [[q, r + 1, int(ids[i, r]), f"{scores[i, r]:.6f}"]
            for i, q in enumerate(query_ids) for r in range(ids.shape[1]) if ids[i, r] >= 0]
    write_output(csv_text(["query", "rank", "id", "score"], rows), args.output, console)
    return 0


def _add_corpus(index: AlignedIndex, path: str, console: Console) -> None:
    """Add the embeddings of ``path`` to the index's aligned corpus, in memory."""
    corpus, _ = load_embeddings(path)
    first_id = 0 if index.corpus_size_ == 0 else None
    index.add(corpus, ids=None if first_id is None else np.arange(len(corpus)))
    console.note(f"added {len(corpus)} rows of {path} to the aligned corpus"
                 + (" (ids = row numbers)" if first_id == 0 else " (ids follow those already in the index)"))
