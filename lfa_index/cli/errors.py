"""The error every command raises for an unusable command-line input."""

from __future__ import annotations

from lfa_index import LFAIndexError


class CLIError(LFAIndexError, ValueError):
    """A command-line input is unusable: a missing or contradictory option, an empty class list..."""
