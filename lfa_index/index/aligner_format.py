"""What an :class:`~lfa_index.EmbeddingAligner` saves and loads, in the index's safe format.

``aligner.json``        ``aligner_format``; the constructor ``params``; ``state``: the fitted values
                        (widths, method, centring, steps, selection, summary...).
``map.safetensors``     ``W`` (d_new, d_old) and ``mean`` (d_new,), float32.

The directory itself (manifest of kind ``"embedding-aligner"``, sha256 checksums, atomic replace,
no pickle) is :mod:`lfa_index.persistence`'s. Every inconsistency found on load raises
:class:`~lfa_index.errors.IndexFormatError` naming the file.

Example
-------
>>> save_aligner(aligner, "new_to_old"); load_aligner(EmbeddingAligner, "new_to_old")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .. import persistence
from .format import as_format_error, check_version, file_label, jsonable

ALIGNER_FORMAT = 1
KIND = "embedding-aligner"
PARAMS_FILE, ARRAYS_FILE = "aligner.json", "map.safetensors"
STATE: tuple[str, ...] = (
    "n_features_in_", "n_features_out_", "paired_", "query_mean_", "method_", "center_", "steps_", "selection_",
    "loss_curve_", "fit_seconds_", "summary_",
)
"""Fitted values saved as JSON (the arrays are ``W_`` and ``mean_``)."""


def save_aligner(aligner: Any, path: str | Path) -> Path:
    """Write a fitted aligner to directory ``path`` and return the path."""
    doc = {
        "aligner_format": ALIGNER_FORMAT,
        "params": jsonable(aligner.get_params(deep=False)),
        "state": jsonable({name: getattr(aligner, name) for name in STATE}),
    }
    arrays = {"W": np.ascontiguousarray(aligner.W_, dtype=np.float32),
              "mean": np.ascontiguousarray(aligner.mean_, dtype=np.float32)}
    return persistence.write_index_dir(path, kind=KIND, documents={PARAMS_FILE: doc}, arrays={ARRAYS_FILE: arrays},
                                       faiss_indexes={})


def load_aligner(cls: type, path: str | Path) -> Any:
    """An aligner of class ``cls`` restored from directory ``path`` (checked)."""
    documents, arrays, _ = persistence.read_index_dir(path, kind=KIND)
    params_file, arrays_file = file_label(path, PARAMS_FILE), file_label(path, ARRAYS_FILE)
    with as_format_error(params_file):
        doc = documents[PARAMS_FILE]
        check_version(doc["aligner_format"], ALIGNER_FORMAT, params_file, "aligner")
        aligner = cls(**doc["params"])
        state = doc["state"]
        for name in STATE:
            setattr(aligner, name, state[name])
        d_in, d_out = aligner.n_features_in_, aligner.n_features_out_
        for name, value in (("n_features_in_", d_in), ("n_features_out_", d_out)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
    with as_format_error(arrays_file):
        parts = arrays[ARRAYS_FILE]
        aligner.W_ = _float32(parts, "W", (d_in, d_out))
        aligner.mean_ = _float32(parts, "mean", (d_in,))
    return aligner


def _float32(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    value = arrays[name]
    if value.dtype != np.float32 or value.shape != shape:
        raise ValueError(f"array {name!r} is {value.dtype} of shape {value.shape}, expected float32 {shape}")
    if not np.isfinite(value).all():
        raise ValueError(f"array {name!r} holds NaN or infinite values")
    return value
