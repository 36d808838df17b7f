"""Typed errors and warnings of the embedding sources.

Each error derives from :class:`~lfa_index.core.errors.LFAIndexError` and from the built-in
exception a user would naturally catch, like the errors of the core.
"""

from __future__ import annotations

from ..core.errors import InvalidInputError, LFAIndexError


class MissingDependencyError(LFAIndexError, ImportError):
    """An optional package that this source needs is not installed."""


class ModelUnavailableError(LFAIndexError, OSError):
    """A model or checkpoint cannot be loaded (not on disk and no network, or unreadable)."""


class MissingAPIKeyError(LFAIndexError, ValueError):
    """No API key was given and none is set in the environment."""


class EmbeddingAPIError(LFAIndexError, RuntimeError):
    """A remote embedding API failed for good (retries spent, or a non-retryable answer)."""


class UnsupportedModalityError(LFAIndexError, TypeError):
    """The source cannot embed this kind of input (e.g. images with a text-only model)."""


class UnreadableImageError(InvalidInputError):
    """An image could not be read or decoded (raised with ``strict=True``)."""


class FileFormatError(InvalidInputError):
    """An embeddings file has an unknown extension, lacks a key/column, or holds the wrong type."""


class UnknownEncoderError(LFAIndexError, ValueError):
    """An encoder SPEC string (``minilm``, ``st:NAME``, ``openai:MODEL``...) names no known source."""


class TruncationWarning(UserWarning):
    """Some texts were longer than the model's maximum length and were truncated."""


class SkippedInputWarning(UserWarning):
    """Some inputs (unreadable images) were skipped; ``skipped_`` on the source lists them."""


class RandomWeightsWarning(UserWarning):
    """A vision backbone was named without a checkpoint, so it keeps random weights."""
