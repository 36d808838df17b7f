"""``lfa-index search``: top-k classes, or nearest corpus items, of item or prompt queries.

Prompt queries (``--prompt``/``--prompt-file`` embedded by ``--text-model``, or
``--prompt-embeddings FILE``) search an aligned corpus (``--corpus FILE`` aligned in memory, or the
one ``fit --corpus`` saved beside the index, ``INDEX.corpus``), or with ``--store URI`` an
existing collection of raw (unaligned) embeddings: each query is mapped back to the raw space,
``k · overfetch`` candidates are fetched and re-ranked exactly (:func:`lfa_index.stores.search_unaligned`).
"""

from __future__ import annotations

import argparse

import numpy as np

from lfa_index import AlignedCorpus, AlignedIndex, EmbeddingAligner
from lfa_index.adapters import ENCODER_FORMS, load_embeddings, prompt_ensemble
from lfa_index.errors import CLIError
from lfa_index.stores import search_mapped, search_unaligned

from .console import Console
from .inputs import (
    collect_items,
    corpus_path,
    encoder_from_args,
    load_corpus,
    load_index,
    opened_store,
    query_items,
    use_saved_encoders,
)
from .options import STORE_URI_FORMS, add_command, add_force, add_query_args, positive_int
from .output import csv_text, label_name, write_output
from .readers import EMBEDDING_FILES, read_texts

DEFAULT_OVERFETCH = 10


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``search`` sub-command to ``commands``."""
    p = add_command(commands, "search", epilog=f"{ENCODER_FORMS}\n{STORE_URI_FORMS}",
                    help="top-k classes, or nearest corpus items, of queries",
                    description="Search a saved index. Item queries (--queries/--images/--texts/--text) find their "
                                "top-k\nclasses (--target classes) or their nearest items in an aligned corpus "
                                "(--target corpus);\nprompt queries (embedded like class names) find corpus items, "
                                "or, with --store URI, items of\nan existing collection of raw embeddings (mapped "
                                "back, k x overfetch candidates re-ranked exactly).")
    p.add_argument("index", metavar="INDEX", nargs="?", help="directory written by `lfa-index fit` (not with --map)")
    p.add_argument("--map", metavar="MAP",
                   help="directory written by `lfa-index align`: --store holds the old model's rows, and --prompt "
                        "queries embedded by the new model (--text-model) are mapped into their space")
    add_query_args(p, text_model=True)
    add_force(p)
    p.add_argument("--prompt", action="append", metavar="TEXT", help="text query on the class-name side (repeatable)")
    p.add_argument("--prompt-file", metavar="FILE",
                   help="text queries on the class-name side (.txt one per line, or CSV)")
    p.add_argument("--prompt-embeddings", metavar="FILE",
                   help=f"queries already embedded on the class-name side ({EMBEDDING_FILES}); ids = row numbers")
    p.add_argument("--corpus", metavar="FILE",
                   help="embeddings to search, aligned in memory (ids = row numbers; default: the corpus `fit "
                        "--corpus` saved beside INDEX, INDEX.corpus)")
    p.add_argument("--store", metavar="URI",
                   help="search this vector store of raw embeddings instead (store URI, see below; nothing is "
                        "re-indexed)")
    p.add_argument("--overfetch", default=DEFAULT_OVERFETCH,
                   help=f"with --store: candidates fetched per result before the exact re-rank (default "
                        f"{DEFAULT_OVERFETCH}; recall grows with it)")
    p.add_argument("--target", choices=("classes", "corpus"),
                   help="what item queries search (default classes, corpus with --corpus)")
    p.add_argument("-k", default=5, help="results per query (default 5)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Write the top-k classes or corpus items of each query as CSV."""
    if args.map:
        return _run_mapped(args, console)
    if not args.index:
        raise CLIError("give the INDEX directory (written by `lfa-index fit`), or --map MAP with --store URI.")
    index = load_index(args.index, args.device)
    k = positive_int(args.k, "-k")
    overfetch = positive_int(args.overfetch, "--overfetch")
    if args.store and (args.corpus or args.target):
        raise CLIError("--store searches the store's rows: drop --corpus and --target.")
    prompts = list(args.prompt or [])
    if args.prompt_file:
        prompts += read_texts(args.prompt_file, text_column=args.text_column, label_column=None,
                              need_labels=False).texts
    if prompts and args.prompt_embeddings:
        raise CLIError("give prompt queries one way: --prompt/--prompt-file or --prompt-embeddings, not both.")
    has_prompts = bool(prompts or args.prompt_embeddings)
    items = query_items(args, console, index)
    if has_prompts and items is not None:
        raise CLIError("give either item queries (--queries/--images/--texts/--text) or --prompt queries, not both.")
    if args.store and items is not None:
        raise CLIError(
            "--store is searched by prompt queries: --prompt/--prompt-file with --text-model, or --prompt-embeddings "
            "FILE (queries on the class-name side)."
        )
    if not has_prompts and items is None:
        raise CLIError(
            "give queries: --queries FILE, --images PATH..., --texts FILE, --text TEXT..., --prompt TEXT... or "
            "--prompt-embeddings FILE"
        )
    target = args.target or ("corpus" if has_prompts or args.corpus else "classes")
    if has_prompts and target != "corpus":
        raise CLIError("--prompt queries search the aligned corpus; drop --target classes.")
    corpus = _corpus(args, index, console) if target == "corpus" and not args.store else None
    if has_prompts:
        query_ids, queries = _prompt_queries(args, index, prompts, console)
        if args.store:
            with opened_store(args.store) as store:
                scores, ids = search_unaligned(index, store, queries, k=k, overfetch=overfetch)
        else:
            scores, ids = corpus.search_text(queries, k=k)
    elif target == "corpus":
        scores, ids = corpus.search(items.embeddings, k=k)
        query_ids = items.ids
    else:
        scores, labels = index.search(items.embeddings, k=k)
        rows = [[q, r + 1, labels[i, r], label_name(index, labels[i, r]), f"{scores[i, r]:.6f}"]
                for i, q in enumerate(items.ids) for r in range(labels.shape[1])]
        write_output(csv_text(["query", "rank", "label", "class_name", "score"], rows), args.output, console)
        return 0
    _write_hits(args, console, query_ids, scores, ids)
    return 0


