"""Changing the embedding model without re-embedding the store: EmbeddingAligner on Cranfield.

For each direction (new model -> old model: MiniLM <-> e5-small, and MiniLM <-> static-64 of
another width) the store holds the 1,400 Cranfield documents embedded by the **old** model; the
225 queries are embedded by the **new** model and mapped into the old space. Beside each other, in
one run: the legacy model (old queries on the old store), a full re-index (new queries on the new
model's documents), Procrustes, centred Procrustes, ridge (scikit-learn ``RidgeCV``, with
intercept) and ``EmbeddingAligner``, fitted on pairs drawn from 100, 300 or all 1,400 documents,
the same documents with their first sentences as more pairs (``"300+sentences"``: the new side
embeds the sentences in its query role, as queries are) or with every sentence of them
(``"300+every"``, :func:`lfa_index.adapters.with_sentences`, the CLI's default) or with their
overlapping 12-word spans (``"300+windows"``, :func:`lfa_index.adapters.with_windows`), or on 5,000 unrelated sentences
(Banking77 and AG News; no Cranfield text among them).
nDCG@10 and recall@100 over the 225 queries with the corrected graded judgements; the share of
the re-index's nDCG@10 in brackets. Pairs are embedded in the document role (e5 ``passage:``), as
a store's rows are; where the new model has a query role of its own (e5 ``query:``), the aligner
also gets the new model's query-role rows of the 5,000 unrelated sentences (``queries=``, unpaired)
and serves around their mean, and the same fit served around the pairs' mean is shown too. Where
the pairs come with views (a document's sentences or spans share its ``groups`` label), the aligner
weighs them by their group's design effect (``group_weights="design"``, the default); the same fit
with every pair weighing 1 (``"equal"``) is shown beside it.

Unpaired (``fit(..., paired=False)``): the new model sees documents 0-699 of a fixed permutation and
the old model the other 700; U-LFA (Gromov-Wasserstein start, Sinkhorn/Procrustes rounds) against a
MUSE-style refinement (CSLS mutual nearest neighbours, then Procrustes, 5 times) from the same start,
and against supervised Procrustes on the 700 true pairs. Also: top-1 matching of those 700 documents.

Usage
-----
    LFA_SHARED_DATA=../shared/data .venv/bin/python -m benchmarks.migration

Prints the table and writes ``benchmarks/results/migration.{json,md}`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import RidgeCV

from benchmarks.data import add_data_argument
from benchmarks.migration_data import MODELS, ModelRows, every_model_rows, ndcg_recall
from lfa_index import EmbeddingAligner
from lfa_index.arrays import l2_normalize
from lfa_index.core.solvers.matching import fit_unpaired
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"
DIRECTIONS: tuple[tuple[str, str], ...] = (
    ("minilm", "e5-small"), ("e5-small", "minilm"), ("static-64", "minilm"), ("minilm", "static-64"),
)
WITH_SENTENCES = "+sentences"
WITH_EVERY = "+every"
WITH_WINDOWS = "+windows"
VIEW_ROWS: dict[str, tuple[str, str, str, str]] = {  # suffix -> ModelRows fields (query role, document role,
    # each row's document) and the table's words
    WITH_SENTENCES: ("first_sentences", "first_sentences_as_documents", "sentence_of", "first sentences"),
    WITH_EVERY: ("every_sentence", "every_sentence_as_documents", "every_sentence_of", "every sentence"),
    WITH_WINDOWS: ("windows", "windows_as_documents", "window_of", "12-word spans"),
}
VIEWS = tuple(VIEW_ROWS)
PAIR_COUNTS: tuple[int | str, ...] = (100, 300, 1400, "100+sentences", "300+sentences", "1400+sentences",
                                      "100+every", "300+every", "1400+every", "100+windows", "300+windows",
                                      "1400+windows", "unrelated")
PAIR_SEED = 0
RIDGE_ALPHAS = np.logspace(-3, 3, 13)
MUSE_ITERATIONS, CSLS_K = 5, 10


def procrustes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``U Vᵀ`` of the thin SVD of ``aᵀ b`` (orthonormal rows or columns; any widths)."""
    u, _, vt = np.linalg.svd(a.T.astype(np.float64) @ b, full_matrices=False)
    return (u @ vt).astype(np.float32)


def scores(mapped: np.ndarray, store: np.ndarray) -> np.ndarray:
    return l2_normalize(mapped) @ store.T


