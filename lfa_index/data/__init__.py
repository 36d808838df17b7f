"""Data for the demo: a Banking77 subset shipped with the package, and the project's shared
few-shot sets (CLIP image features) when they are on disk.

Example
-------
>>> subset = banking77_subset()
>>> len(subset.train_texts), len(subset.class_names)
(1848, 77)
>>> root = find_shared_data()          # None when $LFA_SHARED_DATA is unset or not a folder
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..arrays import l2_normalize
from ..errors import InvalidInputError

BANKING77_CREDIT = (
    "Banking77 by PolyAI (Casanueva et al., \"Efficient Intent Detection with Dual Sentence Encoders\", "
    "NLP4ConvAI 2020), CC BY 4.0; a subset ships in lfa_index/data/banking77 with its LICENSE."
)
SHARED_DATA_ENV = "LFA_SHARED_DATA"
CLIP_SETS: tuple[str, ...] = ("caltech101", "dtd", "oxford_pets")
CLIP_FILES: tuple[str, ...] = ("classnames.json", "val_f.npy", "val_l.npy", "test_f.npy", "test_l.npy")


@dataclass(frozen=True)
class LabelledTexts:
    """A text classification set: pool (few-shot support is drawn from it) and eval texts.

    ``*_labels`` are int64 in 0..C-1, indexing ``class_names`` (readable) and ``class_ids``.
    """

    train_texts: list[str]
    train_labels: np.ndarray
    test_texts: list[str]
    test_labels: np.ndarray
    class_ids: list[str]
    class_names: list[str]


@dataclass(frozen=True)
class ImageFeatures:
    """Precomputed image features of a few-shot set (rows L2-normalised, float32)."""

    name: str
    pool_features: np.ndarray
    pool_labels: np.ndarray
    eval_features: np.ndarray
    eval_labels: np.ndarray
    class_names: list[str]


def banking77_subset() -> LabelledTexts:
    """The shipped Banking77 subset: 24 pool and 15 eval texts for each of the 77 intents."""
    folder = resources.files(__name__) / "banking77"
    class_ids = json.loads((folder / "categories.json").read_text(encoding="utf-8"))
    position = {c: i for i, c in enumerate(class_ids)}

    def read(name: str) -> tuple[list[str], np.ndarray]:
        with (folder / name).open("r", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return [r["text"] for r in rows], np.array([position[r["category"]] for r in rows], dtype=np.int64)

    train_texts, train_labels = read("train.csv")
    test_texts, test_labels = read("test.csv")
    return LabelledTexts(
        train_texts, train_labels, test_texts, test_labels, class_ids, [c.replace("_", " ") for c in class_ids]
    )


def find_shared_data(explicit: str | os.PathLike | None = None) -> Path | None:
    """The shared data folder: ``explicit``, else ``$LFA_SHARED_DATA``, else None.

    Returns None when ``$LFA_SHARED_DATA`` is unset or not a folder. An ``explicit`` folder that
    does not exist raises :class:`InvalidInputError` (the user asked for it).
    """
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise InvalidInputError(
                f"--data {path} is not a folder; point it at the shared data folder (holding clip_vitb32/)."
            )
        return path
    env = os.environ.get(SHARED_DATA_ENV, "").strip()
    if not env:
        return None
    path = Path(env).expanduser()
    return path if path.is_dir() else None


def has_clip_set(root: Path, name: str) -> bool:
    """True when ``root/clip_vitb32/name`` holds the feature files of one CLIP set."""
    folder = Path(root) / "clip_vitb32" / name
    return all((folder / f).is_file() for f in CLIP_FILES)


def load_clip_features(root: Path, name: str) -> ImageFeatures:
    """CLIP ViT-B/32 image features of one shared set (pool = ``val_*``, eval = ``test_*``).

    Class names are readable (``_`` replaced by a space).
    """
    folder = Path(root) / "clip_vitb32" / name
    if not has_clip_set(root, name):
        raise InvalidInputError(f"{folder} lacks the CLIP feature files ({', '.join(CLIP_FILES)}).")

    def features(file: str) -> np.ndarray:
        return l2_normalize(np.load(folder / file, allow_pickle=False))

    names = json.loads((folder / "classnames.json").read_text(encoding="utf-8"))
    return ImageFeatures(
        name=name,
        pool_features=features("val_f.npy"),
        pool_labels=np.load(folder / "val_l.npy", allow_pickle=False).astype(np.int64),
        eval_features=features("test_f.npy"),
        eval_labels=np.load(folder / "test_l.npy", allow_pickle=False).astype(np.int64),
        class_names=[n.replace("_", " ") for n in names],
    )
