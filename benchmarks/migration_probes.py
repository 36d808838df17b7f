"""Linear variants that might lift e5-small -> MiniLM beyond the aligner, scored on Cranfield's queries.

``docs/migration.md`` cites these figures: with all 1,400 documents paired, each variant maps the
e5 queries into a MiniLM store and reports nDCG@10 (share of the e5 re-index). None is a fit the
library makes; they probe whether any linear map reaches 95 %.

Usage
-----
    LFA_SHARED_DATA=../shared/data .venv/bin/python -m benchmarks.migration_probes [NEW OLD]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from benchmarks.data import add_data_argument
from benchmarks.migration import PAIR_SEED, procrustes
from benchmarks.migration_data import MODELS, embed, load_cranfield, model_rows, ndcg_recall, unrelated_texts
from lfa_index import EmbeddingAligner
from lfa_index.arrays import l2_normalize
from lfa_index.core.solvers.migration import whitened_procrustes

SHRINKAGE = (0.01, 0.1, 1.0)
"""Whitening shrinkage, relative to the covariance's mean eigenvalue."""


def matrix_power(cov: np.ndarray, power: float, shrinkage: float) -> np.ndarray:
    """``(C + s·mean(eig C)·I)^power`` of a symmetric PSD ``C`` (scipy-free: numpy's ``eigh``)."""
    w, v = np.linalg.eigh(cov)
    w = np.clip(w, 0, None) + shrinkage * w.mean()
    return (v * w**power) @ v.T


def probes(x_new: np.ndarray, x_old: np.ndarray, queries: np.ndarray, query_sample: np.ndarray,
           query_role_pairs: np.ndarray | None,
           unrelated: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Mapped queries of each variant (rows need not be unit; the caller normalises). ``query_sample``:
    unit query-role rows of unrelated texts, whose mean centred maps are served around;
    ``unrelated``: (new, old) rows of unrelated pairs, added to the pairs in one variant."""
    query_mean = query_sample.mean(axis=0)
    mean_new, mean_old = x_new.mean(axis=0), x_old.mean(axis=0)
    a, b = x_new - mean_new, x_old - mean_old
    w = procrustes(a, b)
    out = {"centred Procrustes, pairs' mean": (queries - mean_new) @ w,
           "centred Procrustes, queries' mean": (queries - query_mean) @ w,
           "same, old pairs' mean added back": (queries - query_mean) @ w + mean_old}
    for s in SHRINKAGE:
        wx, wy = matrix_power(np.cov(a.T), -0.5, s), matrix_power(np.cov(b.T), -0.5, s)
        r = procrustes(a @ wx, b @ wy)
        out[f"whitened Procrustes, s={s:g}"] = (queries - query_mean) @ wx @ r @ matrix_power(np.cov(b.T), 0.5, s)
        w_new = whitened_procrustes(torch.from_numpy(a), torch.from_numpy(b), s).numpy()  # the aligner's kind
        out[f"new side whitened, s={s:g}"] = (queries - query_mean) @ w_new
    out["aligner (the default), queries' mean"] = EmbeddingAligner(random_state=0).fit(
        x_new, x_old, queries=query_sample).transform(queries)
    for steps in (100, 300):
        aligner = EmbeddingAligner(steps=steps, center=True, random_state=0).fit(x_new, x_old, queries=query_sample)
        out[f"{steps} refinement steps, queries' mean"] = aligner.transform(queries)
    if unrelated is not None:
        more_new, more_old = np.concatenate([x_new, unrelated[0]]), np.concatenate([x_old, unrelated[1]])
        w_more = procrustes(more_new - more_new.mean(axis=0), more_old - more_old.mean(axis=0))
        out["with the unrelated pairs added, queries' mean"] = (queries - query_mean) @ w_more
    if query_role_pairs is not None:
        own_role = EmbeddingAligner(random_state=0).fit(x_new, x_old, queries=query_role_pairs)
        out["aligner, served around the pairs' query-role mean"] = own_role.transform(queries)
        q_mean = query_role_pairs.mean(axis=0)
        out["pairs in the query role, their mean"] = (queries - q_mean) @ procrustes(query_role_pairs - q_mean, b)
        w_role = procrustes(query_role_pairs - q_mean, b)
        out["pairs in the query role, queries' mean"] = (queries - query_mean) @ w_role
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_data_argument(parser)
    parser.add_argument("direction", nargs="*", default=["e5-small", "minilm"],
                        help="NEW OLD (default e5-small minilm)")
    args = parser.parse_args(argv)
    if len(args.direction) != 2 or not set(args.direction) <= set(MODELS):
        parser.error(f"give NEW OLD among {sorted(MODELS)}")
    new, old = args.direction
    data = load_cranfield(args.data)
    unrelated = unrelated_texts(args.data)
    rows = {m: model_rows(m, data, unrelated) for m in (new, old)}
    picked = np.random.default_rng(PAIR_SEED).permutation(len(data.documents))
    query_role = MODELS[new][0] != MODELS[new][1]
    role_pairs = embed(MODELS[new][1], data.documents)[picked] if query_role else None
    store, queries = rows[old].documents, rows[new].queries
    reindex = ndcg_recall(queries @ rows[new].documents.T, data.qrels)[0]
    print(f"{new} -> {old}, {len(picked)} document pairs; full re-index nDCG@10 {reindex:.3f}")
    mapped = probes(rows[new].documents[picked], store[picked], queries, rows[new].unrelated_queries, role_pairs,
                    (rows[new].unrelated_queries, rows[old].unrelated))
    for name, z in mapped.items():
        ndcg = ndcg_recall(l2_normalize(z.astype(np.float32)) @ store.T, data.qrels)[0]
        print(f"  {name:<50} {ndcg:.3f} ({100 * ndcg / reindex:.0f} %)", flush=True)


if __name__ == "__main__":
    main()
