"""What the stores that talk to an engine (Milvus, Qdrant, Chroma, LanceDB) share: the
:class:`CollectionStore` base, and helpers for names, URLs, ids and re-scoring."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence, TypeVar
from urllib.parse import urlsplit

import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import (
    CollectionNotFoundError,
    InvalidInputError,
    InvalidParameterError,
    SchemaError,
    StoreUnavailableError,
)
from .base import check_field_update, check_fields, check_vectors, object_column

Batches = Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]  # what scan() yields
Candidates = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # queries -> (ids (n, m), vectors (n, m, d))
_CHUNK_BYTES = 64 << 20  # at most this much candidate data in memory while re-scoring
_FIELD_ROWS = 4096  # rows per partial update of one field


def check_name(name: Any, what: str, pattern: str, rule: str) -> str:
    """``name`` if it fully matches ``pattern``, else :class:`InvalidParameterError` quoting the engine's ``rule``."""
    if not isinstance(name, str) or re.fullmatch(pattern, name) is None:
        raise InvalidParameterError(f"{what} must be {rule}; got {name!r}.")
    return name


def check_uri(uri: Any, engine: str, forms: str) -> str:
    """``uri`` (a str or path) as a non-empty str, else :class:`InvalidParameterError` listing the ``forms``."""
    if not isinstance(uri, (str, bytes)) and not hasattr(uri, "__fspath__"):
        raise InvalidParameterError(f"uri must be {forms} for {engine}, got {type(uri).__name__}.")
    text = os.fsdecode(uri)
    if not text:
        raise InvalidParameterError(f"uri must be {forms} for {engine}, got an empty string.")
    return text


