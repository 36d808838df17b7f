"""Options several commands share: their argparse groups, and how their values are read."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lfa_index.adapters import ENCODER_FORMS
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.errors import InvalidParameterError
from lfa_index.stores.uri import URI_FORMS

from .errors import CLIError
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
                        help="no progress bars or notes (warnings and errors still show)")
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
                   help="the paper's LFA exactly (LFA.paper: hybrid prototypes, centring, trained prototypes and "
                        "map averaging off; the wider side projected down) instead of the default, which turns "
                        "those on only where a cross-validation on the support says they help")


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
                   help=f"label {rows} whose best aligned cosine is below TAU as 'unknown'; "
                        "'auto' keeps 95%% of the support rows")


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


def cosine_threshold(value: str, flag: str) -> float:
    """``value`` as a finite number; the index then checks it can separate its scores
    (within [-1, 1] unless its classifier has class biases)."""
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise CLIError(f"{flag} must be 'auto' or a number (an aligned score, e.g. 0.3), got {value!r}.") from err
    if not np.isfinite(number):
        raise CLIError(f"{flag} must be 'auto' or a finite number (an aligned score, e.g. 0.3), got {value!r}.")
    return number


def given_threshold(args: argparse.Namespace) -> float | None:
    """The cosine ``--reject-below`` gives, read before any work; None when absent or 'auto'."""
    if args.reject_below is None or args.reject_below == "auto":
        return None
    return cosine_threshold(args.reject_below, "--reject-below")


def rejection_threshold(args: argparse.Namespace, index: AlignedIndex, given: float | None) -> float | None:
    """The threshold of ``--reject-below``: ``given`` once the index accepts it (within [-1, 1] unless
    its classifier has class biases), or with 'auto' the index's (95% of the support kept)."""
    if args.reject_below == "auto":
        return index.rejection_threshold(0.95)
    if given is not None:
        try:
            index.check_threshold(given)
        except InvalidParameterError as err:
            raise CLIError(f"--reject-below: {err}") from err
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
