"""Inputs read from the command line's files: embeddings, labels, class lists, texts, images.

Each reader returns :class:`Items` (rows not embedded yet, or embeddings) or a plain list, and
raises :class:`CLIError` saying how to fix an unusable file. Text files are UTF-8, with or without
a byte-order mark (spreadsheets write one).
"""

from __future__ import annotations

import contextlib
import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from lfa_index import LFAIndexError
from lfa_index.adapters import load_embeddings
from lfa_index.adapters.embedding_files import decoding_errors, describe_error
from lfa_index.errors import CLIError, MissingFileError

LABEL_COLUMNS = ("label", "labels", "category", "class", "intent", "y")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
EMBEDDING_FILES = ".npy, .npz, .safetensors, .parquet or .faiss"


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


@contextlib.contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Turn any decoding failure while reading ``path`` into one :class:`CLIError` naming the file."""
    try:
        yield
    except LFAIndexError:
        raise
    except UnicodeDecodeError as err:
        raise CLIError(
            f"{path} is not UTF-8 text (byte {err.object[err.start:err.start + 1]!r} at position {err.start}); "
            f"save the {what} as UTF-8."
        ) from err
    except (csv.Error, *decoding_errors()) as err:
        raise CLIError(f"{path} could not be read as {what} ({describe_error(err)}); fix or replace the file.") from err
    except FileNotFoundError as err:
        raise MissingFileError(f"no {what} file at {path}; check the path.") from err
    except OSError as err:  # a folder, no permission...
        raise CLIError(f"{path} cannot be read as {what} ({err.strerror or err}); pass a readable file.") from err


def read_labels(path: str) -> np.ndarray:
    """Labels from a .npy array (no pickles), a JSON list or a text file (one label per line)."""
    p = Path(path)
    with reading(path, "labels"):
        if p.suffix == ".npy":
            labels = np.load(p, allow_pickle=False)
        elif p.suffix == ".json":
            values = json.loads(p.read_text(encoding="utf-8-sig"))
            # numpy would read true/false as 1/0 and mix numbers into strings: only all-int or all-str lists
            if not isinstance(values, list) or not (all(type(v) is int for v in values)
                                                    or all(isinstance(v, str) for v in values)):
                raise CLIError(f"{path}: expected a JSON list of integers or of class names (strings), "
                               "not booleans, floats, nulls or a mix.")
            labels = np.asarray(values)
        else:
            lines = p.read_text(encoding="utf-8-sig").splitlines()
            labels = np.asarray([line.strip() for line in lines if line.strip()])
    if labels.ndim != 1 or labels.dtype.kind not in "iuU":
        raise CLIError(
            f"{path}: labels must be a 1-D list of integers or class names, got {labels.dtype} {labels.shape}."
        )
    return labels


def read_classes(path: str) -> list[str]:
    """Class names from a JSON list or a text file (one name per line, blank lines ignored)."""
    p = Path(path)
    with reading(path, "class names"):
        text = p.read_text(encoding="utf-8-sig")
        names = json.loads(text) if p.suffix == ".json" else None
    if p.suffix == ".json":
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CLIError(f"{path}: expected a JSON list of class names (strings).")
        names = [n.strip() for n in names]
    else:
        names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        raise CLIError(f"{path} lists no class names; give one class name per line (or a JSON list).")
    return names


def read_class_names(path: str) -> dict[str, str]:
    """Readable class names by label: a JSON object ``{"pto_balance": "PTO balance"}``, or a CSV whose first
    column is the label and second the readable name (a header row is allowed)."""
    p = Path(path)
    with reading(path, "readable class names"):
        if p.suffix.lower() == ".json":
            mapping = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
                raise CLIError(f"{path}: expected a JSON object mapping each label to its readable name (a string).")
        else:
            with open(p, newline="", encoding="utf-8") as f:
                rows = [r for r in csv.reader(f) if r and any(cell.strip() for cell in r)]
            if any(len(r) < 2 for r in rows):
                raise CLIError(f"{path}: every line needs two columns, the label and its readable name.")
            mapping = {r[0].strip(): r[1].strip() for r in rows}
    if not mapping:
        raise CLIError(f"{path} holds no readable class names; give one 'label,readable name' line per class.")
    return {str(k): v for k, v in mapping.items()}


def read_texts(path: str, *, text_column: str, label_column: str | None, need_labels: bool) -> Items:
    """Texts (and labels) from a CSV with a header, or a .txt file with one text per line.

    Also reads prompt files (``search --prompt-file``).
    """
    p = Path(path)
    if p.suffix.lower() == ".txt":
        if need_labels:
            raise CLIError(f"{path}: a .txt file holds texts only; give a CSV with '{text_column}' and label columns.")
        with reading(path, "texts"):
            texts = [line.strip() for line in p.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        if not texts:
            raise CLIError(f"{path} holds no texts; give one text per line.")
        return Items(ids=texts, texts=texts)
    with reading(path, "a CSV of texts"), open(p, newline="", encoding="utf-8-sig") as f:
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
        raise CLIError(
            f"{path} has no label column (looked for {list(LABEL_COLUMNS)}); name it with --label-column."
        )
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
            if f.suffix.lower() not in IMAGE_SUFFIXES:  # a stray notes.txt is not an unreadable image
                continue
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
