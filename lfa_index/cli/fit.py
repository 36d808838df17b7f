"""``lfa-index fit``: fit an aligned index on a labelled support set and save it."""

from __future__ import annotations

import argparse

import numpy as np

from lfa_index import LFA, AlignedCorpus, AlignedIndex, LabelSpace
from lfa_index.adapters import ENCODER_FORMS, VisionBackboneSource, load_embeddings
from lfa_index.errors import CLIError
from lfa_index.reporting import format_open_set, open_set_metrics

from .console import Console
from .inputs import (
    check_labels,
    class_list,
    class_prototypes,
    collect_items,
    corpus_path,
    embed_items,
    encoder_from_args,
    labelled_rows,
    require_model,
    store_support,
)
from .options import (
    STORE_URI_FORMS,
    add_calibration_args,
    add_command,
    add_encoder_args,
    add_lfa_args,
    add_prototype_args,
    add_text_columns,
    fraction,
    lfa_options,
)
from .readers import EMBEDDING_FILES, Items


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
    p.add_argument("--class-names", metavar="FILE",
                   help="readable names to embed for the labels: a JSON object {\"pto_balance\": \"PTO balance\"} "
                        "or a CSV 'label,readable name' (the index keeps the labels as given)")
    add_lfa_args(p)
    p.add_argument("--seed", type=int, default=0, help="random seed of every choice in LFA (default 0)")
    p.add_argument("--corpus", metavar="FILE",
                   help="embeddings to align into a corpus saved beside the index, as OUT.corpus (for `search "
                        "--target corpus`; ids = row numbers)")
    add_calibration_args(p)
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
    calibration = _calibration_rows(args)
    require_model(support, args)
    require_model(calibration, args)
    names = class_list(args, support.labels)  # support labels that --classes does not list fail here
    if calibration is not None and names is not None:  # and so do the calibration labels, before any embedding
        kind = "name" if support.labels.dtype.kind == "U" else "index"
        check_labels(LabelSpace(kind, len(names), names), calibration.labels, "--calibrate-on", args.unknown_label)
    model = encoder_from_args(args, console, args.model)
    if args.model and args.prototypes is None and args.text_model is None and isinstance(model, VisionBackboneSource):
        raise CLIError(
            f"{args.model} embeds images only: pass --text-model SPEC or --prototypes FILE for the class prototypes."
        )
    if args.class_names and args.prototypes:
        raise CLIError("--class-names gives the names to embed; with --prototypes FILE nothing is embedded: drop one.")
    # class names first: cheap, and a missing API key or model fails before the support set is embedded
    prototypes = class_prototypes(args, console, names, images=support.kind == "images", model_encoder=model)
    if names is not None and len(names) != len(prototypes):
        given = f"--classes {args.classes}" if args.classes else "the distinct support labels"
        raise CLIError(f"{given} name(s) {len(names)} classes but --prototypes {args.prototypes} holds "
                       f"{len(prototypes)} rows; give one prototype row per class, in the order of the class names.")
    if calibration is not None and names is None:
        check_labels(LabelSpace("index", len(prototypes)), calibration.labels, "--calibrate-on", args.unknown_label)
    support = embed_items(support, model, console, strict=args.strict)
    index = AlignedIndex(lfa=LFA(**lfa_options(args), random_state=args.seed, verbose=console.progress))
    console.note(f"fitting LFA on {len(support.ids)} support rows, {len(prototypes)} classes")
    index.fit(support.embeddings, support.labels, prototypes, names)
    if console.quiet:  # the fit printed no summary line
        console.note(index.lfa_.summary_)
    index.set_encoders(document=args.model, name=None if args.prototypes else args.text_model or args.model)
    corpus = None
    if args.corpus:
        images, _ = load_embeddings(args.corpus)
        corpus = AlignedCorpus(index).add(images, ids=np.arange(len(images)))
    if calibration is not None:
        _calibrate(index, embed_items(calibration, model, console, strict=args.strict), args, console)
    index.save(args.out)
    if corpus is not None:
        corpus.save(corpus_path(args.out))
    elif corpus_path(args.out).exists():
        console.note(f"{corpus_path(args.out)}, the aligned corpus of an earlier fit, is kept as it was (its images "
                     "keep that fit's map): pass --corpus FILE to rebuild it, or remove it")
    lfa = index.lfa_
    console.note(
        f"saved {args.out}: {len(index.classes_)} classes, {len(support.ids)} support rows, "
        f"support hubness {100 * lfa.hubness_init_:.1f}% → {100 * lfa.hubness_:.1f}%"
        + (f", corpus of {corpus.ntotal} saved to {corpus_path(args.out)}" if corpus is not None else "")
        + (f", rejection threshold {index.reject_below_:.4f}" if index.reject_below_ is not None else "")
        + "; the fit's summary line above is saved with it"
    )
    return 0


def _calibration_rows(args: argparse.Namespace) -> Items | None:
    """The --calibrate-on rows, read and their options checked (nothing embedded yet); None without it."""
    calibration_only = [flag for flag, value in (("--unknown-label", args.unknown_label),
                                                 ("--objective", args.objective),
                                                 ("--calibrate-labels", args.calibrate_labels)) if value]
    if not args.calibrate_on:
        if calibration_only:
            raise CLIError(f"{', '.join(calibration_only)} set how --calibrate-on FILE is read: pass it too.")
        return None
    args.objective = args.objective or ("macro-f1" if args.unknown_label else "accept-rate")
    if args.objective != "accept-rate" and not args.unknown_label:
        raise CLIError(f"--objective {args.objective} needs out-of-scope rows: pass --unknown-label NAME, their label.")
    fraction(args.accept_rate, "--accept-rate")
    fraction(args.oos_recall, "--oos-recall")
    return labelled_rows(args.calibrate_on, args.calibrate_labels, args, "--calibrate-on rows")


def _calibrate(index: AlignedIndex, rows: Items, args: argparse.Namespace, console: Console) -> None:
    """Set the index's rejection threshold on the --calibrate-on rows and say what it gives there."""
    truth = check_labels(index.label_space_, rows.labels, "--calibrate-on", args.unknown_label)
    labels = np.where(truth < 0, args.unknown_label, rows.labels).astype(object) if args.unknown_label else rows.labels
    tau = index.rejection_threshold(
        rows.embeddings, labels, unknown_label=args.unknown_label, objective=args.objective,
        accept_rate=fraction(args.accept_rate, "--accept-rate"), oos_recall=fraction(args.oos_recall, "--oos-recall"),
    )
    index.set_reject_below(tau)
    _, predicted = index.search(rows.embeddings, k=1)
    metrics = open_set_metrics(truth, index.label_space_.lookup(predicted[:, 0]), index.score_samples(rows.embeddings),
                               tau)
    console.note(f"rejection threshold {tau:.4f} set on {args.calibrate_on} (--objective {args.objective}), saved "
                 f"in the index; there: {format_open_set(metrics)}")
