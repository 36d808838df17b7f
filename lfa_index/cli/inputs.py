"""The inputs of a command, from its options: support, eval, pool or query rows, embedded; classes.

A role (support set, eval set, pool, queries) is given one way: an embeddings file, images or
texts (or, for the support set, rows of a vector store). Raw texts and images are embedded by
the encoder that ``--model`` names. Stores are named by URI (:func:`lfa_index.stores.open_store`).
"""

from __future__ import annotations

import argparse
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from lfa_index import AlignedCorpus, AlignedIndex, LabelSpace
from lfa_index.adapters import (
    ENCODER_FORMS,
    PHOTO_TEMPLATE,
    EmbeddingSource,
    SkippedInputWarning,
    UnreadableImageError,
    load_embeddings,
    make_encoder,
    prompt_ensemble,
)
from lfa_index.errors import CLIError, CollectionNotFoundError, IndexNotFoundError, LabelError
from lfa_index.stores import FaissStore, VectorStore, open_store, support_from_store

from .console import PROG, Console, one_line
from .options import cache_dir
from .readers import (
    Items,
    read_class_names,
    read_classes,
    read_embedding_file,
    read_image_folder,
    read_image_paths,
    read_texts,
)


def encoder_from_args(args: argparse.Namespace, console: Console, spec: str | None) -> EmbeddingSource | None:
    """The encoder SPEC names, with the command's cache, device and ``--strict``; None without a SPEC."""
    if not spec:
        return None
    return make_encoder(spec, cache_dir=cache_dir(args), progress=console.progress, device=args.device,
                        strict=getattr(args, "strict", False))


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


def require_model(items: Items | None, args: argparse.Namespace) -> None:
    """Fail before any work when raw texts or images come without an encoder to embed them."""
    if items is not None and items.kind != "embeddings" and not getattr(args, "model", None):
        raise CLIError(f"embedding {items.kind} needs an encoder: pass --model SPEC. " + one_line(ENCODER_FORMS))


