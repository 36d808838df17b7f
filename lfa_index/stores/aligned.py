"""An AlignedIndex's prototypes and corpora in any vector store, searched exactly.

Classification: the store holds the prototypes folded with the query map (``P Gᵀ``, see
:meth:`AlignedIndex.aligned_prototypes`), so the class of a raw query ``x`` is the inner-product
nearest neighbour of ``x``; dividing by ``||x G||`` turns the scores into aligned cosines. When
the classifier has class biases or centred rows (``index.augmented_``), the folded vectors carry
one more coordinate and the queries are ``index.prepare_queries(x)``; the search stays exact.
Corpora: either the store holds aligned images ``index.transform(x)`` and is searched with aligned
text (:func:`add_aligned` / :func:`search_aligned`, exact on a flat index), or it holds raw
images and the text query is mapped back, ``y Gᵀ``, with an exact re-rank of ``k · overfetch``
candidates (:func:`search_unaligned`; a FAISS index of raw images is searched as a
:class:`~lfa_index.stores.FaissStore`). Both sides call
the index's :class:`~lfa_index.core.query_map.QueryMap` and the same functions of
:mod:`lfa_index.index.folding` for the folded ranking and the exact re-rank.

Example
-------
>>> store = MilvusStore("vectors.db", "prototypes", dim=prototype_dim(index))
>>> write_prototypes(index, store)
>>> classify(index, store, queries)                # == index.predict(queries)
>>> X, y = support_from_store(labelled_store, label_field="label")
>>> classify_rows(index, raw_store, write_field="predicted")   # label every stored embedding
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..arrays import CHUNK_ROWS
from ..arrays import Mapping as MapName
from ..core.validation import check_ids, check_number, check_query_matrix
from ..errors import EmptyIndexError, InvalidInputError, SchemaError, ShapeError
from ..index import AlignedIndex
from ..index.folding import rerank, top_classes
from .base import VectorStore, check_store

MAPPING_FIELD = "mapping"  # which map a prototype is folded with: "task" (fitted classes) or "tt" (added from text)


# ------------------------------------------------------------------------------ classification
def prototype_dim(index: AlignedIndex) -> int:
    """Width of the folded prototypes a store must hold: ``d_in``, or ``d_in + 1`` when the
    classifier has class biases or centred rows (``index.augmented_``)."""
    return index.n_features_in_ + int(index.augmented_)


def write_prototypes(index: AlignedIndex, store: VectorStore, *, label_field: str = "label") -> VectorStore:
    """Replace the store's rows with the index's folded prototypes: id = class position in ``classes_``.

    Each row also carries ``label_field`` (the class label) and ``"mapping"``. Call it again
    after ``fit``, ``partial_fit`` or ``add_classes``. Returns the store. The rows are replaced
    with ``store.replace`` (a store without it is cleared, then filled): a concurrent
    :func:`classify` sees the old prototypes or the new ones in FAISS, Qdrant, Milvus (collections
    lfa-index created) and LanceDB, and each class's old or new row in Chroma; never an empty set.

    Example
    -------
    >>> write_prototypes(index, MilvusStore("vectors.db", "prototypes", dim=prototype_dim(index)))
    """
    folded = index.aligned_prototypes("auto")
    if not isinstance(label_field, str) or label_field == MAPPING_FIELD:
        raise InvalidInputError(f"label_field must be a field name other than {MAPPING_FIELD!r}, got {label_field!r}.")
    check_store(store, folded.shape[1], "the index's folded prototypes (prototype_dim(index))")
    if store.metric != "IP":
        raise SchemaError(
            f"{store.location} ranks by {store.metric}, but folded prototypes are not unit vectors and need the "
            "inner product: use a collection indexed with metric IP."
        )
    fields = {label_field: index.classes_.tolist(), MAPPING_FIELD: np.where(index.is_new_class_, "tt", "task").tolist()}
    replace = getattr(store, "replace", None)
    if callable(replace):
        replace(folded, np.arange(len(folded)), fields)
    else:
        store.clear()
        store.add(folded, ids=np.arange(len(folded)), fields=fields)
    return store


def search_classes(index: AlignedIndex, store: VectorStore, X: Any, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` classes of raw queries from the store: ``(scores, labels)``, each (n, k'), best first.

    Scores are aligned cosines; ``k' = min(k, n_classes)``. Equals ``index.search(X, k)`` (exact
    ties go to the lowest class position).

    Example
    -------
    >>> scores, labels = search_classes(index, store, queries, k=3)
    """
    k = check_number(k, "k", low=1, integer=True)
    x, groups = _classification_inputs(index, store, X)
    k = min(k, len(index.classes_))
    hits = []
    for mapping, size in groups:
        where = {MAPPING_FIELD: mapping} if len(groups) > 1 else None
        raw, positions = store.search(x, min(k, size), where=where)
        hits.append((raw, index.query_norms(X, mapping), _positions(positions, store, len(index.classes_))))
    scores, positions = top_classes(hits, k)
    return scores, index.label_space_.labels(positions)


