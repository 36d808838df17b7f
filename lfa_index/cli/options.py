"""Options several commands share: their argparse groups, and how their values are read."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lfa_index.adapters import ENCODER_FORMS
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.errors import CLIError
from lfa_index.index.calibration import OBJECTIVES
from lfa_index.stores.uri import URI_FORMS

from .readers import EMBEDDING_FILES, LABEL_COLUMNS

if TYPE_CHECKING:
    from lfa_index import AlignedIndex

CACHE_ENV = "LFA_INDEX_CACHE"
DEFAULT_REPORT_DIR = "lfa_report"
FORMATTER = argparse.RawDescriptionHelpFormatter
STORE_URI_FORMS = URI_FORMS


# ----------------------------------------------------------------------------------- argparse groups
def add_command(commands: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A sub-command's parser with the shared options (``-q``, ``--device``, the cache, ``--offline``)."""
    kwargs.setdefault("epilog", ENCODER_FORMS)
    return commands.add_parser(name, parents=[_shared_options()], formatter_class=FORMATTER, **kwargs)


def _shared_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars (notes, results, warnings and errors still show)")
    parent.add_argument("--device", default="auto",
                        help="'auto' (CUDA when available), 'cpu', 'cuda', 'cuda:N' (default auto)")
    parent.add_argument("--cache-dir", help=f"embedding cache folder (default ${CACHE_ENV}, else "
                                            "$XDG_CACHE_HOME/lfa-index, else ~/.cache/lfa-index)")
    parent.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    parent.add_argument("--offline", action="store_true",
                        help="never download models: hub names must be in the local Hugging Face cache "
                             "(sets HF_HUB_OFFLINE=1)")
    return parent


def add_text_columns(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text-column", default="text", help="CSV column holding the texts (default text)")
    p.add_argument("--label-column",
                   help=f"CSV column holding the labels (default: the first of {', '.join(LABEL_COLUMNS)})")


def add_encoder_args(p: argparse.ArgumentParser, *, text_model: bool = True) -> None:
    p.add_argument("--model", metavar="SPEC",
                   help="encoder of images / texts given as raw inputs (see encoder SPEC forms)")
    if text_model:
        p.add_argument("--text-model", metavar="SPEC", help="encoder of class names / prompts (default: --model)")
        p.add_argument("--template", action="append", metavar="T",
                       help="prompt template with one {} for the class name; repeat to ensemble "
                            "(default 'a photo of a {}.' for images, '{}' otherwise)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first unreadable image (default: skip it with a warning)")


def add_prototype_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prototypes", metavar="FILE",
                   help=f"class prototypes ({EMBEDDING_FILES}), one row per class in --classes order "
                        "(without --classes: in sorted label order)")
    p.add_argument("--classes", metavar="FILE", help="class names in label order: one per line, or a JSON list "
                                                      "(default: the sorted distinct string labels)")


def add_lfa_args(p: argparse.ArgumentParser, steps_default: str = "auto") -> None:
    p.add_argument("--steps", default=steps_default,
                   help=f"refinement steps, or 'auto' to choose them on the support (default {steps_default})")
    p.add_argument("--beta", default="auto",
                   help="β of β-Procrustes in [0, 1], or 'auto' (CV on the support; default)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's LFA (LFA.paper: hybrid prototypes, centring, trained prototypes and "
                        "map averaging off; the image rows projected into the text width; one guard where the "
                        "class names say nothing) instead of the default, which turns those on only where a "
                        "cross-validation on the support says they help")


def add_query_args(p: argparse.ArgumentParser, *, text_model: bool = False) -> None:
    p.add_argument("--queries", metavar="FILE",
                   help=f"query embeddings ({EMBEDDING_FILES}); labels in it are used to report accuracy")
    p.add_argument("--labels", metavar="FILE", help="labels of --queries rows (optional)")
    p.add_argument("--images", nargs="+", metavar="PATH", help="image files or folders (needs --model)")
    p.add_argument("--texts", metavar="FILE",
                   help="texts: CSV with a text column, or .txt one per line (needs --model)")
    p.add_argument("--text", action="append", metavar="TEXT", help="one text query (repeatable; needs --model)")
    add_text_columns(p)
    add_encoder_args(p, text_model=text_model)


def add_reject_below(p: argparse.ArgumentParser, rows: str) -> None:
    p.add_argument("--reject-below", metavar="TAU",
                   help=f"label {rows} whose open-set score is below TAU as 'unknown'; 'auto' accepts 95%% of "
                        "held-out support rows; 'none' ignores the TAU saved in the index (default: that TAU, "
                        "if `fit --calibrate-on` saved one); a negative TAU is written --reject-below=-1.5")


def add_unknown_label(p: argparse.ArgumentParser, rows: str) -> None:
    p.add_argument("--unknown-label", metavar="NAME",
                   help=f"the label of out-of-scope {rows} (e.g. oos): they should be rejected; reports in-scope "
                        "accuracy, out-of-scope recall and precision, macro-F1 and AUROC")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="use --model/--text-model even where INDEX was fitted with another encoder")