def server_address(uri: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an ``http(s)://host[:port]`` URI, None for anything else (a path)."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as err:  # a port beyond 65535, a broken IPv6 address
        raise InvalidParameterError(
            f"uri {uri!r} is not a valid server address ({err}); write e.g. 'http://localhost:6333' or "
            "'http://[::1]:6333'."
        ) from err
    if not parts.hostname:
        raise InvalidParameterError(f"uri {uri!r} names no host; use e.g. 'http://localhost:8000'.")
    return parts.scheme, parts.hostname, port if port is not None else (443 if parts.scheme == "https" else 80)


def probe(host: str, port: int, timeout: float, location: str, hint: str) -> None:
    """Open and close a TCP connection, or raise :class:`StoreUnavailableError` within ``timeout`` seconds."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        raise StoreUnavailableError(f"cannot reach {location} ({reason(err)}); {hint}") from err


def reason(err: BaseException) -> str:
    """First line of an engine's error message, at most 300 characters."""
    text = str(getattr(err, "message", "") or err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


def parse_ids(values: Sequence[Any], location: str) -> np.ndarray:
    """Engine ids (ints, or decimal strings for engines with string ids) as int64."""
    try:
        return np.fromiter((int(v) for v in values), dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError) as err:
        raise SchemaError(
            f"{location} holds ids that are not integers ({reason(err)}); lfa-index stores int64 ids, so use a "
            "collection filled through lfa-index or one whose ids are integers."
        ) from err


def rank_candidates(
    queries: np.ndarray, ids: np.ndarray, vectors: np.ndarray, k: int, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` among candidates: ``ids`` (n, m) with -1 for none, their ``vectors`` (n, m, d);
    or one candidate set for every query: ``ids`` (m,), ``vectors`` (m, d).

    Scores are recomputed in float32 from the stored vectors (inner products, or cosines for
    metric "COSINE"), so the engine's own distance arithmetic never leaks into scores or order.
    Returns ``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf.
    """
    if vectors.ndim == 2:  # shared by every query: one matrix product
        scores = (queries @ vectors.T).astype(np.float32, copy=False)
        row_norms = np.linalg.norm(vectors, axis=1)[None, :]
        ids = np.broadcast_to(ids, scores.shape)
    else:
        scores = np.einsum("nd,nmd->nm", queries, vectors, dtype=np.float32)
        row_norms = np.linalg.norm(vectors, axis=2)
    if metric == "COSINE":
        norms = row_norms * np.linalg.norm(queries, axis=1, keepdims=True)
        scores = np.divide(scores, norms, out=np.zeros_like(scores), where=norms > 0)
    scores[ids < 0] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    top_ids = np.full((len(queries), k), -1, dtype=np.int64)
    top_scores[:, : order.shape[1]] = np.take_along_axis(scores, order, 1)
    top_ids[:, : order.shape[1]] = np.take_along_axis(ids, order, 1)
    top_ids[~np.isfinite(top_scores)] = -1
    return top_scores, top_ids


def query_chunk(dim: int, candidates: int, limit: int = 1024) -> int:
    """Queries per request such that their candidates' vectors stay under 64 MiB."""
    return max(1, min(limit, _CHUNK_BYTES // max(1, 4 * dim * max(candidates, 1))))


_MILVUS_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def filter_literal(value: str | int, dialect: str) -> str:
    """``value`` as a literal in an engine's filter expression; integers as decimal numbers.

    ``"sql"`` (LanceDB): a string in single quotes, quotes doubled, backslashes plain characters.
    ``"milvus"``: a string in double quotes with backslash, double quote, newline, carriage return
    and tab escaped by a backslash; every other character as itself (Milvus reads no ``\\u`` or
    ``\\x`` escapes, so ``json.dumps`` breaks on "café").
    """
    if not isinstance(value, str):
        return str(int(value))
    if dialect == "sql":
        return "'" + value.replace("'", "''") + "'"
    if dialect == "milvus":
        return '"' + value.translate(_MILVUS_ESCAPES) + '"'
    raise ValueError(f"unknown filter dialect {dialect!r}")  # a programming error


def requested_ids(ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(wanted, distinct sorted)`` int64 ids asked of ``get``; repeats allowed, floats and strings refused."""
    try:
        wanted = np.asarray(ids).ravel()
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise InvalidInputError(f"ids must be a flat list of integers (int64); could not read them: {err}") from err
    if wanted.size == 0:  # [] is float64 to numpy: asking for nothing is fine
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    integral = wanted.dtype != bool and np.issubdtype(wanted.dtype, np.integer)
    # non-integers reach check_ids as they are, so that it raises its "ids must be integers" error
    candidates = np.unique(wanted) if integral else wanted
    unique = check_ids(candidates, len(candidates))
    return wanted.astype(np.int64), unique


def empty_results(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, ids)`` of ``n`` queries before any result: each (n, k), score -inf and id -1."""
    return np.full((n, k), -np.inf, dtype=np.float32), np.full((n, k), -1, dtype=np.int64)


def row_fields(values: Mapping[str, list[Any]], start: int, stop: int) -> list[dict[str, Any]] | None:
    """The fields of rows ``start:stop``, one dict a row (payloads, metadata); None when there are no fields."""
    return [{name: vs[j] for name, vs in values.items()} for j in range(start, stop)] if values else None


def rescore(
    queries: np.ndarray, k: int, metric: str, step: int, candidates: Candidates
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rank_candidates` of ``step`` queries at a time among the ``candidates`` fetched for them."""
    parts = [rank_candidates(chunk, *candidates(chunk), k, metric)
             for chunk in (queries[start : start + step] for start in range(0, len(queries), step))]
    return np.concatenate([scores for scores, _ in parts]), np.concatenate([ids for _, ids in parts])


def generation_name(name: str, sep: str) -> str:
    """A new collection for lfa-index to keep behind the alias ``name``: ``lfa<sep><name's digest><sep><random>``."""
    return f"lfa{sep}{_digest(name)}{sep}{secrets.token_hex(4)}"


def is_generation(candidate: str, name: str, sep: str) -> bool:
    """Whether ``candidate`` is a collection that :func:`generation_name` made for the alias ``name``."""
    return re.fullmatch(rf"lfa{re.escape(sep)}{_digest(name)}{re.escape(sep)}[0-9a-f]{{8}}", candidate) is not None


def _digest(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:12]


def grouped(ids: np.ndarray, values: Sequence[Any]) -> list[tuple[Any, list[int]]]:
    """``(value, ids holding it)`` for each distinct value, first seen first (1, 1.0 and True apart)."""
    groups: dict[tuple[type, Any], list[int]] = {}
    for i, value in zip(ids.tolist(), values):
        groups.setdefault((type(value), value), []).append(i)
    return [(value, members) for (_, value), members in groups.items()]


_Store = TypeVar("_Store", bound="CollectionStore")


class CollectionStore:
    """The store protocol's plumbing over one collection of an engine; a subclass adds the engine's calls.

    A subclass names its ``engine`` and, where the engine says "table", its ``kind`` (also the
    attribute holding the name; "collection" by default). Its ``__init__`` sets ``uri``, the name,
    ``_client``, ``_errors`` (the engine's exceptions that :meth:`_call` types), ``_dim`` and,
    unless it is "IP", ``_metric``.
    """

    engine: ClassVar[str]
    kind: ClassVar[str] = "collection"
    _uri_forms: ClassVar[str] = ""  # what a uri may be, for messages
    _name_pattern: ClassVar[str] = ""
    _name_rule: ClassVar[str] = ""
    _lost_hint: ClassVar[str] = "check that the server is running and reachable, then retry."
    _lost_errors: ClassVar[tuple[str, ...]] = ()  # names of engine exceptions that mean the engine is gone

    uri: str
    _client: Any = None
    _errors: tuple[type[BaseException], ...] = ()
    _dim: int
    _metric: str = "IP"

    @classmethod
    def _checked(cls, uri: Any, name: Any, dim: Any) -> tuple[str, str]:
        """``(uri, name)`` as given, once checked with ``dim``: before the engine's client is imported."""
        uri = check_uri(uri, cls.engine, cls._uri_forms)
        name = check_name(name, f"{cls.kind} (a {cls.engine} {cls.kind} name)", cls._name_pattern, cls._name_rule)
        if dim is not None:
            check_number(dim, "dim", low=1, integer=True)
        return uri, name

    @property
    def _name(self) -> str:
        return getattr(self, self.kind)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def metric(self) -> str:
        return self._metric

    @property
    def location(self) -> str:
        return f"{self.engine} {self.kind} {self._name!r} at {self.uri!r}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(uri={self.uri!r}, {self.kind}={self._name!r}, dim={self.dim}, "
            f"metric={self.metric!r})"
        )

    def drop(self) -> None:
        """Delete the whole collection."""
        self._call(f"drop the {self.kind}", self._client.delete_collection, self._name)

    def close(self) -> None:
        """Release the client: its connection, a local directory's lock, or its share of an in-process engine."""
        close = getattr(self._client, "close", None)
        if callable(close):
            close()

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ for subclasses
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; an engine error becomes :class:`StoreUnavailableError` when the engine is gone
        (:meth:`_lost`) or :class:`SchemaError` when it refuses (:meth:`_refused`), else propagates."""
        try:
            return fn(*args, **kwargs)
        except self._errors as err:
            if self._lost(err):
                raise StoreUnavailableError(
                    f"lost {self.engine} at {self.uri!r} while trying to {what} ({reason(err)}); {self._lost_hint}"
                ) from err
            if self._refused(err):
                raise SchemaError(f"{self.location} refused to {what}: {reason(err)}") from err
            raise

    def _lost(self, err: BaseException) -> bool:
        """Whether the engine error ``err`` means the engine cannot be reached."""
        return isinstance(err, (ConnectionError, OSError)) or type(err).__name__ in self._lost_errors

    def _refused(self, err: BaseException) -> bool:
        """Whether the engine error ``err`` (the engine reached) is a refusal of the request."""
        return True

    def _new_dim(self, dim: int | None) -> int:
        """The dimension of a collection about to be created: ``dim``, else :class:`CollectionNotFoundError`."""
        if dim is None:
            raise CollectionNotFoundError(
                f"{self.kind} {self._name!r} does not exist at {self.uri!r}; pass dim= to create it."
            ) from None
        return int(dim)

    @contextmanager
    def _closed_on_failure(self) -> Iterator[None]:
        """Close the client when what the block does to open the collection fails."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    def _gather(
        self, ids: Any, step: int, fetch: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], row: str = "row"
    ) -> np.ndarray:
        """Vectors of ``ids`` (n, dim) in their order; ``fetch`` takes ``step`` distinct ids and returns those
        held and their vectors. An id not held is :class:`InvalidInputError`."""
        wanted, unique = requested_ids(ids)
        out = np.empty((len(unique), self.dim), dtype=np.float32)
        found = np.zeros(len(unique), dtype=bool)
        for start in range(0, len(unique), step):
            held, vectors = fetch(unique[start : start + step])
            if len(held):
                slots = np.searchsorted(unique, held)
                out[slots] = vectors
                found[slots] = True
        if not found.all():
            raise InvalidInputError(f"{self.location} holds no {row} with id(s) {unique[~found][:5].tolist()}.")
        return out[np.searchsorted(unique, wanted)]

    def _field_values(
        self, records: Sequence[Mapping[str, Any]], fields: Sequence[str], rows: str = "rows", kind: str = "field"
    ) -> dict[str, np.ndarray]:
        """``{field: values}`` of scanned ``records`` (rows, payloads, metadata); :class:`SchemaError` when one
        lacks a field."""
        missing = sorted({f for r in records for f in fields if f not in r})
        if missing:
            raise SchemaError(
                f"{rows} of {self.location} lack {kind}(s) {missing}; store them with add(..., fields=...) or name "
                "a field the collection has."
            )
        return {f: object_column([r[f] for r in records]) for f in fields}

    # ------------------------------------------------------------------ writes of one field, replacement
    _reserved: tuple[str, ...] = ()  # names a field may not take (the id and vector columns)

    def set_field(self, ids: Any, name: str, values: Sequence[Any]) -> None:
        """Write field ``name`` of the held rows ``ids`` (one value each) with the engine's partial update;
        their vectors and other fields stay as they are, type and value. Every id must be held, and every
        value is checked before the first write."""
        ids, values = check_field_update(ids, name, values, self._reserved)
        self._require_held(ids)
        self._check_field(name, values)
        for start in range(0, len(ids), _FIELD_ROWS):
            self._set_field(ids[start : start + _FIELD_ROWS], name, values[start : start + _FIELD_ROWS])

    def replace(self: _Store, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> _Store:
        """Make these the only rows. A concurrent search never sees an empty collection; how much more the
        engine promises (all old or all new rows) is said in the store's Notes. Returns the store."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        self._replace(x, new_ids, check_fields(fields, len(x), reserved=self._reserved))
        return self

    def _switch_generation(self, new: str, current: str, fill_and_switch: Callable[[], None],
                           drop: Callable[[str], None]) -> None:
        """Fill the collection ``new`` and point the name at it (``fill_and_switch``), dropping ``new`` if that fails;
        then drop the collections kept behind the name before ``current``, which other clients' searches may
        still read. (Stores that keep collections behind an alias: Qdrant, Milvus.)"""
        try:
            fill_and_switch()
        except BaseException:
            drop(new)
            raise
        with self._switching.write():  # no search of this client reads them meanwhile
            for name in self._generations():
                if name not in (new, current):
                    drop(name)

    def _generations(self) -> list[str]:
        """The collections kept behind this store's name (alias)."""
        raise NotImplementedError

    def _require_held(self, ids: np.ndarray) -> None:
        missing = [chunk[~np.isin(chunk, self._held(chunk))] for chunk in np.array_split(ids, max(1, len(ids) // 4096))]
        missing = np.concatenate(missing) if missing else ids[:0]
        if len(missing):
            raise InvalidInputError(f"{self.location} holds no row with id(s) {missing[:5].tolist()}.")

    def _held(self, ids: np.ndarray) -> np.ndarray:
        """Which of at most 4096 distinct ``ids`` the collection holds."""
        raise NotImplementedError

    def _check_field(self, name: str, values: list[Any]) -> None:
        """Refuse values the engine would not keep exactly in field ``name`` (typed columns)."""

    def _set_field(self, ids: np.ndarray, name: str, values: list[Any]) -> None:
        """Write one field of held rows (at most 4096)."""
        raise NotImplementedError

    def _replace(self, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        raise NotImplementedError
