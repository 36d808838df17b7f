"""What the commands say on stderr: notes, progress switch, one-line warnings, offline mode."""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from typing import Any, Iterator

from lfa_index.adapters import RandomWeightsWarning, SkippedInputWarning, TruncationWarning

PROG = "lfa-index"
# Warnings of lfa-index's own sources, shown as one ``lfa-index: warning:`` line.
OWN_WARNINGS = (TruncationWarning, SkippedInputWarning, RandomWeightsWarning)


class Console:
    """Notes and warnings on stderr; ``quiet`` silences progress bars only, never notes, results or warnings."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    @property
    def progress(self) -> bool:
        return not self.quiet

    @staticmethod
    def note(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    @staticmethod
    def warn(message: str) -> None:
        print(f"{PROG}: warning: {one_line(message)}", file=sys.stderr, flush=True)


def one_line(message: Any) -> str:
    """``message`` as one line, runs of white space collapsed."""
    return " ".join(str(message).split())


@contextmanager
def cli_warnings() -> Iterator[None]:
    """Show lfa-index's own warnings (e.g. truncated texts) as one ``lfa-index: warning:`` line."""
    with warnings.catch_warnings():
        # a command may build the same kind of source twice: say it each time
        warnings.simplefilter("always", RandomWeightsWarning)
        original = warnings.showwarning

        def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if issubclass(category, OWN_WARNINGS) or "lfa_index" in str(filename):
                Console.warn(str(message))
            else:
                original(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


@contextmanager
def offline(enabled: bool) -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` while a command runs (the sources read it when they load a model)."""
    if not enabled:
        yield
        return
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before
