"""Ray Data batch jobs: Parquet in, Parquet out, the in-process predictions, every row exactly once."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from lfa_index import LFA, AlignedIndex, DimensionMismatchError, InvalidParameterError
from lfa_index.distributed import BatchReport, ClassifyBatch, RowCountError, check_output, classify_parquet
from lfa_index.stores import MissingExtraError, SchemaError

ray = pytest.importorskip("ray", reason="needs the [distributed] extra")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

OPTIONS = dict(beta=0.5, steps=5, device="cpu", random_state=0)
NAMES = [f"class_{i}" for i in range(12)]
N_ROWS, D_IMG, D_TXT = 12000, 32, 24
FAILING_ID = 73210  # the batch holding this row raises once


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the whole module: starting Ray takes seconds. Ray's default Parquet reader (V2)
    lists file footers on an actor pool started for every job, seconds each on 2 shared cores; the V1
    reader runs the same pipeline here in a fraction of that, one block per file."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.use_datasource_v2 = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A saved index and a Parquet dataset of 4 files: ids (shuffled), embeddings, one extra column."""
    root = tmp_path_factory.mktemp("ray_job")
    rng = np.random.default_rng(0)
    text = rng.standard_normal((len(NAMES), D_TXT)).astype(np.float32)
    mix = rng.standard_normal((D_TXT, D_IMG)).astype(np.float32)
    labels = np.repeat(np.arange(len(NAMES)), 4)
    support = (text[labels] @ mix + 0.8 * rng.standard_normal((len(labels), D_IMG))).astype(np.float32)
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(NAMES)[labels], text, class_names=NAMES)
    index_path = index.save(root / "index")
    classes = rng.integers(0, len(NAMES), N_ROWS)
    X = (text[classes] @ mix + 0.8 * rng.standard_normal((N_ROWS, D_IMG))).astype(np.float32)
    ids = rng.permutation(N_ROWS).astype(np.int64) * 10  # non-consecutive, unordered ids
    source = root / "embeddings"
    source.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(N_ROWS), 4)):
        table = _embedding_table(ids[rows], X[rows], extra=rows)
        pq.write_table(table, source / f"part-{part}.parquet", row_group_size=1000)
    return index, index_path, source, X, ids


def _embedding_table(ids, X, extra=None, list_type=None):
    columns = {"id": pa.array(ids)}
    flat = pa.array(X.ravel(), pa.float32())
    if list_type == "list":
        offsets = pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32))
        columns["embedding"] = pa.ListArray.from_arrays(offsets, flat)
    else:
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(flat, X.shape[1])
    if extra is not None:
        columns["source_row"] = pa.array(extra, pa.int64())
    return pa.table(columns)


# ------------------------------------------------------------------------------ the job, with one flaky batch
@pytest.fixture(scope="module")
def flaky_job(ray_session, table, tmp_path_factory):
    """2 workers; the batch holding FAILING_ID raises once (a marker file makes it once across processes)."""
    index, index_path, source, _, _ = table
    root = tmp_path_factory.mktemp("flaky")
    marker = root / "failed-once"

    class FlakyOnce(ClassifyBatch):  # defined here, so Ray ships it by value to the workers
        def __call__(self, batch):
            if FAILING_ID in batch.column("id").to_numpy() and not marker.exists():
                marker.touch()
                raise RuntimeError("injected transient failure")
            return super().__call__(batch)

    tau = index.rejection_threshold(accept_rate=0.9)
    report = classify_parquet(
        source, root / "predictions", index_path, num_workers=2, cpus_per_worker=0.5, batch_size=1500,
        aligned_column="aligned", keep_columns=["source_row"], reject_below=tau, max_retries=2, batch_class=FlakyOnce,
    )
    output = pq.read_table(root / "predictions")
    return report, output, marker, tau


def test_failing_batch_is_retried_and_every_row_is_written_exactly_once(flaky_job, table):
    report, output, marker, _ = flaky_job
    ids = table[4]
    assert marker.exists(), "the injected failure did not happen"
    assert isinstance(report, BatchReport) and report.ids_checked
    assert report.rows_in == report.rows_out == output.num_rows == N_ROWS
    out_ids = output.column("id").to_numpy()
    assert len(np.unique(out_ids)) == N_ROWS
    np.testing.assert_array_equal(np.sort(out_ids), np.sort(ids))


def test_ray_predictions_equal_in_process_predict(flaky_job, table):
    _, output, _, tau = flaky_job
    index, _, _, X, ids = table
    rows = output.column("source_row").to_numpy()
    np.testing.assert_array_equal(output.column("id").to_numpy(), ids[rows])
    labels = np.array(output.column("label").to_pylist(), dtype=object)
    np.testing.assert_array_equal(labels, index.predict(X[rows], reject_below=tau))
    assert (labels == None).any() and (labels != None).any()  # noqa: E711 (both branches of the rejection ran)
    expected_scores, _ = index.search(X[rows], k=1)
    np.testing.assert_allclose(output.column("score").to_numpy(), expected_scores[:, 0], atol=1e-5)
    aligned = np.stack(output.column("aligned").to_numpy(zero_copy_only=False))
    z = X[rows] @ index.query_transform()
    np.testing.assert_allclose(aligned, z / np.linalg.norm(z, axis=1, keepdims=True), atol=1e-5)
    assert output.schema.field("label").type == pa.string()