def classify(index: AlignedIndex, store: VectorStore, X: Any) -> np.ndarray:
    """Label of the nearest class of each raw query, shape (n,); equals ``index.predict(X)``.

    With one map (no classes added from text) this is a single inner-product search in the store.
    """
    x, groups = _classification_inputs(index, store, X)
    if len(groups) > 1:
        return search_classes(index, store, X, k=1)[1][:, 0]
    _, ids = store.search(x, 1)
    return index.label_space_.labels(_positions(ids[:, 0], store, len(index.classes_)))


def _classification_inputs(index: AlignedIndex, store: VectorStore, X: Any) -> tuple[np.ndarray, list[tuple[str, int]]]:
    x = index.prepare_queries(check_query_matrix(X, name="X", dim=index.n_features_in_))
    check_store(store, x.shape[1], "the index's folded prototypes (prototype_dim(index))")
    held, n_classes = store.count(), len(index.classes_)
    if held != n_classes:
        raise InvalidInputError(
            f"{store.location} holds {held} rows but the index has {n_classes} classes; call "
            "write_prototypes(index, store) after fit/add_classes, and keep one store per index."
        )
    n_new = int(index.is_new_class_.sum())
    groups = [(m, n) for m, n in (("task", n_classes - n_new), ("tt", n_new)) if n]
    return x, groups


def _positions(ids: np.ndarray, store: VectorStore, n_classes: int) -> np.ndarray:
    """Class positions found in a store of prototypes; "no hit" (-1) or an id beyond the classes is a typed
    error, never a class (numpy would read -1 as the last one)."""
    odd = (ids < 0) | (ids >= n_classes)
    if odd.any():
        raise InvalidInputError(
            f"{store.location} answered {int(odd.sum())} search(es) with no prototype (id -1) or an id outside "
            f"0..{n_classes - 1}: it does not hold this index's {n_classes} folded prototypes (emptied or filled by "
            "something else meanwhile). Call write_prototypes(index, store), and keep one store per index."
        )
    return ids


