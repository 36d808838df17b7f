"""What an :class:`~lfa_index.AlignedCorpus` saves and loads, in the index's safe format.

Corpus format 1 (``"corpus_format"`` in ``corpus.json``):

``corpus.json``        ``corpus_format``; ``params``: ``{"factory", "params", "mapping"}``; ``device``
                       (the FAISS placement, as the index's LFA named it); ``next_id``; the widths
                       ``n_features_in`` (d_in, images) and ``n_text_features`` (d_txt).
``maps.safetensors``   the frozen maps: ``map_weights`` W (d, d_out) and, when it has them,
                       ``map_projection`` R (d, d_in) and ``map_mean`` μ (d,) (a
                       :class:`~lfa_index.core.query_map.QueryMap`); ``text_projection`` (d_out, d_txt)
                       when text is projected into the aligned space.
``corpus.faiss``       the aligned images, an inner-product ``IndexIDMap2``.

The directory itself (manifest of kind ``"aligned-corpus"``, sha256 checksums, atomic replace, no
pickle) is :mod:`lfa_index.persistence`'s. Every inconsistency found on load raises
:class:`~lfa_index.errors.IndexFormatError` naming the file.

Example
-------
>>> save_corpus("my_index.corpus", parts)
>>> parts = load_corpus("my_index.corpus", device="cpu")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from .. import persistence
from ..arrays import MAPPINGS
from ..core.query_map import QueryMap
from ..core.validation import check_choice, check_stored_array
from .corpus import ID_LIMIT, held_ids
from .faiss_device import gpu_of
from .format import as_format_error, check_dtypes, check_version, file_label, jsonable

CORPUS_FORMAT = 1
KIND = "aligned-corpus"
PARAMS_FILE, MAPS_FILE, INDEX_FILE = "corpus.json", "maps.safetensors", "corpus.faiss"
MAP_PARTS = ("weights", "projection", "mean")  # the QueryMap fields, saved as map_<part>


@dataclass
class SavedCorpus:
    """A corpus as saved or read back (checked): what :meth:`AlignedCorpus.load` restores."""

    params: dict[str, Any]  # factory, params, mapping
    device: str
    next_id: int
    n_text_features: int
    query_map: QueryMap
    text_projection: np.ndarray | None
    index: faiss.Index  # a CPU IndexIDMap2


def save_corpus(path: str | Path, saved: SavedCorpus) -> Path:
    """Write a corpus directory (format :data:`CORPUS_FORMAT`) and return its path."""
    doc = {
        "corpus_format": CORPUS_FORMAT,
        "params": jsonable(saved.params),
        "device": saved.device,
        "next_id": saved.next_id,
        "n_features_in": saved.query_map.n_features_in,
        "n_text_features": saved.n_text_features,
    }
    arrays = {f"map_{part}": getattr(saved.query_map, part) for part in MAP_PARTS}
    arrays["text_projection"] = saved.text_projection
    arrays = {name: np.ascontiguousarray(value) for name, value in arrays.items() if value is not None}
    return persistence.write_index_dir(
        path, kind=KIND, documents={PARAMS_FILE: doc}, arrays={MAPS_FILE: arrays},
        faiss_indexes={INDEX_FILE: saved.index},
    )


def load_corpus(path: str | Path, device: str | None = None) -> SavedCorpus:
    """Read and check a corpus directory; ``device`` overrides the saved one."""
    documents, arrays, indexes = persistence.read_index_dir(path, kind=KIND)
    with corpus_errors(path):
        doc = documents[PARAMS_FILE]
        check_version(doc["corpus_format"], CORPUS_FORMAT, file_label(path, PARAMS_FILE, "corpus"), "corpus",
                      fix="rebuild")
        params = {name: doc["params"][name] for name in ("factory", "params", "mapping")}
        check_choice(params["mapping"], "mapping", MAPPINGS)
        if not isinstance(params["factory"], str) or not isinstance(params["params"], (str, type(None))):
            raise ValueError(f"factory and params must be strings (params may be null), got {params}")
        gpu_of(doc["device"])
        next_id, n_in, n_text = doc["next_id"], doc["n_features_in"], doc["n_text_features"]
        for name, value, low, high in (("next_id", next_id, 0, ID_LIMIT), ("n_features_in", n_in, 1, None),
                                       ("n_text_features", n_text, 1, None)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
                raise ValueError(f"{name} must be an integer in {low}..{high or 'inf'}, got {value!r}")
    with corpus_errors(path, MAPS_FILE):
        parts = arrays[MAPS_FILE]
        check_dtypes(parts)
        query_map, text_projection = _maps(parts)
    with corpus_errors(path):
        d_out = query_map.n_features_out
        if (d_out, n_text) != ((d_out, d_out) if text_projection is None else text_projection.shape):
            raise ValueError(f"n_text_features {n_text} does not match the saved maps (aligned space {d_out}-d)")
        if n_in != query_map.n_features_in:
            raise ValueError(f"n_features_in {n_in} does not match the saved map ({query_map.n_features_in}-d images)")
    with corpus_errors(path, INDEX_FILE):
        index = _checked_index(indexes[INDEX_FILE], query_map.n_features_out)
    with corpus_errors(path):
        ids = held_ids(index)
        if len(ids) and next_id <= ids[-1]:
            raise ValueError(f"next_id {next_id} is not above the largest id held ({ids[-1]})")
    device = doc["device"] if device is None else device
    return SavedCorpus(params, device, next_id, n_text, query_map, text_projection, index)


def corpus_errors(path: str | Path, name: str = PARAMS_FILE) -> Any:
    """The context that turns what reading file ``name`` of the corpus at ``path`` raises into one
    :class:`~lfa_index.errors.IndexFormatError` naming it."""
    return as_format_error(file_label(path, name, "corpus"), "AlignedCorpus.save()", "corpus")


def _maps(arrays: dict[str, np.ndarray]) -> tuple[QueryMap, np.ndarray | None]:
    """The saved maps, checked: W (d, d_out), R (d, d_in) and μ (d,) if any, the text projection (d_out, d_txt)."""
    weights = check_stored_array(arrays["map_weights"], "map_weights", ndim=2)
    d, d_out = weights.shape
    projection = mean = text_projection = None
    if "map_projection" in arrays:
        projection = check_stored_array(arrays["map_projection"], "map_projection", shape=(d, None))
    if "map_mean" in arrays:
        mean = check_stored_array(arrays["map_mean"], "map_mean", shape=(d,))
    if "text_projection" in arrays:
        text_projection = check_stored_array(arrays["text_projection"], "text_projection", shape=(d_out, None))
    for name, value in (("map_weights", weights), ("map_projection", projection), ("map_mean", mean),
                        ("text_projection", text_projection)):
        if value is not None and value.dtype not in (np.float32, np.float64):  # as fitted: float16 would round
            raise ValueError(f"array {name!r} is {value.dtype}, not float32 or float64")
    return QueryMap(weights, projection, mean), text_projection


def _checked_index(index: faiss.Index, dim: int) -> faiss.Index:
    downcast = faiss.downcast_index(index)
    if not hasattr(downcast, "id_map") or index.d != dim or index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise ValueError(
            f"the corpus must be an inner-product IndexIDMap2 of {dim}-d vectors, got a {type(downcast).__name__} "
            f"of {index.d}-d vectors"
        )
    ids = held_ids(index)
    if len(ids) != index.ntotal or (len(ids) and ids[0] < 0) or (np.diff(ids) == 0).any():
        raise ValueError("the corpus ids are not one distinct non-negative id per vector")
    return index
