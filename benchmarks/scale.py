"""Batch classification at scale: Ray Data with 1 and 2 local workers against the in-process path.

Sections
--------
batch    A saved AlignedIndex (C classes, d-dim synthetic embeddings) classifies a Parquet table of
         N rows, Parquet out (id, label, score): in process (pyarrow scanner -> ClassifyBatch ->
         ParquetWriter, 1 and 2 threads) and with ``classify_parquet`` on a local Ray (1 and 2
         workers, one thread each). Rows/s, peak memory of each worker process (VmHWM, and the
         largest private RSS seen, which leaves out the shared object-store pages), and the
         arithmetic for 1e9 rows from the measured per-worker rate.
milvus   Milvus Lite: recall@10 of the query-side path (``search_unaligned``: raw corpus, y Gᵀ query,
         exact re-rank) against the exact aligned search for several over-fetch factors; the
         re-indexed path's agreement with FAISS; class search queries/s through Milvus and FAISS.

Usage
-----
    .venv/bin/python -m benchmarks.scale                         # 10M rows, d=512, C=100
    .venv/bin/python -m benchmarks.scale --rows 2000000          # what fits a shorter run
    .venv/bin/python -m benchmarks.scale --quick                 # 200k rows, d=128, seconds

The synthetic table is written once under ``--data-dir`` (default: ``lfa_scale`` in the system's
temporary folder) and reused while its parameters match. Prints a table and writes
``benchmarks/results/scale.json`` (``scale_quick.json`` with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import torch

from benchmarks.search import fit_index, recall_at, synthetic_task
from lfa_index.distributed import ClassifyBatch, classify_parquet
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"
ROWS_PER_FILE = 250_000
TARGET_ROWS = 1_000_000_000


# ------------------------------------------------------------------ memory of processes
def _status_kb(pid: int, keys: Sequence[str]) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key = line.split(":", 1)[0]
                if key in keys:
                    out[key] = int(line.split()[1])
    except OSError:
        pass
    return out


class MemoryWatch:
    """Samples the memory of matching processes every ``interval`` s while a run goes on.

    ``match`` is a pid (the in-process run) or a substring of the process title (Ray names its
    actors ``ray::MapWorker(MapBatches(ClassifyBatch))``). Keeps, per process, the peak RSS
    (VmHWM) and the largest private resident memory sampled (RssAnon).
    """

    def __init__(self, match: int | str, interval: float = 0.25):
        self.match = match
        self.interval = interval
        self.peaks: dict[int, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "MemoryWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _pids(self) -> list[int]:
        if isinstance(self.match, int):
            return [self.match]
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        if self.match.encode() in fh.read():
                            pids.append(int(entry))
                except OSError:
                    continue
        return pids

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self._pids():
                status = _status_kb(pid, ("VmHWM", "RssAnon"))
                if status:
                    peak = self.peaks.setdefault(pid, {"peak_rss_mb": 0.0, "peak_private_mb": 0.0})
                    peak["peak_rss_mb"] = max(peak["peak_rss_mb"], status.get("VmHWM", 0) / 1024)
                    peak["peak_private_mb"] = max(peak["peak_private_mb"], status.get("RssAnon", 0) / 1024)
            self._stop.wait(self.interval)


def reset_peak_rss() -> None:
    """Reset this process's VmHWM (Linux >= 4.0); a no-op elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


