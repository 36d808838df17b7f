"""ChromaStore: the store protocol over a Chroma collection, on disk, in memory or on a server.

chromadb is imported when a ChromaStore is opened (``pip install 'lfa-index[chroma]'``), with
anonymized telemetry off. Vectors are always passed in: no embedding function is attached, so
Chroma never downloads its default model.

Example
-------
>>> store = ChromaStore("vectors_chroma", "prototypes", dim=prototype_dim(index))     # a directory
>>> classify(index, write_prototypes(index, store), queries)                          # == index.predict
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import (
    CollectionNotFoundError,
    DimensionMismatchError,
    InvalidInputError,
    InvalidParameterError,
    SchemaError,
    StoreUnavailableError,
)
from ..extras import import_extra
from ._common import (
    Batches,
    check_name,
    check_uri,
    parse_ids,
    probe,
    query_chunk,
    rank_candidates,
    reason,
    requested_ids,
    server_address,
)
from .base import Where, check_fields, check_k, check_vectors, check_where

_NAME = r"(?!.*\.\.)(?!\d{1,3}(\.\d{1,3}){3}$)[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]"
_NAME_RULE = (
    "3 to 512 letters, digits, '.', '_' or '-', starting and ending with a letter or digit, without '..', "
    "and not an IPv4 address (Chroma's rule)"
)
_DIM_KEY = "lfa_index_dim"  # collection metadata: the dimension, known before the first row arrives
_DEFAULT_EF = 512
_METRICS = {"ip": "IP", "cosine": "COSINE"}


def _chromadb() -> Any:
    return import_extra("chromadb", "chroma")


@contextmanager
def _quiet() -> Iterator[None]:
    # chromadb warns that a collection without an embedding function uses a "legacy" config
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy embedding function.*", category=DeprecationWarning)
        yield


class ChromaStore:
    """Vectors with int64 ids and metadata fields in a Chroma collection.

    Parameters
    ----------
    uri : str or path
        A directory (``PersistentClient``), ``":memory:"`` (``EphemeralClient``; every ephemeral
        client of a process shares one in-memory database) or a server ``"http://host:8000"``.
    collection : str
        Collection name (Chroma's rule: 3-512 of letters, digits, '.', '_', '-'); created when
        missing (``dim`` then required).
    dim : int or None, default=None
        Vector dimension; checked against an existing collection (None accepts its dimension).
    ef_search : int or None, default=None
        HNSW beam width. A new collection gets 512; an existing one keeps its own unless given.
    overfetch : int, default=2
        Candidates fetched per result (at least ``k · overfetch``) before the exact re-score.
    headers : dict or None, default=None
        HTTP headers for a server (e.g. an auth token); never printed.
    timeout : float, default=10.0
        Seconds allowed to reach a server when opening (chromadb's HTTP client has no request timeout).

    Notes
    -----
    Metric: a collection created here uses ``hnsw:space = "ip"``, for which Chroma reports the
    distance ``1 - q·x``. Scores are not derived from it: each search returns its candidates'
    stored vectors and scores them again, ``q·x`` in float32, so no rounding of ``1 - d`` leaks.
    An existing ``cosine`` collection opens with metric "COSINE" (scores ``q̂·x̂``); ``l2`` is refused.

    Exactness: Chroma's only index is HNSW, which can miss true neighbours. A search asks for
    ``k · overfetch`` candidates (HNSW then explores ``max(ef_search, k · overfetch)``) and
    re-ranks them exactly. With at most ``ef_search`` rows HNSW visits every row it can reach,
    which is every row of unit vectors (embeddings, aligned corpora) and of small collections
    (class prototypes), so those search exactly; beyond, recall is HNSW's. Raise ``ef_search``
    for larger corpora that must stay exact. Rows of unequal norms (raw, unnormalised vectors)
    can be unreachable in HNSW's inner-product graph even then: 6 to 25 of 300 clustered rows
    were, in our tests; store unit vectors where exactness matters.

    Ids are kept as decimal strings (Chroma's ids are strings). A row replaced by :meth:`add` is
    deleted first, since Chroma's upsert would merge the old metadata into the new. A ``where``
    on a field no row holds matches nothing.

    Raises
    ------
    StoreUnavailableError
        The server cannot be reached or the directory cannot be opened (the message names ``uri``).
    SchemaError
        The collection uses the l2 space, or its ids are not integers.
    DimensionMismatchError
        The collection holds vectors of another dimension than ``dim``.
    """

    def __init__(
        self,
        uri: Any,
        collection: str,
        dim: int | None = None,
        *,
        ef_search: int | None = None,
        overfetch: int = 2,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ):
        self.uri = check_uri(uri, "Chroma", "':memory:', a directory or a server URL ('http://host:8000')")
        self.collection = check_name(collection, "collection (a Chroma collection name)", _NAME, _NAME_RULE)
        if dim is not None:
            check_number(dim, "dim", low=1, integer=True)
        if ef_search is not None:
            check_number(ef_search, "ef_search", low=1, integer=True)
        check_number(overfetch, "overfetch", low=1, integer=True)
        check_number(timeout, "timeout", low=0.0, low_inclusive=False)
        self.overfetch = int(overfetch)
        chromadb = _chromadb()
        settings = chromadb.config.Settings(anonymized_telemetry=False)
        self._errors = (chromadb.errors.ChromaError, ConnectionError, OSError, RuntimeError, ValueError)
        address = server_address(self.uri)
        if address is not None:
            scheme, host, port = address
            probe(host, port, float(timeout), f"Chroma at {self.uri!r}",
                  "check that the server is running and the URL and network are right, or pass a directory.")
        try:
            if address is not None:
                self._client = chromadb.HttpClient(
                    host=host, port=port, ssl=scheme == "https", headers=dict(headers or {}), settings=settings
                )
            elif self.uri == ":memory:":
                self._client = chromadb.EphemeralClient(settings=settings)
            else:
                self._client = chromadb.PersistentClient(path=self.uri, settings=settings)
            self._client.heartbeat()
        except self._errors as err:
            raise StoreUnavailableError(
                f"cannot open Chroma at {self.uri!r} ({reason(err)}); check that the server is running and reachable, "
                "or that the directory is a writable Chroma database."
            ) from err
        self._max_batch: int | None = None
        try:
            try:
                with _quiet():
                    self._col = self._client.get_collection(self.collection, embedding_function=None)
            except chromadb.errors.NotFoundError:
                if dim is None:
                    raise CollectionNotFoundError(
                        f"collection {self.collection!r} does not exist at {self.uri!r}; pass dim= to create it."
                    ) from None
                hnsw = {"space": "ip", "ef_search": int(ef_search or _DEFAULT_EF)}
                with _quiet():
                    self._col = self._call(
                        "create the collection", self._client.create_collection, self.collection,
                        embedding_function=None, configuration={"hnsw": hnsw}, metadata={_DIM_KEY: int(dim)},
                    )
            except self._errors as err:
                raise StoreUnavailableError(
                    f"cannot open {self.location} ({reason(err)}); check that the server is running and reachable."
                ) from err
            self._dim, self._metric = self._inspect(dim, ef_search)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ schema
    def _inspect(self, dim: int | None, ef_search: int | None) -> tuple[int, str]:
        with _quiet():
            config = self._col.configuration or {}
        index = config.get("hnsw") or config.get("spann") or {}
        space = str(index.get("space", "l2")).lower()
        if space not in _METRICS:
            raise SchemaError(
                f"{self.location} uses the {space!r} space; lfa-index needs 'ip' (or 'cosine' for unit vectors): "
                "create the collection with configuration={'hnsw': {'space': 'ip'}}."
            )
        held = (self._col.metadata or {}).get(_DIM_KEY)
        if held is None:  # a collection made elsewhere: its first row tells (it is left unmodified)
            first = self._call("read a row", self._col.get, limit=1, include=["embeddings"])
            if len(first["ids"]):
                held = len(first["embeddings"][0])
            elif dim is None:
                raise InvalidParameterError(f"{self.location} is empty and records no dimension; pass dim=.")
            else:
                held = int(dim)
        held = int(held)
        if dim is not None and held != int(dim):
            raise DimensionMismatchError(
                f"{self.location} holds {held}-d vectors but dim={dim} was asked for; use another collection name, "
                "or embeddings from the model the collection was built with."
            )
        hnsw = config.get("hnsw") or {}
        if ef_search is not None and hnsw and hnsw.get("ef_search") != ef_search:
            with _quiet():
                self._call("set ef_search", self._col.modify, configuration={"hnsw": {"ef_search": int(ef_search)}})
        return held, _METRICS[space]

    # ------------------------------------------------------------------ protocol
    @property
    def dim(self) -> int:
        return self._dim

    @property
    def metric(self) -> str:
        return self._metric

    @property
    def location(self) -> str:
        return f"Chroma collection {self.collection!r} at {self.uri!r}"

    def __repr__(self) -> str:
        return f"ChromaStore(uri={self.uri!r}, collection={self.collection!r}, dim={self.dim}, metric={self.metric!r})"

    def count(self) -> int:
        return int(self._call("count rows", self._col.count))

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "ChromaStore":
        """Insert rows; a row whose id is held is replaced (deleted, then added). Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        keys = [str(i) for i in check_ids(ids, len(x)).tolist()]
        values = check_fields(fields, len(x), reserved=())
        replace = self.count() > 0
        step = self._batch_rows()
        for start in range(0, len(x), step):
            stop = min(start + step, len(x))
            metadatas = [{n: vs[j] for n, vs in values.items()} for j in range(start, stop)] if values else None
            if replace:
                self._call("delete rows", self._col.delete, ids=keys[start:stop])
            self._call("add rows", self._col.add, ids=keys[start:stop], embeddings=x[start:stop], metadatas=metadatas)
        return self

    def clear(self) -> None:
        step = self._batch_rows()
        while True:
            held = self._call("list rows", self._col.get, limit=step, include=[])["ids"]
            if not held:
                return
            self._call("delete rows", self._col.delete, ids=list(held))

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first, re-scored exactly; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_k(k)
        filters = [{name: value} for name, value in check_where(where).items()]
        expr = None if not filters else filters[0] if len(filters) == 1 else {"$and": filters}
        fetch = min(self.count(), k * self.overfetch)
        if fetch == 0:
            return np.full((len(q), k), -np.inf, dtype=np.float32), np.full((len(q), k), -1, dtype=np.int64)
        scores, ids = [], []
        step = query_chunk(self.dim, fetch)
        for start in range(0, len(q), step):
            chunk = q[start : start + step]
            found = self._call(
                "search", self._col.query, query_embeddings=chunk, n_results=fetch, where=expr,
                include=["embeddings"],
            )
            cand_ids = np.full((len(chunk), fetch), -1, dtype=np.int64)
            cand = np.zeros((len(chunk), fetch, self.dim), dtype=np.float32)
            for row, (hit_ids, hit_vectors) in enumerate(zip(found["ids"], found["embeddings"])):
                n = len(hit_ids)
                if n:
                    cand_ids[row, :n] = parse_ids(hit_ids, self.location)
                    cand[row, :n] = np.asarray(hit_vectors, dtype=np.float32)
            s, i = rank_candidates(chunk, cand_ids, cand, k, self.metric)
            scores.append(s)
            ids.append(i)
        return np.concatenate(scores), np.concatenate(ids)

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""
        wanted, unique = requested_ids(ids)
        out = np.empty((len(unique), self.dim), dtype=np.float32)
        found = np.zeros(len(unique), dtype=bool)
        step = self._batch_rows()
        for start in range(0, len(unique), step):
            rows = self._call(
                "get rows", self._col.get, ids=[str(i) for i in unique[start : start + step].tolist()],
                include=["embeddings"],
            )
            if len(rows["ids"]):
                slots = np.searchsorted(unique, parse_ids(rows["ids"], self.location))
                out[slots] = np.asarray(rows["embeddings"], dtype=np.float32)
                found[slots] = True
        if not found.all():
            raise InvalidInputError(f"{self.location} holds no row with id(s) {unique[~found][:5].tolist()}.")
        return out[np.searchsorted(unique, wanted)]

    def scan(self, fields: Sequence[str], batch_size: int = 4096) -> Batches:
        """Every row, ``batch_size`` at a time (Chroma's offset pages): ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, integer=True)
        fields = list(fields)
        step = min(int(batch_size), self._batch_rows())
        offset = 0
        while True:
            rows = self._call(
                "scan rows", self._col.get, limit=step, offset=offset, include=["embeddings", "metadatas"]
            )
            if not len(rows["ids"]):
                return
            metadatas = [m or {} for m in rows["metadatas"]]
            missing = sorted({f for m in metadatas for f in fields if f not in m})
            if missing:
                raise SchemaError(
                    f"rows of {self.location} lack metadata field(s) {missing}; store them with add(..., fields=...) "
                    "or name a field the collection has."
                )
            vectors = np.asarray(rows["embeddings"], dtype=np.float32).reshape(len(rows["ids"]), self.dim)
            values = {f: np.array([m[f] for m in metadatas]) for f in fields}
            yield parse_ids(rows["ids"], self.location), vectors, values
            offset += len(rows["ids"])

    def field_names(self) -> list[str]:
        """Metadata fields some row holds (one pass over the metadata, no vectors)."""
        names: set[str] = set()
        step, offset = self._batch_rows(), 0
        while True:
            rows = self._call("scan rows", self._col.get, limit=step, offset=offset, include=["metadatas"])
            if not len(rows["ids"]):
                return sorted(names)
            names.update(key for m in rows["metadatas"] for key in (m or {}))
            offset += len(rows["ids"])

    def drop(self) -> None:
        """Delete the whole collection."""
        self._call("drop the collection", self._client.delete_collection, self.collection)

    def close(self) -> None:
        """Release the client (chromadb >= 1.1 counts clients of a shared system and stops it with the last)."""
        client = getattr(self, "_client", None)
        if client is not None and hasattr(client, "close"):
            client.close()

    def __enter__(self) -> "ChromaStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers
    def _batch_rows(self) -> int:
        if self._max_batch is None:
            self._max_batch = int(self._call("read the batch limit", self._client.get_max_batch_size))
        return max(1, min(self._max_batch, (32 << 20) // (4 * self.dim + 64)))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self._errors as err:
            if isinstance(err, (ConnectionError, OSError)) or "connect" in str(err).lower():
                raise StoreUnavailableError(
                    f"lost Chroma at {self.uri!r} while trying to {what} ({reason(err)}); check that the server is "
                    "running and reachable, then retry."
                ) from err
            raise SchemaError(f"{self.location} refused to {what}: {reason(err)}") from err