def baselines(x_new: np.ndarray, x_old: np.ndarray, queries: np.ndarray) -> dict[str, np.ndarray]:
    """Mapped queries of the three simple maps, fitted on the pairs (x_new, x_old)."""
    mean_new, mean_old = x_new.mean(axis=0), x_old.mean(axis=0)
    ridge = RidgeCV(alphas=RIDGE_ALPHAS).fit(x_new, x_old)
    return {
        "Procrustes": queries @ procrustes(x_new, x_old),
        "centred Procrustes": (queries - mean_new) @ procrustes(x_new - mean_new, x_old - mean_old),
        "ridge": ridge.predict(queries),
    }


def pairs(count: int | str, new: ModelRows, old: ModelRows, n_docs: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The pairs of one row: ``count`` documents (a seeded draw), those documents and their first
    sentences (``"300+sentences"``), every sentence of them (``"300+every"``) or their 12-word spans
    (``"300+windows"``; the views: the new side in its query role, the old side in its document role),
    or the unrelated sentences; and each row's
    document (the aligner's ``groups``: a document's views are held out together), None for unrelated ones."""
    if count == "unrelated":
        return new.unrelated, old.unrelated, None
    suffix = next((s for s in VIEWS if isinstance(count, str) and count.endswith(s)), "")
    n = int(count[: len(count) - len(suffix)]) if suffix else int(count)
    picked = np.random.default_rng(PAIR_SEED).permutation(n_docs)[:n]
    x_new, x_old, groups = new.documents[picked], old.documents[picked], picked
    if suffix:
        query_rows, document_rows, source, _ = VIEW_ROWS[suffix]
        of = getattr(new, source)
        views = np.flatnonzero(np.isin(of, picked))
        x_new = np.concatenate([x_new, getattr(new, query_rows)[views]])
        x_old = np.concatenate([x_old, getattr(old, document_rows)[views]])
        groups = np.concatenate([groups, of[views]])
    return x_new, x_old, groups


def run_direction(new: str, old: str, rows: dict[str, Any], qrels: dict[int, dict[int, int]],
                  counts: tuple[int | str, ...] = PAIR_COUNTS) -> list[dict[str, Any]]:
    """Every row of one direction (one per pair count)."""
    n_docs = len(rows[old].documents)
    store, queries = rows[old].documents, rows[new].queries
    query_role = MODELS[new][0] != MODELS[new][1]
    query_sample = rows[new].unrelated_queries if query_role else None  # the aligner's queries=
    fixed = {
        "legacy (old model)": rows[old].queries @ store.T,
        "full re-index (new model)": queries @ rows[new].documents.T,
    }
    fixed = {name: ndcg_recall(s, qrels) for name, s in fixed.items()}
    reindex = fixed["full re-index (new model)"][0]
    out = []
    for count in counts:
        x_new, x_old, groups = pairs(count, rows[new], rows[old], n_docs)
        results, candidates = dict(fixed), None
        for name, mapped in baselines(x_new, x_old, queries).items():
            results[name] = ndcg_recall(scores(mapped, store), qrels)
        started = time.perf_counter()
        aligner = EmbeddingAligner(random_state=0).fit(
            x_new, x_old, queries=query_sample, groups=groups)
        fit_s = time.perf_counter() - started
        results["EmbeddingAligner"] = ndcg_recall(aligner.transform(queries) @ store.T, qrels)
        if aligner.selection_.get("group_correlation") is not None:  # views: the same fit, every pair weighing 1
            equal = EmbeddingAligner(group_weights="equal", random_state=0).fit(
                x_new, x_old, queries=query_sample, groups=groups)
            results["EmbeddingAligner, equal weights"] = ndcg_recall(equal.transform(queries) @ store.T, qrels)
        if count == 1400:  # the least-squares maps as candidates too: what held-out pairs pick, and what queries get
            wide = EmbeddingAligner(maps="all", random_state=0).fit(
                x_new, x_old, queries=query_sample, groups=groups)
            results["EmbeddingAligner, maps='all'"] = ndcg_recall(wide.transform(queries) @ store.T, qrels)
            candidates = wide.selection_["candidates"]
        if query_role and aligner.center_:
            pairs_mean = l2_normalize(x_new).mean(axis=0)
            mapped = (l2_normalize(queries) - pairs_mean) @ aligner.W_
            results["EmbeddingAligner, pairs' mean"] = ndcg_recall(scores(mapped, store), qrels)
        simple = max(results[m][0] for m in ("Procrustes", "centred Procrustes", "ridge"))
        out.append({
            "new": new, "old": old, "pairs": count, "n_pairs": len(x_new), "fit_seconds": fit_s,
            "aligner": aligner.summary_, "method": aligner.method_, "steps": aligner.steps_,
            "results": {m: {"ndcg10": v[0], "recall100": v[1], "share_of_reindex": v[0] / reindex}
                        for m, v in results.items()},
            "best_simple_ndcg10": simple, "aligner_above_simple": results["EmbeddingAligner"][0] > simple,
            "gemv_us_per_query": query_cost_us(aligner, queries) if count == 1400 else None,
            "heldout_mrr_of_every_closed_form": candidates,
        })
        print(table([out[-1]]).splitlines()[-1], flush=True)
    return out


def query_cost_us(aligner: EmbeddingAligner, queries: np.ndarray, repeats: int = 5) -> dict[str, float]:
    """µs per query: the GEMV alone (one query), ``aligner.transform`` of one query per call (input
    checks, normalisations and the GEMV; medians) and of 225 per call."""
    single, gemv = [], []
    for _ in range(repeats):
        for row in queries:
            start = time.perf_counter()
            aligner.transform(row[None])
            single.append(time.perf_counter() - start)
            start = time.perf_counter()
            np.dot(row[None], aligner.W_)
            gemv.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(repeats):
        aligner.transform(queries)
    batched = (time.perf_counter() - start) / (repeats * len(queries))
    return {"gemv": 1e6 * float(np.median(gemv)), "one_per_call": 1e6 * float(np.median(single)),
            "batch_of_225": 1e6 * batched}


def csls_pairs(mapped: np.ndarray, targets: np.ndarray, k: int = CSLS_K) -> tuple[np.ndarray, np.ndarray]:
    """Mutual nearest neighbours under CSLS (Conneau et al., 2018): the MUSE refinement dictionary."""
    sims = l2_normalize(mapped) @ l2_normalize(targets).T
    r_src = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    r_tgt = np.sort(sims, axis=0)[-k:, :].mean(axis=0)
    csls = 2 * sims - r_src[:, None] - r_tgt[None, :]
    forward, backward = csls.argmax(axis=1), csls.argmax(axis=0)
    mutual = np.flatnonzero(backward[forward] == np.arange(len(mapped)))
    return mutual, forward[mutual]


def run_unpaired(new: str, old: str, rows: dict[str, Any], qrels: dict[int, dict[int, int]]) -> dict[str, Any]:
    """Unpaired fits on disjoint halves of the documents, against MUSE-style refinement and supervision."""
    perm = np.random.default_rng(PAIR_SEED).permutation(len(rows[old].documents))
    seen_new, seen_old = perm[:700], perm[700:]
    a, b = rows[new].documents[seen_new], rows[old].documents[seen_old]
    truth = rows[old].documents[seen_new]
    queries, store = rows[new].queries, rows[old].documents
    mean_new, mean_old = a.mean(axis=0), b.mean(axis=0)
    maps: dict[str, np.ndarray] = {}
    aligner = EmbeddingAligner(random_state=0).fit(a, b, paired=False)
    maps["U-LFA (EmbeddingAligner, paired=False)"] = aligner.W_
    start = fit_unpaired(torch.from_numpy(l2_normalize(a)), torch.from_numpy(l2_normalize(b)), n_rounds=0,
                         seed=0).W.numpy()
    maps["Gromov-Wasserstein start"] = start
    w = start
    ca, cb = l2_normalize(a - mean_new), l2_normalize(b - mean_old)
    for _ in range(MUSE_ITERATIONS):
        src, tgt = csls_pairs(ca @ w, cb)
        w = procrustes(ca[src], cb[tgt])
    maps["MUSE-style refinement (CSLS + Procrustes)"] = w
    maps["supervised Procrustes (700 true pairs)"] = procrustes(a - mean_new, truth - truth.mean(axis=0))
    out = {}
    for name, w in maps.items():
        ndcg, recall = ndcg_recall(scores((queries - mean_new) @ w, store), qrels)
        matched = (scores((a - mean_new) @ w, truth).argmax(axis=1) == np.arange(len(a))).mean()
        out[name] = {"ndcg10": ndcg, "recall100": recall, "top1_match": float(matched)}
    print(f"unpaired {new} -> {old}: " + "; ".join(
        f"{n}: nDCG@10 {v['ndcg10']:.3f}, top-1 match {100 * v['top1_match']:.1f}%" for n, v in out.items()),
        flush=True)
    return {"new": new, "old": old, "results": out}


METHODS = ("legacy (old model)", "full re-index (new model)", "Procrustes", "centred Procrustes", "ridge",
           "EmbeddingAligner, pairs' mean", "EmbeddingAligner, maps='all'", "EmbeddingAligner, equal weights",
           "EmbeddingAligner")


def table(records: list[dict[str, Any]]) -> str:
    """One line per direction and pair count: nDCG@10 / recall@100 (share of the re-index) per method."""
    head = "| new -> old | pairs | " + " | ".join(METHODS) + " | aligner > simple maps |"
    lines = [head, "|" + "---|" * (len(METHODS) + 3)]
    for r in records:
        cells = []
        for m in METHODS:
            v = r["results"].get(m)
            cells.append("" if v is None else
                         f"{v['ndcg10']:.3f} / {v['recall100']:.3f} ({100 * v['share_of_reindex']:.0f}%)")
        label = "5,000 unrelated" if r["pairs"] == "unrelated" else f"{r['pairs']:,}" if isinstance(r["pairs"], int) \
            else next(f"{int(r['pairs'][:-len(suffix)]):,} + {words} ({r['n_pairs']:,} pairs)"
                      for suffix, (*_, words) in VIEW_ROWS.items() if r["pairs"].endswith(suffix))
        lines.append(f"| {r['new']} -> {r['old']} | {label} | " + " | ".join(cells)
                     + f" | {'yes' if r['aligner_above_simple'] else 'no'} |")
    return "\n".join(lines)


def markdown(records: list[dict[str, Any]], unpaired: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    parts = ["# Changing the embedding model without re-embedding: Cranfield (`benchmarks/migration.py`)", "",
             f"`{meta['command']}`; {meta['machine']}.", "",
             "nDCG@10 / recall@100 over the 225 queries (corrected judgements), and the share of the full "
             "re-index's nDCG@10.", "", table(records), "", "## Query-side cost (1,400 pairs' aligner)", "",
             "| new -> old | the GEMV, µs | transform(), one query per call, µs | transform(), 225 per call, µs per "
             "query |", "|---|---:|---:|---:|"]
    for r in records:
        if r["gemv_us_per_query"]:
            c = r["gemv_us_per_query"]
            parts.append(f"| {r['new']} -> {r['old']} | {c['gemv']:.1f} | {c['one_per_call']:.1f} | "
                         f"{c['batch_of_225']:.2f} |")
    parts += ["", "## Held-out pairs vs queries (1,400 pairs, `maps='all'`): held-out MRR of each closed form", ""]
    for r in records:
        if r["heldout_mrr_of_every_closed_form"]:
            ranked = sorted(r["heldout_mrr_of_every_closed_form"].items(), key=lambda kv: -kv[1])[:4]
            parts.append(f"- {r['new']} -> {r['old']}: " + "; ".join(f"{n} {v:.3f}" for n, v in ranked))
    parts += ["", "## What the aligner chose", ""]
    parts += [f"- {r['new']} -> {r['old']}, {r['pairs']} pairs: {r['aligner']}" for r in records]
    parts += ["", "## Unpaired (700 new-model documents, 700 other old-model documents)", "",
              "| new -> old | method | nDCG@10 | recall@100 | top-1 match of the 700 |", "|---|---|---:|---:|---:|"]
    for u in unpaired:
        for name, v in u["results"].items():
            parts.append(f"| {u['new']} -> {u['old']} | {name} | {v['ndcg10']:.3f} | {v['recall100']:.3f} | "
                         f"{100 * v['top1_match']:.1f}% |")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    parser.add_argument("--pairs", nargs="+", default=[str(c) for c in PAIR_COUNTS],
                        help="pair counts to run (100, 300, 1400, 300+sentences, 300+every, ..., unrelated; "
                             "default all)")
    parser.add_argument("--name", default="migration", help="results file name (default migration)")
    args = parser.parse_args(argv)
    counts = tuple(int(c) if c.isdigit() else c for c in args.pairs)
    bad = [c for c in counts if isinstance(c, str) and c != "unrelated" and not any(
        c.endswith(s) and c[: -len(s)].isdigit() for s in VIEWS)]
    if bad:
        parser.error(f"--pairs {bad[0]!r}: give a count (300), a count and its documents' first sentences "
                     "(300+sentences), every sentence (300+every) or 12-word spans (300+windows), or unrelated.")
    started = time.perf_counter()
    data, rows = every_model_rows(args.data)
    records = [r for new, old in DIRECTIONS for r in run_direction(new, old, rows, data.qrels, counts)]
    unpaired = [run_unpaired(new, old, rows, data.qrels) for new, old in DIRECTIONS[:2]]
    command = "python -m benchmarks.migration" + ("" if counts == PAIR_COUNTS else " --pairs " + " ".join(args.pairs))
    meta = {"command": command + ("" if args.name == "migration" else f" --name {args.name}"),
            "machine": f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
                       f"{torch.get_num_threads()} torch threads",
            "seconds": time.perf_counter() - started}
    print(table(records))
    atomic_write(RESULTS / f"{args.name}.json", json.dumps({"meta": meta, "records": records, "unpaired": unpaired},
                                                       indent=1))
    atomic_write(RESULTS / f"{args.name}.md", markdown(records, unpaired, meta))


if __name__ == "__main__":
    main()
