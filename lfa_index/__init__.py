"""lfa-index: few-shot adaptation of any embedding model by Linear Feature Alignment."""

from .core import (
    LFA,
    DimensionMismatchError,
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    LFAIndexError,
    NonFiniteError,
    ShapeError,
    ZeroNormError,
    max_pool_frames,
)
from .index import AlignedIndex, DuplicateIdError, EmptyIndexError, NotFittedError
from .persistence import IndexFormatError, IndexPathError, IndexVersionError

__version__ = "0.1.0"

__all__ = [
    "LFA",
    "max_pool_frames",
    "LFAIndexError",
    "InvalidInputError",
    "InvalidParameterError",
    "NonFiniteError",
    "ZeroNormError",
    "ShapeError",
    "DimensionMismatchError",
    "LabelError",
    "AlignedIndex",
    "NotFittedError",
    "EmptyIndexError",
    "DuplicateIdError",
    "IndexFormatError",
    "IndexVersionError",
    "IndexPathError",
]