def add_calibration_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibrate-on", metavar="FILE",
                   help=f"labelled validation rows ({EMBEDDING_FILES} with labels, or a CSV of texts) to set the "
                        "rejection threshold on; it is saved in the index (predict and classify use it)")
    p.add_argument("--calibrate-labels", metavar="FILE", help="labels of --calibrate-on rows (optional)")
    add_unknown_label(p, "rows of --calibrate-on")
    p.add_argument("--objective", choices=OBJECTIVES,
                   help="how --calibrate-on sets the threshold: accept --accept-rate of the known-class rows, reject "
                        "--oos-recall of the out-of-scope ones, or the best macro-F1 over the known classes + "
                        "unknown (default macro-f1 with --unknown-label, else accept-rate)")
    p.add_argument("--accept-rate", default="0.95", help="known-class rows to accept (default 0.95)")
    p.add_argument("--oos-recall", default="0.9", help="out-of-scope rows to reject (default 0.9)")


def add_eval_set_args(p: argparse.ArgumentParser, purpose: str = "") -> None:
    p.add_argument("--eval", metavar="FILE", help=f"labelled eval embeddings ({EMBEDDING_FILES}){purpose}")
    p.add_argument("--eval-labels", metavar="FILE", help="labels of --eval rows")
    p.add_argument("--eval-images", metavar="DIR", help="labelled eval images DIR/<class name>/<image>")
    p.add_argument("--eval-texts", metavar="CSV", help="labelled eval texts")


# ----------------------------------------------------------------------------------- values
def positive_int(value: Any, flag: str) -> int:
    """``value`` as an integer >= 1, or a :class:`CLIError` naming ``flag``."""
    try:
        number = int(value)
    except (TypeError, ValueError) as err:
        raise CLIError(f"{flag} must be a positive integer, got {value!r}.") from err
    if number < 1:
        raise CLIError(f"{flag} must be a positive integer, got {number}.")
    return number


def score_threshold(value: str, flag: str) -> float:
    """``value`` as a finite number (an open-set score, see ``AlignedIndex.score_samples``)."""
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise CLIError(f"{flag} must be 'auto', 'none' or a number (an open-set score, e.g. -1.5), "
                       f"got {value!r}.") from err
    if not np.isfinite(number):
        raise CLIError(f"{flag} must be 'auto', 'none' or a finite number (an open-set score, e.g. -1.5), "
                       f"got {value!r}.")
    return number


def fraction(value: Any, flag: str) -> float:
    """``value`` as a number in (0, 1], or a :class:`CLIError` naming ``flag``."""
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise CLIError(f"{flag} must be a number in (0, 1], got {value!r}.") from err
    if not 0 < number <= 1:
        raise CLIError(f"{flag} must be a number in (0, 1], got {value!r}.")
    return number


def given_threshold(args: argparse.Namespace) -> float | None:
    """The number ``--reject-below`` gives, read before any work; None when absent, 'auto' or 'none'."""
    if args.reject_below is None or args.reject_below in ("auto", "none"):
        return None
    return score_threshold(args.reject_below, "--reject-below")


def rejection_threshold(
    args: argparse.Namespace, index: AlignedIndex, given: float | None, console: Any, *, open_set: bool = False
) -> float | None:
    """The threshold of ``--reject-below``: ``given``, the index's for 'auto' (95% of held-out support rows
    accepted), none for 'none'; absent, the τ saved in the index, else 'auto' when ``open_set`` (an
    ``--unknown-label`` was given), else none. Says which on the console."""
    choice = args.reject_below
    if choice is None and index.reject_below_ is not None:
        console.note(f"rejecting below the threshold saved in the index, {index.reject_below_:.4f} "
                     "(--reject-below none keeps every query)")
        return index.reject_below_
    if choice == "auto" or (choice is None and open_set):
        tau = index.rejection_threshold(accept_rate=0.95)
        console.note(f"rejecting below {tau:.4f}, which accepts 95% of held-out support rows"
                     + ("" if choice else " (no --reject-below given and none saved in the index)"))
        return tau
    if given is not None:
        console.note(f"rejecting below {given:.4f}")
    return given


def lfa_options(args: argparse.Namespace) -> dict[str, Any]:
    """LFA options from ``--device``, ``--paper``, ``--steps`` and ``--beta``."""
    options: dict[str, Any] = {"device": args.device}
    if getattr(args, "paper", False):
        options.update(PAPER_OPTIONS)
    if args.steps != "auto":
        options["steps"] = positive_int(args.steps, "--steps")
    if args.beta != "auto":
        try:
            options["beta"] = float(args.beta)
        except ValueError as err:
            raise CLIError(f"--beta must be 'auto' or a number in [0, 1], got {args.beta!r}.") from err
    return options


def default_cache_dir() -> Path:
    """``$LFA_INDEX_CACHE``, else ``$XDG_CACHE_HOME/lfa-index``, else ``~/.cache/lfa-index``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "lfa-index"


def cache_dir(args: argparse.Namespace) -> Path | None:
    """The embedding cache folder of a command: ``--cache-dir``, else the default; None with ``--no-cache``."""
    if getattr(args, "no_cache", False):
        return None
    return Path(args.cache_dir).expanduser() if getattr(args, "cache_dir", None) else default_cache_dir()
