"""Throughput of the vector stores behind an AlignedIndex: FAISS, Milvus Lite, Qdrant, Chroma, LanceDB.

For each store, in one run and on the same synthetic data (N raw image embeddings of d=512, C
classes): **insert** rows/s of the aligned corpus (``store.add`` of ``index.transform(x)``, the
transform done beforehand), **classify** queries/s over the folded prototypes
(``stores.classify``; agreement with ``index.predict`` reported) and **aligned search**
queries/s, k=10 (``stores.search_aligned``; recall@10 against FAISS flat reported). FAISS is
the in-process reference; every other figure is also given relative to it.

Embedded engines by default: Milvus Lite (a file), Qdrant local mode in memory (its directory
mode commits each point to SQLite on its own: ``--qdrant-uri DIR`` to measure it), Chroma and
LanceDB in a temporary directory. ``--<store>-uri`` points a store at a server instead.

Usage
-----
    .venv/bin/python -m benchmarks.stores                 # N=100,000, C=1000, 10k classify queries
    .venv/bin/python -m benchmarks.stores --quick         # N=5,000, C=100: a minute
    .venv/bin/python -m benchmarks.stores --n 20000 --stores faiss qdrant

Prints a table and writes ``benchmarks/results/stores.json`` (``stores_quick.json`` with --quick).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import faiss
import numpy as np
import torch

from benchmarks.search import fit_index, recall_at, synthetic_task
from lfa_index import AlignedIndex
from lfa_index.files import atomic_write
from lfa_index.stores import (
    ChromaStore,
    FaissStore,
    LanceDBStore,
    MilvusStore,
    QdrantStore,
    VectorStore,
    classify,
    prototype_dim,
    search_aligned,
    write_prototypes,
)

RESULTS = Path(__file__).parent / "results"
STORES = ("faiss", "milvus", "qdrant", "chroma", "lancedb")
CLIENTS = {"milvus": "pymilvus", "qdrant": "qdrant-client", "chroma": "chromadb", "lancedb": "lancedb"}


# ------------------------------------------------------------------ stores
def open_store(name: str, collection: str, dim: int, workdir: Path, args: argparse.Namespace) -> VectorStore:
    """A fresh store of ``name`` holding ``dim``-d vectors (an existing collection is dropped first)."""
    uri = getattr(args, f"{name}_uri", None)
    if name == "faiss":
        return FaissStore(dim=dim)
    if name == "milvus":
        store = MilvusStore(uri or str(workdir / "milvus.db"), collection, dim=dim)
    elif name == "qdrant":
        store = QdrantStore(uri or ":memory:", collection, dim=dim)
    elif name == "chroma":
        store = ChromaStore(uri or workdir / "chroma", collection, dim=dim)
    else:
        store = LanceDBStore(uri or workdir / "lancedb", collection, dim=dim)
    store.clear()
    return store


def close(store: VectorStore) -> None:
    """Drop the store's collection and close it; a failure is printed, not raised."""
    for method in ("drop", "close"):
        fn = getattr(store, method, None)
        if callable(fn):
            try:
                fn()
            except Exception as err:  # a benchmark must report, not stop, on a failed clean-up
                print(f"  ({type(store).__name__}.{method} failed: {err})", flush=True)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls after one warm-up, and the last result."""
    out = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out


def client_versions() -> dict[str, str]:
    """Versions of Python, numpy, FAISS and of each installed engine client."""
    versions = {"python": platform.python_version(), "numpy": np.__version__, "faiss": faiss.__version__}
    for dist in CLIENTS.values():
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def bench_store(name: str, index: AlignedIndex, data: dict[str, np.ndarray], reference: dict[str, Any],
                workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    aligned, ids, queries, text = data["aligned"], data["ids"], data["queries"], data["text"]
    out: dict[str, Any] = {"store": name}
    corpus = open_store(name, "lfa_bench_corpus", aligned.shape[1], workdir, args)
    out["location"] = corpus.location.replace(str(workdir), "<workdir>")  # no machine paths in results
    try:
        start = time.perf_counter()
        for s in range(0, len(aligned), args.insert_batch):
            corpus.add(aligned[s : s + args.insert_batch], ids[s : s + args.insert_batch])
        out["insert_s"] = time.perf_counter() - start
        out["insert_rows_per_s"] = len(aligned) / out["insert_s"]
        seconds, (_, found) = timed(lambda: search_aligned(index, corpus, text, k=args.k), args.repeats)
        out["search_s"] = seconds
        out["search_queries_per_s"] = len(text) / seconds
        out["search_recall_at_k_vs_faiss"] = recall_at(found, reference["search_ids"]) if reference else 1.0
    finally:
        close(corpus)
    prototypes = open_store(name, "lfa_bench_prototypes", prototype_dim(index), workdir, args)
    try:
        write_prototypes(index, prototypes)
        seconds, labels = timed(lambda: classify(index, prototypes, queries), args.repeats)
        out["classify_s"] = seconds
        out["classify_queries_per_s"] = len(queries) / seconds
        out["classify_agrees_with_predict"] = float(np.mean(labels == data["predicted"]))
    finally:
        close(prototypes)
    if name == "faiss":
        reference["search_ids"] = found
    return out


# ------------------------------------------------------------------ report
def print_report(report: dict[str, Any]) -> None:
    p = report["params"]
    print(f"\nstores: N={p['n']:,} x d={p['dim']} corpus, C={p['classes']} classes, {p['queries']:,} classify "
          f"queries, {p['search_queries']} aligned-search queries, k={p['k']}")
    header = (f"{'store':<9}{'insert rows/s':>15}{'vs FAISS':>10}{'classify q/s':>14}{'vs FAISS':>10}"
              f"{'agree':>7}{'search q/s':>12}{'vs FAISS':>10}{'recall@k':>10}")
    print(header)
    faiss_row = report["stores"].get("faiss")
    for name, r in report["stores"].items():
        if "error" in r:
            print(f"{name:<9}  skipped: {r['error']}")
            continue

        def ratio(key: str) -> str:
            return f"{r[key] / faiss_row[key]:>9.3f}x" if faiss_row and "error" not in faiss_row else f"{'-':>10}"

        print(f"{name:<9}{r['insert_rows_per_s']:>15,.0f}{ratio('insert_rows_per_s')}"
              f"{r['classify_queries_per_s']:>14,.0f}{ratio('classify_queries_per_s')}"
              f"{r['classify_agrees_with_predict']:>7.3f}{r['search_queries_per_s']:>12,.1f}"
              f"{ratio('search_queries_per_s')}{r['search_recall_at_k_vs_faiss']:>10.3f}")


def write_report(report: dict[str, Any], out: Path) -> None:
    """Write ``report`` as JSON to ``out``, making its folder, and say so."""
    atomic_write(out, json.dumps(report, indent=1))
    print(f"\nwrote {out}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="corpus rows")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=10_000, help="classification queries")
    parser.add_argument("--search-queries", type=int, default=200, help="aligned-search (text) queries")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--insert-batch", type=int, default=10_000, help="rows per store.add call")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of each search (median)")
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    for name in STORES[1:]:
        parser.add_argument(f"--{name}-uri", default=None, help=f"a {name} server (default: embedded, temporary)")
    parser.add_argument("--workdir", type=Path, default=None, help="where embedded stores live (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=None, help="FAISS/torch threads (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="N=5,000, C=100, 1,000 classify and 50 search queries")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.n, args.classes, args.queries, args.search_queries, args.repeats = 5_000, 100, 1_000, 50, 1
        args.insert_batch = min(args.insert_batch, 2_500)
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    if "faiss" in args.stores:  # the reference runs first: recall of the others is measured against it
        args.stores = ["faiss"] + [s for s in args.stores if s != "faiss"]
    prototypes, support, labels, images = synthetic_task(args.classes, args.dim, shots=2)
    index = fit_index(prototypes, support, labels, "cpu")
    corpus, _ = images(args.n, seed=2)
    queries, _ = images(args.queries, seed=3)
    text = prototypes[np.random.default_rng(4).integers(0, args.classes, args.search_queries)]
    data = {
        "aligned": index.transform(corpus), "ids": np.arange(args.n, dtype=np.int64) * 2 + 1,
        "queries": queries, "text": text, "predicted": index.predict(queries),
    }
    meta = {
        "command": "python -m benchmarks.stores " + " ".join(sys.argv[1:] if argv is None else argv),
        "cpu_count": os.cpu_count(), "faiss_threads": faiss.omp_get_max_threads(),
        "torch_threads": torch.get_num_threads(), "versions": client_versions(),
        "load_average_at_start": os.getloadavg(),
    }
    workdir = Path(tempfile.mkdtemp(prefix="lfa_stores_", dir=args.workdir))
    results: dict[str, Any] = {}
    reference: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        for name in args.stores:
            print(f"  {name} ...", flush=True)
            try:
                results[name] = bench_store(name, index, data, reference, workdir, args)
            except ImportError as err:  # a missing extra skips that store
                results[name] = {"store": name, "error": str(err).splitlines()[0]}
            print(f"  {name}: {results[name]}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta["runtime_s"] = time.perf_counter() - started
    meta["load_average_at_end"] = os.getloadavg()
    params = {"n": args.n, "dim": args.dim, "classes": args.classes, "queries": args.queries,
              "search_queries": args.search_queries, "k": args.k, "insert_batch": args.insert_batch,
              "repeats": args.repeats}
    report = {"params": params, "stores": results, "meta": meta}
    print_report(report)
    write_report(report, args.out or RESULTS / f"stores{'_quick' if args.quick else ''}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