def test_output_check_catches_a_lost_row_and_a_row_swapped_for_a_duplicate(flaky_job, table, tmp_path):
    _, output, _, _ = flaky_job
    source = table[2]
    ids = output.column("id").to_numpy().copy()
    ids[1] = ids[0]  # same row count: one id lost, another written twice
    (tmp_path / "swapped").mkdir()
    pq.write_table(output.set_column(0, "id", pa.array(ids)), tmp_path / "swapped" / "part.parquet")
    with pytest.raises(RowCountError, match="not the same 'id' values"):
        check_output(source, tmp_path / "swapped")
    (tmp_path / "short").mkdir()
    pq.write_table(output.slice(1), tmp_path / "short" / "part.parquet")
    with pytest.raises(RowCountError, match=f"{N_ROWS - 1} rows but"):
        check_output(source, tmp_path / "short", id_column=None)


# ------------------------------------------------------------------------------ bad input (fails before any work)
def test_table_without_the_embedding_column_is_a_schema_error(ray_session, table, tmp_path):
    _, index_path, source, _, _ = table
    with pytest.raises(SchemaError, match="'vectors'.*embedding_column"):
        classify_parquet(source, tmp_path / "out", index_path, embedding_column="vectors", cpus_per_worker=0.5)
    assert not os.path.exists(tmp_path / "out")


def test_a_threshold_that_is_not_a_finite_number_is_refused_before_any_work(ray_session, table, tmp_path):
    """τ is on the scale of score_samples (unbounded), but it must be a finite number."""
    _, _, source, _, _ = table
    rng = np.random.default_rng(1)
    text = rng.standard_normal((len(NAMES), D_IMG)).astype(np.float32)
    labels = np.repeat(np.arange(len(NAMES)), 3)
    support = (text[labels] + 0.5 * rng.standard_normal((len(labels), D_IMG))).astype(np.float32)
    index = AlignedIndex(lfa=LFA(prototype_mix=0.0, steps=2, device="cpu", random_state=0)).fit(support, labels, text)
    path = index.save(tmp_path / "index")
    for tau in (float("nan"), float("inf")):
        with pytest.raises(InvalidParameterError, match="reject_below"):
            classify_parquet(source, tmp_path / "out", path, reject_below=tau, cpus_per_worker=0.5)
        assert not os.path.exists(tmp_path / "out")


def test_embeddings_of_another_dimension_are_refused(ray_session, table, tmp_path):
    _, index_path, _, _, _ = table
    pq.write_table(_embedding_table(np.arange(10), np.ones((10, D_IMG + 1), np.float32)), tmp_path / "wide.parquet")
    with pytest.raises(DimensionMismatchError, match=f"{D_IMG + 1}-d"):
        classify_parquet(tmp_path / "wide.parquet", tmp_path / "out", index_path, cpus_per_worker=0.5)


def test_non_integer_ids_are_a_schema_error(ray_session, table, tmp_path):
    _, index_path, _, X, _ = table
    pq.write_table(_embedding_table(np.arange(10).astype(str), X[:10]), tmp_path / "string_ids.parquet")
    with pytest.raises(SchemaError, match="integers"):
        classify_parquet(tmp_path / "string_ids.parquet", tmp_path / "out", index_path, cpus_per_worker=0.5)


def test_workers_that_would_starve_reads_are_refused(ray_session, table, tmp_path):
    _, index_path, source, _, _ = table
    with pytest.raises(InvalidParameterError, match="cpus_per_worker"):
        classify_parquet(source, tmp_path / "out", index_path, num_workers=2, cpus_per_worker=1.0)


def test_non_empty_destination_is_refused_without_overwrite(ray_session, table, tmp_path):
    _, index_path, source, _, _ = table
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.parquet").touch()
    with pytest.raises(InvalidParameterError, match="overwrite=True"):
        classify_parquet(source, tmp_path / "out", index_path, cpus_per_worker=0.5)


# ------------------------------------------------------------------------------ the batch function alone
def test_batch_function_outside_ray_reads_variable_length_lists_and_checks_their_length(table):
    index, index_path, _, X, _ = table
    classify = ClassifyBatch(str(index_path))
    out = classify(_embedding_table(np.arange(50), X[:50], list_type="list"))
    np.testing.assert_array_equal(np.array(out.column("label").to_pylist()), index.predict(X[:50]))
    with pytest.raises(DimensionMismatchError, match="length"):
        classify(_embedding_table(np.arange(5), np.ones((5, D_IMG - 2), np.float32), list_type="list"))


def test_missing_ray_names_the_extra(monkeypatch, table, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtraError, match=r"lfa-index\[distributed\]"):
        classify_parquet(table[2], tmp_path / "out", table[1])
