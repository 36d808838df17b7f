"""Apply a saved AlignedIndex to a large embedding table with Ray Data: Parquet in, Parquet out.

The job streams: Ray reads Parquet blocks, a pool of actors (each loads the index once)
classifies them batch by batch, and Ray writes Parquet files as batches finish, so the table is
never held whole. A batch whose code raises is retried by Ray Data (``max_retries``), and the
output is checked against the input: same row count and, with an id column, the same multiset of
ids, so no row is lost or written twice. The same call runs on a laptop (a local Ray) or on a
cluster (``address="ray://head:10001"``, with paths every node can read: S3, GCS, NFS).

Needs ``pip install 'lfa-index[distributed]'``.

Example
-------
>>> index.save("/shared/my_index")
>>> report = classify_parquet("/data/embeddings/", "/data/labels/", "/shared/my_index",
...                           embedding_column="embedding", id_column="id", num_workers=8)
>>> report.rows_out, report.rows_per_second
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

import faiss
import numpy as np
import threadpoolctl
import torch

from .core.validation import check_number, check_query_matrix
from .errors import DimensionMismatchError, InvalidInputError, InvalidParameterError, RowCountError, SchemaError
from .extras import import_extra
from .files import check_output_path
from .index import AlignedIndex

_FINGERPRINT_MODULUS = 1 << 64


@dataclass(frozen=True)
class BatchReport:
    """What a :func:`classify_parquet` run read, wrote and checked."""

    source: str
    destination: str
    rows_in: int
    rows_out: int
    seconds: float
    num_workers: int
    ids_checked: bool  # True when the multisets of ids were compared, not only the row counts

    @property
    def rows_per_second(self) -> float:
        return self.rows_out / self.seconds if self.seconds > 0 else math.inf


# ------------------------------------------------------------------------------ the batch function
class ClassifyBatch:
    """Ray Data callable class: loads an AlignedIndex once per actor and classifies pyarrow batches.

    Each output batch holds ``id_column`` (when given), ``keep_columns``, ``label_column`` (the
    predicted class: int64, or string for named classes), ``score_column`` (aligned score, the
    cosine unless the classifier has class biases; float32) and, when ``aligned_column`` is set,
    the aligned embedding ``index.transform(x)`` as a ``fixed_size_list<float32>``. It also runs
    outside Ray: ``ClassifyBatch(path)(table)``.

    Parameters
    ----------
    index_path : str
        Directory written by :meth:`AlignedIndex.save`, readable by every worker.
    embedding_column : str, default="embedding"
        List / fixed-size-list column of image embeddings (n_features_in_ floats per row).
    id_column : str or None, default="id"
        Integer row id carried through to the output.
    label_column, score_column : str, default="label", "score"
    aligned_column : str or None, default=None
    keep_columns : sequence of str, default=()
        Other input columns copied to the output.
    reject_below : float or None, default=None
        Rows whose ``score_samples`` is below it get ``unknown_label_`` (-1, or null for names).
    threads : int, default=1
        FAISS, torch and BLAS threads of this worker.
    """

    def __init__(
        self,
        index_path: str,
        *,
        embedding_column: str = "embedding",
        id_column: str | None = "id",
        label_column: str = "label",
        score_column: str = "score",
        aligned_column: str | None = None,
        keep_columns: Sequence[str] = (),
        reject_below: float | None = None,
        threads: int = 1,
    ):
        faiss.omp_set_num_threads(threads)
        torch.set_num_threads(threads)
        self._blas_limits = threadpoolctl.threadpool_limits(limits=threads)
        self.index = AlignedIndex.load(index_path, device="cpu")
        self.embedding_column = embedding_column
        self.id_column = id_column
        self.label_column = label_column
        self.score_column = score_column
        self.aligned_column = aligned_column
        self.keep_columns = tuple(keep_columns)
        self.reject_below = None if reject_below is None else self.index.check_threshold(reject_below)
        self._aligned = aligned_column is not None
        self._aligned_dim = int(self.index.prototypes_.shape[1])

    def __call__(self, batch: Any) -> Any:
        pa = import_extra("pyarrow", "distributed")
        x = embedding_matrix(batch, self.embedding_column, self.index.n_features_in_)
        if len(x):
            scores, labels = (column[:, 0] for column in self.index.search(x, k=1))
        else:  # Ray hands empty blocks on (an empty file): answer with an empty table of the same schema
            scores, labels = np.empty(0, np.float32), self.index.classes_[:0]
        if self.reject_below is not None and len(x):
            labels = self.index.label_space_.reject(labels, self.index.score_samples(x), self.reject_below)
        names = ((self.id_column,) if self.id_column else ()) + self.keep_columns
        columns = {name: batch.column(name) for name in names}
        label_type = pa.string() if self.index.label_space_.kind == "name" else pa.int64()
        columns[self.label_column] = pa.array(labels.tolist() if labels.dtype == object else labels, type=label_type)
        columns[self.score_column] = pa.array(scores.astype(np.float32))
        if self._aligned:
            if len(x):
                z = self.index.transform(x)
            else:
                z = np.empty((0, self._aligned_dim), np.float32)
            columns[self.aligned_column] = pa.FixedSizeListArray.from_arrays(
                pa.array(z.ravel(), pa.float32()), z.shape[1]
            )
        return pa.table(columns)


def embedding_matrix(batch: Any, column: str, dim: int) -> np.ndarray:
    """The ``column`` of a pyarrow table as a float32 (n, dim) array (list, large-list or fixed-size-list of floats)."""
    pa = import_extra("pyarrow", "distributed")
    if column not in batch.column_names:
        raise SchemaError(
            f"the table has no column {column!r} (columns: {batch.column_names}); pass embedding_column=."
        )
    values = batch.column(column).combine_chunks()
    if len(values) == 0:
        return np.empty((0, dim), dtype=np.float32)
    if values.null_count:
        raise InvalidInputError(
            f"column {column!r} has {values.null_count} null embedding(s); drop or fill those rows."
        )
    if isinstance(values.type, pa.ExtensionType) and hasattr(values, "to_numpy"):
        x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32)  # Ray's tensor columns
    else:
        check_embedding_type(values.type, column, dim)
        flat = values.flatten().to_numpy(zero_copy_only=False)
        if len(flat) != len(values) * dim:
            compute = import_extra("pyarrow.compute", "distributed")
            lengths = np.unique(compute.list_value_length(values).to_numpy(zero_copy_only=False))
            raise DimensionMismatchError(
                f"column {column!r} holds embeddings of length {lengths[:5].tolist()} but the index aligns {dim}-d "
                "image embeddings; embed the table with the image model of the support set."
            )
        x = flat.astype(np.float32, copy=False).reshape(len(values), dim)
    return check_query_matrix(x.reshape(len(values), -1), name=f"column {column!r}", dim=dim)


def check_embedding_type(dtype: Any, column: str, dim: int) -> None:
    """Raise :class:`SchemaError` unless ``dtype`` is a list of floats, or :class:`DimensionMismatchError`
    when it is a fixed-size list of another length."""
    pa = import_extra("pyarrow", "distributed")
    is_list = pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype)
    if not is_list or not pa.types.is_floating(dtype.value_type):
        raise SchemaError(
            f"column {column!r} has type {dtype}; it must be a list of floats (one embedding per row), "
            "e.g. pa.list_(pa.float32(), dim)."
        )
    if pa.types.is_fixed_size_list(dtype) and dtype.list_size != dim:
        raise DimensionMismatchError(
            f"column {column!r} holds {dtype.list_size}-d embeddings but the index aligns {dim}-d image embeddings; "
            "embed the table with the image model of the support set."
        )


# ------------------------------------------------------------------------------ Ray pipelines
def classify_dataset(
    dataset: Any,
    index_path: str | os.PathLike,
    *,
    embedding_column: str = "embedding",
    id_column: str | None = "id",
    label_column: str = "label",
    score_column: str = "score",
    aligned_column: str | None = None,
    keep_columns: Sequence[str] = (),
    reject_below: float | None = None,
    num_workers: int = 1,
    cpus_per_worker: float = 1.0,
    batch_size: int = 16384,
    batch_class: type = ClassifyBatch,
) -> Any:
    """The lazy Ray Data transform: ``dataset.map_batches`` over a fixed pool of ``num_workers`` actors.

    Nothing runs until the result is consumed (written, iterated). ``batch_class`` may be a
    subclass of :class:`ClassifyBatch` (extra columns, instrumentation). See :func:`classify_parquet`
    for the parameters.

    Example
    -------
    >>> classify_dataset(ray.data.read_parquet(src), "my_index", num_workers=4).write_parquet(dst)
    """
    ray = import_extra("ray", "distributed")
    check_number(num_workers, "num_workers", low=1, integer=True)
    check_number(cpus_per_worker, "cpus_per_worker", low=0.0, low_inclusive=False)
    check_number(batch_size, "batch_size", low=1, integer=True)
    if reject_below is not None:
        check_number(reject_below, "reject_below")  # finite here; each worker's index checks its range too
    return dataset.map_batches(
        batch_class,
        batch_format="pyarrow",
        batch_size=int(batch_size),
        compute=ray.data.ActorPoolStrategy(size=int(num_workers)),
        num_cpus=float(cpus_per_worker),
        fn_constructor_kwargs=dict(
            index_path=str(index_path), embedding_column=embedding_column, id_column=id_column,
            label_column=label_column, score_column=score_column, aligned_column=aligned_column,
            keep_columns=tuple(keep_columns), reject_below=reject_below,
            threads=max(1, int(round(cpus_per_worker))),
        ),
    )


def classify_parquet(
    source: str | os.PathLike | Sequence[str],
    destination: str | os.PathLike,
    index_path: str | os.PathLike,
    *,
    embedding_column: str = "embedding",
    id_column: str | None = "id",
    label_column: str = "label",
    score_column: str = "score",
    aligned_column: str | None = None,
    keep_columns: Sequence[str] = (),
    reject_below: float | None = None,
    num_workers: int = 1,
    cpus_per_worker: float = 1.0,
    batch_size: int = 16384,
    max_retries: int = 3,
    check_ids: bool = True,
    overwrite: bool = False,
    address: str | None = None,
    batch_class: type = ClassifyBatch,
) -> BatchReport:
    """Classify every row of a Parquet dataset with a saved AlignedIndex; write Parquet; check the counts.

    Parameters
    ----------
    source : path, URI or list of them
        Parquet file(s) or directory (local, ``s3://``, ``gs://``, ... as Ray Data reads them).
    destination : path or URI
        Output directory (one Parquet file per written block). Must not exist unless ``overwrite``.
    index_path : path
        Directory written by :meth:`AlignedIndex.save`, readable by every worker.
    embedding_column : str, default="embedding"
        List of ``n_features_in_`` floats per row.
    id_column : str or None, default="id"
        Integer row id, carried to the output and used to check that no row is lost or written
        twice. None checks row counts only.
    label_column, score_column, aligned_column, keep_columns, reject_below
        Output columns, as :class:`ClassifyBatch`.
    num_workers : int, default=1
        Actors, each holding one copy of the index.
    cpus_per_worker : float, default=1.0
        Ray CPUs reserved per actor (and its threads, rounded, at least 1). Reading and writing
        need free CPUs too: the cluster must have more than ``num_workers * cpus_per_worker``.
    batch_size : int, default=16384
        Rows per batch handed to an actor.
    max_retries : int, default=3
        Times Ray Data retries a batch whose code raised (actor crashes are retried by Ray too).
    check_ids : bool, default=True
        Row counts of input and output (from Parquet metadata) are always compared. With an
        ``id_column``, the id column of both is also read back and its multiset compared (a
        sum of 64-bit hashes), so a lost row hidden by a duplicated one is caught too. A
        difference raises :class:`RowCountError`.
    overwrite : bool, default=False
        Replace what ``destination`` holds. A destination that is the source, lies inside it or
        holds it is always refused (:class:`~lfa_index.errors.OutputPathError`), before any work.
    address : str or None, default=None
        Ray cluster to join when Ray is not initialised yet (None starts or finds a local one).

    Returns
    -------
    BatchReport

    Example
    -------
    >>> classify_parquet("s3://bucket/emb/", "s3://bucket/pred/", "/shared/idx", num_workers=16)
    """
    source = [str(p) for p in source] if isinstance(source, (list, tuple)) else str(source)
    destination = str(destination)
    check_output_path(destination, {"source": source, "index_path": str(index_path)}, name="destination")
    ray = import_extra("ray", "distributed")
    import_extra("pyarrow", "distributed")
    check_number(max_retries, "max_retries", low=0, integer=True)
    index = AlignedIndex.load(index_path, device="cpu")  # a bad path fails here, once, not in every actor
    if reject_below is not None:
        index.check_threshold(reject_below)  # a finite τ on the scale of score_samples
    if not ray.is_initialized():
        ray.init(address=address)
    _check_cpus(ray, num_workers, cpus_per_worker)
    _check_destination(destination, overwrite)
    context = ray.data.DataContext.get_current().copy()
    context.retried_map_errors = max_retries > 0  # a batch whose code raised runs again on its same input
    context.max_map_retries = int(max_retries)
    context.raise_original_map_exception = True  # typed lfa-index errors reach the caller as they are
    with ray.data.DataContext.current(context):
        dataset = ray.data.read_parquet(source)
        _check_schema(dataset.schema(), embedding_column, id_column, keep_columns, index.n_features_in_)
        columns = list(dict.fromkeys([embedding_column, *([id_column] if id_column else []), *keep_columns]))
        classified = classify_dataset(
            dataset.select_columns(columns), index_path, embedding_column=embedding_column, id_column=id_column,
            label_column=label_column, score_column=score_column, aligned_column=aligned_column,
            keep_columns=keep_columns, reject_below=reject_below, num_workers=num_workers,
            cpus_per_worker=cpus_per_worker, batch_size=batch_size, batch_class=batch_class,
        )
        start = time.perf_counter()
        classified.write_parquet(destination, mode="overwrite" if overwrite else "append")
        seconds = time.perf_counter() - start
        ids = id_column if check_ids else None
        rows_in, rows_out = check_output(source, destination, id_column=ids)
    return BatchReport(
        source=str(source), destination=destination, rows_in=rows_in, rows_out=rows_out, seconds=seconds,
        num_workers=int(num_workers), ids_checked=ids is not None,
    )


def check_output(
    source: str | os.PathLike | Sequence[str], destination: str | os.PathLike, *, id_column: str | None = "id"
) -> tuple[int, int]:
    """Check that a job's Parquet output holds exactly the rows of its Parquet input: ``(rows_in, rows_out)``.

    Row counts come from Parquet metadata. With ``id_column``, the ids of both sides are read (in
    one Ray job) and their multisets compared by an order-free fingerprint, a sum of 64-bit hashes
    mod 2**64: a lost row hidden by a duplicated one changes it unless two hashes collide (2**-64).
    Raises :class:`RowCountError` on any difference.

    Example
    -------
    >>> check_output("/data/embeddings/", "/data/labels/", id_column="id")
    (1000000000, 1000000000)
    """
    ray = import_extra("ray", "distributed")
    source = [str(p) for p in source] if isinstance(source, (list, tuple)) else str(source)
    destination = str(destination)
    if id_column is None:
        rows_in, rows_out = ray.data.read_parquet(source).count(), ray.data.read_parquet(destination).count()
        same_ids = True
    else:
        (rows_in, fingerprint_in), (rows_out, fingerprint_out) = _fingerprints(ray, (source, destination), id_column)
        same_ids = fingerprint_in == fingerprint_out
    if rows_in != rows_out or not same_ids:
        found = (
            f"{destination} holds {rows_out} rows but {source} has {rows_in}" if rows_in != rows_out
            else f"{destination} holds {rows_out} rows, as many as {source}, but not the same {id_column!r} values"
        )
        raise RowCountError(
            f"{found}: rows were lost or written twice; delete the output and run the job again "
            "(or pass overwrite=True)."
        )
    return rows_in, rows_out


# ------------------------------------------------------------------------------ checks
def _check_cpus(ray: Any, num_workers: int, cpus_per_worker: float) -> None:
    check_number(num_workers, "num_workers", low=1, integer=True)
    check_number(cpus_per_worker, "cpus_per_worker", low=0.0, low_inclusive=False)
    total = float(ray.cluster_resources().get("CPU", 0.0))
    # the actors hold their CPUs for the whole job; Ray's read and write tasks need one more
    if num_workers * cpus_per_worker > total - 1:
        raise InvalidParameterError(
            f"{num_workers} worker(s) x {cpus_per_worker} CPU leave no CPU of the cluster's {total:g} for reading and "
            f"writing, so the job would stall; pass cpus_per_worker={max(total - 1, 0.5) / num_workers:.2g} or "
            "fewer workers."
        )


def _check_destination(destination: str, overwrite: bool) -> None:
    if overwrite or "://" in destination:
        return
    if os.path.exists(destination) and (not os.path.isdir(destination) or os.listdir(destination)):
        raise InvalidParameterError(
            f"destination {destination!r} already exists and is not empty; pass overwrite=True or a new directory."
        )


def _check_schema(
    schema: Any, embedding_column: str, id_column: str | None, keep_columns: Sequence[str], dim: int
) -> None:
    pa = import_extra("pyarrow", "distributed")
    names = list(schema.names)
    types = dict(zip(names, schema.types))
    missing = [c for c in (embedding_column, *([id_column] if id_column else []), *keep_columns) if c not in names]
    if missing:
        raise SchemaError(
            f"the Parquet source has no column(s) {missing} (its columns: {names}); pass embedding_column=, "
            "id_column= (None for none) and keep_columns= that exist."
        )
    embedding_type = types[embedding_column]
    if not isinstance(embedding_type, pa.ExtensionType):
        check_embedding_type(embedding_type, embedding_column, dim)
    if id_column and not pa.types.is_integer(types[id_column]):
        raise SchemaError(f"id column {id_column!r} has type {types[id_column]}; it must be integers (e.g. int64).")


def _fingerprints(ray: Any, paths: Sequence[Any], id_column: str) -> list[tuple[int, int]]:
    """``(rows, fingerprint)`` of the ids of each Parquet path, in one Ray job."""

    # defined here so that Ray ships it by value: workers then import numpy and pyarrow, not lfa_index
    def fingerprint(batch: Any, side: int) -> Any:
        import numpy as np
        import pyarrow as pa

        column = batch.column(0)
        if column.null_count:
            raise ValueError(
                f"id column {batch.column_names[0]!r} has {column.null_count} null(s); give every row an id."
            )
        z = column.to_numpy().astype(np.int64).view(np.uint64)
        with np.errstate(over="ignore"):  # splitmix64, in wrapping uint64 arithmetic
            z = z + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
        fingerprint = pa.array([int(z.sum(dtype=np.uint64))], pa.uint64())
        return pa.table({"side": [side], "rows": [len(z)], "fingerprint": fingerprint})

    parts = [
        ray.data.read_parquet(path).select_columns([id_column]).map_batches(
            fingerprint, fn_kwargs={"side": side}, batch_format="pyarrow", batch_size=None
        )
        for side, path in enumerate(paths)
    ]
    totals = [[0, 0] for _ in paths]
    for summary in parts[0].union(*parts[1:]).take_all():
        total = totals[summary["side"]]
        total[0] += int(summary["rows"])
        total[1] = (total[1] + int(summary["fingerprint"])) % _FINGERPRINT_MODULUS
    return [tuple(t) for t in totals]
