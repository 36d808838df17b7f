"""Open-intent detection on Banking77: the default's open-set score against GDA and a linear probe.

The standard open-intent protocol (Shu et al., 2017; Zhang et al., 2021): per seed, a random 25 %,
50 % or 75 % of the classes is known and the rest unknown. ``shots`` support rows of each known
class are drawn from the training pool (:func:`benchmarks.data.sample_support`); every eval row
is a query, those of unknown classes are out of scope. MiniLM embeddings, cached (``.cache/``).

Methods, each fitted on the support rows alone, each with τ accepting 95 % of *held-out*
known-class rows (no out-of-scope data is seen):

* ``default`` — ``AlignedIndex(lfa=LFA(random_state=seed))``, ``score_samples`` (the best aligned
  score plus the cosine to the nearest aligned support row, each standardised on held-out
  support rows), τ = ``rejection_threshold(accept_rate=0.95)``;
* ``gda`` — GDA's Mahalanobis score (minus the distance to the nearest class mean under GDA's
  shared shrunk precision), τ from 5-fold held-out support rows;
* ``probe`` — a logistic-regression probe (C by stratified CV)'s max probability, τ likewise.

Also recorded, AUROC only or with the same held-out τ where one exists, the candidates the
default's score was chosen among, on the same fit: ``max_score`` (the best aligned score, the
score before; its cross-fitted held-out scores), ``nearest_row`` (the aligned nearest support
row; leave-one-out), ``energy`` (``T·logsumexp(scores/T)``, T = the LFA's temperature) and
``mahalanobis`` (in the aligned space, GDA's estimator on the aligned support rows).
Metrics: AUROC (known vs unknown), macro-F1 over the known classes + unknown, in-scope accuracy
(rejections count wrong), out-of-scope recall and precision, the share of known rows accepted.

Usage
-----
    .venv/bin/python -m benchmarks.openset                        # 3 splits x 2 shots x 10 seeds
    .venv/bin/python -m benchmarks.openset --cells 50:16 --seeds 1 --name openset_try
    # in parts, then one table
    .venv/bin/python -m benchmarks.openset --cells 25:4 25:16 --name openset_part_a &
    .venv/bin/python -m benchmarks.openset --cells 50:4 50:16 75:4 75:16 --name openset_part_b
    .venv/bin/python -m benchmarks.openset --merge openset_part_a openset_part_b --name openset

With ``--ood SET`` the eval rows of another shared set join the queries as out-of-scope ones
(``--ood-rows`` of them, a seeded sample): out-of-domain queries, as an intent classifier meets
them in use. Then ``100:SHOTS`` cells (every class known) are allowed:

    .venv/bin/python -m benchmarks.openset --cells 100:4 100:16 --seeds 1 2 3 4 5 --ood ag_news --name openset_ood

Prints the table and writes ``benchmarks/results/<name>.json`` and ``.md`` (default ``openset``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import sklearn
import torch
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from lfa_index import LFA, AlignedIndex
from lfa_index.arrays import l2_normalize
from lfa_index.files import atomic_write
from lfa_index.index.calibration import quantile_threshold
from lfa_index.reporting import open_set_metrics

from .baselines import LINEAR_PROBE_MAX_ITER, gda_mahalanobis, select_linear_probe_C
from .data import FewShotSet, add_data_argument, load_set, sample_support

RESULTS = Path(__file__).parent / "results"
CELLS = ("25:4", "25:16", "50:4", "50:16", "75:4", "75:16")
"""known share (%) : shots per known class."""
SEEDS = tuple(range(1, 11))
ACCEPT_RATE = 0.95
HELDOUT_FOLDS = 5
SERVED = ("default", "gda", "probe")
CANDIDATES = ("max_score", "nearest_row", "energy", "mahalanobis")
LABELS = {
    "default": "default (score_samples)", "gda": "GDA Mahalanobis", "probe": "probe max prob.",
    "max_score": "best aligned score", "nearest_row": "nearest support row", "energy": "energy (log-sum-exp)",
    "mahalanobis": "aligned Mahalanobis",
}

Scored = tuple[np.ndarray, np.ndarray, float | None]
"""(score of each eval row, predicted class of each eval row, τ or None)."""


# ---------------------------------------------------------------------------- one split
def known_classes(n_classes: int, percent: int, seed: int) -> np.ndarray:
    """The known classes of a split: a seeded random ``percent`` % of the ``n_classes``, sorted."""
    return np.sort(np.random.default_rng(seed).permutation(n_classes)[: int(round(percent / 100 * n_classes))])


def _heldout(y: np.ndarray, seed: int, score_rows: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Each support row scored by a model fitted on the other folds (class-stratified K-fold)."""
    k = int(min(HELDOUT_FOLDS, max(2, np.bincount(y).min())))
    out = np.empty(len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # classes with one row: sklearn warns, the fold still runs
        for train, held in StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y):
            out[held] = score_rows(train, held)
    return out


