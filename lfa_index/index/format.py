"""What an AlignedIndex saves and loads, and the checks a loaded index must pass.

Index format 1 (``"index_format"`` in ``params.json``) saves only what the index adds to its LFA
estimator, plus the estimator's own state (``LFA.fitted_state`` / ``LFA.from_fitted_state``):

``params.json``         ``index_format``; the constructor ``params`` (the ``lfa`` estimator's
                        parameters or null); ``label_space`` and ``class_names``; ``lfa``:
                        ``{"params", "state"}`` of the fitted estimator; ``serving``:
                        ``{"reject_below": τ or null, "encoders": {"document", "name"}}``, the
                        threshold and encoder SPECs kept with the index.
``arrays.safetensors``  ``lfa.<name>``: the estimator's fitted arrays; ``text_embeddings`` (C, d_txt),
                        ``is_new_class`` (C,), ``added_prototypes`` (prototypes of the classes added
                        from text since the last fit), ``folded_task`` / ``folded_tt`` and the support set.

An index holds no image corpus: an :class:`~lfa_index.AlignedCorpus` saves itself beside it
(:mod:`~lfa_index.index.corpus_format`), and a directory that still holds a corpus section is refused
with :class:`~lfa_index.errors.IndexFormatError`. An index of any other format is refused with
:class:`~lfa_index.errors.IndexVersionError` (re-fit and re-save).
The directory itself (manifest, checksums, atomic replace) is :mod:`lfa_index.persistence`'s.
Every inconsistency found on load raises :class:`~lfa_index.errors.IndexFormatError` naming the file.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .. import persistence
from ..core import LFA
from ..core.query_map import QueryMap
from ..core.validation import check_stored_array, validate_params
from ..errors import IndexFormatError, IndexVersionError, InvalidParameterError, LFAIndexError
from .classes import ClassTable, class_vectors, fitted_maps, group_masks
from .labels import LabelSpace

INDEX_FORMAT = 1
KIND = "aligned-index"
PARAMS_FILE, ARRAYS_FILE = "params.json", "arrays.safetensors"
LFA_PREFIX = "lfa."
NO_ENCODERS: dict[str, str | None] = {"document": None, "name": None}
"""``encoders_`` of an index that recorded none (the sides: rows, class names)."""
_FOLD_RTOL, _FOLD_ATOL = 1e-4, 1e-5


@dataclass
class SavedIndex:
    """An index as read from disk, checked: what :meth:`AlignedIndex.load` restores."""

    params: dict[str, Any]  # lfa (an LFA or None)
    lfa: LFA
    labels: LabelSpace
    prototypes: np.ndarray
    intercept: np.ndarray
    is_new: np.ndarray
    text_embeddings: np.ndarray
    maps: dict[str, QueryMap]
    folded: dict[str, np.ndarray]
    support_embeddings: np.ndarray
    support_labels: np.ndarray | None
    reject_below: float | None = None
    encoders: dict[str, str | None] | None = None


# ------------------------------------------------------------------ writing
def save_index(
    path: str | Path, *, params: dict[str, Any], lfa: LFA, table: ClassTable, support_embeddings: np.ndarray,
    support_labels: np.ndarray | None, serving: dict[str, Any] | None = None,
) -> Path:
    """Write an index directory (format :data:`INDEX_FORMAT`) and return its path."""
    values, lfa_arrays = lfa.fitted_state()
    n_fitted = len(np.asarray(lfa.prototypes_))
    arrays = {LFA_PREFIX + name: value for name, value in lfa_arrays.items()}
    arrays.update(
        text_embeddings=table.text_embeddings, added_prototypes=table.prototypes[n_fitted:],
        is_new_class=table.is_new.astype(np.uint8), support_embeddings=support_embeddings,
    )
    if support_labels is not None:
        arrays["support_labels"] = support_labels
    arrays.update({f"folded_{group.mapping}": group.folded for group in table.groups})
    lfa_param = params["lfa"]
    doc = {
        "index_format": INDEX_FORMAT,
        "params": {**params, "lfa": None if lfa_param is None else jsonable(lfa_param.get_params(deep=False))},
        **table.labels.to_json(),
        "lfa": {"params": jsonable(lfa.get_params(deep=False)), "state": jsonable(values)},
        "serving": jsonable(serving or {}),
    }
    arrays = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
    return persistence.write_index_dir(
        path, kind=KIND, documents={PARAMS_FILE: doc}, arrays={ARRAYS_FILE: arrays}, faiss_indexes={}
    )


# ------------------------------------------------------------------ reading
def load_index(path: str | Path, device: str | None = None) -> SavedIndex:
    """Read and check an index directory; ``device`` overrides the LFA's ``device``."""
    documents, arrays, indexes = persistence.read_index_dir(path, kind=KIND)
    params_file, arrays_file = file_label(path, PARAMS_FILE), file_label(path, ARRAYS_FILE)
    with as_format_error(params_file):
        doc, arr = documents[PARAMS_FILE], arrays.get(ARRAYS_FILE, {})
        check_version(doc["index_format"], INDEX_FORMAT, params_file, "index")
        _refuse_corpus(path, doc, indexes)
        lfa_params = {**doc["lfa"]["params"], **({} if device is None else {"device": device})}
        state = doc["lfa"]["state"]
        params = _params(doc["params"], device)
        for estimator in (LFA(**lfa_params), params["lfa"]):  # each within the estimator's own constraints
            if estimator is not None:
                validate_params(estimator.get_params(deep=False), LFA._parameter_constraints, "LFA")
    with as_format_error(arrays_file):
        check_dtypes(arr)
        lfa_arrays = {k[len(LFA_PREFIX):]: v for k, v in arr.items() if k.startswith(LFA_PREFIX)}
        lfa = LFA.from_fitted_state(lfa_params, state, lfa_arrays)  # checks the fitted state
        classes = _classes(arr, lfa)
        support = check_stored_array(arr["support_embeddings"], "support_embeddings")
        if support.ndim not in (2, 3) or support.shape[-1] != lfa.n_features_in_ or not len(support):
            raise ValueError(f"support_embeddings has shape {support.shape}, not (N[, V], {lfa.n_features_in_})")
        support_labels = None
        if "support_labels" in arr:
            support_labels = check_stored_array(arr["support_labels"], "support_labels", shape=(len(support),),
                                                kind="iu").astype(np.int64)
            if support_labels.min() < 0 or support_labels.max() >= len(classes["text"]):
                raise ValueError(f"support_labels must lie in 0..{len(classes['text']) - 1}")
        _check_estimator_arrays(lfa, len(support))
    with as_format_error(params_file):
        labels = LabelSpace.from_json(doc, len(classes["text"]))
    with as_format_error(params_file):
        reject_below, encoders = _serving(doc["serving"])
    return SavedIndex(
        params, lfa, labels, classes["prototypes"], classes["intercept"], classes["is_new"], classes["text"],
        classes["maps"], classes["folded"], support, support_labels, reject_below, encoders,
    )


