"""Parity of the vector stores on real embeddings: DTD CLIP ViT-B/32 images vs MiniLM class names, 16 shots.

For every store (FAISS, Milvus Lite, Qdrant, Chroma, LanceDB, each embedded and opened by store
URI) and two classifiers fitted on the same 16-shot support (``plain``: no class biases, no
centring; ``biased``: ``LFA(prototype_mix=0.5, center=True)``, whose folded prototypes carry a
bias coordinate), on the DTD test split:

* **classify**: ``write_prototypes`` + ``classify`` against ``AlignedIndex.predict`` (rows that
  agree), and ``search_classes`` top-5 against ``AlignedIndex.search``;
* **aligned search**: ``add_aligned`` of the test images + ``search_aligned`` of the 47 class
  prompts ("a photo of a {name}.", MiniLM) against FAISS flat (an AlignedCorpus of the index,
  i.e. re-indexing): queries whose top-10 ids are identical;
* **query-side search**: the raw test images in the store, ``search_unaligned`` recall@10
  against re-indexing at over-fetch 1, 2, 5, 10 and full (every row re-ranked: exact).

Chroma's only index is HNSW; its collections are created with ``ef_search`` (default 2048) above
the row count so that its searches are exact, as its store documents.

Usage
-----
    LFA_SHARED_DATA=../shared/data .venv/bin/python -m benchmarks.stores_real       # whole test split
    .venv/bin/python -m benchmarks.stores_real --data DIR --eval-rows 400 --stores faiss lancedb

Prints a table and writes ``benchmarks/results/stores_real.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import faiss
import numpy as np

from benchmarks.data import add_data_argument, load_set, sample_support
from benchmarks.stores import RESULTS, STORES, client_versions, close, write_report
from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.stores import (
    add_aligned,
    classify,
    open_store,
    prototype_dim,
    search_aligned,
    search_classes,
    search_unaligned,
    write_prototypes,
)

OVERFETCH = (1, 2, 5, 10)
K = 10
CLASSIFIERS = {  # the two layouts of folded prototypes: d coordinates, and d + 1 (bias)
    "plain": dict(prototype_mix=0.0, center=False, mapping="task"),
    "biased": dict(prototype_mix=0.5, center=True, mapping="task"),
}


# ------------------------------------------------------------------ data and classifiers
def load_task(root: Path | None, shots: int = 16, seed: int = 0, eval_rows: int | None = None) -> dict[str, Any]:
    """DTD: a ``shots``-shot support, the test split (its first ``eval_rows`` of a stratified order) with
    store ids, and the 47 class prompts as text queries."""
    data = load_set("dtd", root=root)
    support = sample_support(data.pool_labels, shots, seed)
    rows = np.arange(len(data.eval_labels))
    if eval_rows is not None and eval_rows < len(rows):
        # every class keeps its share: a round-robin over classes, taken in order
        rank = np.empty(len(rows), dtype=np.int64)
        for c in np.unique(data.eval_labels):
            members = np.flatnonzero(data.eval_labels == c)
            rank[members] = np.arange(len(members))
        rows = np.sort(np.lexsort((rows, rank))[:eval_rows])
    names = np.asarray(data.class_names)
    return {  # labels are class names, as a store's label field holds them
        "support": data.pool_features[support], "labels": names[data.pool_labels[support]],
        "prototypes": data.prototypes, "names": data.class_names,
        "eval": np.ascontiguousarray(data.eval_features[rows], dtype=np.float32),
        "eval_labels": names[data.eval_labels[rows]],
        "ids": np.arange(len(rows), dtype=np.int64) * 2 + 1,  # not row numbers: ids travel through the store
        "text_queries": data.prototypes,
    }


def fit_classifiers(
    task: dict[str, Any], steps: int | str = 100, beta: float | str = "auto"
) -> dict[str, AlignedIndex]:
    """The plain and the biased/centred classifier on the same support (CPU, seed 0)."""
    return {
        kind: AlignedIndex(lfa=LFA(beta=beta, steps=steps, device="cpu", random_state=0, **options)).fit(
            task["support"], task["labels"], task["prototypes"], class_names=task["names"]
        )
        for kind, options in CLASSIFIERS.items()
    }


# ------------------------------------------------------------------ one store
def store_uri(name: str, collection: str, workdir: Path) -> str:
    """An embedded store of ``name`` under ``workdir`` (Qdrant in memory: its directory mode commits point by point)."""
    location = {"faiss": workdir / "faiss", "milvus": workdir / "milvus.db", "qdrant": ":memory:",
                "chroma": workdir / "chroma", "lancedb": workdir / "lancedb"}[name]
    return f"{name}:{location}#{collection}"


def fresh_store(name: str, collection: str, dim: int, workdir: Path, ef_search: int) -> Any:
    options = {"ef_search": ef_search} if name == "chroma" else {}
    store = open_store(store_uri(name, collection, workdir), dim=dim, **options)
    store.clear()
    return store


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f[f >= 0], t)) / len(t) for f, t in zip(found, truth)]))


def reference_search(index: AlignedIndex, images: np.ndarray, ids: np.ndarray,
                     text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-indexing: the images in an aligned corpus of the index (FAISS flat), searched exactly."""
    return AlignedCorpus(index).add(images, ids=ids).search_text(text, k=K)


