"""``lfa-index eval``: accuracy of LFA against zero-shot and the baselines, as a table.

(The module is named ``evaluate`` so that it does not shadow the builtin ``eval``.)
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from lfa_index import AlignedIndex, LabelSpace
from lfa_index.adapters import EmbeddingSource
from lfa_index.baselines import BASELINES
from lfa_index.errors import CLIError
from lfa_index.files import atomic_write
from lfa_index.reporting import FewShotTask, class_positions, format_open_set, open_set_metrics, run_few_shot
from lfa_index.reporting.evaluation import LFA_METHOD, FewShotResults

from .console import Console
from .inputs import (
    check_labels,
    class_list,
    class_prototypes,
    collect_items,
    embed_items,
    encoder_from_args,
    load_index,
    require_model,
    use_saved_encoders,
)
from .options import (
    add_command,
    add_encoder_args,
    add_eval_set_args,
    add_force,
    add_lfa_args,
    add_prototype_args,
    add_reject_below,
    add_text_columns,
    add_unknown_label,
    given_threshold,
    lfa_options,
    positive_int,
    rejection_threshold,
)
from .readers import Items


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``eval`` sub-command to ``commands``."""
    p = add_command(commands, "eval",
                    help="accuracy table of LFA against zero-shot and the baselines",
                    description="Accuracy of LFA against zero-shot, nearest class mean, kNN and a linear probe.\n"
                                "With INDEX: the baselines are fitted on the index's support set.\n"
                                "With --pool: k-shot support sets are drawn from the pool (--shots, --seeds) and "
                                "every\nmethod is fitted on each.\nWith INDEX and --unknown-label: the eval rows "
                                "so labelled are out of scope, the table is\nof the others, and the open-set "
                                "metrics of the index follow it.")
    p.add_argument("index", metavar="INDEX", nargs="?", help="directory written by `lfa-index fit` (or use --pool)")
    add_eval_set_args(p)
    p.add_argument("--pool", metavar="FILE", help="labelled embeddings to draw k-shot support sets from")
    p.add_argument("--pool-labels", metavar="FILE", help="labels of --pool rows")
    p.add_argument("--pool-images", metavar="DIR", help="labelled pool images DIR/<class name>/<image>")
    p.add_argument("--pool-texts", metavar="CSV", help="labelled pool texts")
    add_text_columns(p)
    add_encoder_args(p)
    add_prototype_args(p)
    add_lfa_args(p)
    add_force(p)
    add_unknown_label(p, "eval rows (with INDEX)")
    add_reject_below(p, "eval rows (with INDEX and --unknown-label)")
    p.add_argument("--shots", nargs="+", default=["1", "4", "16"], help="support rows per class (default 1 4 16)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one support draw per seed (default 0 1 2)")
    p.add_argument("--no-zero-shot", action="store_true",
                   help="leave zero-shot out (rows and prototypes from different models)")
    p.add_argument("--json", metavar="FILE", help="also write the accuracies as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Print the accuracy table of LFA and the baselines (and write it as JSON with ``--json``)."""
    eval_items = collect_items(args, file="eval", images="eval_images", texts="eval_texts", labels="eval_labels",
                               need_labels=True, what="eval set")
    if eval_items is None:
        raise CLIError("give the eval set: --eval FILE, --eval-images DIR or --eval-texts CSV (with labels).")
    if not args.index and (args.unknown_label or args.reject_below):
        raise CLIError("--unknown-label and --reject-below report the open set of a saved INDEX: pass one.")
    open_set = None
    if args.index:
        results, header, zero_shot, open_set = _eval_index(args, console, eval_items)
    else:
        require_model(eval_items, args)
        model = encoder_from_args(args, console, args.model)
        results, header, zero_shot = _eval_pool(args, console, eval_items, model)
    left_out = "" if zero_shot else "; zero-shot left out (rows and prototypes differ in width, or --no-zero-shot)"
    print(f"{header}\naccuracy (%){left_out}")
    print(results.table())
    if open_set is not None:
        print(format_open_set(open_set))
    if args.json:
        atomic_write(args.json, json.dumps(results.to_dict(), indent=1) + "\n")
        console.note(f"wrote {args.json}")
    return 0


def _eval_index(
    args: argparse.Namespace, console: Console, eval_items: Items
) -> tuple[FewShotResults, str, bool, dict | None]:
    """LFA of a saved index against the baselines fitted on its support set: results, header, zero-shot and,
    with ``--unknown-label``, the index's open-set metrics."""
    tau = given_threshold(args)
    index = load_index(args.index, args.device)
    if eval_items.kind != "embeddings":
        use_saved_encoders(args, index)
        require_model(eval_items, args)
    truth = check_labels(index.label_space_, eval_items.labels, "the eval rows", args.unknown_label)
    eval_items = embed_items(eval_items, encoder_from_args(args, console, args.model), console, strict=args.strict)
    x, inside = eval_items.embeddings, truth >= 0
    if not inside.any():
        raise CLIError(f"every eval row is labelled --unknown-label {args.unknown_label}: none is left to score "
                       "the classes on.")
    zero_shot = not args.no_zero_shot and index.text_embeddings_.shape[1] == index.n_features_in_
    results = _index_table(index, x[inside], truth[inside], zero_shot)
    header = (f"{args.index}: support set of the index ({len(index.support_labels_)} rows, median shots per class "
              f"shown as 'shots'), {int(inside.sum())} eval rows"
              + (f" in scope, {int((~inside).sum())} out of scope (--unknown-label {args.unknown_label})"
                 if args.unknown_label else ""))
    if args.unknown_label is None:
        return results, header, zero_shot, None
    tau = rejection_threshold(args, index, tau, console, open_set=True)
    _, found = index.search(x, k=1)
    metrics = open_set_metrics(truth, index.label_space_.lookup(found[:, 0]), index.score_samples(x), tau)
    return results, header, zero_shot, metrics


def _eval_pool(
    args: argparse.Namespace, console: Console, eval_items: Items, model: EmbeddingSource | None
) -> tuple[FewShotResults, str, bool]:
    """Every method fitted on k-shot support sets drawn from the pool: results, header, zero-shot."""
    pool = collect_items(args, file="pool", images="pool_images", texts="pool_texts", labels="pool_labels",
                         need_labels=True, what="pool")
    if pool is None:
        raise CLIError(
            "give an INDEX to evaluate, or a --pool FILE (or --pool-images/--pool-texts) "
            "to draw k-shot support sets from."
        )
    require_model(pool, args)
    names = class_list(args, pool.labels)
    prototypes = class_prototypes(args, console, names, images=pool.kind == "images", model_encoder=model)
    pool = embed_items(pool, model, console, strict=args.strict)
    eval_items = embed_items(eval_items, model, console, strict=args.strict)
    y_pool = _positions(pool.labels, names, len(prototypes), "pool")
    y_eval = _positions(eval_items.labels, names, len(prototypes), "eval")
    zero_shot = not args.no_zero_shot and prototypes.shape[1] == pool.embeddings.shape[1]
    names = names or [str(i) for i in range(len(prototypes))]
    task = FewShotTask("eval", pool.embeddings, y_pool, eval_items.embeddings, y_eval, prototypes, names, zero_shot)
    shots = [positive_int(s, "--shots") for s in args.shots]
    results = run_few_shot(task, shots=shots, seeds=args.seeds, lfa_options=lfa_options(args),
                           progress=console.progress)
    header = (f"k-shot support drawn from {len(y_pool)} pool rows with seeds {', '.join(map(str, args.seeds))}; "
              f"{len(y_eval)} eval rows, {len(prototypes)} classes")
    return results, header, zero_shot


def _positions(labels: np.ndarray, names: list[str] | None, n_classes: int, what: str) -> np.ndarray:
    """Labels as class positions 0..n_classes-1 (names looked up in ``names``)."""
    if labels.dtype.kind == "U" and names is None:
        raise CLIError(f"the {what} labels are class names: pass --classes FILE to fix the class order.")
    return LabelSpace("index", n_classes, names).lookup(labels, name=f"the {what} labels")


def _index_table(index: AlignedIndex, x_eval: np.ndarray, y_eval: np.ndarray, zero_shot: bool) -> FewShotResults:
    """Accuracy of an existing index and of the baselines fitted on its support set (one row)."""
    support = index.support_embeddings_
    support = support[:, 0] if support.ndim == 3 else support
    if index.support_labels_ is None:
        raise CLIError("this index was fitted without labels (U-LFA): the baselines need a labelled support set.")
    y_support = index.support_labels_
    names = list(index.class_names_ or [str(c) for c in index.classes_])
    task = FewShotTask("index", support, y_support, x_eval, y_eval, index.text_embeddings_, names, zero_shot)
    methods = tuple(m for m, b in BASELINES.items() if zero_shot or not b.same_model_only) + (LFA_METHOD,)
    n_shots = int(np.median(np.bincount(y_support)[np.unique(y_support)]))
    results = FewShotResults(task, (n_shots,), (int(index.lfa_.random_state or 0),), methods)
    for m in methods:
        if m == LFA_METHOD:
            pred = class_positions(index, index.predict(x_eval))
        else:
            pred = BASELINES[m].predict(support, y_support, index.text_embeddings_, x_eval)
        results.accuracy[(n_shots, m)] = [float(np.mean(pred == y_eval))]
    return results
