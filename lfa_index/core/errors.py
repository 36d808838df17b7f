"""Typed errors of lfa-index.

Every error the library raises on purpose derives from :class:`LFAIndexError` and from the
built-in exception a user would naturally catch (``ValueError`` or ``TypeError``), in the spirit
of scikit-learn's ``InvalidParameterError``. Messages say what was wrong and how to fix it.
"""

from __future__ import annotations


class LFAIndexError(Exception):
    """Base class of every error raised on purpose by lfa-index."""


class InvalidInputError(LFAIndexError, ValueError):
    """An input array (embeddings, labels, prototypes) is unusable as given."""


class InvalidParameterError(LFAIndexError, ValueError, TypeError):
    """A constructor or method parameter has a wrong type or value."""


class NonFiniteError(InvalidInputError):
    """An array holds NaN or infinite values."""


class ZeroNormError(InvalidInputError):
    """An embedding row has zero norm, so it has no direction to align."""


class ShapeError(InvalidInputError):
    """An array has the wrong number of dimensions, is empty, or row counts disagree."""


class DimensionMismatchError(InvalidInputError):
    """Two embedding spaces have different dimensions where they must agree."""


class LabelError(InvalidInputError):
    """Labels are not integers in ``0 .. n_classes - 1`` (or not known class names)."""
