"""What the commands write as results: CSV text to stdout or to a file."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any, Sequence

from lfa_index import AlignedIndex
from lfa_index.files import atomic_write

from .console import Console


def write_output(text: str, out: str | None, console: Console) -> None:
    """Write ``text`` atomically to ``out``, or to stdout when ``out`` is None."""
    if out:
        atomic_write(out, text)
        console.note(f"wrote {out}")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


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
