"""Class-name prompts: standard templates and prompt ensembling (paper, section 5).

A class prototype is the text embedding of its name inserted into templates. With several
templates the prototype is the mean of the L2-normalised template embeddings, renormalised
(CLIP's prompt ensembling).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..arrays import l2_normalize
from ..core.validation import check_texts
from ..errors import InvalidInputError, InvalidParameterError

#: The single template used by the paper and CoOp for generic image datasets.
PHOTO_TEMPLATE: tuple[str, ...] = ("a photo of a {}.",)

#: The paper's template for action-recognition videos.
VIDEO_FRAME_TEMPLATE: tuple[str, ...] = ("a video frame of a person {}.",)

#: CoOp's hand-written template per dataset (Zhou et al., 2022, ``CUSTOM_TEMPLATES``).
COOP_TEMPLATES: dict[str, tuple[str, ...]] = {
    "OxfordPets": ("a photo of a {}, a type of pet.",),
    "OxfordFlowers": ("a photo of a {}, a type of flower.",),
    "FGVCAircraft": ("a photo of a {}, a type of aircraft.",),
    "DescribableTextures": ("{} texture.",),
    "EuroSAT": ("a centered satellite photo of {}.",),
    "StanfordCars": ("a photo of a {}.",),
    "Food101": ("a photo of {}, a type of food.",),
    "SUN397": ("a photo of a {}.",),
    "Caltech101": ("a photo of a {}.",),
    "UCF101": ("a photo of a person doing {}.",),
    "ImageNet": ("a photo of a {}.",),
}

#: CLIP's 80-template ImageNet prompt ensemble (Radford et al., 2021).
CLIP_IMAGENET_TEMPLATES: tuple[str, ...] = (
    "a bad photo of a {}.",
    "a photo of many {}.",
    "a sculpture of a {}.",
    "a photo of the hard to see {}.",
    "a low resolution photo of the {}.",
    "a rendering of a {}.",
    "graffiti of a {}.",
    "a bad photo of the {}.",
    "a cropped photo of the {}.",
    "a tattoo of a {}.",
    "the embroidered {}.",
    "a photo of a hard to see {}.",
    "a bright photo of a {}.",
    "a photo of a clean {}.",
    "a photo of a dirty {}.",
    "a dark photo of the {}.",
    "a drawing of a {}.",
    "a photo of my {}.",
    "the plastic {}.",
    "a photo of the cool {}.",
    "a close-up photo of a {}.",
    "a black and white photo of the {}.",
    "a painting of the {}.",
    "a painting of a {}.",
    "a pixelated photo of the {}.",
    "a sculpture of the {}.",
    "a bright photo of the {}.",
    "a cropped photo of a {}.",
    "a plastic {}.",
    "a photo of the dirty {}.",
    "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.",
    "a photo of the {}.",
    "a good photo of the {}.",
    "a rendering of the {}.",
    "a {} in a video game.",
    "a photo of one {}.",
    "a doodle of a {}.",
    "a close-up photo of the {}.",
    "a photo of a {}.",
    "the origami {}.",
    "the {} in a video game.",
    "a sketch of a {}.",
    "a doodle of the {}.",
    "a origami {}.",
    "a low resolution photo of a {}.",
    "the toy {}.",
    "a rendition of the {}.",
    "a photo of the clean {}.",
    "a photo of a large {}.",
    "a rendition of a {}.",
    "a photo of a nice {}.",
    "a photo of a weird {}.",
    "a blurry photo of a {}.",
    "a cartoon {}.",
    "art of a {}.",
    "a sketch of the {}.",
    "a embroidered {}.",
    "a pixelated photo of a {}.",
    "itap of the {}.",
    "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.",
    "a plushie {}.",
    "a photo of the nice {}.",
    "a photo of the small {}.",
    "a photo of the weird {}.",
    "the cartoon {}.",
    "art of the {}.",
    "a drawing of the {}.",
    "a photo of the large {}.",
    "a black and white photo of a {}.",
    "the plushie {}.",
    "a dark photo of a {}.",
    "itap of a {}.",
    "graffiti of the {}.",
    "a toy {}.",
    "itap of my {}.",
    "a photo of a cool {}.",
    "a photo of a small {}.",
    "a tattoo of the {}.",
)

#: The 7-template subset of the ImageNet ensemble selected in the CLIP notebooks.
CLIP_IMAGENET_TEMPLATES_SMALL: tuple[str, ...] = (
    "itap of a {}.",
    "a bad photo of the {}.",
    "a origami {}.",
    "a photo of the large {}.",
    "a {} in a video game.",
    "art of the {}.",
    "a photo of the small {}.",
)


def fill_templates(class_names: Sequence[str], templates: Sequence[str]) -> list[str]:
    """Prompts for every (class, template) pair, class-major: ``C * T`` strings."""
    names = check_texts(class_names, name="class_names")
    if isinstance(templates, str):
        raise InvalidParameterError(
            "templates must be a sequence of strings such as ('a photo of a {}.',), got a single string; "
            "wrap it in a tuple."
        )
    templates = list(templates)
    if not templates:
        raise InvalidParameterError(
            "templates is empty; pass at least one template such as 'a photo of a {}.'."
        )
    bad = [t for t in templates if not isinstance(t, str) or t.count("{}") != 1]
    if bad:
        raise InvalidParameterError(
            f"each template must be a string with exactly one '{{}}' placeholder for the class name; got {bad[0]!r}."
        )
    return [t.replace("{}", name) for name in names for t in templates]


def prompt_ensemble(
    class_names: Sequence[str],
    embed_texts: Callable[[list[str]], np.ndarray],
    templates: Sequence[str] = PHOTO_TEMPLATE,
) -> np.ndarray:
    """One prototype per class: the renormalised mean of its normalised template embeddings.

    Parameters
    ----------
    class_names : C class names, e.g. ``["cat", "dog"]``.
    embed_texts : any text embedder, e.g. ``source.embed_texts`` of a text or CLIP source.
    templates : T strings with one ``{}`` each; default ``("a photo of a {}.",)``.

    Returns
    -------
    ndarray (C, d), float32, rows L2-normalised.

    Example
    -------
    >>> protos = prompt_ensemble(["cat", "dog"], clip.embed_texts, CLIP_IMAGENET_TEMPLATES)
    """
    prompts = fill_templates(class_names, templates)
    n_classes, n_templates = len(prompts) // len(templates), len(templates)
    emb = l2_normalize(embed_texts(prompts))
    if emb.ndim != 2 or emb.shape[0] != len(prompts):
        raise InvalidInputError(
            f"embed_texts returned shape {emb.shape} for {len(prompts)} prompts; expected ({len(prompts)}, d)."
        )
    return l2_normalize(emb.reshape(n_classes, n_templates, -1).mean(axis=1))