# ------------------------------------------------------------------ data
def write_table(data_dir: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """Write the synthetic table (reused while its parameters match) and a saved index; returns their paths."""
    prototypes, support, labels, images = synthetic_task(args.classes, args.dim, args.shots, seed=0)
    source, index_path, manifest = data_dir / "embeddings", data_dir / "index", data_dir / "table.json"
    params = {"rows": args.rows, "dim": args.dim, "classes": args.classes, "shots": args.shots,
              "rows_per_file": ROWS_PER_FILE}
    index = fit_index(prototypes, support, labels, "cpu")
    index.save(index_path)
    if manifest.exists() and json.loads(manifest.read_text()) == params:
        print(f"reusing the table in {source}", flush=True)
        return source, index_path
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    started = time.perf_counter()
    for part, start in enumerate(range(0, args.rows, ROWS_PER_FILE)):
        n = min(ROWS_PER_FILE, args.rows - start)
        x, _ = images(n, seed=1000 + part)
        table = pa.table({
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel(), pa.float32()), args.dim),
        })
        pq.write_table(table, source / f"part-{part:05d}.parquet", row_group_size=65536)
    atomic_write(manifest, json.dumps(params))
    size = sum(f.stat().st_size for f in source.iterdir())
    print(f"wrote {args.rows:,} rows ({size / 2**30:.2f} GiB) in {time.perf_counter() - started:.0f} s", flush=True)
    return source, index_path


# ------------------------------------------------------------------ the runs
def run_in_process(source: Path, destination: Path, index_path: Path, threads: int, batch_size: int) -> dict[str, Any]:
    """pyarrow's scanner streams batches through ClassifyBatch into one ParquetWriter."""
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    reset_peak_rss()
    with MemoryWatch(os.getpid()) as watch:
        started = time.perf_counter()
        classify = ClassifyBatch(str(index_path), threads=threads)
        # pyarrow's default read-ahead (4 files, 16 batches) holds gigabytes at d=512; one file and two
        # batches ahead keep the decoding overlapped with the classification and the memory bounded
        scanner = pads.dataset(source, format="parquet").scanner(
            columns=["id", "embedding"], batch_size=batch_size, batch_readahead=2, fragment_readahead=1
        )
        writer, rows = None, 0
        for batch in scanner.to_batches():
            out = classify(pa.Table.from_batches([batch]))
            writer = writer or pq.ParquetWriter(destination / "part-0.parquet", out.schema)
            writer.write_table(out)
            rows += out.num_rows
        writer.close()
        seconds = time.perf_counter() - started
    peak = next(iter(watch.peaks.values()))
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "workers": [peak]}


def run_ray(source: Path, destination: Path, index_path: Path, workers: int, batch_size: int) -> dict[str, Any]:
    """classify_parquet on the local Ray: ``workers`` actors of one thread (0.5 logical CPU each, so
    Ray keeps a CPU for reading and writing)."""
    with MemoryWatch("MapWorker(MapBatches(ClassifyBatch))") as watch:
        started = time.perf_counter()
        report = classify_parquet(
            source, destination, index_path, num_workers=workers, cpus_per_worker=0.5, batch_size=batch_size,
            overwrite=True,
        )
        total = time.perf_counter() - started
    return {
        "rows": report.rows_out, "seconds": report.seconds, "rows_per_s": report.rows_per_second,
        "seconds_with_check": total, "ids_checked": report.ids_checked, "workers": list(watch.peaks.values()),
    }


