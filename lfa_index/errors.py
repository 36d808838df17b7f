"""Every error and warning lfa-index raises on purpose, in one module.

Each error derives from :class:`LFAIndexError` and from the built-in exception a user would
naturally catch (``ValueError``, ``TypeError``, ``ImportError``, ``OSError``...), in the spirit of
scikit-learn's ``InvalidParameterError``. Messages say what was wrong and how to fix it.

This module sits below every other one (``core/`` included) and imports nothing from the package.

Example
-------
>>> from lfa_index.errors import LFAIndexError
>>> try:
...     index.predict(queries)
... except LFAIndexError as err:
...     print(err)
"""

from __future__ import annotations

try:  # scikit-learn's NotFittedError, where it is installed (a serving-only environment may lack it)
    from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
except ImportError:  # pragma: no cover - exercised by the torch-free serving test

    class _SklearnNotFittedError(ValueError, AttributeError):  # type: ignore[no-redef]
        """Stand-in with scikit-learn's bases."""


class LFAIndexError(Exception):
    """Base class of every error raised on purpose by lfa-index."""


# ------------------------------------------------------------------ inputs and parameters
class InvalidInputError(LFAIndexError, ValueError):
    """An input array (embeddings, labels, prototypes) is unusable as given."""


class InvalidParameterError(LFAIndexError, ValueError, TypeError):
    """A constructor or method parameter has a wrong type or value."""


class InputTypeError(InvalidInputError, TypeError):
    """An input array holds values of a type that is not a number (e.g. strings or dicts in an object array)."""


class NonFiniteError(InvalidInputError):
    """An array holds NaN or infinite values."""


class ZeroNormError(InvalidInputError):
    """An embedding row has zero norm, so it has no direction to align."""


class ShapeError(InvalidInputError):
    """An array has the wrong number of dimensions, is empty, or row counts disagree."""


class DimensionMismatchError(InvalidInputError):
    """Two embedding spaces have different dimensions where they must agree."""


class MemoryLimitError(InvalidInputError, MemoryError):
    """A fit would need more memory than the limit allows (``$LFA_INDEX_MEMORY_LIMIT`` or 80 % of RAM)."""


class LabelError(InvalidInputError):
    """Labels are not integers in ``0 .. n_classes - 1`` (or not known class names)."""


class MissingExtraError(LFAIndexError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


# ------------------------------------------------------------------ the index
class NotFittedError(LFAIndexError, _SklearnNotFittedError):
    """The index is used before :meth:`AlignedIndex.fit` (or :meth:`AlignedIndex.load`)."""


class EmptyIndexError(LFAIndexError, ValueError):
    """A corpus search was asked for before any image embedding was added."""


class DuplicateIdError(InvalidInputError):
    """Ids passed to :meth:`AlignedCorpus.add` repeat each other or ids already in the corpus."""


class IdsExhaustedError(InvalidInputError):
    """``add(ids=None)`` finds no int64 id left after the largest id held."""


# ------------------------------------------------------------------ saved indexes
class IndexFormatError(LFAIndexError, ValueError):
    """A directory is not a readable lfa-index: missing, foreign, corrupted, truncated or inconsistent."""


class IndexVersionError(IndexFormatError):
    """An index was written in an on-disk format version this library does not read: re-fit and re-save it."""


class IndexNotFoundError(IndexFormatError, FileNotFoundError):
    """Nothing is at the path given to :meth:`AlignedIndex.load`."""


class IndexPathError(LFAIndexError, FileExistsError):
    """The save target is not a place for an index: a file, or a directory holding foreign files."""


class IndexPermissionError(LFAIndexError, PermissionError):
    """The save target cannot be written: no permission, or a read-only file system."""


# ------------------------------------------------------------------ vector stores and batch jobs
class StoreUnavailableError(LFAIndexError, ConnectionError):
    """A vector store cannot be reached or opened at the given URI."""


class SchemaError(InvalidInputError):
    """A collection or table lacks the expected embedding / id column, or holds it with the wrong type."""


class RowCountError(LFAIndexError, RuntimeError):
    """The output of a batch job does not hold exactly the rows of its input."""


class OutputPathError(LFAIndexError, ValueError):
    """An output path is an input of the same call, lies inside one or holds one: writing would destroy it."""


# ------------------------------------------------------------------ embedding sources
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


class MissingFileError(LFAIndexError, FileNotFoundError):
    """An input file (embeddings, labels, class names, texts) does not exist."""


class FileFormatError(InvalidInputError):
    """An embeddings file has an unknown extension, lacks a key/column, or holds the wrong type."""


class UnknownEncoderError(LFAIndexError, ValueError):
    """An encoder SPEC string (``minilm``, ``st:NAME``, ``openai:MODEL``...) names no known source."""


# ------------------------------------------------------------------ the command line
class CLIError(LFAIndexError, ValueError):
    """A command-line input is unusable: a missing or contradictory option, an empty class list..."""


# ------------------------------------------------------------------ warnings
class TruncationWarning(UserWarning):
    """Some texts were longer than the model's maximum length and were truncated."""


class SkippedInputWarning(UserWarning):
    """Some inputs (unreadable images) were skipped; ``skipped_`` on the source lists them."""


class RandomWeightsWarning(UserWarning):
    """A vision backbone was named without a checkpoint, so it keeps random weights."""


class ApproximateIndexWarning(UserWarning):
    """A store's existing collection is searched through an approximate index: results can miss
    true neighbours (lfa-index creates exact ones)."""


# ------------------------------------------------------------------ store URIs
class StoreURIError(InvalidParameterError):
    """A store URI (``SCHEME:LOCATION#COLLECTION``) is malformed or names an unknown scheme."""


class CollectionNotFoundError(InvalidParameterError):
    """A store's collection (table, FAISS store directory) does not exist and no ``dim`` was given to create it."""