def store_parity(name: str, indexes: dict[str, AlignedIndex], task: dict[str, Any], references: dict[str, Any],
                 workdir: Path, ef_search: int = 2048, overfetch: Sequence[int] = OVERFETCH) -> dict[str, Any]:
    """Every parity figure of one store, for each classifier."""
    images, text, ids = task["eval"], task["text_queries"], task["ids"]
    out: dict[str, Any] = {}
    for kind, index in indexes.items():
        row: dict[str, Any] = {}
        predicted = index.predict(images)
        expected_scores, expected_top5 = index.search(images, k=5)
        store = fresh_store(name, f"lfa_real_prototypes_{kind}", prototype_dim(index), workdir, ef_search)
        try:
            write_prototypes(index, store)
            start = time.perf_counter()
            labels = classify(index, store, images)
            row["classify_s"] = time.perf_counter() - start
            _, top5 = search_classes(index, store, images, k=5)
        finally:
            close(store)
        row["classify_agree"] = int(np.sum(labels == predicted))
        row["top5_agree"] = int(np.sum(np.all(top5 == expected_top5, axis=1)))
        row["queries"] = len(images)

        ref_scores, ref_ids = references[kind]
        aligned = fresh_store(name, f"lfa_real_aligned_{kind}", index.prototypes_.shape[1], workdir, ef_search)
        try:
            start = time.perf_counter()
            add_aligned(index, aligned, images, ids)
            row["insert_aligned_s"] = time.perf_counter() - start
            scores, found = search_aligned(index, aligned, text, k=K)
        finally:
            close(aligned)
        row["aligned_top10_equal"] = int(np.sum(np.all(found == ref_ids, axis=1)))
        row["aligned_max_score_diff"] = float(np.max(np.abs(scores - ref_scores)))
        row["text_queries"] = len(text)

        raw = fresh_store(name, f"lfa_real_raw_{kind}", images.shape[1], workdir, ef_search)
        try:
            raw.add(images, ids)
            recall = {}
            for factor in [*overfetch, "full"]:
                times = len(images) if factor == "full" else int(factor)
                _, found = search_unaligned(index, raw, text, k=K, overfetch=times)
                recall[str(factor)] = recall_at(found, ref_ids)
        finally:
            close(raw)
        row["unaligned_recall_at_10"] = recall
        out[kind] = row
    return out


