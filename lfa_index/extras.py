"""Optional dependencies, imported when first needed: a missing one raises :class:`MissingExtraError`.

Example
-------
>>> pymilvus = import_extra("pymilvus", "milvus")
>>> Image = import_extra("PIL.Image", "vision", package="pillow")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingExtraError


def import_extra(module: str, extra: str, *, package: str | None = None) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming ``pip install 'lfa-index[extra]'``.

    ``package`` is the distribution to name when it differs from the module (``pillow`` for ``PIL``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"the package '{package or module}' could not be imported ({err}); "
            f"install it with: pip install 'lfa-index[{extra}]'"
        ) from err
