"""Globally pooled features of supervised or self-supervised vision backbones (torchvision or timm)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.device import resolve_device
from ..core.validation import StrOptions
from ..errors import ModelUnavailableError
from ..extras import import_extra
from .base import BaseSource
from .cache import file_fingerprint, weights_fingerprint
from .images import N_VIEWS, ImageInput, center_crop, corner_crops, embed_image_views, resize_shorter

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_HEAD_NAMES = ("fc", "classifier", "head", "heads")
# Checkpoints nest their weights under one of these keys (Lightning, DINO, EMA, DDP wrappers).
_NESTING_KEYS = ("state_dict", "model", "teacher", "model_ema", "module", "network")


class VisionBackboneSource(BaseSource):
    """Image embeddings: a backbone's globally pooled features, its classifier removed.

    Parameters
    ----------
    arch : architecture name in ``library`` (``"resnet50"``, ``"mobilenet_v2"``, ``"vit_b_16"``...).
    checkpoint : local weights file (state dict, ``.pth``/``.pt``/``.bin`` loaded with
        ``weights_only=True``, or ``.safetensors``). Prefixes such as ``module.``, ``backbone.`` or
        ``module.encoder_q.`` (DDP, DINO, MoCo) are matched automatically and heads are ignored.
        ``None`` keeps random weights (only useful for tests).
    library : ``"torchvision"`` (default) or ``"timm"``.
    device : ``"auto"`` (default), ``"cpu"``, ``"cuda"``...
    image_size : side of the crop fed to the model (default 224).
    resize_size : shorter side after resizing, before cropping (default 256).
    mean, std : per-channel normalisation (default ImageNet's).
    interpolation : ``"bilinear"`` (default) or ``"bicubic"``.
    batch_size : images per forward pass (default 32); five-crop runs 5x as many views.
    strict : raise :class:`UnreadableImageError` on an unreadable image instead of skipping it.
    cache_dir : folder of the on-disk embedding cache; ``None`` (default) disables it.
    progress : show a tqdm progress bar (default True).

    Attributes
    ----------
    skipped_ : input indices skipped (unreadable) by the last ``embed_images`` call.

    Example
    -------
    >>> source = VisionBackboneSource("resnet50", "dino_resnet50_pretrain.pth")
    >>> support = source.embed_images(paths, five_crop=True)   # (N, 5, 2048)
    """

    _parameter_constraints: dict[str, list[Any]] = {
        **BaseSource._parameter_constraints,
        "library": [StrOptions({"torchvision", "timm"})],
        "interpolation": [StrOptions({"bilinear", "bicubic"})],
    }

    def __init__(
        self,
        arch: str = "resnet50",
        checkpoint: str | os.PathLike | None = None,
        *,
        library: str = "torchvision",
        device: str = "auto",
        image_size: int = 224,
        resize_size: int = 256,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        interpolation: str = "bilinear",
        batch_size: int = 32,
        strict: bool = False,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.arch = arch
        self.checkpoint = checkpoint
        self.library = library
        self.device = device
        self.image_size = image_size
        self.resize_size = resize_size
        self.mean = mean
        self.std = std
        self.interpolation = interpolation
        self.batch_size = batch_size
        self.strict = strict
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        weights = Path(self.checkpoint).name if self.checkpoint is not None else "random"
        return f"{self.library}:{self.arch}:{weights}"

    @property
    def dim(self) -> int:
        self._model()
        return self.dim_

    def embed_images(self, images: Sequence[ImageInput], *, five_crop: bool = False) -> np.ndarray:
        """Embed images: (N, dim), or (N, 5, dim) with ``five_crop=True`` (view 0 = the standard
        centre crop, then top-left, top-right, bottom-left, bottom-right). Rows L2-normalised;
        unreadable images are skipped (see ``skipped_``)."""
        rows, self.skipped_ = embed_image_views(self, images, five_crop=five_crop, encode_images=self._encode_images,
                                                encode_five_crops=self._encode_five_crops, extra="vision")
        return rows

    # --- preprocessing and forward ------------------------------------------------------------

    def _resample(self) -> int:
        Image = import_extra("PIL.Image", extra="vision", package="pillow")
        return Image.BILINEAR if self.interpolation == "bilinear" else Image.BICUBIC

    def _to_tensor(self, img: Any) -> Any:
        torch = import_extra("torch", extra="vision")
        x = np.asarray(img, dtype=np.float32) / 255.0
        x = (x - np.asarray(self.mean, dtype=np.float32)) / np.asarray(self.std, dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))

    def _centre_view(self, img: Any) -> Any:
        return center_crop(resize_shorter(img, self.resize_size, self._resample()), self.image_size)

    def _forward(self, views: list[Any]) -> np.ndarray:
        torch = import_extra("torch", extra="vision")
        model = self._model()
        batch = torch.stack([self._to_tensor(v) for v in views]).to(self.device_)
        with torch.inference_mode():
            return model(batch).flatten(1).float().cpu().numpy()

    def _encode_images(self, images: list[Any]) -> np.ndarray:
        return self._forward([self._centre_view(img) for img in images])

    def _encode_five_crops(self, images: list[Any]) -> np.ndarray:
        views = []
        for img in images:
            views.append(self._centre_view(img))
            views.extend(
                corner_crops(img, self.image_size, self._resample(), ratio=self.image_size / self.resize_size)
            )
        return self._forward(views).reshape(len(images), N_VIEWS, -1)

    def _identity(self) -> str:
        if self.checkpoint is None:
            weights = "random:" + self._model_fingerprint()
        else:
            weights = "file:" + file_fingerprint(self.checkpoint)
        return (
            f"vision|{self.library}|{self.arch}|{weights}|size={self.image_size}|resize={self.resize_size}"
            f"|mean={tuple(self.mean)}|std={tuple(self.std)}|{self.interpolation}"
        )

    def _model_fingerprint(self) -> str:
        if getattr(self, "fingerprint_", None) is None:
            self.fingerprint_ = weights_fingerprint(self._model())
        return self.fingerprint_

    # --- loading --------------------------------------------------------------------------------

    def _model(self) -> Any:
        if getattr(self, "model_", None) is None:
            self._load()
        return self.model_

    def _load(self) -> None:
        torch = import_extra("torch", extra="vision")
        self.check_params()
        if self.checkpoint is not None and not os.path.isfile(self.checkpoint):
            raise ModelUnavailableError(
                f"No checkpoint file at {self.checkpoint}; pass the path of a local weights file."
            )
        model = self._build()
        if self.checkpoint is not None:
            load_backbone_weights(
                model, read_state_dict(self.checkpoint), source=f"{self.checkpoint}", target=self.name
            )
        device = resolve_device(self.device)
        model.eval().to(device)
        with torch.inference_mode():
            probe = torch.zeros(1, 3, self.image_size, self.image_size, device=device)
            self.dim_ = int(model(probe).flatten(1).shape[1])
        self.model_, self.device_ = model, device

    def _build(self) -> Any:
        try:
            if self.library == "timm":
                timm = import_extra("timm", extra="vision")
                return timm.create_model(self.arch, pretrained=False, num_classes=0)
            torchvision = import_extra("torchvision", extra="vision")
            model = torchvision.models.get_model(self.arch, weights=None)
        except (RuntimeError, ValueError, KeyError) as err:
            raise ModelUnavailableError(
                f"{self.library} has no architecture {self.arch!r} ({err}); check arch= and library=."
            ) from err
        drop_classifier(model)
        return model


def drop_classifier(model: Any) -> None:
    """Replace a torchvision model's final Linear layer by Identity, so it returns pooled features."""
    torch = import_extra("torch", extra="vision")
    for name in _HEAD_NAMES:
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Linear):
            setattr(model, name, torch.nn.Identity())
            return
        if isinstance(head, torch.nn.Sequential):
            linear = [i for i, m in enumerate(head) if isinstance(m, torch.nn.Linear)]
            if linear:
                head[linear[-1]] = torch.nn.Identity()
                return