# ------------------------------------------------------------------ errors
def file_label(path: str | Path, name: str, what: str = "index") -> str:
    """How messages name one file of an index (or corpus, ``what``) directory (its folder layout is persistence's)."""
    return f"{name} of the {what} at {path}"


@contextmanager
def as_format_error(file: str, writer: str = "AlignedIndex.save()", what: str = "index") -> Iterator[None]:
    """Turn whatever reading ``file``'s contents raises into one :class:`IndexFormatError` naming it (and
    the ``writer`` of such a ``what``)."""
    try:
        yield
    except IndexFormatError:
        raise
    except (LFAIndexError, KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as err:
        problem = f"missing {err}" if isinstance(err, KeyError) else str(err) or type(err).__name__
        raise IndexFormatError(
            f"{file} has the right checksums but unexpected contents ({problem}); it was not written by "
            f"{writer} or was changed since: re-save the {what}."
        ) from err


# ------------------------------------------------------------------ checks
def _params(saved: dict[str, Any], device: str | None) -> dict[str, Any]:
    if set(saved) != {"lfa"}:
        raise ValueError(f"params must hold only 'lfa', got {sorted(saved)}")
    lfa_params = saved["lfa"]
    if device is not None:
        lfa_params = {**(lfa_params or {}), "device": device}
    return {"lfa": None if lfa_params is None else LFA(**lfa_params)}


def _refuse_corpus(path: str | Path, doc: dict[str, Any], indexes: dict[str, Any]) -> None:
    """An index saved while indexes held an image corpus: refused, not upgraded (nothing was released)."""
    found = [part for part, present in (
        ("corpus.faiss", "corpus.faiss" in indexes), ("a 'corpus' entry", "corpus" in doc),
        ("corpus_* parameters", any(name.startswith("corpus_") for name in doc.get("params") or {})),
    ) if present]
    if found:
        raise IndexFormatError(
            f"the index at {path} holds an aligned corpus section ({', '.join(found)}): indexes no longer keep image "
            "corpora. Re-fit the index and re-save it with this lfa-index, then build the corpus with "
            "AlignedCorpus(index).add(images) and save it beside the index (AlignedCorpus.save)."
        )


def _serving(doc: Any) -> tuple[float | None, dict[str, str | None]]:
    """The τ and encoder SPECs kept with an index (both optional), checked."""
    if not isinstance(doc, dict):
        raise ValueError(f"serving must be an object, got {type(doc).__name__}")
    tau = doc.get("reject_below")
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float)) or not np.isfinite(tau)):
        raise ValueError(f"serving.reject_below must be a finite number or null, got {tau!r}")
    encoders = doc.get("encoders") or {}
    if not isinstance(encoders, dict) or set(encoders) - set(NO_ENCODERS):
        raise ValueError(f"serving.encoders must map {sorted(NO_ENCODERS)} to SPEC strings, got {encoders!r}")
    if not all(v is None or (isinstance(v, str) and v.strip()) for v in encoders.values()):
        raise ValueError(f"serving.encoders values must be SPEC strings or null, got {encoders!r}")
    return (None if tau is None else float(tau)), {**NO_ENCODERS, **encoders}


