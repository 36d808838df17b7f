"""MilvusStore: one Milvus collection behind the store protocol, through ``pymilvus``.

The same code reaches Milvus Lite (``uri="vectors.db"``, embedded, for tests and laptops), a
Milvus server (``uri="http://host:19530"``) or a managed cluster (``uri=..., token=...``). A
collection it creates has an INT64 primary key, a FLOAT_VECTOR field with a FLAT (exact) index of
metric IP, and dynamic fields for labels; an existing collection is checked against what is asked.

Example
-------
>>> store = MilvusStore("vectors.db", "prototypes", dim=512)
>>> store.add(vectors, ids=np.arange(len(vectors)), fields={"label": names})
>>> scores, ids = store.search(queries, k=1)
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..core.validation import check_ids, check_number
from ..errors import (
    ApproximateIndexWarning,
    DimensionMismatchError,
    InvalidParameterError,
    SchemaError,
    StoreUnavailableError,
)
from ..extras import import_extra
from ..index.corpus import ReadWriteLock
from ._common import (
    CollectionStore,
    check_name,
    empty_results,
    filter_literal,
    generation_name,
    is_generation,
    reason,
    server_address,
)
from .base import Where, check_fields, check_vectors, check_where

_MAX_TOPK = 16384  # Milvus's limit on topk and on queries per search request
_REQUEST_BYTES = 16 << 20  # stay well under gRPC's 64 MiB message limit
_METRICS = ("IP", "COSINE")
_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,254}"
_NAME_RULE = "1 to 255 letters, digits or '_', starting with a letter or '_' (Milvus's rule)"


def _pymilvus() -> Any:
    return import_extra("pymilvus", "milvus")


class MilvusStore(CollectionStore):
    """Vectors with int64 ids and scalar fields in a Milvus collection.

    Parameters
    ----------
    uri : str
        A Milvus Lite file ("vectors.db"), or a server / cluster address ("http://host:19530").
    collection : str
        Collection name. It is created when missing (``dim`` is then required).
    dim : int or None, default=None
        Vector dimension. For an existing collection it is checked; None accepts the collection's.
    embedding_field : str, default="embedding"
        The FLOAT_VECTOR field holding the vectors.
    token : str, default=""
        Credentials for a server ("user:password" or an API key); never printed.
    db_name : str, default=""
        Milvus database ("" for the default one).
    timeout : float, default=30.0
        Seconds allowed for each request.

    Notes
    -----
    A collection created here is an alias of the name asked for over a collection
    ``lfa_<digest>_<random>``, so :meth:`replace` fills a new one and switches the alias in one
    step (searches see the old rows or the new ones); for a collection made elsewhere it upserts,
    then deletes the others. :meth:`set_field` is Milvus's partial upsert of one field.

    Raises
    ------
    StoreUnavailableError
        The URI cannot be reached or opened (the message names the URI).
    SchemaError
        The collection lacks ``embedding_field``, has a non-INT64 primary key or a metric other
        than IP/COSINE.
    DimensionMismatchError
        The collection holds vectors of another dimension than ``dim``.

    Example
    -------
    >>> MilvusStore("http://milvus:19530", "corpus_raw", token="root:Milvus").search(q, k=100)
    """

    engine = "Milvus"

    def __init__(
        self,
        uri: str,
        collection: str,
        dim: int | None = None,
        *,
        embedding_field: str = "embedding",
        token: str = "",
        db_name: str = "",
        timeout: float = 30.0,
    ):
        if not isinstance(uri, str) or not uri:
            raise InvalidParameterError(f"uri must be a Milvus Lite file or a server address, got {uri!r}.")
        server_address(uri)  # a bad port or IPv6 address: a typed error before pymilvus sees it
        check_name(collection, "collection", _NAME, _NAME_RULE)
        check_name(embedding_field, "embedding_field", _NAME, _NAME_RULE)
        if dim is not None:
            check_number(dim, "dim", low=1, integer=True)
        self.timeout = check_number(timeout, "timeout", low=0.0, low_inclusive=False)
        self.uri = uri
        self.collection = collection
        self.embedding_field = embedding_field
        self._switching = ReadWriteLock()  # searches share it, replace() drops old collections alone
        pymilvus = _pymilvus()
        self._errors = (pymilvus.MilvusException, ConnectionError, OSError)
        try:
            self._client = pymilvus.MilvusClient(uri=uri, token=token, db_name=db_name, timeout=self.timeout)
            exists = self._client.has_collection(collection, timeout=self.timeout)
        except self._errors as err:
            lock = _lock_held_elsewhere(uri)
            if lock is not None:
                raise StoreUnavailableError(
                    f"the Milvus Lite file {uri!r} is open in another process (it holds the lock {str(lock)!r}); "
                    "Milvus Lite lets one process open a file at a time: close the other process's store "
                    "(MilvusStore.close()), wait for it to exit, or share a Milvus server (uri='http://host:19530')."
                ) from err
            raise StoreUnavailableError(
                f"cannot reach Milvus at {uri!r} ({reason(err)}); check that the server is running and the URI, "
                "token and network are right, or pass a local file such as 'vectors.db' for Milvus Lite."
            ) from err
        with self._closed_on_failure():
            if not exists:
                self._create(self._new_dim(dim))
            self._dim, self._pk, self._metric = self._inspect(dim)
            self._call("load the collection", self._client.load_collection, collection, timeout=self.timeout)

    # ------------------------------------------------------------------ schema
    def _create(self, dim: int) -> None:
        """A new collection behind an alias of the name asked for, so that :meth:`replace` can switch it at once."""
        physical = self._create_generation(dim, "id")
        self._call("name the collection", self._client.create_alias, physical, self.collection, timeout=self.timeout)

    def _create_generation(self, dim: int, pk: str) -> str:
        pymilvus = _pymilvus()
        name = generation_name(self.collection, "_")
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        schema.add_field(pk, pymilvus.DataType.INT64, is_primary=True)
        schema.add_field(self.embedding_field, pymilvus.DataType.FLOAT_VECTOR, dim=dim)
        index_params = self._client.prepare_index_params()
        index_params.add_index(field_name=self.embedding_field, index_type="FLAT", metric_type="IP")
        self._call(
            "create a collection", self._client.create_collection, name, schema=schema,
            index_params=index_params, consistency_level="Strong", timeout=self.timeout,
        )
        return name

    def _inspect(self, dim: int | None) -> tuple[int, str, str]:
        info = self._call(
            "describe the collection", self._client.describe_collection, self.collection, timeout=self.timeout
        )
        fields = {f["name"]: f for f in info["fields"]}
        pymilvus = _pymilvus()
        vector_fields = [n for n, f in fields.items() if f["type"] == pymilvus.DataType.FLOAT_VECTOR]
        field = fields.get(self.embedding_field)
        if field is None or field["type"] != pymilvus.DataType.FLOAT_VECTOR:
            raise SchemaError(
                f"collection {self.collection!r} at {self.uri!r} has no FLOAT_VECTOR field {self.embedding_field!r} "
                f"(its vector fields: {vector_fields}); pass embedding_field= one of them."
            )
        held = int(field["params"]["dim"])
        if dim is not None and held != int(dim):
            raise DimensionMismatchError(
                f"collection {self.collection!r} at {self.uri!r} holds {held}-d vectors but dim={dim} was asked for; "
                "use another collection name, or embeddings from the model the collection was built with."
            )
        pk = [n for n, f in fields.items() if f.get("is_primary")]
        if len(pk) != 1 or fields[pk[0]]["type"] != pymilvus.DataType.INT64:
            raise SchemaError(
                f"collection {self.collection!r} at {self.uri!r} needs an INT64 primary key, it has {pk}; "
                "create a collection with an INT64 id field."
            )
        metric = "IP"
        indexes = self._call(
            "list indexes", self._client.list_indexes, self.collection, field_name=self.embedding_field
        )
        if indexes:
            described = self._call(
                "describe the index", self._client.describe_index, self.collection, indexes[0], timeout=self.timeout
            )
            metric = str(described.get("metric_type", "IP")).upper()
            kind = str(described.get("index_type", "FLAT")).upper()
            if kind != "FLAT":
                warnings.warn(
                    f"collection {self.collection!r} at {self.uri!r} is indexed with {kind}, an approximate index: "
                    "classification and searches can differ from AlignedIndex's; re-index it with index_type='FLAT' "
                    "for exact answers.", ApproximateIndexWarning, stacklevel=3,
                )
        if metric not in _METRICS:
            raise SchemaError(
                f"collection {self.collection!r} at {self.uri!r} is indexed with metric {metric}; lfa-index needs IP "
                "(or COSINE for unit vectors): re-index it with metric_type='IP'."
            )
        return held, pk[0], metric

    # ------------------------------------------------------------------ protocol
    def count(self) -> int:
        rows = self._call(
            "count rows", self._client.query, self.collection, filter="", output_fields=["count(*)"],
            timeout=self.timeout, consistency_level="Strong",
        )
        return int(rows[0]["count(*)"])

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "MilvusStore":
        """Upsert rows (a row whose id is held is replaced), in requests of at most 16 MiB. Returns ``self``."""
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        self._upsert(self.collection, x, new_ids, check_fields(fields, len(x), reserved=self._reserved))
        return self

    @property
    def _reserved(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self._pk, self.embedding_field)

    def _upsert(self, collection: str, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        step = max(1, _REQUEST_BYTES // (4 * self.dim + 64))
        for start in range(0, len(x), step):
            stop = start + step
            rows = [
                {self._pk: int(i), self.embedding_field: v, **{k: vs[start + j] for k, vs in values.items()}}
                for j, (i, v) in enumerate(zip(ids[start:stop], x[start:stop]))
            ]
            self._call("upsert rows", self._client.upsert, collection, rows, timeout=self.timeout)

    def clear(self) -> None:
        self._call(
            "delete rows", self._client.delete, self.collection, filter=f"{self._pk} >= 0 or {self._pk} < 0",
            timeout=self.timeout,
        )

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_number(k, "k (results per query; Milvus allows at most 16384)", low=1, high=_MAX_TOPK, integer=True)
        filters = check_where(where)
        # a literal expression: Milvus Lite does not read filter templates ({name} + filter_params)
        expr = " and ".join(f"{name} == {filter_literal(value, 'milvus')}" for name, value in filters.items())
        scores, ids = empty_results(len(q), k)
        step = max(1, min(_MAX_TOPK, _REQUEST_BYTES // (4 * self.dim)))
        with self._switching.read():  # this client's replace() drops no collection meanwhile
            # several requests read the collection the name stands for now: a replace() meanwhile would mix them
            target = self._physical() if len(q) > step else self.collection
            for start in range(0, len(q), step):
                found = self._call(
                    "search", self._client.search, target, data=q[start : start + step], limit=k,
                    filter=expr, output_fields=[self._pk], anns_field=self.embedding_field,
                    search_params={"metric_type": self.metric}, timeout=self.timeout, consistency_level="Strong",
                )
                for row, hits in enumerate(found, start):
                    n = len(hits.ids)
                    ids[row, :n] = hits.ids
                    scores[row, :n] = hits.distances
        return scores, ids

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""

        def fetch(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            rows = self._call(
                "get rows", self._client.get, self.collection, ids=chunk.tolist(), output_fields=[self.embedding_field],
                timeout=self.timeout, consistency_level="Strong",
            )
            return self._rows(rows or [])

        return self._gather(ids, max(1, min(_MAX_TOPK, _REQUEST_BYTES // (4 * self.dim + 64))), fetch)

    def scan(
        self, fields: Sequence[str], batch_size: int = 4096
    ) -> Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
        """Every row, ``batch_size`` at a time (a pymilvus query iterator): ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, high=_MAX_TOPK, integer=True)
        fields = list(fields)
        iterator = self._call(
            "scan rows", self._client.query_iterator, self.collection, batch_size=int(batch_size), filter="",
            output_fields=[self.embedding_field, *fields], timeout=self.timeout,
        )
        try:
            while True:
                rows = self._call("scan rows", iterator.next)
                if not rows:
                    return
                values = self._field_values(rows, fields)
                yield *self._rows(rows), values
        finally:
            iterator.close()

    def field_names(self) -> list[str]:
        """Scalar fields of the schema, and every dynamic field some row holds (one pass over the rows, no vectors)."""
        info = self._call(
            "describe the collection", self._client.describe_collection, self.collection, timeout=self.timeout
        )
        names = {f["name"] for f in info["fields"]
                 if f["name"] != self._pk and not getattr(f["type"], "name", "").endswith("VECTOR")}
        if info.get("enable_dynamic_field"):
            iterator = self._call(
                "scan rows", self._client.query_iterator, self.collection, batch_size=_MAX_TOPK, filter="",
                output_fields=["$meta"], timeout=self.timeout,
            )
            try:
                while rows := self._call("scan rows", iterator.next):
                    names.update(key for row in rows for key in row if key != self._pk)
            finally:
                iterator.close()
        return sorted(names)

    def drop(self) -> None:
        """Delete the whole collection (schema and index too, and the collections lfa-index keeps behind its name)."""
        if self._generation() is None:
            self._call("drop the collection", self._client.drop_collection, self.collection, timeout=self.timeout)
            return
        self._call("remove the name", self._client.drop_alias, self.collection, timeout=self.timeout)
        for name in self._generations():
            self._call("drop the collection", self._client.drop_collection, name, timeout=self.timeout)

    # ------------------------------------------------------------------ writes of one field, replacement
    def _held(self, ids: np.ndarray) -> np.ndarray:
        rows = self._call("get rows", self._client.get, self.collection, ids=ids.tolist(), output_fields=[self._pk],
                          timeout=self.timeout, consistency_level="Strong")
        return np.fromiter((r[self._pk] for r in rows or []), dtype=np.int64)

    def _set_field(self, ids: np.ndarray, name: str, values: list[Any]) -> None:
        """Milvus's partial upsert: only the id and the one field are sent."""
        rows = [{self._pk: i, name: value} for i, value in zip(ids.tolist(), values)]
        self._call("update a field", self._client.upsert, self.collection, rows, timeout=self.timeout,
                   partial_update=True)

    def _replace(self, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        """Fill a new collection, then move the name to it in one alias switch (atomic: old or new rows)."""
        current = self._generation()
        if current is None:  # a collection made elsewhere: upsert, then delete the others (never empty)
            self._upsert(self.collection, x, ids, values)
            kept = ", ".join(map(str, ids.tolist()))
            self._call("delete rows", self._client.delete, self.collection, filter=f"{self._pk} not in [{kept}]",
                       timeout=self.timeout)
            return
        new = self._create_generation(self.dim, self._pk)

        def fill_and_switch() -> None:
            self._upsert(new, x, ids, values)
            self._call("load the collection", self._client.load_collection, new, timeout=self.timeout)
            self._call("switch collections", self._client.alter_alias, new, self.collection, timeout=self.timeout)

        self._switch_generation(new, current, fill_and_switch, lambda name: self._call(
            "drop a collection", self._client.drop_collection, name, timeout=self.timeout))

    def _physical(self) -> str:
        """The collection the name stands for now (itself, or the collection an alias names)."""
        info = self._call("describe the collection", self._client.describe_collection, self.collection,
                          timeout=self.timeout)
        return info.get("collection_name", self.collection)

    def _generation(self) -> str | None:
        """The collection lfa-index keeps behind this name, or None (the name is a collection, or another alias)."""
        physical = self._physical()
        return physical if physical != self.collection and is_generation(physical, self.collection, "_") else None

    def _generations(self) -> list[str]:
        names = self._call("list collections", self._client.list_collections, timeout=self.timeout)
        return [name for name in names if is_generation(name, self.collection, "_")]

    # ------------------------------------------------------------------ helpers
    def _rows(self, rows: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Ids and vectors of rows read with the embedding field."""
        ids = np.fromiter((r[self._pk] for r in rows), dtype=np.int64, count=len(rows))
        return ids, np.asarray([r[self.embedding_field] for r in rows], dtype=np.float32)

    def _lost(self, err: BaseException) -> bool:
        return _is_connection_error(err)


def _lock_held_elsewhere(uri: str) -> Path | None:
    """The lock file of Milvus Lite file ``uri`` when another process holds it, else None."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    if "://" in uri:
        return None
    path = Path(uri).expanduser()
    for lock in (path / "LOCK", path.parent / f".{path.name}.lock"):  # milvus-lite 3, milvus-lite 2
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return lock
        except OSError:
            continue
        finally:
            os.close(fd)
    return None


def _is_connection_error(err: Exception) -> bool:
    exceptions = _pymilvus().exceptions
    kinds = (
        ConnectionError, OSError, exceptions.MilvusUnavailableException, exceptions.ConnectionNotExistException,
        exceptions.ConnectionConfigException,
    )
    text = str(err).lower()
    return isinstance(err, kinds) or any(s in text for s in ("fail connecting", "unavailable", "deadline exceeded"))