def bench_batch(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    import ray

    source, index_path = write_table(data_dir, args)
    input_bytes = sum(f.stat().st_size for f in source.iterdir())
    runs: dict[str, Any] = {}
    for threads in (1, 2):
        name = f"in-process, {threads} thread{'s' * (threads > 1)}"
        print(f"running {name} ...", flush=True)
        load_before = os.getloadavg()
        run = run_in_process(source, data_dir / "out_local", index_path, threads, args.batch_size)
        runs[name] = {"load_before": load_before, **run}
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray_start_s = time.perf_counter() - started
    try:
        for workers in (1, 2):
            name = f"ray, {workers} worker{'s' * (workers > 1)}"
            print(f"running {name} ...", flush=True)
            load_before = os.getloadavg()
            run = run_ray(source, data_dir / "out_ray", index_path, workers, args.batch_size)
            runs[name] = {"load_before": load_before, **run}
    finally:
        ray.shutdown()
    output_bytes = sum(f.stat().st_size for f in (data_dir / "out_ray").iterdir())
    one, two = runs["ray, 1 worker"], runs["ray, 2 workers"]
    per_worker = one["rows_per_s"]
    peak_worker_mb = max(w["peak_rss_mb"] for run in (one, two) for w in run["workers"])
    return {
        "rows": args.rows, "dim": args.dim, "classes": args.classes, "batch_size": args.batch_size,
        "input_gib": input_bytes / 2**30, "output_bytes_per_row": output_bytes / args.rows, "ray_start_s": ray_start_s,
        "runs": runs,
        "scaling_2_workers": two["rows_per_s"] / one["rows_per_s"],
        "ray_1_worker_vs_in_process_1_thread": one["rows_per_s"] / runs["in-process, 1 thread"]["rows_per_s"],
        "extrapolation_1e9": {
            "rows": TARGET_ROWS,
            "per_worker_rows_per_s": per_worker,
            "worker_hours": TARGET_ROWS / per_worker / 3600,
            "hours_on_this_machine_2_workers": TARGET_ROWS / two["rows_per_s"] / 3600,
            "minutes_on_64_workers_linear": TARGET_ROWS / (64 * per_worker) / 60,
            "input_tib": TARGET_ROWS * input_bytes / args.rows / 2**40,
            "output_gib": TARGET_ROWS * output_bytes / args.rows / 2**30,
            "peak_memory_per_worker_mb": peak_worker_mb,
            "assumes": "throughput per worker as measured here (1 thread, local disk) and linear in workers; "
            "memory per worker does not grow with rows (streaming)",
        },
    }


def bench_milvus(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from lfa_index.stores import (
        FaissStore,
        MilvusStore,
        add_aligned,
        search_aligned,
        search_classes,
        search_unaligned,
        write_prototypes,
    )

    prototypes, support, labels, images = synthetic_task(args.classes, args.dim, args.shots, seed=0)
    index = fit_index(prototypes, support, labels, "cpu")
    corpus, _ = images(args.milvus_corpus, seed=77)
    text = prototypes  # one text query per class
    shutil.rmtree(data_dir / "milvus", ignore_errors=True)
    (data_dir / "milvus").mkdir(parents=True)
    uri = str(data_dir / "milvus" / "bench.db")
    d_aligned = index.prototypes_.shape[1]
    exact_store = add_aligned(index, FaissStore(d_aligned), corpus, np.arange(len(corpus)))
    exact_scores, exact = search_aligned(index, exact_store, text, k=10)
    out: dict[str, Any] = {"corpus": len(corpus), "queries": len(text)}
    with MilvusStore(uri, "raw", dim=args.dim) as raw:
        started = time.perf_counter()
        raw.add(corpus, ids=np.arange(len(corpus)))
        out["insert_rows_per_s"] = len(corpus) / (time.perf_counter() - started)
        for overfetch in args.overfetch:
            started = time.perf_counter()
            _, found = search_unaligned(index, raw, text, k=10, overfetch=overfetch)
            out[f"query_side_recall@10_overfetch_{overfetch}"] = recall_at(found, exact)
            out[f"query_side_queries_per_s_overfetch_{overfetch}"] = len(text) / (time.perf_counter() - started)
    with MilvusStore(uri, "aligned", dim=d_aligned) as aligned:
        add_aligned(index, aligned, corpus, np.arange(len(corpus)))
        _, found = search_aligned(index, aligned, text, k=10)
        out["reindexed_identical_top10_rows"] = float(np.mean((found == exact).all(axis=1)))
        out["reindexed_recall@10"] = recall_at(found, exact)
    queries, _ = images(args.milvus_queries, seed=78)
    with MilvusStore(uri, "prototypes", dim=args.dim) as store:
        write_prototypes(index, store)
        started = time.perf_counter()
        _, milvus_labels = search_classes(index, store, queries, k=1)
        out["milvus_class_search_queries_per_s"] = len(queries) / (time.perf_counter() - started)
    faiss_store = write_prototypes(index, FaissStore(args.dim))
    started = time.perf_counter()
    _, faiss_labels = search_classes(index, faiss_store, queries, k=1)
    out["faiss_class_search_queries_per_s"] = len(queries) / (time.perf_counter() - started)
    out["milvus_equals_faiss_predictions"] = float(np.mean(milvus_labels == faiss_labels))
    return out


# ------------------------------------------------------------------ report
def print_report(report: dict[str, Any]) -> None:
    if "batch" in report:
        b = report["batch"]
        print(f"\nbatch classification: {b['rows']:,} rows, d={b['dim']}, C={b['classes']}, batch {b['batch_size']}, "
              f"input {b['input_gib']:.2f} GiB (Ray start {b['ray_start_s']:.1f} s, not counted)")
        print(f"  {'path':<22} {'rows/s':>10} {'seconds':>8} {'peak RSS/worker MB':>19} {'peak private MB':>16}")
        for name, run in b["runs"].items():
            rss = "/".join(f"{w['peak_rss_mb']:.0f}" for w in run["workers"])
            private = "/".join(f"{w['peak_private_mb']:.0f}" for w in run["workers"])
            print(f"  {name:<22} {run['rows_per_s']:>10,.0f} {run['seconds']:>8.1f} {rss:>19} {private:>16}")
        e = b["extrapolation_1e9"]
        print(f"  2 workers / 1 worker: {b['scaling_2_workers']:.2f}x; Ray 1 worker / in-process 1 thread: "
              f"{b['ray_1_worker_vs_in_process_1_thread']:.2f}x")
        print(f"  1e9 rows: {e['worker_hours']:.1f} worker-hours at {e['per_worker_rows_per_s']:,.0f} rows/s/worker; "
              f"{e['hours_on_this_machine_2_workers']:.1f} h here (2 workers); "
              f"{e['minutes_on_64_workers_linear']:.0f} min on 64 workers if linear; "
              f"{e['input_tib']:.2f} TiB in, {e['output_gib']:.1f} GiB out; "
              f"{e['peak_memory_per_worker_mb']:.0f} MB peak per worker")
    if "milvus" in report:
        m = report["milvus"]
        print(f"\nMilvus Lite: corpus {m['corpus']:,}, {m['queries']} text queries")
        for key, value in m.items():
            if key not in ("corpus", "queries", "meta"):
                print(f"  {key:<42} {value:,.3f}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--milvus-corpus", type=int, default=100_000)
    parser.add_argument("--milvus-queries", type=int, default=10_000)
    parser.add_argument("--overfetch", type=int, nargs="+", default=[1, 2, 5, 10, 20])
    parser.add_argument("--sections", nargs="+", default=["batch", "milvus"], choices=["batch", "milvus"])
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "lfa_scale")
    parser.add_argument("--quick", action="store_true", help="200k rows, d=128, 20k-image Milvus corpus")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.rows, args.dim, args.milvus_corpus, args.milvus_queries = 200_000, 128, 20_000, 2000
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    meta = {
        "command": "python -m benchmarks.scale " + " ".join(sys.argv[1:] if argv is None else argv),
        "cpu_count": os.cpu_count(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                     "faiss": faiss.__version__, "pyarrow": pa.__version__},
        "load_average_at_start": os.getloadavg(),
    }
    report: dict[str, Any] = {}
    started = time.perf_counter()
    if "batch" in args.sections:
        report["batch"] = bench_batch(args, args.data_dir)
    if "milvus" in args.sections:
        report["milvus"] = bench_milvus(args, args.data_dir)
    meta["runtime_s"] = time.perf_counter() - started
    meta["load_average_at_end"] = os.getloadavg()
    for section in report.values():
        section["meta"] = meta
    print_report(report)
    out = args.out or RESULTS / f"scale{'_quick' if args.quick else ''}.json"
    if out.exists():  # a run of some sections keeps the others from earlier runs
        report = {**json.loads(out.read_text()), **report}
    atomic_write(out, json.dumps(report, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