def check_version(version: Any, expected: int, file: str, what: str, fix: str = "re-fit") -> None:
    """Raise :class:`IndexVersionError` unless ``version`` (a ``what`` format number) is ``expected``."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"{what}_format must be an integer, got {version!r}")
    if version != expected:
        raise IndexVersionError(
            f"{file} was written with {what} format {version}, but this library reads only format {expected}: "
            f"{fix} the {what} and re-save it with this lfa-index."
        )


def _classes(arrays: dict[str, np.ndarray], lfa: LFA) -> dict[str, Any]:
    """Text, flags, prototypes, biases, maps and checked folded prototypes of every class."""
    text = check_stored_array(arrays["text_embeddings"], "text_embeddings", ndim=2)
    if lfa.transform_text(text[:1]).shape[1] != lfa.prototypes_.shape[1]:
        raise ValueError(f"text_embeddings rows of {text.shape[1]} dimensions do not map to the estimator's space")
    is_new = check_stored_array(arrays["is_new_class"], "is_new_class", shape=(len(text),), kind="iub").astype(bool)
    n_fitted = len(lfa.prototypes_)
    if n_fitted > len(text) or not is_new[n_fitted:].all():
        raise ValueError(f"the estimator has {n_fitted} classes for {len(text)} text_embeddings rows")
    added = check_stored_array(arrays["added_prototypes"], "added_prototypes",
                               shape=(len(text) - n_fitted, lfa.prototypes_.shape[1]))
    prototypes, intercept = class_vectors(lfa, is_new, added)
    maps = fitted_maps(lfa)
    folded = _check_folded(arrays, maps, prototypes, intercept, is_new)
    return dict(text=text, is_new=is_new, prototypes=prototypes, intercept=intercept, maps=maps, folded=folded)


def check_dtypes(arrays: dict[str, np.ndarray]) -> None:
    for name, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(f"array {name!r} has dtype {value.dtype}, not a number type")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"array {name!r} holds NaN or infinite values")


def _check_estimator_arrays(lfa: LFA, n_support: int) -> None:
    """The estimator's per-support-row arrays (rejection and U-LFA read them) against the saved support."""
    for name in ("heldout_scores_", "assignments_"):
        value = getattr(lfa, name)
        if value is not None and len(value) != n_support:
            raise ValueError(f"{name} has shape {value.shape}, expected {n_support} rows (one per support row)")


def _check_folded(
    arrays: dict[str, np.ndarray], maps: dict[str, QueryMap], prototypes: np.ndarray, intercept: np.ndarray,
    is_new: np.ndarray,
) -> dict[str, np.ndarray]:
    """The saved folded prototypes of each group, checked against the ones the maps give."""
    folded = {}
    for mapping, mask in group_masks(is_new):
        expected = maps[mapping].fold(prototypes[mask], intercept[mask])
        saved = check_stored_array(arrays[f"folded_{mapping}"], f"folded_{mapping}", ndim=2)
        if saved.dtype != np.float32 or saved.shape != expected.shape:
            raise ValueError(
                f"array 'folded_{mapping}' is {saved.dtype} of shape {saved.shape}, expected float32 {expected.shape}"
            )
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        if not np.allclose(saved, expected, rtol=_FOLD_RTOL, atol=_FOLD_ATOL * scale):
            raise ValueError(f"array 'folded_{mapping}' does not match the prototypes folded with the saved maps")
        folded[mapping] = saved
    return folded


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    raise InvalidParameterError(
        f"cannot save a {type(value).__name__} ({value!r}) as JSON; pass plain str/int/float options "
        "(e.g. device='cuda')."
    )


