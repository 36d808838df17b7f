"""``lfa-index fit``: fit an aligned index on a labelled support set and save it."""

from __future__ import annotations

import argparse

from lfa_index import LFA, AlignedIndex
from lfa_index.adapters import ENCODER_FORMS, VisionBackboneSource, load_embeddings

from .console import Console
from .errors import CLIError
from .inputs import (
    class_list,
    class_prototypes,
    collect_items,
    embed_items,
    encoder_from_args,
    require_model,
    store_support,
)
from .options import (
    STORE_URI_FORMS,
    add_command,
    add_encoder_args,
    add_lfa_args,
    add_prototype_args,
    add_text_columns,
    lfa_options,
)
from .readers import EMBEDDING_FILES


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``fit`` sub-command to ``commands``."""
    p = add_command(commands, "fit", epilog=f"{ENCODER_FORMS}\n{STORE_URI_FORMS}",
                    help="fit an aligned index on a labelled support set and save it",
                    description="Fit an AlignedIndex on a labelled support set and save it to a directory.\n"
                                "Support: an embeddings file with labels, an image folder DIR/<class>/<image>,\n"
                                "a CSV of texts, or labelled rows of a vector store (--from-store URI).\n"
                                "Prototypes: an embeddings file, or the class names embedded by --text-model.")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="directory to save the index to (replaced if it holds an index)")
    p.add_argument("--support", metavar="FILE",
                   help=f"support embeddings ({EMBEDDING_FILES}) with a labels array/column")
    p.add_argument("--labels", metavar="FILE", help="labels of --support rows (.npy, JSON list, or one per line)")
    p.add_argument("--images", metavar="DIR", help="labelled images DIR/<class name>/<image> (needs --model)")
    p.add_argument("--texts", metavar="CSV", help="CSV with a text column and a label column (needs --model)")
    p.add_argument("--from-store", metavar="URI",
                   help="labelled support embeddings already in a vector store (store URI, see below); "
                        "the class names are the distinct values of --label-field")
    p.add_argument("--label-field", default="label", metavar="F",
                   help="field of the --from-store rows holding their labels (default label)")
    add_text_columns(p)
    add_encoder_args(p)
    add_prototype_args(p)
    add_lfa_args(p)
    p.add_argument("--seed", type=int, default=0, help="random seed of every choice in LFA (default 0)")
    p.add_argument("--corpus", metavar="FILE",
                   help="embeddings to add to the aligned corpus (for `search --target corpus`)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Fit an AlignedIndex on the support set and save it to ``--out``."""
    support = collect_items(args, file="support", images="images", texts="texts", labels="labels",
                            need_labels=True, what="support set")
    if args.from_store:
        if support is not None:
            raise CLIError("give the support set one way only: --from-store URI, or --support/--images/--texts.")
        support = store_support(args.from_store, args.label_field, console)
    if support is None:
        raise CLIError(
            "give the support set: --support FILE (embeddings with labels), --images DIR, --texts CSV or "
            "--from-store URI."
        )
    require_model(support, args)
    names = class_list(args, support.labels)
    model = encoder_from_args(args, console, args.model)
    if args.model and args.prototypes is None and args.text_model is None and isinstance(model, VisionBackboneSource):
        raise CLIError(
            f"{args.model} embeds images only: pass --text-model SPEC or --prototypes FILE for the class prototypes."
        )
    # class names first: cheap, and a missing API key or model fails before the support set is embedded
    prototypes = class_prototypes(args, console, names, images=support.kind == "images", model_encoder=model)
    support = embed_items(support, model, console, strict=args.strict)
    index = AlignedIndex(lfa=LFA(**lfa_options(args), random_state=args.seed, verbose=console.progress))
    console.note(f"fitting LFA on {len(support.ids)} support rows, {len(prototypes)} classes")
    index.fit(support.embeddings, support.labels, prototypes, names)
    if args.corpus:
        corpus, _ = load_embeddings(args.corpus)
        index.add(corpus)
    index.save(args.out)
    lfa = index.lfa_
    console.note(
        f"saved {args.out}: {len(index.classes_)} classes, {len(support.ids)} support rows, "
        f"support hubness {100 * lfa.hubness_init_:.1f}% → {100 * lfa.hubness_:.1f}%"
        + (f", corpus of {index.corpus_size_}" if args.corpus else "")
        + "; the fit's summary line above is saved with it"
    )
    return 0
