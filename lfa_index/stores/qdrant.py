"""QdrantStore: the store protocol over a Qdrant collection, local (a directory or ``":memory:"``) or a server.

qdrant-client is imported when a QdrantStore is opened (``pip install 'lfa-index[qdrant]'``). A
collection it creates holds one unnamed vector per point with ``Distance.DOT``: Qdrant's score is
then the inner product itself, so folded prototypes classify exactly. Searches run with
``SearchParams(exact=True)`` by default (a full scan on a server, bypassing HNSW); local mode
always scans.

Example
-------
>>> store = QdrantStore("vectors_qdrant", "prototypes", dim=prototype_dim(index))   # local directory
>>> classify(index, write_prototypes(index, store), queries)                       # == index.predict
>>> QdrantStore("http://qdrant:6333", "corpus_raw", api_key=key, exact=False, hnsw_ef=256)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..core.validation import BOOLEAN, check_ids, check_number, check_param
from ..errors import DimensionMismatchError, InvalidParameterError, SchemaError, StoreUnavailableError
from ..extras import import_extra
from ..index.corpus import ReadWriteLock
from ._common import (
    Batches,
    CollectionStore,
    empty_results,
    generation_name,
    grouped,
    is_generation,
    parse_ids,
    reason,
    row_fields,
    server_address,
)
from .base import Where, check_fields, check_vectors, check_where

_REQUEST_BYTES = 8 << 20  # JSON bodies well under a server's 32 MiB default limit
_QUERIES_PER_REQUEST = 256
_SEARCH_ATTEMPTS = 3
_METRICS = {"Dot": "IP", "Cosine": "COSINE"}


def _qdrant() -> Any:
    return import_extra("qdrant_client", "qdrant")


class QdrantStore(CollectionStore):
    """Vectors with int64 ids and payload fields in a Qdrant collection.

    Parameters
    ----------
    uri : str or path
        ``":memory:"`` (in process), a directory (local mode, persisted with qdrant-client's own
        storage; one open client per directory), or a server ``"http://host:6333"``.
    collection : str
        Collection name (letters, digits, '_', '-', '.'); created when missing (``dim`` then required).
    dim : int or None, default=None
        Vector dimension; checked against an existing collection (None accepts its dimension).
    vector_name : str or None, default=None
        Named vector of the collection to use; None for the unnamed default vector.
    exact : bool, default=True
        Full-scan search (``SearchParams(exact=True)``). ``False`` uses the server's HNSW index
        (``hnsw_ef`` candidates), approximate; local mode always scans.
    hnsw_ef : int or None, default=None
        HNSW beam width on a server when ``exact=False`` (None: the collection's setting).
    api_key : str or None, default=None
        Server API key; never printed.
    timeout : float, default=10.0
        Seconds allowed for each server request.

    Notes
    -----
    Metric: a collection created here uses ``Distance.DOT`` (metric "IP"), whose score is the
    inner product. An existing ``Cosine`` collection opens with metric "COSINE" (Qdrant stores
    it unit-normalised); Euclid and Manhattan collections are refused. Local mode on a directory
    commits every point to SQLite on its own (slow beyond a few thousand rows): use ``":memory:"``
    or a server for large corpora. Ids are Qdrant's unsigned integer ids. A ``where`` on a payload
    field no point holds matches nothing.

    Replacement: a collection created here is an alias of the name asked for over a collection
    ``lfa-<digest>-<random>``, so :meth:`replace` fills a new one and switches the alias in one
    step (searches see the old points or the new ones); the previous one is dropped at the next
    replace. For a collection made elsewhere, :meth:`replace` upserts, then deletes the others.

    Raises
    ------
    StoreUnavailableError
        The server cannot be reached, or the directory is held by another client (the message names ``uri``).
    SchemaError
        The collection's vectors are not what lfa-index needs (metric, named vectors, sparse only).
    DimensionMismatchError
        The collection holds vectors of another dimension than ``dim``.
    """

    engine = "Qdrant"
    _uri_forms = "':memory:', a directory or a server URL ('http://host:6333')"
    _name_pattern = r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}"
    _name_rule = "1 to 255 letters, digits, '_', '-' or '.', not starting with '.'"
    _lost_errors = ("ResponseHandlingException",)

    def __init__(
        self,
        uri: Any,
        collection: str,
        dim: int | None = None,
        *,
        vector_name: str | None = None,
        exact: bool = True,
        hnsw_ef: int | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
    ):
        self.uri, self.collection = self._checked(uri, collection, dim)
        if vector_name is not None and not isinstance(vector_name, str):
            raise InvalidParameterError(f"vector_name must be a str or None, got {vector_name!r}.")
        self.exact = check_param(exact, "exact", [BOOLEAN])
        if hnsw_ef is not None:
            check_number(hnsw_ef, "hnsw_ef", low=1, integer=True)
        self.timeout = check_number(timeout, "timeout", low=0.0, low_inclusive=False)
        self.vector_name = vector_name
        self.hnsw_ef = hnsw_ef
        self._switching = ReadWriteLock()  # searches share it, replace() switches and drops collections alone
        qdrant = _qdrant()
        self._models = qdrant.models
        self._server = server_address(self.uri) is not None
        self._errors = (qdrant.http.exceptions.ApiException, ConnectionError, OSError, RuntimeError, ValueError)
        try:
            if self.uri == ":memory:":
                self._client = qdrant.QdrantClient(location=":memory:")
            elif self._server:
                self._client = qdrant.QdrantClient(
                    url=self.uri, api_key=api_key, timeout=max(1, round(self.timeout)), check_compatibility=False
                )
            else:
                self._client = qdrant.QdrantClient(path=self.uri)
            exists = self._client.collection_exists(self.collection)
        except self._errors as err:
            raise StoreUnavailableError(self._unreachable(err)) from err
        with self._closed_on_failure():
            if not exists:
                self._create(self._new_dim(dim))
            self._dim, self._metric = self._inspect(dim)

    def _unreachable(self, err: BaseException) -> str:
        if self._server:
            return (
                f"cannot reach Qdrant at {self.uri!r} ({reason(err)}); check that the server is running and the URL, "
                "API key and network are right, or pass a directory or ':memory:' for local mode."
            )
        return (
            f"cannot open Qdrant local storage at {self.uri!r} ({reason(err)}); a directory can be open in one client "
            "at a time: close() the other QdrantStore on it, or use a Qdrant server for concurrent access."
        )

    # ------------------------------------------------------------------ schema
    def _create(self, dim: int) -> None:
        """A new collection behind an alias of the name asked for, so that :meth:`replace` can switch it at once."""
        physical = self._create_generation(dim)
        operation = self._models.CreateAliasOperation(
            create_alias=self._models.CreateAlias(collection_name=physical, alias_name=self.collection)
        )
        self._call("name the collection", self._client.update_collection_aliases, change_aliases_operations=[operation])

    def _create_generation(self, dim: int) -> str:
        name = generation_name(self.collection, "-")
        params = self._models.VectorParams(size=dim, distance=self._models.Distance.DOT)
        config = params if self.vector_name is None else {self.vector_name: params}
        self._call("create a collection", self._client.create_collection, name, vectors_config=config)
        return name

    def _inspect(self, dim: int | None) -> tuple[int, str]:
        info = self._call("describe the collection", self._client.get_collection, self.collection)
        vectors = info.config.params.vectors
        if isinstance(vectors, dict):
            params = vectors.get("" if self.vector_name is None else self.vector_name)
            if params is None:
                raise SchemaError(
                    f"{self.location} has named vectors {sorted(vectors)} and no vector named {self.vector_name!r}; "
                    "pass vector_name= one of them."
                )
        elif vectors is None or self.vector_name is not None:
            raise SchemaError(
                f"{self.location} has {'no dense vectors' if vectors is None else 'one unnamed vector'}; "
                f"{'create a collection with dense vectors' if vectors is None else 'pass vector_name=None'}."
            )
        else:
            params = vectors
        if getattr(params, "multivector_config", None) is not None:
            raise SchemaError(f"{self.location} holds multivectors; lfa-index needs one dense vector per point.")
        held = int(params.size)
        if dim is not None and held != int(dim):
            raise DimensionMismatchError(
                f"{self.location} holds {held}-d vectors but dim={dim} was asked for; use another collection name, "
                "or embeddings from the model the collection was built with."
            )
        distance = getattr(params.distance, "value", str(params.distance))
        if distance not in _METRICS:
            raise SchemaError(
                f"{self.location} ranks by {distance} distance; lfa-index needs Dot (or Cosine for unit vectors): "
                "create the collection with Distance.DOT."
            )
        return held, _METRICS[distance]

    # ------------------------------------------------------------------ protocol
    def count(self) -> int:
        return int(self._call("count points", self._client.count, self.collection, exact=True).count)

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "QdrantStore":
        """Upsert points (a point whose id is held is replaced, payload included). Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        self._upsert(self.collection, x, new_ids, check_fields(fields, len(x), reserved=()))
        return self

    def _upsert(self, collection: str, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        step = max(1, _REQUEST_BYTES // (12 * self.dim + 64))
        for start in range(0, len(x), step):
            stop = min(start + step, len(x))
            rows = x[start:stop].tolist()
            batch = self._models.Batch(
                ids=ids[start:stop].tolist(),
                vectors=rows if self.vector_name is None else {self.vector_name: rows},
                payloads=row_fields(values, start, stop),
            )
            self._call("upsert points", self._client.upsert, collection, points=batch, wait=True)

    def clear(self) -> None:
        selector = self._models.FilterSelector(filter=self._models.Filter())
        self._call("delete points", self._client.delete, self.collection, points_selector=selector, wait=True)

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_number(k, "k", low=1, integer=True)
        models = self._models
        conditions = [models.FieldCondition(key=name, match=models.MatchValue(value=value))
                      for name, value in check_where(where).items()]
        flt = models.Filter(must=conditions) if conditions else None
        # local mode always scans (and warns that search params have no effect there)
        params = None
        if self._server:
            params = models.SearchParams(exact=self.exact, hnsw_ef=None if self.exact else self.hnsw_ef)
        requests = [models.QueryRequest(query=row, limit=k, filter=flt, params=params, using=self.vector_name,
                                        with_payload=False, with_vector=False) for row in q.tolist()]
        # every request of one search reads one collection: a replace() that switches the name meanwhile (local
        # mode resolves it per query, a server per request) would mix old and new points
        for attempt in range(_SEARCH_ATTEMPTS):
            with self._switching.read():  # this client's replace() drops no collection meanwhile
                target = self._target() if self._mixes(len(q)) else self.collection
                try:
                    return self._search(target, requests, k)
                except (SchemaError, StoreUnavailableError):
                    if target == self.collection or attempt == _SEARCH_ATTEMPTS - 1:
                        raise  # another client's replace dropped it: read the collection the name stands for now

    def _search(self, collection: str, requests: list[Any], k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = empty_results(len(requests), k)
        for start in range(0, len(requests), _QUERIES_PER_REQUEST):
            batch = requests[start : start + _QUERIES_PER_REQUEST]
            found = self._call("search", self._client.query_batch_points, collection, requests=batch)
            for row, response in enumerate(found, start):
                points = response.points
                ids[row, : len(points)] = parse_ids([p.id for p in points], self.location)
                scores[row, : len(points)] = [p.score for p in points]
        return scores, ids

    def _mixes(self, n_queries: int) -> bool:
        """Whether a search of ``n_queries`` could read two collections behind one name."""
        return not self._server or n_queries > _QUERIES_PER_REQUEST

    def _target(self) -> str:
        """The collection the name stands for now (itself, or the collection an alias names)."""
        aliases = self._call("list aliases", self._client.get_aliases).aliases
        return next((a.collection_name for a in aliases if a.alias_name == self.collection), self.collection)

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""

        def fetch(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            points = self._call(
                "retrieve points", self._client.retrieve, self.collection, ids=chunk.tolist(), with_payload=False,
                with_vectors=[self._vector_key] if self.vector_name else True,
            )
            return parse_ids([p.id for p in points], self.location), self._vectors(points)

        return self._gather(ids, max(1, _REQUEST_BYTES // (12 * self.dim + 64)), fetch, row="point")

    def scan(self, fields: Sequence[str], batch_size: int = 4096) -> Batches:
        """Every point in id order, ``batch_size`` at a time (Qdrant's scroll): ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, integer=True)
        fields = list(fields)
        offset = None
        while True:
            points, offset = self._call(
                "scroll points", self._client.scroll, self.collection, limit=int(batch_size), offset=offset,
                with_payload=fields or False, with_vectors=[self._vector_key] if self.vector_name else True,
            )
            if points:
                values = self._field_values([p.payload or {} for p in points], fields, "points", "payload field")
                yield parse_ids([p.id for p in points], self.location), self._vectors(points), values
            if offset is None:
                return

    def field_names(self) -> list[str]:
        """Payload fields some point holds (one scroll over the payloads, no vectors)."""
        names: set[str] = set()
        offset = None
        while True:
            points, offset = self._call(
                "scroll points", self._client.scroll, self.collection, limit=4096, offset=offset, with_payload=True,
                with_vectors=False,
            )
            names.update(key for p in points for key in (p.payload or {}))
            if offset is None:
                return sorted(names)

    def drop(self) -> None:
        """Delete the whole collection (with the collections lfa-index keeps behind its name)."""
        current = self._generation()
        if current is None:
            return super().drop()
        operation = self._models.DeleteAliasOperation(delete_alias=self._models.DeleteAlias(alias_name=self.collection))
        self._call("remove the name", self._client.update_collection_aliases, change_aliases_operations=[operation])
        for name in self._generations():
            self._call("drop the collection", self._client.delete_collection, name)

    # ------------------------------------------------------------------ writes of one field, replacement
    def _held(self, ids: np.ndarray) -> np.ndarray:
        points = self._call("retrieve points", self._client.retrieve, self.collection, ids=ids.tolist(),
                            with_payload=False, with_vectors=False)
        return parse_ids([p.id for p in points], self.location)

    def _set_field(self, ids: np.ndarray, name: str, values: list[Any]) -> None:
        """One ``set_payload`` per distinct value (Qdrant's partial update of payloads), in one request."""
        models = self._models
        operations = [
            models.SetPayloadOperation(set_payload=models.SetPayload(payload={name: value}, points=points))
            for value, points in grouped(ids, values)
        ]
        self._call("set a payload field", self._client.batch_update_points, self.collection,
                   update_operations=operations, wait=True)

    def _replace(self, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        """Fill a new collection, then point the name at it in one alias switch (atomic: old or new points)."""
        models = self._models
        current = self._generation()
        if current is None:  # a collection made elsewhere: upsert, then delete the others (never empty)
            self._upsert(self.collection, x, ids, values)
            others = models.Filter(must_not=[models.HasIdCondition(has_id=ids.tolist())])
            self._call("delete points", self._client.delete, self.collection,
                       points_selector=models.FilterSelector(filter=others), wait=True)
            return
        new = self._create_generation(self.dim)
        name = self.collection
        switch = [
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name)),
            models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=new, alias_name=name)),
        ]

        def fill_and_switch() -> None:
            self._upsert(new, x, ids, values)
            self._call("switch collections", self._client.update_collection_aliases, change_aliases_operations=switch)

        self._switch_generation(new, current, fill_and_switch, lambda old: self._call(
            "drop a collection", self._client.delete_collection, old))

    def _generation(self) -> str | None:
        """The collection lfa-index keeps behind this name, or None (the name is a collection, or another alias)."""
        target = self._target()
        return target if target in self._generations() else None

    def _generations(self) -> list[str]:
        names = [c.name for c in self._call("list collections", self._client.get_collections).collections]
        return [name for name in names if is_generation(name, self.collection, "-")]

    # ------------------------------------------------------------------ helpers
    @property
    def _vector_key(self) -> str:
        return "" if self.vector_name is None else self.vector_name

    def _vectors(self, points: Sequence[Any]) -> np.ndarray:
        rows = [p.vector if self.vector_name is None else p.vector[self.vector_name] for p in points]
        return np.asarray(rows, dtype=np.float32).reshape(len(points), self.dim)

    def _refused(self, err: BaseException) -> bool:
        return type(err).__name__ == "UnexpectedResponse" or isinstance(err, ValueError)