def _write_hits(args: argparse.Namespace, console: Console, query_ids: list[str], scores: np.ndarray,
                ids: np.ndarray) -> None:
    rows = [[q, r + 1, int(ids[i, r]), f"{scores[i, r]:.6f}"]
            for i, q in enumerate(query_ids) for r in range(ids.shape[1]) if ids[i, r] >= 0]
    write_output(csv_text(["query", "rank", "id", "score"], rows), args.output, console)


def _run_mapped(args: argparse.Namespace, console: Console) -> int:
    """``--map MAP --store URI``: new-model prompts mapped into the old model's space, searched in the store."""
    if args.index or not args.store:
        raise CLIError("--map searches a store of old-model rows: give --store URI and no INDEX.")
    given = collect_items(args, file="queries", images="images", texts="texts", text="text", labels="labels",
                          need_labels=False, what="queries")
    if args.corpus or args.target or given is not None:
        raise CLIError("--map takes prompt queries only: --prompt/--prompt-file with --text-model, or "
                       "--prompt-embeddings FILE (new-model embeddings).")
    prompts = list(args.prompt or [])
    if args.prompt_file:
        prompts += read_texts(args.prompt_file, text_column=args.text_column, label_column=None,
                              need_labels=False).texts
    if not prompts and not args.prompt_embeddings:
        raise CLIError("give queries: --prompt TEXT.../--prompt-file FILE with --text-model SPEC (the new model), "
                       "or --prompt-embeddings FILE.")
    aligner = EmbeddingAligner.load(args.map)
    query_ids, queries = _prompt_queries(args, None, prompts, console)
    with opened_store(args.store) as store:
        scores, ids = search_mapped(aligner, store, queries, k=positive_int(args.k, "-k"))
    _write_hits(args, console, query_ids, scores, ids)
    return 0


def _prompt_queries(
    args: argparse.Namespace, index: AlignedIndex | None, prompts: list[str], console: Console
) -> tuple[list[str], np.ndarray]:
    """``(query ids, class-name-side embeddings)``: the prompts embedded by --text-model (an index's saved one
    by default; ``index`` None with --map), or --prompt-embeddings."""
    if args.prompt_embeddings:
        queries, _ = load_embeddings(args.prompt_embeddings)
        return [str(i) for i in range(len(queries))], queries
    if index is not None:
        use_saved_encoders(args, index)
    encoder = encoder_from_args(args, console, args.text_model)
    if encoder is None:
        raise CLIError("--prompt needs --text-model SPEC (the model that embedded the class names; this index "
                       "did not save one)." if index is not None else
                       "--prompt needs --text-model SPEC (the new model, whose queries the map carries).")
    templates = tuple(args.template) if args.template else ("{}",)
    return prompts, prompt_ensemble(prompts, encoder.embed_texts, templates)


def _corpus(args: argparse.Namespace, index: AlignedIndex, console: Console) -> AlignedCorpus:
    """The aligned corpus to search: ``--corpus FILE`` aligned in memory, else the one saved beside the index."""
    if args.corpus:
        images, _ = load_embeddings(args.corpus)
        console.note(f"aligned {len(images)} rows of {args.corpus} in memory (ids = row numbers)")
        return AlignedCorpus(index).add(images, ids=np.arange(len(images)))
    corpus = load_corpus(args.index, args.device)
    if corpus is None:
        raise CLIError(
            f"{args.index} has no aligned corpus ({corpus_path(args.index)}): pass --corpus FILE (embeddings to "
            "search), --store URI (a vector store of raw embeddings) or fit with --corpus."
        )
    return corpus