def default_scores(index: AlignedIndex, queries: np.ndarray, support: np.ndarray) -> dict[str, Scored]:
    """The default's served score and the candidates it was chosen among, from one fitted index."""
    predicted = np.asarray(index.predict(queries))
    scored: dict[str, Scored] = {
        "default": (index.score_samples(queries), predicted, index.rejection_threshold(accept_rate=ACCEPT_RATE)),
    }
    decision = index.decision_function(queries).astype(np.float64)
    best = decision.max(axis=1)
    scored["max_score"] = (best, predicted, quantile_threshold(index.lfa_.heldout_scores_, ACCEPT_RATE))
    aligned, aligned_support = index.transform(queries), index.transform(support)
    nearest = (aligned @ aligned_support.T).max(axis=1)
    gram = aligned_support @ aligned_support.T
    np.fill_diagonal(gram, -np.inf)
    scored["nearest_row"] = (nearest, predicted, quantile_threshold(gram.max(axis=1), ACCEPT_RATE))
    temperature = index.lfa_.temperature
    scored["energy"] = (temperature * logsumexp(decision / temperature, axis=1), predicted, None)
    labels = index.support_labels_
    mahalanobis, _ = gda_mahalanobis(aligned_support, labels, aligned, len(index.classes_))
    scored["mahalanobis"] = (mahalanobis, predicted, None)
    return scored


def gda_scores(X: np.ndarray, y: np.ndarray, queries: np.ndarray, n_classes: int, seed: int) -> Scored:
    """GDA's Mahalanobis score and prediction, τ from held-out support rows."""
    score, predicted = gda_mahalanobis(X, y, queries, n_classes)
    heldout = _heldout(y, seed, lambda tr, te: gda_mahalanobis(X[tr], y[tr], X[te], n_classes)[0])
    return score, predicted, quantile_threshold(heldout, ACCEPT_RATE)


def probe_scores(X: np.ndarray, y: np.ndarray, queries: np.ndarray, seed: int) -> Scored:
    """A linear probe's max probability (C by stratified CV on the support) and prediction, τ from held-out rows."""
    X, queries = l2_normalize(X), l2_normalize(queries)
    c, _ = select_linear_probe_C(X, y, random_state=seed)

    def fit(rows: np.ndarray) -> LogisticRegression:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return LogisticRegression(C=c, max_iter=LINEAR_PROBE_MAX_ITER).fit(X[rows], y[rows])

    proba = fit(np.arange(len(y))).predict_proba(queries)
    heldout = _heldout(y, seed, lambda tr, te: fit(tr).predict_proba(X[te]).max(axis=1))
    return proba.max(axis=1), proba.argmax(axis=1), quantile_threshold(heldout, ACCEPT_RATE)


def run_split(data: FewShotSet, percent: int, shots: int, seed: int, ood: np.ndarray | None = None) -> dict[str, Any]:
    """Every method on one split (``ood``: out-of-domain rows added as out-of-scope queries): its metrics."""
    known = known_classes(data.n_classes, percent, seed)
    positions = np.full(data.n_classes, -1)
    positions[known] = np.arange(len(known))
    rows = sample_support(data.pool_labels, shots, seed)
    rows = rows[np.isin(data.pool_labels[rows], known)]
    X, y = data.pool_features[rows], positions[data.pool_labels[rows]]
    queries, truth = data.eval_features, positions[data.eval_labels]
    if ood is not None:
        queries, truth = np.concatenate([queries, ood]), np.concatenate([truth, np.full(len(ood), -1)])
    started = time.perf_counter()
    index = AlignedIndex(lfa=LFA(random_state=seed)).fit(X, y, data.prototypes[known])
    fit_s = time.perf_counter() - started
    scored = default_scores(index, queries, X)
    scored["gda"] = gda_scores(X, y, queries, len(known), seed)
    scored["probe"] = probe_scores(X, y, queries, seed)
    record: dict[str, Any] = {"set": data.name, "known": percent, "shots": shots, "seed": seed,
                              "n_known_classes": len(known), "fit_s": fit_s}
    for method, (score, predicted, tau) in scored.items():
        if tau is None:
            record[method] = {"auroc": float(roc_auc_score(truth >= 0, score))}
        else:
            record[method] = open_set_metrics(truth, predicted, score, tau)
    return record


