"""lfa-index: few-shot adaptation of any embedding model by Linear Feature Alignment."""

from .core import LFA, max_pool_frames
from .errors import (
    DimensionMismatchError,
    DuplicateIdError,
    EmptyIndexError,
    IdsExhaustedError,
    IndexFormatError,
    IndexNotFoundError,
    IndexPathError,
    IndexPermissionError,
    IndexVersionError,
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    LFAIndexError,
    MemoryLimitError,
    MissingExtraError,
    MissingFileError,
    NonFiniteError,
    NotFittedError,
    ShapeError,
    ZeroNormError,
)
from .index import AlignedCorpus, AlignedIndex, EmbeddingAligner, LabelSpace

__version__ = "0.1.0"

__all__ = [
    "LFA",
    "max_pool_frames",
    "LFAIndexError",
    "MissingExtraError",
    "InvalidInputError",
    "InvalidParameterError",
    "NonFiniteError",
    "ZeroNormError",
    "ShapeError",
    "DimensionMismatchError",
    "LabelError",
    "MemoryLimitError",
    "AlignedIndex",
    "AlignedCorpus",
    "EmbeddingAligner",
    "LabelSpace",
    "NotFittedError",
    "EmptyIndexError",
    "DuplicateIdError",
    "IdsExhaustedError",
    "IndexFormatError",
    "IndexVersionError",
    "IndexPathError",
    "IndexNotFoundError",
    "IndexPermissionError",
    "MissingFileError",
]
