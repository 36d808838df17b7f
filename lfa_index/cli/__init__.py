"""The ``lfa-index`` command: fit, predict, classify, search, eval, report, demo and align.

Every sub-command has ``--help``. Expected failures (bad input, a missing API key, a model that
cannot be loaded offline) print one ``lfa-index: error: ...`` line on stderr and exit with 1;
usage errors exit with 2. Progress bars and notes go to stderr (``-q`` silences the progress bars); results
(predictions, tables) go to stdout or to the file given with ``-o``.

One module per sub-command (``fit``, ``predict``, ``classify``, ``search``, ``evaluate``,
``report``, ``demo``, ``align``) holds its parser next to its ``run``; :func:`main` builds the top-level
parser from them and turns expected errors into one line. Vector stores are named by URI,
``SCHEME:LOCATION#COLLECTION`` (:func:`lfa_index.stores.open_store`).

Example
-------
$ lfa-index fit --support support.npz --prototypes classes.npy --classes classes.txt -o my_index
$ lfa-index predict my_index --queries queries.npy
$ lfa-index classify milvus:./vectors.db#images --index my_index --write-field predicted
$ lfa-index demo
"""

from __future__ import annotations

import argparse
import csv
import json
import pickle
import sys
from typing import Sequence

from lfa_index import LFAIndexError, __version__
from lfa_index.adapters import ENCODER_FORMS
from lfa_index.adapters.embedding_files import decoding_errors
from lfa_index.errors import CLIError

from . import align, classify, demo, evaluate, fit, predict, report, search
from .console import PROG, Console, cli_warnings, offline, one_line
from .options import FORMATTER
from .output import check_outputs
from .readers import EMBEDDING_FILES

__all__ = ["main", "build_parser", "CLIError"]

# One module per sub-command, each with ``add_parser(commands)`` and ``run(args, console)``.
COMMANDS = (fit, predict, classify, search, evaluate, report, demo, align)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lfa-index`` and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=FORMATTER,
        description="Adapt any embedding model to a few-shot task with Linear Feature Alignment (LFA), "
                    "served as an aligned FAISS index.",
        epilog=f"Start with `{PROG} demo`. {ENCODER_FORMS}\nembedding files: {EMBEDDING_FILES} (no pickles).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lfa-index``; returns the exit status (0 ok, 1 expected error, 2 usage error, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    console = Console(args.quiet)
    with cli_warnings(), offline(getattr(args, "offline", False)):
        try:
            check_outputs(args)
            return int(args.func(args, console) or 0)
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
        except (LFAIndexError, OSError) as err:
            print(f"{PROG}: error: {one_line(err)}", file=sys.stderr)
            return 1
        except input_errors() as err:  # a decoding failure that no reader turned into a typed error
            print(f"{PROG}: error: an input could not be read ({type(err).__name__}: {one_line(err)})", file=sys.stderr)
            return 1


def input_errors() -> tuple[type[BaseException], ...]:
    """Decoding failures of input files, by category: text encodings, JSON, CSV, archives, array formats.

    A bare ValueError is not among them: outside the readers it is a bug, and keeps its traceback.
    """
    libraries = tuple(kind for kind in decoding_errors() if kind not in (ValueError, RecursionError))
    return (UnicodeError, json.JSONDecodeError, csv.Error, pickle.UnpicklingError, *libraries)
