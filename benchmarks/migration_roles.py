"""The new model's roles in the pairs: what ``lfa-index align --texts`` gives against the benchmark's rows.

e5 embeds queries after ``"query: "`` and documents after ``"passage: "``. ``benchmarks.migration``
pairs each drawn document in the passage role and its sentences in the query role, and gives the
aligner the query-role rows of 5,000 unrelated sentences (``queries=``) to serve a centred map
around. ``lfa-index align --texts FILE --new-model e5-small`` instead embeds every row of the new
side, documents and sentences, with the one SPEC given: the query role. This script measures both on
Cranfield (e5-small -> MiniLM, the one direction whose new model has two roles), and a third way
that needs no other text: documents in the passage role, sentences in the query role, and those
sentences as the ``queries=`` sample (what ``--new-document-model e5-small:passage`` does); and a
fourth that serves around the documents themselves in the query role.

Usage
-----
    LFA_SHARED_DATA=../shared/data .venv/bin/python -m benchmarks.migration_roles

Writes ``benchmarks/results/migration_roles.{json,md}`` (atomically); about 6 minutes on one core
once ``benchmarks.migration`` has cached the embeddings (the first run embeds the 1,400 documents
in e5's query role as well).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from benchmarks.data import add_data_argument
from benchmarks.migration import RESULTS, pairs
from benchmarks.migration_data import MODELS, embed, every_model_rows, ndcg_recall
from lfa_index import EmbeddingAligner
from lfa_index.files import atomic_write

NEW, OLD = "e5-small", "minilm"
COUNTS: tuple[str, ...] = ("100+every", "300+every", "1400+every", "100+windows", "300+windows", "300+sentences",
                           "1400+sentences", "300", "1400")
WAYS: dict[str, str] = {
    "cli": "every new-side row in the query role (`lfa-index align --texts`)",
    "unrelated": "documents as passages, sentences as queries; 5,000 unrelated query-role rows as `queries=` "
                 "(`benchmarks.migration`)",
    "views": "documents as passages, sentences as queries; those sentences as `queries=` "
             "(`lfa-index align --texts --new-document-model`)",
    "texts": "documents as passages, sentences as queries; the documents in the query role as `queries=`",
}


def run(count: str, rows: dict[str, Any], documents_as_queries: np.ndarray, qrels: dict) -> dict[str, Any]:
    """nDCG@10 / recall@100 of the aligner fitted each way on the pairs of ``count`` (None where a way
    needs sentences and the row has none)."""
    store, queries = rows[OLD].documents, rows[NEW].queries
    reindex = ndcg_recall(queries @ rows[NEW].documents.T, qrels)[0]
    n_docs = len(store)
    x_new, x_old, groups = pairs(count, rows[NEW], rows[OLD], n_docs)
    n_picked = int(count.split("+")[0])
    picked, views = groups[:n_picked], x_new[n_picked:]  # the drawn documents come first, then their views
    x_cli = np.concatenate([documents_as_queries[picked], views])  # the same pairs, documents in the query role
    fits = {"cli": (x_cli, None), "unrelated": (x_new, rows[NEW].unrelated_queries),
            "views": (x_new, views if len(views) else None), "texts": (x_new, documents_as_queries[picked])}
    out: dict[str, Any] = {"pairs": count, "n_pairs": len(x_new), "reindex_ndcg10": reindex}
    for way, (rows_new, sample) in fits.items():
        if way == "views" and sample is None:
            out[way] = None
            continue
        started = time.perf_counter()
        aligner = EmbeddingAligner(random_state=0).fit(rows_new, x_old, queries=sample, groups=groups)
        ndcg, recall = ndcg_recall(aligner.transform(queries) @ store.T, qrels)
        out[way] = {"ndcg10": ndcg, "recall100": recall, "share_of_reindex": ndcg / reindex,
                    "aligner": aligner.summary_, "fit_seconds": time.perf_counter() - started}
    return out


def markdown(records: list[dict[str, Any]]) -> str:
    lines = [
        "# The new model's roles in the pairs: e5-small -> MiniLM on Cranfield (`benchmarks/migration_roles.py`)",
        "",
        "`python -m benchmarks.migration_roles`. nDCG@10 / recall@100 over the 225 queries (share of the full "
        "re-index's nDCG@10). Pairs as in `benchmarks.migration` (\"+every\": every sentence of the drawn "
        "documents, \"+windows\": their 12-word spans, \"+sentences\": their first sentences); the old side is "
        "always MiniLM.",
        "",
        *[f"- **{way}**: {text}" for way, text in WAYS.items()],
        "",
        "| pairs | rows | " + " | ".join(WAYS) + " |",
        "|---|---:|" + "---:|" * len(WAYS),
    ]
    for r in records:
        cells = [f"{r[w]['ndcg10']:.3f} / {r[w]['recall100']:.3f} ({100 * r[w]['share_of_reindex']:.1f} %)"
                 if r[w] else "–" for w in WAYS]
        lines.append(f"| {r['pairs']} | {r['n_pairs']:,} | " + " | ".join(cells) + " |")
    lines += ["", "## What each fit chose", ""]
    lines += [f"- {r['pairs']}, {w}: {r[w]['aligner']}" for r in records for w in WAYS if r[w]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    parser.add_argument("--counts", nargs="+", default=list(COUNTS), choices=COUNTS, metavar="PAIRS",
                        help=f"pair counts to run (default all: {' '.join(COUNTS)})")
    parser.add_argument("--name", default="migration_roles", help="results file stem (default migration_roles)")
    args = parser.parse_args(argv)
    data, rows = every_model_rows(args.data)
    documents_as_queries = embed(MODELS[NEW][1], data.documents)  # the CLI's way: the query-role SPEC
    records = []
    for count in args.counts:
        records.append(run(count, rows, documents_as_queries, data.qrels))
        r = records[-1]
        print(count, " ".join(f"{w}={100 * r[w]['share_of_reindex']:.1f}%" for w in WAYS if r[w]), flush=True)
    text = markdown(records)
    atomic_write(RESULTS / f"{args.name}.json", json.dumps({"records": records, "ways": WAYS}, indent=1))
    atomic_write(RESULTS / f"{args.name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