def read_state_dict(path: str | os.PathLike) -> dict[str, Any]:
    """Tensors of a checkpoint file, unwrapped from the usual nesting keys (never unpickles code)."""
    torch = import_extra("torch", extra="vision")
    try:
        if str(path).endswith(".safetensors"):
            from safetensors.torch import load_file

            obj: Any = load_file(str(path))
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError... on bad files
        raise ModelUnavailableError(
            f"Could not read the checkpoint {path} ({type(err).__name__}: {err}). It must be a state dict "
            "saved with torch.save or safetensors; pickled objects are refused (weights_only=True)."
        ) from err
    while isinstance(obj, dict):
        nested = next((obj[k] for k in _NESTING_KEYS if isinstance(obj.get(k), dict)), None)
        if nested is None:
            break
        obj = nested
    if not isinstance(obj, dict):
        raise ModelUnavailableError(f"The checkpoint {path} holds a {type(obj).__name__}, not a state dict.")
    return {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}


def load_backbone_weights(model: Any, state: dict[str, Any], *, source: str, target: str) -> None:
    """Load ``state`` into ``model``, stripping the wrapper prefix that matches most model keys.

    Extra checkpoint keys (classifier, projection heads, momentum encoders) are ignored; a missing or
    misshapen backbone weight raises :class:`ModelUnavailableError`.
    """
    expected = model.state_dict()
    prefixes: Counter[str] = Counter()
    for key in state:
        parts = key.split(".")
        for j in range(len(parts)):
            if ".".join(parts[j:]) in expected:
                prefixes[".".join(parts[:j]) + ("." if j else "")] += 1
                break
    prefix = max(prefixes, key=lambda p: (prefixes[p], -len(p))) if prefixes else ""
    matched = {
        k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix) and k[len(prefix) :] in expected
    }
    missing = [k for k in expected if k not in matched and not k.endswith("num_batches_tracked")]
    misshapen = [k for k, v in matched.items() if tuple(v.shape) != tuple(expected[k].shape)]
    if missing or misshapen:
        example = (missing or misshapen)[:3]
        raise ModelUnavailableError(
            f"The checkpoint {source} does not fit {target}: {len(missing)} of {len(expected)} backbone weights "
            f"are missing and {len(misshapen)} have another shape (e.g. {example}). Check arch= and library=."
        )
    model.load_state_dict(matched, strict=False)
