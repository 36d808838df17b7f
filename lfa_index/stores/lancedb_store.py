"""LanceDBStore: the store protocol over a LanceDB table, in a directory, object store or LanceDB server.

lancedb is imported when a LanceDBStore is opened (``pip install 'lfa-index[lancedb]'``). A table
it creates has an int64 id column and a fixed-size float32 vector column; metadata fields become
nullable columns, added the first time a field is stored. Searches use LanceDB's ``"dot"``
distance without an ANN index (a flat scan), so they are exact.

Example
-------
>>> store = LanceDBStore("vectors_lance", "prototypes", dim=prototype_dim(index))     # a directory
>>> classify(index, write_prototypes(index, store), queries)                          # == index.predict
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.validation import BOOLEAN, check_ids, check_number, check_param
from ..errors import DimensionMismatchError, InvalidParameterError, SchemaError, StoreUnavailableError
from ..extras import import_extra
from ._common import (
    Batches,
    CollectionStore,
    empty_results,
    filter_literal,
    parse_ids,
    query_chunk,
    reason,
    rescore,
)
from .base import Where, check_fields, check_vectors, check_where, object_column

_ROWS_PER_WRITE = 65536
_IDS_PER_QUERY = 8192
_REMOTE = ("db://",)


def _lancedb() -> Any:
    return import_extra("lancedb", "lancedb")


def _arrow() -> Any:
    return import_extra("pyarrow", "lancedb")


class LanceDBStore(CollectionStore):
    """Vectors with int64 ids and scalar columns in a LanceDB table.

    Parameters
    ----------
    uri : str or path
        A directory, an object-store URI (``"s3://bucket/path"``) or a LanceDB server / cloud
        database (``"db://name"`` with ``api_key`` and, for a self-hosted server, ``host_override``).
    table : str
        Table name (letters, digits, '_', '-', '.'); created when missing (``dim`` then required).
    dim : int or None, default=None
        Vector dimension; checked against an existing table (None accepts its dimension).
    id_field, vector_field : str, default="id", "vector"
        The int64 id column and the fixed-size float32 vector column.
    exact : bool, default=True
        Flat scan even when the table has an ANN index (``bypass_vector_index``); ``False`` lets
        LanceDB use the index, approximate.
    api_key : str or None, default=None
        Key of a LanceDB cloud or server database; never printed.
    timeout : float, default=10.0
        Seconds allowed for each request to a LanceDB server.
    **connect_options
        Passed to ``lancedb.connect`` (``host_override``, ``region``, ``storage_options``, ...).

    Notes
    -----
    Metric "IP": LanceDB's ``"dot"`` distance is ``1 - q·x``; scores are not derived from it but
    recomputed, ``q·x`` in float32, from the returned vectors. Without an ANN index (what this
    store creates) a search is a flat scan, exact for any size. Each :meth:`add` writes a new
    table version; compact a table that receives many small writes with ``table.optimize()``.
    A column holds one type, and a value that would not read back as itself (an int in a float
    column, 1.5 in an int column) is refused. :meth:`replace` is one ``merge_insert`` that also
    deletes the other rows: one commit, so a search sees the old rows or the new ones.

    Raises
    ------
    StoreUnavailableError
        The URI cannot be opened or the server reached (the message names ``uri``).
    SchemaError
        The table lacks an int64 id column or a fixed-size float32 vector column, or a field's values
        do not fit its column type.
    DimensionMismatchError
        The table holds vectors of another dimension than ``dim``.
    """

    engine = "LanceDB"
    kind = "table"
    _uri_forms = "a directory, an object-store URI or 'db://name'"
    _name_pattern = r"[A-Za-z0-9_.-]{1,255}"
    _name_rule = "1 to 255 letters, digits, '_', '-' or '.' (LanceDB's rule)"
    _lost_hint = "check that the storage or server is reachable, then retry."
    _lost_errors = ("RetryError", "HttpError")

    def __init__(
        self,
        uri: Any,
        table: str,
        dim: int | None = None,
        *,
        id_field: str = "id",
        vector_field: str = "vector",
        exact: bool = True,
        api_key: str | None = None,
        timeout: float = 10.0,
        **connect_options: Any,
    ):
        self.uri, self.table = self._checked(uri, table, dim)
        for name, value in (("id_field", id_field), ("vector_field", vector_field)):
            if not isinstance(value, str) or not value.isidentifier():
                raise InvalidParameterError(f"{name} must be a column name (an identifier), got {value!r}.")
        if id_field == vector_field:
            raise InvalidParameterError(f"id_field and vector_field must differ, both are {id_field!r}.")
        self.exact = check_param(exact, "exact", [BOOLEAN])
        self.timeout = check_number(timeout, "timeout", low=0.0, low_inclusive=False)
        self.id_field, self.vector_field = id_field, vector_field
        lancedb = _lancedb()
        self._errors = (ValueError, RuntimeError, OSError, ConnectionError)
        remote = self.uri.startswith(_REMOTE)
        if remote:
            span = datetime.timedelta(seconds=self.timeout)
            timeouts = lancedb.remote.TimeoutConfig(timeout=span, connect_timeout=span)
            connect_options.setdefault("client_config", lancedb.remote.ClientConfig(timeout_config=timeouts))
        try:
            self._client = lancedb.connect(self.uri, api_key=api_key, **connect_options)
            try:
                self._table = self._client.open_table(self.table)
                exists = True
            except ValueError as err:
                if "not found" not in str(err).lower() and "does not exist" not in str(err).lower():
                    raise
                exists = False
        except self._errors as err:
            raise StoreUnavailableError(
                f"cannot open LanceDB at {self.uri!r} ({reason(err)}); check that the path is a writable directory, "
                "or that the server is running and the URI, API key and network are right."
            ) from err
        if not exists:
            pa = _arrow()
            schema = pa.schema([
                pa.field(id_field, pa.int64(), nullable=False),
                pa.field(vector_field, pa.list_(pa.float32(), self._new_dim(dim))),
            ])
            self._table = self._call(
                "create the table", self._client.create_table, self.table, schema=schema, exist_ok=True
            )
        self._dim = self._inspect(dim)

    # ------------------------------------------------------------------ schema
    def _inspect(self, dim: int | None) -> int:
        pa = _arrow()
        schema = self._schema()
        names = schema.names
        if self.id_field not in names or not pa.types.is_integer(schema.field(self.id_field).type):
            raise SchemaError(
                f"{self.location} has no integer column {self.id_field!r} (columns: {names}); pass id_field= its "
                "int64 id column."
            )
        vector_type = schema.field(self.vector_field).type if self.vector_field in names else None
        if vector_type is None or not pa.types.is_fixed_size_list(vector_type) or not pa.types.is_floating(
            vector_type.value_type
        ):
            raise SchemaError(
                f"{self.location} has no fixed-size float vector column {self.vector_field!r} (columns: {names}, "
                f"{self.vector_field!r}: {vector_type}); pass vector_field= its vector column."
            )
        held = int(vector_type.list_size)
        if dim is not None and held != int(dim):
            raise DimensionMismatchError(
                f"{self.location} holds {held}-d vectors but dim={dim} was asked for; use another table name, "
                "or embeddings from the model the table was built with."
            )
        return held

    def _schema(self) -> Any:
        return self._call("read the schema", lambda: self._table.schema)

    # ------------------------------------------------------------------ protocol
    def __repr__(self) -> str:
        return f"LanceDBStore(uri={self.uri!r}, table={self.table!r}, dim={self.dim})"

    def count(self) -> int:
        return int(self._call("count rows", self._table.count_rows))

    def add(self, vectors: Any, ids: Any, fields: Mapping[str, Sequence[Any]] | None = None) -> "LanceDBStore":
        """Insert rows; a row whose id is held is replaced (``merge_insert`` on the id). Returns ``self``.

        A field seen for the first time becomes a nullable column; columns not given are null.
        """
        x = check_vectors(vectors, dim=self.dim, location=self.location)
        new_ids = check_ids(ids, len(x))
        values = check_fields(fields, len(x), reserved=self._reserved)
        for name, column in values.items():  # every value fits its column before the first write
            self._check_field(name, column)
        schema = self._add_columns(values)
        empty = self.count() == 0
        for start in range(0, len(x), _ROWS_PER_WRITE):
            stop = min(start + _ROWS_PER_WRITE, len(x))
            data = self._rows(schema, x[start:stop], new_ids[start:stop], values, start)
            if empty:
                self._call("add rows", self._table.add, data)
            else:
                merge = self._table.merge_insert(self.id_field)
                merge = merge.when_matched_update_all().when_not_matched_insert_all()
                self._call("upsert rows", merge.execute, data)
        return self

    @property
    def _reserved(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.id_field, self.vector_field, "_distance", "_rowid")

    def _rows(self, schema: Any, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]], start: int) -> Any:
        """An Arrow table of rows ``start:start + len(x)`` in the table's ``schema`` (fields not given: null)."""
        pa = _arrow()
        columns = {}
        for field in schema:
            if field.name == self.id_field:
                columns[field.name] = pa.array(ids, type=field.type)
            elif field.name == self.vector_field:
                flat = pa.array(x.ravel(), type=field.type.value_type)
                columns[field.name] = pa.FixedSizeListArray.from_arrays(flat, self.dim)
            elif field.name in values:
                columns[field.name] = self._column(field, values[field.name][start : start + len(x)])
            elif field.nullable:
                columns[field.name] = pa.nulls(len(x), type=field.type)
            else:
                raise SchemaError(f"{self.location} has a non-nullable column {field.name!r}; pass it in fields=.")
        return pa.table(columns, schema=schema)

    def _column(self, field: Any, values: list[Any]) -> Any:
        """``values`` as an Arrow array of ``field``'s type, or :class:`SchemaError` when one would not read back
        exactly (an int in a float column, 1.5 in an int column, a value beyond the column's range)."""
        pa = _arrow()
        odd = next((v for v in values if not _fits(v, field.type)), None)
        if odd is None:
            try:
                return pa.array(values, type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                pass
        raise SchemaError(
            f"field {field.name!r} of {self.location} is a {field.type} column; {odd!r} would not read back exactly "
            f"from it ({type(odd).__name__}). Store values of that type, or use another field name."
        )

    def _add_columns(self, values: dict[str, list[Any]]) -> Any:
        pa = _arrow()
        schema = self._schema()
        new = [pa.field(name, _arrow_type(name, vs, self.location)) for name, vs in values.items()
               if name not in schema.names]
        if new:
            self._call("add columns", self._table.add_columns, new)
            schema = self._schema()
        return schema

    def clear(self) -> None:
        self._call("delete rows", self._table.delete, "true")

    # ------------------------------------------------------------------ writes of one field, replacement
    def _held(self, ids: np.ndarray) -> np.ndarray:
        expr = f"`{self.id_field}` IN ({', '.join(map(str, ids.tolist()))})"
        rows = self._call("get rows", self._table.search().where(expr).select([self.id_field]).limit(len(ids)).to_arrow)
        return rows[self.id_field].to_numpy()

    def _check_field(self, name: str, values: list[Any]) -> None:
        schema = self._schema()
        pa = _arrow()
        field = schema.field(name) if name in schema.names else pa.field(name, _arrow_type(name, values, self.location))
        self._column(field, values)

    def _set_field(self, ids: np.ndarray, name: str, values: list[Any]) -> None:
        """A ``merge_insert`` of the id and the one column: LanceDB rewrites that column of those rows only."""
        pa = _arrow()
        schema = self._add_columns({name: values})
        data = pa.table({self.id_field: pa.array(ids, type=schema.field(self.id_field).type),
                         name: self._column(schema.field(name), values)})
        self._call("update a column", self._table.merge_insert(self.id_field).when_matched_update_all().execute, data)

    def _replace(self, x: np.ndarray, ids: np.ndarray, values: dict[str, list[Any]]) -> None:
        """One ``merge_insert`` that updates, inserts and deletes: one commit, so a search sees old or new rows."""
        data = self._rows(self._add_columns(values), x, ids, values, 0)
        merge = self._table.merge_insert(self.id_field).when_matched_update_all().when_not_matched_insert_all()
        self._call("replace rows", merge.when_not_matched_by_source_delete().execute, data)

    def search(self, queries: Any, k: int, where: Where | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, ids)``, each (n, k), best first, scored exactly; unfilled slots are id -1, score -inf."""
        q = check_vectors(queries, dim=self.dim, location=self.location, name="queries")
        k = check_number(k, "k", low=1, integer=True)
        expr = self._where(where)
        if expr is None:
            return empty_results(len(q), k)

        def candidates(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            builder = (
                self._table.search(list(chunk) if len(chunk) > 1 else chunk[0], vector_column_name=self.vector_field,
                                   query_type="vector")
                .distance_type("dot").limit(k).select([self.id_field, self.vector_field, "_distance"])
            )
            if expr:
                builder = builder.where(expr, prefilter=True)
            if self.exact:
                builder = builder.bypass_vector_index()
            found = self._call("search", builder.to_arrow)
            if "query_index" in found.column_names:
                which = found["query_index"].to_numpy().astype(np.int64)
            else:
                which = np.zeros(found.num_rows, dtype=np.int64)
            order = np.argsort(which, kind="stable")
            which = which[order]
            rank = np.arange(len(which)) - np.searchsorted(which, which)
            cand_ids = np.full((len(chunk), k), -1, dtype=np.int64)
            cand = np.zeros((len(chunk), k, self.dim), dtype=np.float32)
            cand_ids[which, rank] = found[self.id_field].to_numpy()[order]
            cand[which, rank] = self._vectors(found)[order]
            return cand_ids, cand

        return rescore(q, k, "IP", query_chunk(self.dim, k, limit=256), candidates)

    def get(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids`` (n, dim), in the order of ``ids``."""

        def fetch(chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            expr = f"`{self.id_field}` IN ({', '.join(map(str, chunk.tolist()))})"
            rows = self._call(
                "get rows",
                self._table.search().where(expr).select([self.id_field, self.vector_field]).limit(len(chunk)).to_arrow,
            )
            return rows[self.id_field].to_numpy(), self._vectors(rows)

        return self._gather(ids, _IDS_PER_QUERY, fetch)

    def scan(self, fields: Sequence[str], batch_size: int = 4096) -> Batches:
        """Every row, at most ``batch_size`` at a time: ``(ids, vectors, {field: values})``."""
        check_number(batch_size, "batch_size", low=1, integer=True)
        fields = list(fields)
        columns = self._schema().names
        unknown = sorted(set(fields) - set(columns))
        if unknown:
            raise SchemaError(
                f"{self.location} has columns {columns}, not {unknown}; store the field with add(..., fields=...) "
                "first."
            )
        reader = self._call(
            "scan rows", self._table.search().select([self.id_field, self.vector_field, *fields]).to_batches,
            int(batch_size),
        )
        for batch in reader:
            if batch.num_rows == 0:
                continue
            values = {}
            for f in fields:
                column = batch.column(f)
                if column.null_count:
                    raise SchemaError(
                        f"{column.null_count} row(s) of {self.location} have no value in column {f!r}; store it for "
                        "every row with add(..., fields=...)."
                    )
                values[f] = object_column(column.to_pylist())
            ids = parse_ids(batch.column(self.id_field).to_pylist(), self.location)
            yield ids, self._vectors(batch), values

    def field_names(self) -> list[str]:
        """The table's columns other than the id and vector columns."""
        return sorted(n for n in self._schema().names if n not in (self.id_field, self.vector_field))

    def drop(self) -> None:
        """Delete the whole table."""
        self._call("drop the table", self._client.drop_table, self.table)

    # ------------------------------------------------------------------ helpers
    def _where(self, where: Where | None) -> str | None:
        """The SQL filter of ``where``; None when it names a column the table lacks (it matches nothing)."""
        filters = check_where(where)
        if not filters:
            return ""
        if set(filters) - set(self._schema().names):
            return None
        return " AND ".join(f"`{name}` = {filter_literal(value, 'sql')}" for name, value in filters.items())

    def _vectors(self, table: Any) -> np.ndarray:
        column = table[self.vector_field] if hasattr(table, "column_names") else table.column(self.vector_field)
        if hasattr(column, "combine_chunks"):
            column = column.combine_chunks()
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(flat, dtype=np.float32).reshape(len(column), self.dim)


def _arrow_type(name: str, values: Sequence[Any], location: str) -> Any:
    """Column type of a new field from its values: bool, int64, float64 or string (one kind: an int in a float64
    column would read back as a float)."""
    pa = _arrow()
    kinds = {type(v) for v in values}
    if len(kinds) == 1:
        return {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}[kinds.pop()]
    raise SchemaError(
        f"field {name!r} mixes {sorted(k.__name__ for k in kinds)} values; a {location} column holds one type, "
        "so store one kind (e.g. 1.0 rather than 1 among floats)."
    )


def _fits(value: Any, column: Any) -> bool:
    """Whether ``value`` reads back from a column of Arrow type ``column`` as itself: same type, same value."""
    pa = _arrow()
    if isinstance(value, bool):
        return pa.types.is_boolean(column)
    if isinstance(value, int):
        if not pa.types.is_integer(column):
            return False
        info = np.iinfo(column.to_pandas_dtype())
        return info.min <= value <= info.max
    if isinstance(value, float):
        return pa.types.is_floating(column) and float(np.asarray(value, dtype=column.to_pandas_dtype())) == value
    return pa.types.is_string(column) or pa.types.is_large_string(column)
