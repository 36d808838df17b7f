"""Helpers shared by the stores that talk to an engine (Milvus, Qdrant, Chroma, LanceDB): names, URLs, re-scoring."""

from __future__ import annotations

import re
import socket
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit

import numpy as np

from ..core.validation import check_ids
from ..errors import InvalidInputError, InvalidParameterError, SchemaError, StoreUnavailableError

Batches = Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]  # what scan() yields
_CHUNK_BYTES = 64 << 20  # at most this much candidate data in memory while re-scoring


def check_name(name: Any, what: str, pattern: str, rule: str) -> str:
    """``name`` if it fully matches ``pattern``, else :class:`InvalidParameterError` quoting the engine's ``rule``."""
    if not isinstance(name, str) or re.fullmatch(pattern, name) is None:
        raise InvalidParameterError(f"{what} must be {rule}; got {name!r}.")
    return name


def check_uri(uri: Any, engine: str, forms: str) -> str:
    if not isinstance(uri, (str, bytes)) and not hasattr(uri, "__fspath__"):
        raise InvalidParameterError(f"uri must be {forms} for {engine}, got {type(uri).__name__}.")
    text = str(uri.__fspath__() if hasattr(uri, "__fspath__") else uri)
    if not text:
        raise InvalidParameterError(f"uri must be {forms} for {engine}, got an empty string.")
    return text


def server_address(uri: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an ``http(s)://host[:port]`` URI, None for anything else (a path)."""
    if not uri.startswith(("http://", "https://")):
        return None
    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError as err:
        raise InvalidParameterError(f"uri {uri!r} has an invalid port ({err}).") from err
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
    """Exact top-``k`` among candidates: ``ids`` (n, m) with -1 for none, their ``vectors`` (n, m, d).

    Scores are recomputed in float32 from the stored vectors (inner products, or cosines for
    metric "COSINE"), so the engine's own distance arithmetic never leaks into scores or order.
    Returns ``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf.
    """
    scores = np.einsum("nd,nmd->nm", queries, vectors, dtype=np.float32)
    if metric == "COSINE":
        norms = np.linalg.norm(vectors, axis=2) * np.linalg.norm(queries, axis=1, keepdims=True)
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
