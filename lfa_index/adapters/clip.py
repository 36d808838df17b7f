"""Image and text towers of any open_clip model: prompts, five-crop views, video clips."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.video import max_pool_frames
from ..errors import InvalidInputError, InvalidParameterError, ModelUnavailableError
from ..extras import import_extra
from .base import BaseSource, hf_offline
from .cache import file_fingerprint, weights_fingerprint
from .images import N_VIEWS, ImageInput, check_images, corner_crops, embed_image_items, embed_image_views
from .prompts import PHOTO_TEMPLATE, prompt_ensemble


class OpenCLIPSource(BaseSource):
    """Image and text embeddings from an open_clip model.

    Parameters
    ----------
    model_name : open_clip architecture (``"ViT-B-32"``, ``"RN50"``, a name registered with
        ``open_clip.add_model_config``, or ``"local-dir:/path"``), or an already loaded open_clip
        model (used on its own device and put in eval mode; the cache knows it by a hash of its
        weights, taken once).
    pretrained : ``None`` (random weights), a local checkpoint file (state dict, loaded with
        ``weights_only=True``), or an open_clip tag such as ``"openai"`` (needs the network or the
        local Hugging Face cache). Must be None for a loaded model.
    tokenizer : texts -> token ids; default ``open_clip.get_tokenizer(model_name)``, or for a loaded
        model open_clip's CLIP tokenizer at the model's context length (pass the right one for
        models with another text tower, e.g. ``open_clip.get_tokenizer("ViT-B-16-SigLIP")``).
    preprocess : image -> tensor; default the model's own evaluation transform.
    device : ``"auto"`` (default), ``"cpu"``, ``"cuda"``...
    batch_size : images (or texts) per forward pass (default 64); five-crop runs 5x as many views.
    strict : raise :class:`UnreadableImageError` on an unreadable image instead of skipping it.
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Attributes
    ----------
    skipped_ : input indices skipped by the last ``embed_images`` / ``embed_videos`` call.

    Example
    -------
    >>> clip = OpenCLIPSource("ViT-B-32", pretrained="/models/vit_b_32_openai.pt")
    >>> prototypes = clip.embed_class_names(["cat", "dog"], CLIP_IMAGENET_TEMPLATES)   # (2, 512)
    >>> support = clip.embed_images(paths, five_crop=True)                             # (N, 5, 512)
    >>> OpenCLIPSource(open_clip.create_model("ViT-B-32", pretrained="/models/vit_b_32_openai.pt"))
    """

    def __init__(
        self,
        model_name: str | Any = "ViT-B-32",
        pretrained: str | os.PathLike | None = None,
        *,
        tokenizer: Any = None,
        preprocess: Any = None,
        device: str = "auto",
        batch_size: int = 64,
        strict: bool = False,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.model_name = model_name
        self.pretrained = pretrained
        self.tokenizer = tokenizer
        self.preprocess = preprocess
        self.device = device
        self.batch_size = batch_size
        self.strict = strict
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        if self._given_model() is not None:
            return f"open_clip:{type(self.model_name).__name__}:in-memory"
        if self.pretrained is None:
            weights = "random"
        elif os.path.isfile(self.pretrained):
            weights = Path(self.pretrained).name
        else:
            weights = str(self.pretrained)
        return f"open_clip:{self.model_name}:{weights}"

    @property
    def dim(self) -> int:
        self._model()
        return self.dim_

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed raw texts with the text tower: (N, dim) float32, rows L2-normalised."""
        return self._embed_texts_cached(texts, self._encode_texts)

    def embed_class_names(
        self, class_names: Sequence[str], templates: Sequence[str] = PHOTO_TEMPLATE
    ) -> np.ndarray:
        """Class prototypes: (C, dim), each the renormalised mean over ``templates`` (prompt ensembling)."""
        return prompt_ensemble(class_names, self.embed_texts, templates)

    def embed_images(self, images: Sequence[ImageInput], *, five_crop: bool = False) -> np.ndarray:
        """Embed images with the image tower.

        Returns (N, dim), or (N, 5, dim) with ``five_crop=True``: view 0 is the model's standard
        centre view (equal to the single-view embedding), views 1-4 the top-left, top-right,
        bottom-left and bottom-right crops. Unreadable images are skipped (see ``skipped_``).
        """
        rows, self.skipped_ = embed_image_views(self, images, five_crop=five_crop, encode_images=self._encode_images,
                                                encode_five_crops=self._encode_five_crops, extra="clip")
        return rows

    def embed_videos(self, clips: Sequence[Sequence[ImageInput] | np.ndarray]) -> np.ndarray:
        """One embedding per clip: per-frame image embeddings max-pooled (paper, section 5).

        ``clips`` holds N clips, each a sequence of frames or a (T, H, W, 3) uint8 array.
        Returns (N, dim); clips without a readable frame are skipped (see ``skipped_``).
        """
        if isinstance(clips, np.ndarray) and clips.ndim != 5:
            raise InvalidInputError(
                f"clips must be a list of clips or an (N, T, H, W, 3) array, got an array of shape {clips.shape}; "
                "wrap a single (T, H, W, 3) clip in a list."
            )
        clips = check_images(clips, name="clips")
        frames: list[ImageInput] = []
        owner: list[int] = []
        for c, clip in enumerate(clips):
            if isinstance(clip, np.ndarray) and clip.ndim != 4:
                raise InvalidInputError(
                    f"clip {c} is an array of shape {clip.shape}; expected (T, H, W, 3) frames."
                )
            if isinstance(clip, (str, os.PathLike)) or hasattr(clip, "getpixel"):
                raise InvalidInputError(
                    f"clip {c} is a single image ({clip!r:.60}); a clip is a sequence of frames (decode videos first)."
                )
            clip_frames = list(clip)
            if not clip_frames:
                raise InvalidInputError(f"clip {c} has no frames; pass at least one frame per clip.")
            frames.extend(clip_frames)
            owner.extend([c] * len(clip_frames))
        rows, skipped_frames = embed_image_items(
            self,
            frames,
            self._encode_images,
            modality="image",
            item_shape=lambda: (self.dim,),
            extra="clip",
        )
        skipped = set(skipped_frames)
        kept_owner = np.asarray([owner[i] for i in range(len(frames)) if i not in skipped], dtype=np.int64)
        pooled, self.skipped_ = [], []
        for c in range(len(clips)):
            clip_rows = rows[kept_owner == c]
            if len(clip_rows):
                pooled.append(max_pool_frames(clip_rows))
            else:
                self.skipped_.append(c)
        if not pooled:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.stack(pooled).astype(np.float32, copy=False)

    # --- model ----------------------------------------------------------------------------------

    def _encode_texts(self, texts: list[str]) -> np.ndarray:
        torch = import_extra("torch", extra="clip")
        model = self._model()
        tokens = self.tokenizer_(texts).to(self.device_)
        with torch.inference_mode():
            return model.encode_text(tokens).float().cpu().numpy()

    def _encode_pixels(self, pixels: Any) -> np.ndarray:
        torch = import_extra("torch", extra="clip")
        with torch.inference_mode():
            return self._model().encode_image(pixels.to(self.device_)).float().cpu().numpy()

    def _encode_images(self, images: list[Any]) -> np.ndarray:
        torch = import_extra("torch", extra="clip")
        self._model()
        return self._encode_pixels(torch.stack([self.preprocess_(img) for img in images]))

    def _encode_five_crops(self, images: list[Any]) -> np.ndarray:
        torch = import_extra("torch", extra="clip")
        self._model()
        Image = import_extra("PIL.Image", extra="clip", package="pillow")
        size = self.image_size_
        views = []
        for img in images:
            views.append(self.preprocess_(img))
            views.extend(self.preprocess_(c) for c in corner_crops(img, size, Image.BICUBIC))
        out = self._encode_pixels(torch.stack(views))
        return out.reshape(len(images), N_VIEWS, -1)

    def _identity(self) -> str:
        if self._given_model() is not None:
            return f"open_clip|{type(self.model_name).__name__}|weights:{self._model_fingerprint()}"
        if self.pretrained is None:
            weights = "random:" + self._model_fingerprint()
        elif os.path.isfile(self.pretrained):
            weights = "file:" + file_fingerprint(self.pretrained)
        else:
            weights = "tag:" + str(self.pretrained)
        return f"open_clip|{self.model_name}|{weights}"

    def _model_fingerprint(self) -> str:
        if getattr(self, "fingerprint_", None) is None:
            self.fingerprint_ = weights_fingerprint(self._model())
        return self.fingerprint_

    def _model(self) -> Any:
        if getattr(self, "model_", None) is None:
            self._load()
        return self.model_

    def _given_model(self) -> Any | None:
        """The model object passed as ``model_name``; None for an architecture name."""
        given = self.model_name
        if isinstance(given, str):
            return None
        if callable(getattr(given, "encode_image", None)) and callable(getattr(given, "encode_text", None)):
            return given
        raise InvalidParameterError(
            "model_name must be an open_clip architecture name or a loaded open_clip model, "
            f"got {type(given).__name__}."
        )

    def _load(self) -> None:
        open_clip = import_extra("open_clip", extra="clip", package="open_clip_torch")
        torch = import_extra("torch", extra="clip")
        from ..core.device import resolve_device

        given = self._given_model()
        if given is not None:
            if self.pretrained is not None:
                raise InvalidParameterError(
                    f"pretrained={self.pretrained!r} names weights for an architecture, but model_name is a loaded "
                    "model that has its weights already: drop pretrained=."
                )
            model = given
            parameter = next(model.parameters(), None)
            device = parameter.device if parameter is not None else resolve_device(self.device)
            preprocess = self.preprocess or _evaluation_transform(open_clip, model)
            tokenizer = self.tokenizer or _clip_tokenizer(open_clip, model)
            self._finish_load(open_clip, torch, model, preprocess, tokenizer, device)
            return
        device = resolve_device(self.device)
        pretrained = self._checked_pretrained(open_clip)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                self.model_name, pretrained=pretrained, device=device, weights_only=True
            )
            tokenizer = open_clip.get_tokenizer(self.model_name)
        except (RuntimeError, OSError, ValueError, KeyError) as err:
            if pretrained is not None and not os.path.isfile(pretrained):
                raise ModelUnavailableError(
                    f"Could not get the weights of {self.model_name!r} / {pretrained!r} ({err}): downloading "
                    "them needs network access. Download the checkpoint where there is network and pass its "
                    "local file path as pretrained=..."
                ) from err
            raise ModelUnavailableError(
                f"Could not load open_clip model {self.model_name!r} with pretrained={self.pretrained!r}: {err}. "
                f"Check the model name (open_clip.list_models()) and that the checkpoint fits it."
            ) from err
        self._finish_load(open_clip, torch, model, self.preprocess or preprocess, self.tokenizer or tokenizer, device)

    def _finish_load(
        self, open_clip: Any, torch: Any, model: Any, preprocess: Any, tokenizer: Any, device: Any
    ) -> None:
        model.eval()
        size = open_clip.get_model_preprocess_cfg(model).get("size", 224)
        self.image_size_ = int(size if isinstance(size, int) else size[0])
        self.preprocess_, self.tokenizer_, self.device_ = preprocess, tokenizer, device
        self.model_ = model
        with torch.inference_mode():
            self.dim_ = int(model.encode_text(tokenizer(["a"]).to(device)).shape[-1])

    def _checked_pretrained(self, open_clip: Any) -> str | None:
        if self.pretrained is None:
            return None
        value = os.fspath(self.pretrained)
        if os.path.isfile(value):
            return value
        tags = open_clip.list_pretrained_tags_by_model(self.model_name)
        if value not in tags:
            raise ModelUnavailableError(
                f"pretrained={value!r} is neither a checkpoint file nor a known tag of {self.model_name!r} "
                f"(tags: {tags or 'none'}). Pass an existing local checkpoint path, a tag, or None."
            )
        if hf_offline():
            raise ModelUnavailableError(
                f"The weights of {self.model_name!r} / {value!r} must be downloaded, which needs network "
                "access (offline mode is on). Download the checkpoint where there is network and pass "
                "its local file path as pretrained=..."
            )
        return value


def _evaluation_transform(open_clip: Any, model: Any) -> Any:
    """The evaluation image transform that open_clip builds for ``model`` from its preprocessing config."""
    cfg = dict(open_clip.get_model_preprocess_cfg(model))
    try:
        from open_clip.transform import PreprocessCfg, image_transform_v2
    except ImportError:  # open_clip < 2.24
        return open_clip.image_transform(cfg.get("size", 224), is_train=False, mean=cfg.get("mean"), std=cfg.get("std"))
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False)


def _clip_tokenizer(open_clip: Any, model: Any) -> Any:
    """open_clip's CLIP tokenizer at ``model``'s context length; refused for another text tower."""
    vocab = getattr(model, "vocab_size", None)
    if type(getattr(model, "text", None)).__name__ == "HFTextEncoder" or vocab not in (None, 49408):
        raise InvalidParameterError(
            f"the loaded model's text tower is not open_clip's CLIP transformer (vocabulary {vocab}), so its "
            "tokenizer cannot be guessed: pass tokenizer=open_clip.get_tokenizer(ARCHITECTURE)."
        )
    return functools.partial(open_clip.tokenize, context_length=int(getattr(model, "context_length", 77)))