def run(set_name: str, cells: Sequence[str], seeds: Sequence[int], root: Path | None,
        ood: np.ndarray | None = None) -> list[dict[str, Any]]:
    data = load_set(set_name, root=root)
    records = []
    for cell in cells:
        percent, shots = (int(v) for v in cell.split(":"))
        for seed in seeds:
            records.append(run_split(data, percent, shots, seed, ood))
            r = records[-1]
            auroc = " / ".join(f"{r[m]['auroc']:.3f}" for m in SERVED)
            f1 = " / ".join(f"{r[m]['macro_f1']:.3f}" for m in SERVED)
            print(f"  {set_name} {percent}% known, {shots} shots, seed {seed}: AUROC default / GDA / probe {auroc}; "
                  f"macro-F1 {f1} ({r['fit_s']:.1f} s fit)", flush=True)
    return records


# ---------------------------------------------------------------------------- tables
def summarize(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds of every metric, one row per (known share, shots)."""
    cells = sorted({(r["known"], r["shots"]) for r in records})
    rows = []
    for known, shots in cells:
        group = [r for r in records if r["known"] == known and r["shots"] == shots]
        row: dict[str, Any] = {"known": known, "shots": shots, "seeds": len(group)}
        for method in SERVED + CANDIDATES:
            for metric, value in group[0][method].items():
                if isinstance(value, float) or value is None:
                    values = np.array([np.nan if r[method][metric] is None else r[method][metric] for r in group])
                    row[f"{method}.{metric}"] = float(np.nanmean(values))
                    row[f"{method}.{metric}_std"] = float(np.nanstd(values))
        row["target_met"] = all(
            row[f"default.{m}"] >= max(row[f"gda.{m}"], row[f"probe.{m}"]) for m in ("auroc", "macro_f1"))
        rows.append(row)
    return rows


def markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The tables of the results file: the comparison, the default's operating point, the candidates."""
    def cell(row: dict[str, Any], key: str, percent: bool = False) -> str:
        scale, digits = (100, 1) if percent else (1, 3)
        return f"{scale * row[key]:.{digits}f} ± {scale * row[key + '_std']:.{digits}f}"

    def table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
            "| " + " | ".join(cells) + " |" for cells in body]

    comparison = table(
        ["known", "shots", "AUROC default", "AUROC GDA", "AUROC probe", "macro-F1 default (%)", "macro-F1 GDA (%)",
         "macro-F1 probe (%)", "default ≥ both"],
        [[f"{r['known']} %", str(r["shots"]), *(cell(r, f"{m}.auroc") for m in SERVED),
          *(cell(r, f"{m}.macro_f1", True) for m in SERVED), "yes" if r["target_met"] else "no"] for r in rows])
    operating = table(
        ["known", "shots", "method", "in-scope acc.", "closed-set acc.", "known accepted", "OOS recall",
         "OOS precision"],
        [[f"{r['known']} %", str(r["shots"]), LABELS[m],
          *(cell(r, f"{m}.{k}", True) for k in ("in_scope_accuracy", "closed_set_accuracy", "known_accepted",
                                                "oos_recall", "oos_precision"))] for r in rows for m in SERVED])
    calibrated = ("default",) + tuple(m for m in CANDIDATES if f"{m}.macro_f1" in rows[0])
    candidates = table(
        ["known", "shots", *(f"AUROC {LABELS[m]}" for m in ("default",) + CANDIDATES),
         *(f"macro-F1 {LABELS[m]} (%)" for m in calibrated)],
        [[f"{r['known']} %", str(r["shots"]), *(cell(r, f"{m}.auroc") for m in ("default",) + CANDIDATES),
          *(cell(r, f"{m}.macro_f1", True) for m in calibrated)] for r in rows])
    return "\n".join([
        f"# Open-intent detection: {meta['set']}, MiniLM, {meta['seeds']} seeds"
        + (f", plus {meta['ood_rows']} out-of-domain {meta['ood']} queries" if meta.get("ood") else ""), "",
        f"Command: `{meta['command']}`",
        "", "τ of every method accepts 95 % of held-out known-class support rows (no out-of-scope rows are seen). "
        "Mean ± std over seeds.", "", "## AUROC and macro-F1 (known classes + unknown), default vs the two baselines",
        "", *comparison, "", "## Operating point at τ (%)", "", *operating, "",
        "## The candidate scores (same LFA fit as the default; macro-F1 where held-out support rows set τ)", "",
        *candidates]) + "\n"


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    header = (f"{'known':>6}{'shots':>6}  {'AUROC def / GDA / probe':<25}{'macro-F1 def / GDA / probe':<28}"
              f"{'OOS recall def':>15}{'known acc.':>11}  target")
    print(header)
    print("-" * len(header))
    for r in rows:
        auroc = " / ".join(f"{r[m + '.auroc']:.3f}" for m in SERVED)
        f1 = " / ".join(f"{100 * r[m + '.macro_f1']:.1f}" for m in SERVED)
        print(f"{r['known']:>5}%{r['shots']:>6}  {auroc:<25}{f1:<28}{100 * r['default.oos_recall']:>14.1f}%"
              f"{100 * r['default.known_accepted']:>10.1f}%  {'met' if r['target_met'] else 'MISSED'}")


