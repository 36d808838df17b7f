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

import math
import warnings
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import (
    DimensionMismatchError,
    InvalidInputError,
    InvalidParameterError,
    SchemaError,
    StoreUnavailableError,
)
from ..extras import import_extra
from ._common import (
    Batches,
    CollectionStore,
    empty_results,
    parse_ids,
    probe,
    query_chunk,
    reason,
    rescore,
    row_fields,
    server_address,
)
from .base import Where, check_fields, check_vectors, check_where

_DIM_KEY = "lfa_index_dim"  # collection metadata: the dimension, known before the first row arrives
_DEFAULT_EF = 512
# Collections up to this many rows are scored in full on every search (one read, one matrix product).
EXACT_ROWS = 4096
_METRICS = {"ip": "IP", "cosine": "COSINE"}


def _chromadb() -> Any:
    return import_extra("chromadb", "chroma")


@contextmanager
def _quiet() -> Iterator[None]:
    # chromadb warns that a collection without an embedding function uses a "legacy" config
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*legacy embedding function.*", category=DeprecationWarning)
        yield


class ChromaStore(CollectionStore):
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

    Exactness: a collection of at most :data:`EXACT_ROWS` rows (class prototypes, small corpora)
    is read in full and every row scored, so its searches are exact. Beyond, Chroma's only index
    is HNSW, which can miss true neighbours: a search asks for ``k · overfetch`` candidates (HNSW
    then explores ``max(ef_search, k · overfetch)``) and re-ranks them exactly. With at most
    ``ef_search`` rows HNSW visits every row it can reach, which is every row of unit vectors;
    beyond, recall is HNSW's. Raise ``ef_search`` for larger corpora that must stay exact. Rows of
    unequal norms (raw, unnormalised vectors) can be unreachable in HNSW's inner-product graph:
    6 to 25 of 300 clustered rows were, in our tests; store unit vectors where exactness matters.

    Ids are kept as decimal strings (Chroma's ids are strings). A row replaced by :meth:`add` is
    deleted first, since Chroma's upsert would merge the old metadata into the new. A ``where``
    on a field no row holds matches nothing. Chroma stores -0.0 as 0.0, so it is refused. With no
    multi-row transaction, :meth:`replace` upserts the rows, then deletes the others: a search
    meanwhile sees each row's old or new version, never an empty collection.

    Raises
    ------
    StoreUnavailableError
        The server cannot be reached or the directory cannot be opened (the message names ``uri``).
    SchemaError
        The collection uses the l2 space, or its ids are not integers.
    DimensionMismatchError
        The collection holds vectors of another dimension than ``dim``.
    """

    engine = "Chroma"
    _uri_forms = "':memory:', a directory or a server URL ('http://host:8000')"
    _name_pattern = r"(?!.*\.\.)(?!\d{1,3}(\.\d{1,3}){3}$)[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]"
    _name_rule = (
        "3 to 512 letters, digits, '.', '_' or '-', starting and ending with a letter or digit, without '..', "
        "and not an IPv4 address (Chroma's rule)"
    )

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
        self.uri, self.collection = self._checked(uri, collection, dim)
        if ef_search is not None:
            check_number(ef_search, "ef_search", low=1, integer=True)
        check_number(overfetch, "overfetch", low=1, integer=True)
        timeout = check_number(timeout, "timeout", low=0.0, low_inclusive=False)
        self.overfetch = int(overfetch)
        chromadb = _chromadb()
        settings = chromadb.config.Settings(anonymized_telemetry=False)
        self._errors = (chromadb.errors.ChromaError, ConnectionError, OSError, RuntimeError, ValueError)
        address = server_address(self.uri)
        if address is not None:
            scheme, host, port = address
            probe(host, port, timeout, f"Chroma at {self.uri!r}",
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
        with self._closed_on_failure():
            try:
                with _quiet():
                    self._col = self._client.get_collection(self.collection, embedding_function=None)
            except chromadb.errors.NotFoundError:
                new_dim = self._new_dim(dim)
                hnsw = {"space": "ip", "ef_search": int(ef_search or _DEFAULT_EF)}
                with _quiet():
                    self._col = self._call(
                        "create the collection", self._client.create_collection, self.collection,
                        embedding_function=None, configuration={"hnsw": hnsw}, metadata={_DIM_KEY: new_dim},
                    )
            except self._errors as err:
                raise StoreUnavailableError(
                    f"cannot open {self.location} ({reason(err)}); check that the server is running and reachable."
                ) from err
            self._dim, self._metric = self._inspect(dim, ef_search)

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
    def count(self) -> int:
        return int(self._call("count rows", self._col.count))

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "ChromaStore":
        """Insert rows; a row whose id is held is replaced (deleted, then added). Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        keys = [str(i) for i in check_ids(ids, len(x)).tolist()]
        values = check_fields(fields, len(x), reserved=())
        for name, column in values.items():
            self._check_field(name, column)
        replace = self.count() > 0
        step = self._batch_rows()
        for start in range(0, len(x), step):
            stop = min(start + step, len(x))
            if replace:
                self._call("delete rows", self._col.delete, ids=keys[start:stop])
            self._call(
                "add rows", self._col.add, ids=keys[start:stop], embeddings=x[start:stop],
                metadatas=row_fields(values, start, stop),
            )
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
        k = check_number(k, "k", low=1, integer=True)
        filters = [{name: value} for name, value in check_where(where).items()]
        expr = None if not filters else filters[0] if len(filters) == 1 else {"$and": filters}
        held = self.count()
        if 0 < held <= EXACT_ROWS:  # every row scored: HNSW may not reach rows of unequal norms
            rows = self._call("read rows", self._col.get, where=expr, include=["embeddings"])
            ids = parse_ids(rows["ids"], self.location)
            if len(ids) == 0:
                return empty_results(len(q), k)
            vectors = np.asarray(rows["embeddings"], dtype=np.float32).reshape(len(ids), self.dim)
            return rescore(q, k, self.metric, 4096, lambda chunk: (ids, vectors))
        fetch = min(held, k * self.overfetch)
        if fetch == 0:
            return empty_results(len(q), k)

        def candidates(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
            return cand_ids, cand

        return rescore(q, k, self.metric, query_chunk(self.dim, fetch), candidates)

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""

        def fetch(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            rows = self._call("get rows", self._col.get, ids=[str(i) for i in chunk.tolist()], include=["embeddings"])
            return parse_ids(rows["ids"], self.location), np.asarray(rows["embeddings"], dtype=np.float32)

        return self._gather(ids, self._batch_rows(), fetch)

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
            values = self._field_values([m or {} for m in rows["metadatas"]], fields, kind="metadata field")
            vectors = np.asarray(rows["embeddings"], dtype=np.float32).reshape(len(rows["ids"]), self.dim)
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

    # ------------------------------------------------------------------ writes of one field, replacement
    def _held(self, ids: np.ndarray) -> np.ndarray:
        found = self._call("get rows", self._col.get, ids=[str(i) for i in ids.tolist()], include=[])
        return parse_ids(found["ids"], self.location)

    def _check_field(self, name: str, values: list[Any]) -> None:
        if any(isinstance(v, float) and v == 0.0 and math.copysign(1.0, v) < 0 for v in values):
            raise InvalidInputError(
                f"field {name!r} holds -0.0, which Chroma stores as 0.0; store 0.0 (or the value as a str)."
            )

    def _set_field(self, ids: np.ndarray, name: str, values: list[Any]) -> None:
        """Chroma's ``update`` of metadata, which merges the given keys into each row's metadata."""
        step = self._batch_rows()
        for start in range(0, len(ids), step):
            keys = [str(i) for i in ids[start : start + step].tolist()]
            metadatas = [{name: value} for value in values[start : start + step]]
            self._call("update a metadata field", self._col.update, ids=keys, metadatas=metadatas)

    def _replace(self, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        """Upsert the rows (keys they no longer have removed), then delete every other row: a search meanwhile
        sees each row's old or new version, never an empty collection (Chroma has no multi-row transaction)."""
        for name, column in values.items():
            self._check_field(name, column)
        step = self._batch_rows()
        keys = [str(i) for i in ids.tolist()]
        for start in range(0, len(keys), step):
            batch_keys = keys[start : start + step]
            old = self._call("get rows", self._col.get, ids=batch_keys, include=["metadatas"])
            stale = {key: set(m or {}) for key, m in zip(old["ids"], old["metadatas"])}
            metadatas = []
            for j, key in enumerate(batch_keys, start):
                row = {name: vs[j] for name, vs in values.items()}
                row.update({name: None for name in stale.get(key, ()) if name not in row})  # None removes a key
                metadatas.append(row or None)
            self._call("upsert rows", self._col.upsert, ids=batch_keys, embeddings=x[start : start + step],
                       metadatas=metadatas)
        kept, offset, others = set(keys), 0, []
        while True:
            held = self._call("list rows", self._col.get, limit=step, offset=offset, include=[])["ids"]
            if not held:
                break
            others += [key for key in held if key not in kept]
            offset += len(held)
        for start in range(0, len(others), step):
            self._call("delete rows", self._col.delete, ids=others[start : start + step])

    # ------------------------------------------------------------------ helpers
    def _batch_rows(self) -> int:
        if self._max_batch is None:
            self._max_batch = int(self._call("read the batch limit", self._client.get_max_batch_size))
        return max(1, min(self._max_batch, (32 << 20) // (4 * self.dim + 64)))

    def _lost(self, err: BaseException) -> bool:
        return super()._lost(err) or "connect" in str(err).lower()