def classify_rows(
    index: AlignedIndex,
    store: VectorStore,
    *,
    write_field: str | None = None,
    reject_below: float | None = None,
    batch_size: int = 4096,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classify every row of a store of raw embeddings: ``(ids, labels, scores)``, each (n,), in id order.

    ``labels`` equal ``index.predict`` of the stored vectors (with ``reject_below=τ``, rows whose
    ``index.score_samples`` is below τ get ``index.unknown_label_``); ``scores`` are their best
    aligned scores.
    With ``write_field``, field ``write_field`` of each row is set to its label with the store's
    partial update (``store.set_field``): vectors and every other field stay as they were, type and
    value. A rejected row gets "" (named classes) or -1 (class indices). Every row is read and
    checked before the first write.

    Example
    -------
    >>> ids, labels, scores = classify_rows(index, MilvusStore(uri, "images"), write_field="predicted")
    """
    check_number(batch_size, "batch_size", low=1, integer=True)
    if reject_below is not None:
        index.check_threshold(reject_below)
    check_store(store, index.n_features_in_, "raw image embeddings (the image embedding dimension)")
    set_field = None if write_field is None else _field_writer(store, write_field)
    ids, labels, scores, known = [], [], [], []
    for batch_ids, vectors, _ in store.scan([], batch_size=batch_size):
        best, found = index.search(vectors, k=1)
        ids.append(batch_ids)
        labels.append(found[:, 0])
        scores.append(best[:, 0])
        if reject_below is not None:
            known.append(index.score_samples(vectors))
    if not ids:
        raise EmptyIndexError(f"{store.location} is empty: add raw embeddings to it before classifying its rows.")
    order = np.argsort(np.concatenate(ids), kind="stable")
    ids, labels, scores = np.concatenate(ids)[order], np.concatenate(labels)[order], np.concatenate(scores)[order]
    found = labels
    if reject_below is not None:
        known = np.concatenate(known)[order]
        labels = index.label_space_.reject(found, known, reject_below)
    if set_field is not None:  # a store field holds "" where the index's unknown label is None
        unknown = "" if index.unknown_label_ is None else index.unknown_label_
        written = found if reject_below is None else index.label_space_.reject(found, known, reject_below, unknown)
        set_field(ids, write_field, written.tolist())
    return ids, labels, scores


def _field_writer(store: VectorStore, write_field: Any) -> Any:
    if not isinstance(write_field, str) or not write_field.isidentifier():
        raise InvalidInputError(f"write_field must be a field name (an identifier), got {write_field!r}.")
    set_field = getattr(store, "set_field", None)
    if not callable(set_field):
        raise InvalidInputError(
            f"{type(store).__name__} has no set_field(ids, name, values): writing a label must update that one field "
            "and leave the others as they are; add set_field() to the store."
        )
    return set_field


# ------------------------------------------------------------------------------ corpora
def add_aligned(
    index: AlignedIndex,
    store: VectorStore,
    X: Any,
    ids: Any,
    *,
    fields: Mapping[str, Sequence[Any]] | None = None,
    mapping: MapName = "task",
) -> VectorStore:
    """Add images to a re-indexed corpus: the store receives ``normalize(x G)`` (n, d).

    ``mapping`` names the index's map (W, W_tt or their mean). Images added before a refit keep the
    old map (re-add them). Returns the store.

    Example
    -------
    >>> add_aligned(index, MilvusStore("vectors.db", "corpus", dim=index.prototypes_.shape[1]), X, ids)
    """
    x = check_query_matrix(X, name="X", dim=index.n_features_in_)
    ids = check_ids(ids, len(x))
    query_map = index.class_table_.query_map(mapping)
    check_store(store, query_map.n_features_out, "aligned embeddings (the aligned space's dimension)")
    for start in range(0, len(x), CHUNK_ROWS):
        stop = start + CHUNK_ROWS
        batch_fields = None if fields is None else {name: list(values)[start:stop] for name, values in fields.items()}
        store.add(index.transform(x[start:stop], mapping), ids[start:stop], fields=batch_fields)
    return store


def search_aligned(
    index: AlignedIndex, store: VectorStore, text_emb: Any, k: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Text -> image search in a corpus filled by :func:`add_aligned`: ``(scores, ids)``, (n, k), best first.

    Exact on a flat index; equals ``AlignedCorpus(index).add(images).search_text`` over the same images.
    """
    k = check_number(k, "k", low=1, integer=True)
    queries = index.transform_text(text_emb)
    check_store(store, queries.shape[1], "aligned embeddings (the aligned space's dimension)")
    return store.search(queries, k)


def search_unaligned(
    index: AlignedIndex,
    store: VectorStore,
    text_emb: Any,
    k: int = 10,
    *,
    overfetch: int = 10,
    mapping: MapName = "task",
) -> tuple[np.ndarray, np.ndarray]:
    """Text -> image search in a store of RAW image embeddings, with no re-indexing.

    The aligned text query is mapped back (``y Gᵀ``), ``k · overfetch`` candidates are fetched and
    re-ranked exactly by aligned cosine with their stored vectors. Returns ``(scores, ids)``, each
    (n, k), best first; unfilled slots are id -1, score -inf. Recall against the exact aligned
    top-k grows with ``overfetch``. ``mapping`` names the index's map that aligns the images.

    Example
    -------
    >>> scores, ids = search_unaligned(index, MilvusStore(uri, "images_raw"), text_emb, k=10, overfetch=20)
    """
    k = check_number(k, "k", low=1, integer=True)
    check_number(overfetch, "overfetch", low=1, integer=True)
    queries = index.transform_text(text_emb)
    query_map = index.class_table_.query_map(mapping)
    check_store(store, index.n_features_in_, "raw image embeddings (the image embedding dimension)")
    held = store.count()
    if held == 0:
        raise EmptyIndexError(f"{store.location} is empty: add raw image embeddings to it before search_unaligned().")
    _, candidates = store.search(query_map.unalign(queries), min(k * int(overfetch), held))
    return rerank(queries, candidates, lambda ids: index.transform(store.get(ids), mapping), k)


# ------------------------------------------------------------------------------ support sets
def support_from_store(
    store: VectorStore, *, label_field: str, batch_size: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Labelled support embeddings held in a store, for :meth:`AlignedIndex.fit`: ``(embeddings, labels)``.

    Rows come in id order; ``labels`` holds the values of ``label_field`` (strings or ints).

    Example
    -------
    >>> X, y = support_from_store(MilvusStore(uri, "labelled_images"), label_field="label")
    >>> AlignedIndex(lfa=LFA(random_state=0)).fit(X, y, text_emb, class_names=names)
    """
    ids, vectors, labels = [], [], []
    for batch_ids, batch_vectors, batch_fields in store.scan([label_field], batch_size=batch_size):
        ids.append(batch_ids)
        vectors.append(batch_vectors)
        labels.append(np.asarray(batch_fields[label_field], dtype=object))
    if not ids:
        raise ShapeError(f"{store.location} holds no rows; add labelled embeddings before pulling a support set.")
    order = np.argsort(np.concatenate(ids), kind="stable")
    values = np.concatenate(labels)[order]
    if all(isinstance(v, str) for v in values):
        values = values.astype(str)
    elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        values = values.astype(np.int64)
    else:
        raise SchemaError(
            f"field {label_field!r} of {store.location} must hold class names (str) or class indices (int)."
        )
    return np.concatenate(vectors)[order], values