def save(records: Sequence[dict[str, Any]], meta: dict[str, Any], name: str) -> None:
    rows = summarize(records)
    print()
    print_table(rows)
    meta = {**meta, "seeds": len({r["seed"] for r in records})}
    atomic_write(RESULTS / f"{name}.json", json.dumps({"meta": meta, "summary": rows, "records": list(records)},
                                                      indent=1))
    atomic_write(RESULTS / f"{name}.md", markdown(rows, meta))
    print(f"\nwrote {RESULTS / name}.json and .md")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="banking77", help="shared set (default banking77)")
    parser.add_argument("--cells", nargs="+", default=list(CELLS), help="KNOWN%%:SHOTS pairs (default all six)")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), help="seeds (default 1..10)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ood", metavar="SET", help="add the eval rows of this shared set as out-of-scope queries")
    parser.add_argument("--ood-rows", type=int, default=1000, help="how many of them, a seeded sample (default 1000)")
    parser.add_argument("--name", default=None, help="results file stem (default openset; required with --merge)")
    parser.add_argument("--merge", nargs="+", metavar="STEM", help="join the records of earlier runs instead")
    add_data_argument(parser)
    args = parser.parse_args(argv)
    if args.merge and args.name is None:
        parser.error("--merge needs --name, the stem of the merged file (e.g. --name openset)")
    for cell in args.cells:
        known, _, shots = cell.partition(":")
        top = 100 if args.ood else 99  # every class known leaves no unknown class, only --ood rows
        if not (known.isdigit() and shots.isdigit() and 0 < int(known) <= top and int(shots) > 0):
            parser.error(f"--cells takes KNOWN%:SHOTS pairs such as 25:4 (100 only with --ood), got {cell!r}")
    args.name = args.name or "openset"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m benchmarks.openset " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.merge:
        parts = [json.loads((RESULTS / f"{stem}.json").read_text()) for stem in args.merge]
        meta = {**parts[0]["meta"], "command": " ; ".join([p["meta"]["command"] for p in parts] + [command])}
        save([r for p in parts for r in p["records"]], meta, args.name)
        return 0
    ood = None
    if args.ood:
        rows = load_set(args.ood, root=args.data).eval_features
        ood = rows[np.sort(np.random.default_rng(0).permutation(len(rows))[: args.ood_rows])]
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        records = run(args.set, args.cells, args.seeds, args.data, ood)
    meta = {"command": command, "set": args.set, "ood": args.ood, "ood_rows": None if ood is None else len(ood),
            "threads": args.threads, "accept_rate": ACCEPT_RATE,
            "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                         "sklearn": sklearn.__version__}}
    save(records, meta, args.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
