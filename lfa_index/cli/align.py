"""``lfa-index align``: fit an EmbeddingAligner from paired rows of a new and an old model, and save it.

The pairs come as two embedding files (row i of each embeds the same item), or as a sample of
texts embedded here by both models. ``lfa-index search --store URI --map MAP`` then searches a
store of old-model rows with new-model queries.
"""

from __future__ import annotations

import argparse
from typing import Sequence

import numpy as np

from lfa_index import EmbeddingAligner
from lfa_index.adapters import (
    ENCODER_FORMS,
    EmbeddingSource,
    load_embeddings,
    with_first_sentences,
    with_sentences,
    with_windows,
)
from lfa_index.errors import CLIError

from .console import Console
from .inputs import encoder_from_args
from .options import add_command, positive_int
from .readers import EMBEDDING_FILES, read_texts

SENTENCE_VIEWS: tuple[str, ...] = ("every", "first", "none")
"""What ``--sentences`` pairs beside each text of ``--texts`` (:mod:`lfa_index.adapters.text_views`)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``align`` sub-command to ``commands``."""
    p = add_command(commands, "align", epilog=ENCODER_FORMS,
                    help="map a new embedding model into an old one's space (no re-embedding)",
                    description="Fit an EmbeddingAligner: new-model queries then search a store filled by the old "
                                "model.\nPairs: --new FILE --old FILE (row i of both embeds the same item), or "
                                "--texts CSV\nembedded here by --new-model and --old-model. The items need not be in "
                                "the store,\nbut should be like its documents.")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="directory to save the aligner to (replaced if it holds one)")
    p.add_argument("--new", metavar="FILE", help=f"new-model embeddings of the sample ({EMBEDDING_FILES})")
    p.add_argument("--old", metavar="FILE", help="old-model embeddings of the same items, same order")
    p.add_argument("--texts", metavar="FILE", help="sample texts: CSV with a text column, or .txt one per line")
    p.add_argument("--text-column", default="text", help="CSV column holding the texts (default text)")
    p.add_argument("--new-model", metavar="SPEC",
                   help="encoder of --texts on the new side, in the role queries will have (e5-small: query)")
    p.add_argument("--old-model", metavar="SPEC", help="encoder of --texts on the old side (the store's model)")
    p.add_argument("--new-document-model", metavar="SPEC",
                   help="encoder of the texts themselves on the new side, where the new model embeds documents "
                        "in another role than queries (e5-small:passage); their sentences keep --new-model's role "
                        "and a centred map is served around their mean (see docs/migration.md)")
    p.add_argument("--sentences", choices=SENTENCE_VIEWS, default=None,
                   help="also pair the sentences of each text of --texts that has more than one: every one "
                        "(default), the first, or none. Pairs as short as queries, from the store's own domain "
                        "(see docs/migration.md)")
    p.add_argument("--windows", metavar="WORDS",
                   help="pair overlapping spans of WORDS words of each text (one every WORDS/2 words) instead of "
                        "its sentences; 12 is about a short query (see docs/migration.md)")
    p.add_argument("--group-weights", choices=("design", "equal"), default="design",
                   help="how a text and its views weigh in the fit: design (default; a text's many views count "
                        "for less than as many texts, by how alike they are) or equal (every pair 1)")
    # the flags of earlier releases (first sentences on by default)
    p.add_argument("--first-sentences", dest="sentences", action="store_const", const="first", help=argparse.SUPPRESS)
    p.add_argument("--no-first-sentences", dest="sentences", action="store_const", const="none",
                   help=argparse.SUPPRESS)
    p.add_argument("--query-sample", metavar="FILE",
                   help="new-model query embeddings (unpaired) when the pairs' new side was embedded in another "
                        "role (e5 passages): a centred map is served around their mean")
    p.add_argument("--unpaired", action="store_true",
                   help="--new and --old are unrelated samples (Sinkhorn matching; see docs/migration.md: it does "
                        "not work at these sizes)")
    p.add_argument("--steps", default="auto",
                   help="ARerank refinement steps (0: none), or 'auto' (default: chosen on held-out pairs)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the folds and refinement (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Fit the aligner on the pairs and save it to ``--out``."""
    files, texts = bool(args.new or args.old), bool(args.texts)
    if files == texts:
        raise CLIError(
            "give the pairs one way: --new FILE --old FILE, or --texts FILE --new-model SPEC --old-model SPEC."
        )
    if files and (args.windows is not None or args.sentences is not None):
        raise CLIError(f"{'--windows' if args.windows is not None else '--sentences'} makes views of --texts; with "
                       "--new/--old files, embed the views yourself and add them as rows of both files.")
    if args.new_document_model and files:
        raise CLIError("--new-document-model embeds --texts; with --new/--old files, give query-role rows as "
                       "--query-sample instead.")
    groups, role_queries = None, None
    if files:
        if not (args.new and args.old):
            raise CLIError("--new and --old go together: the same items embedded by the new and the old model.")
        x_new, _ = load_embeddings(args.new)
        x_old, _ = load_embeddings(args.old)
    else:
        if not (args.new_model and args.old_model):
            raise CLIError("--texts needs --new-model SPEC and --old-model SPEC to embed the sample with both.")
        texts_read = read_texts(args.texts, text_column=args.text_column, label_column=None, need_labels=False).texts
        window_words = None if args.windows is None else positive_int(args.windows, "--windows")
        if window_words and args.sentences is not None:
            raise CLIError("--windows pairs spans instead of sentences: give --windows or --sentences, not both.")
        sample, groups, kind = text_views(texts_read, args.sentences or "every", window_words)
        added = len(sample) - len(texts_read)
        extra = f" and {added} {kind}" if added else ""
        roles = f" ({args.new_document_model} for the texts)" if args.new_document_model else ""
        console.note(f"embedding {len(texts_read)} texts{extra} with {args.new_model}{roles} and {args.old_model}")
        new_encoder = encoder_from_args(args, console, args.new_model)
        if args.new_document_model:
            documents = encoder_from_args(args, console, args.new_document_model)
            x_new, role_queries = document_role_rows(new_encoder, documents, texts_read, sample)
        else:
            x_new = new_encoder.embed_texts(sample)
        x_old = encoder_from_args(args, console, args.old_model).embed_texts(sample)
    steps = args.steps if args.steps in ("auto", "0") else positive_int(args.steps, "--steps")
    queries = load_embeddings(args.query_sample)[0] if args.query_sample else role_queries
    aligner = EmbeddingAligner(steps=0 if steps == "0" else steps, group_weights=args.group_weights,
                               device=args.device, random_state=args.seed, verbose=console.progress)
    aligner.fit(x_new, x_old, paired=not args.unpaired, queries=queries, groups=None if args.unpaired else groups)
    aligner.save(args.out)
    console.note(f"saved {args.out}: {aligner.n_features_in_}-d new-model queries -> {aligner.n_features_out_}-d "
                 "old-model rows (the fit's summary line above is saved with it)")
    return 0


def text_views(texts: Sequence[str], sentences: str, window_words: int | None
               ) -> tuple[list[str], np.ndarray | None, str]:
    """The sample to embed (the texts, then their views), each row's text (None without views) and what
    the views are: ``window_words``-word spans where given, else the sentences ``sentences`` asks for.
    Each view is held out with its text when the map is chosen."""
    if window_words:
        sample, groups = with_windows(texts, words=window_words, return_sources=True)
        return sample, groups, f"{window_words}-word spans"
    if sentences == "none":
        return list(texts), None, ""
    views = with_sentences if sentences == "every" else with_first_sentences
    sample, groups = views(texts, return_sources=True)
    return sample, groups, "first sentences" if sentences == "first" else "sentences"


def document_role_rows(query_encoder: EmbeddingSource, document_encoder: EmbeddingSource, texts: Sequence[str],
                       sample: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The new side's rows where the new model has two roles, and the query-role rows a centred map is
    served around: the texts in the document role and their sentence views (``sample`` after
    ``texts``) in the query role, the views being that sample. The texts themselves in the query
    role would be a worse one, longer than queries (``benchmarks/results/migration_roles.md``)."""
    views = list(sample[len(texts):])
    if not views:
        raise CLIError("--new-document-model serves the map around the views' query-role rows, and these texts "
                       "gave none: use --sentences every or first (or --windows), or embed the roles yourself and "
                       "pass --new, --old and --query-sample.")
    documents = document_encoder.embed_texts(list(texts))
    view_rows = query_encoder.embed_texts(views)
    if view_rows.shape[1] != documents.shape[1]:
        raise CLIError(f"--new-model gives {view_rows.shape[1]}-d rows and --new-document-model "
                       f"{documents.shape[1]}-d ones: give two roles of one model (e5-small, e5-small:passage).")
    return np.concatenate([documents, view_rows]), view_rows