def embed_items(items: Items, encoder: EmbeddingSource | None, console: Console, *, strict: bool) -> Items:
    """Embed texts or images with ``encoder``; unreadable images are dropped with one warning."""
    if items.embeddings is not None:
        return items
    if encoder is None:
        raise CLIError(f"embedding {items.kind} needs an encoder: pass --model SPEC. " + one_line(ENCODER_FORMS))
    if items.texts is not None:
        return Items(ids=items.ids, labels=items.labels, embeddings=encoder.embed_texts(items.texts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedInputWarning)  # replaced by the CLI's own message below
        try:
            x = encoder.embed_images([str(p) for p in items.images])
        except UnreadableImageError as err:
            text = str(err).split(" Fix or remove it")[0]
            raise CLIError(
                f"{text}; fix or remove it, or drop --strict to skip unreadable images with a warning."
            ) from err
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


def query_items(args: argparse.Namespace, console: Console, index: AlignedIndex) -> Items | None:
    """The item queries of ``predict`` / ``search``, embedded; None when none were given."""
    items = unembedded_queries(args, index)
    if items is None:
        return None
    return embed_items(items, encoder_from_args(args, console, args.model), console, strict=args.strict)


def unembedded_queries(args: argparse.Namespace, index: AlignedIndex) -> Items | None:
    """The item queries, read but not embedded yet (their encoder resolved and checked); None when none were given."""
    items = collect_items(args, file="queries", images="images", texts="texts", text="text", labels="labels",
                          need_labels=False, what="queries")
    if items is not None and items.kind != "embeddings":
        use_saved_encoders(args, index)
        require_model(items, args)
    return items


def use_saved_encoders(args: argparse.Namespace, index: AlignedIndex) -> None:
    """Fill ``--model`` / ``--text-model`` from the encoder SPECs saved in the index; refuse a different
    SPEC (it embeds into another space: silent garbage) unless ``--force``."""
    saved = index.encoders_
    for flag, attr, side in (("--model", "model", "document"), ("--text-model", "text_model", "name")):
        if not hasattr(args, attr):
            continue
        given = getattr(args, attr)
        if given is None:
            setattr(args, attr, saved[side])
        elif saved[side] is not None and given != saved[side] and not getattr(args, "force", False):
            what = "queries" if side == "document" else "prompts"
            raise CLIError(
                f"{args.index} was fitted with {flag} {saved[side]}; {flag} {given} would embed the {what} into "
                f"another space and give meaningless answers. Drop {flag} (the saved one is used), or pass --force "
                "to use it anyway."
            )


def check_labels(space: LabelSpace, labels: np.ndarray, flag: str, unknown_label: str | None = None) -> np.ndarray:
    """Class positions of ``labels`` (the labels of ``flag``'s rows) in ``space`` (an index's ``label_space_``),
    -1 where they equal ``unknown_label``; a :class:`CLIError` naming the labels that are neither (called
    before anything is embedded)."""
    labels = np.asarray(labels)
    outside = labels.astype(str) == unknown_label if unknown_label is not None else np.zeros(len(labels), bool)
    positions = np.full(len(labels), -1, dtype=np.int64)
    try:
        positions[~outside] = space.lookup(labels[~outside], name=f"the labels of {flag}")
    except LabelError as err:
        known = {str(c) for c in space.classes}
        strangers = sorted({str(v) for v in labels[~outside]} - known)
        if unknown_label is not None:
            hint = ""
        elif len(strangers) == 1:
            hint = f"; if they mark out-of-scope rows, pass --unknown-label {strangers[0]}"
        else:
            hint = "; if one of them marks out-of-scope rows, pass --unknown-label NAME"
        raise CLIError(
            f"the labels of {flag} hold {len(strangers)} name(s) not among the index's {len(known)} classes: "
            f"{strangers[:5]}{hint} (or fit the index with those classes in --classes)."
        ) from err
    return positions


def class_list(args: argparse.Namespace, labels: np.ndarray | None) -> list[str] | None:
    """Class names from --classes, else the sorted distinct string labels, else None (integer labels).

    Labels that --classes does not list fail here, before anything is embedded."""
    if not getattr(args, "classes", None):
        return sorted(set(labels.tolist())) if labels is not None and labels.dtype.kind == "U" else None
    names = read_classes(args.classes)
    if labels is not None and labels.dtype.kind == "U":
        missing = sorted(set(labels.tolist()) - set(names))
        if missing:
            raise CLIError(
                f"the support labels hold {len(missing)} name(s) that --classes {args.classes} does not list: "
                f"{missing[:5]}; add them to {args.classes} or drop those rows."
            )
    elif labels is not None and len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
        raise CLIError(
            f"integer labels index the {len(names)} names of --classes {args.classes}: they must lie in "
            f"0..{len(names) - 1}, got {int(labels.min())}..{int(labels.max())}."
        )
    return names


def labelled_rows(path: str, labels_path: str | None, args: argparse.Namespace, what: str) -> Items:
    """Labelled rows of one file, not embedded yet: a CSV (or .tsv) of texts, else an embeddings file."""
    if path.lower().endswith((".csv", ".tsv")):
        items = read_texts(path, text_column=args.text_column, label_column=args.label_column, need_labels=True)
    else:
        items = read_embedding_file(path, labels_path)
    if items.labels is None:
        raise CLIError(f"the {what} need labels: {path} has none (use a file with a labels array, or a labels file).")
    return items


def readable_names(args: argparse.Namespace, class_names: list[str]) -> list[str]:
    """The names to embed for ``class_names``: their entries in --class-names FILE, else the names as given."""
    path = getattr(args, "class_names", None)
    if not path:
        return class_names
    mapping = read_class_names(path)
    missing = [n for n in class_names if n not in mapping]
    if missing:
        raise CLIError(
            f"--class-names {path} gives no readable name for {len(missing)} class(es): {missing[:5]}; add a "
            "line for each."
        )
    return [mapping[n] for n in class_names]


def class_prototypes(
    args: argparse.Namespace, console: Console, class_names: list[str] | None, *, images: bool,
    model_encoder: EmbeddingSource | None,
) -> np.ndarray:
    """Prototypes from --prototypes, else the class names embedded by --text-model (or --model)."""
    if args.prototypes:
        if args.text_model:
            raise CLIError("give the class prototypes one way only: --prototypes FILE or --text-model SPEC.")
        prototypes, _ = load_embeddings(args.prototypes)
        return prototypes
    encoder = encoder_from_args(args, console, args.text_model) if args.text_model else model_encoder
    if encoder is None:
        raise CLIError(
            "class prototypes are needed: pass --prototypes FILE (one row per class) "
            "or --text-model SPEC to embed the class names."
        )
    if class_names is None:
        raise CLIError(
            "integer labels give no class names to embed: pass --classes FILE (one name per line, in label order)."
        )
    templates = tuple(args.template) if args.template else (PHOTO_TEMPLATE if images else ("{}",))
    names = readable_names(args, class_names)
    mapped = " (readable names from --class-names)" if names != class_names else ""
    console.note(f"embedding {len(class_names)} class names{mapped} with {encoder.name} (templates: {list(templates)})")
    return prompt_ensemble(names, encoder.embed_texts, templates)


def load_index(path: str, device: str) -> AlignedIndex:
    """The index saved at ``path`` (one that a crashed save moved aside is recovered), or a
    :class:`CLIError` saying how to create one."""
    try:
        return AlignedIndex.load(path, device=None if device == "auto" else device)
    except IndexNotFoundError as err:
        raise CLIError(f"no index at {path}; create one with `{PROG} fit ... -o {path}`.") from err


def corpus_path(index_path: str) -> Path:
    """Where ``fit --corpus`` saves the aligned corpus of the index at ``index_path``: beside it, ``INDEX.corpus``."""
    path = Path(index_path)
    path = path if path.name else path.resolve()
    return path.with_name(path.name + ".corpus")


def load_corpus(index_path: str, device: str) -> AlignedCorpus | None:
    """The aligned corpus saved beside the index at ``index_path`` by ``fit --corpus``, or None."""
    path = corpus_path(index_path)
    return AlignedCorpus.load(path, device=None if device == "auto" else device) if path.exists() else None


@contextmanager
def opened_store(uri: str) -> Iterator[VectorStore]:
    """The store ``uri`` names (``SCHEME:LOCATION#COLLECTION``), an existing one only; closed at the end."""
    try:
        store = open_store(uri)
    except CollectionNotFoundError as err:
        raise CLIError(
            f"{uri}: no such collection; check the name after '#', or create the collection and add rows to it first "
            "(the commands read existing collections only)."
        ) from err
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if callable(close):
            close()


def save_store(store: VectorStore) -> None:
    """Write a FAISS store back to its directory (the engines' stores commit every write themselves)."""
    if isinstance(store, FaissStore) and store.path is not None:
        store.save()


def store_support(uri: str, label_field: str, console: Console) -> Items:
    """Labelled support rows of a store: its vectors, and the values of ``label_field`` as labels."""
    with opened_store(uri) as store:
        embeddings, labels = support_from_store(store, label_field=label_field)
        console.note(f"read {len(embeddings)} labelled rows from {store.location}")
    return Items(ids=[str(i) for i in range(len(embeddings))], labels=labels, embeddings=embeddings)