# ------------------------------------------------------------------ report
def print_report(report: dict[str, Any]) -> None:
    p = report["params"]
    print(f"\nstores on real embeddings: DTD, {p['shots']} shots, {p['eval_rows']} test images, {p['text_queries']} "
          f"class-prompt queries, k={K}")
    for kind, info in report["classifiers"].items():
        print(f"  {kind:<7} accuracy {100 * info['accuracy']:.2f}%, augmented={info['augmented']}, "
              f"beta={info['beta']:.2f}, steps={info['steps']}")
    factors = [*map(str, report["params"]["overfetch"]), "full"]
    print(f"\n{'store':<9}{'kind':<8}{'classify=predict':>18}{'top5=search':>13}{'aligned top10':>15}   "
          + "recall@10 of search_unaligned at overfetch " + " / ".join(factors))
    for name, result in report["stores"].items():
        if "error" in result:
            print(f"{name:<9}  skipped: {result['error']}")
            continue
        for kind, r in result.items():
            print(f"{name:<9}{kind:<8}{r['classify_agree']:>10}/{r['queries']:<7}{r['top5_agree']:>6}/{r['queries']:<6}"
                  f"{r['aligned_top10_equal']:>8}/{r['text_queries']:<6}   "
                  + " / ".join(f"{r['unaligned_recall_at_10'][f]:.3f}" for f in factors))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0, help="support draw")
    parser.add_argument("--steps", default="100", help="LFA refinement steps, or 'auto'")
    parser.add_argument("--beta", default="auto", help="β of β-Procrustes, or 'auto'")
    parser.add_argument("--eval-rows", type=int, default=None, help="test images (default: the whole split)")
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    parser.add_argument("--ef-search", type=int, default=2048, help="Chroma's HNSW beam (>= rows: exact)")
    parser.add_argument("--workdir", type=Path, default=None, help="where embedded stores live (default: a temp dir)")
    parser.add_argument("--threads", type=int, default=None, help="FAISS/torch threads (default: all cores)")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fit both classifiers, measure every store, return the report."""
    steps = args.steps if args.steps == "auto" else int(args.steps)
    beta = args.beta if args.beta == "auto" else float(args.beta)
    task = load_task(args.data, args.shots, args.seed, args.eval_rows)
    started = time.perf_counter()
    indexes = fit_classifiers(task, steps=steps, beta=beta)
    workdir = Path(tempfile.mkdtemp(prefix="lfa_stores_real_", dir=args.workdir))
    results: dict[str, Any] = {}
    try:
        references = {kind: reference_search(ix, task["eval"], task["ids"], task["text_queries"])
                      for kind, ix in indexes.items()}
        for name in args.stores:
            print(f"  {name} ...", flush=True)
            try:
                results[name] = store_parity(name, indexes, task, references, workdir, args.ef_search)
            except ImportError as err:  # a missing extra skips that store
                results[name] = {"error": str(err).splitlines()[0]}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    classifiers = {
        kind: {"accuracy": float(np.mean(ix.predict(task["eval"]) == task["eval_labels"])),
               "augmented": bool(ix.augmented_), "beta": float(ix.lfa_.beta_), "steps": int(ix.lfa_.steps_),
               "options": CLASSIFIERS[kind]}
        for kind, ix in indexes.items()
    }
    return {
        "params": {"set": "dtd", "shots": args.shots, "seed": args.seed, "steps": args.steps, "beta": args.beta,
                   "eval_rows": len(task["eval"]), "text_queries": len(task["text_queries"]), "k": K,
                   "overfetch": list(OVERFETCH), "chroma_ef_search": args.ef_search},
        "classifiers": classifiers,
        "stores": results,
        "meta": {"command": "python -m benchmarks.stores_real " + " ".join(sys.argv[1:]), "cpu_count": os.cpu_count(),
                 "runtime_s": time.perf_counter() - started, "versions": client_versions()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        faiss.omp_set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    report = run(args)
    print_report(report)
    write_report(report, args.out or RESULTS / "stores_real.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
