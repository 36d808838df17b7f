"""What the commands write as results: CSV text to stdout or to a file."""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from typing import Any, Sequence

from lfa_index import AlignedIndex
from lfa_index.errors import StoreURIError
from lfa_index.files import atomic_write, check_output_path
from lfa_index.stores import parse_store_uri

from .console import Console


def write_output(text: str, out: str | None, console: Console) -> None:
    """Write ``text`` atomically to ``out``, or to stdout when ``out`` is None."""
    if out:
        atomic_write(out, text)
        console.note(f"wrote {out}")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


OUTPUTS = {"output": "-o/--output", "out": "-o/--out"}
_NOT_INPUTS = {"func", "command", "cache_dir", "device", *OUTPUTS}


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output (``-o``) that is one of the command's inputs, lies inside one or
    holds one: every other option naming an existing path, or a store URI's location."""
    inputs = {}
    for name, value in vars(args).items():
        paths = [_input_path(v) for v in (value if isinstance(value, list) else [value]) if name not in _NOT_INPUTS]
        paths = [p for p in paths if p]
        if paths:
            inputs["--" + name.replace("_", "-")] = paths
    for name, flag in OUTPUTS.items():
        check_output_path(getattr(args, name, None), inputs, name=flag)


def _input_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        uri = parse_store_uri(value)  # a FAISS store is DIR/NAME; an engine owns its whole directory
        faiss_store = uri.scheme == "faiss" and uri.collection
        location = os.path.join(uri.location, uri.collection) if faiss_store else uri.location
    except StoreURIError:
        location = value
    return location if os.path.lexists(os.path.expanduser(location)) else None


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A CSV table with one header line, ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def label_name(index: AlignedIndex, label: Any) -> str:
    """The class name of a predicted label (its own text for named labels, '' for None)."""
    return index.label_space_.name_of(label)
