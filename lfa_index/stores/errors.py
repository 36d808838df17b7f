"""Typed errors of the vector stores and the batch jobs.

Each derives from :class:`~lfa_index.core.errors.LFAIndexError` and from the built-in exception
a user would naturally catch, like the errors of the core. Messages say how to fix the problem.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..core.errors import InvalidInputError, LFAIndexError


class StoreUnavailableError(LFAIndexError, ConnectionError):
    """A vector store cannot be reached or opened at the given URI."""


class SchemaError(InvalidInputError):
    """A collection or table lacks the expected embedding / id column, or holds it with the wrong type."""


class MissingExtraError(LFAIndexError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def import_extra(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``pip install 'lfa-index[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{module} is not installed; install it with `pip install 'lfa-index[{extra}]'` ({err})."
        ) from err
