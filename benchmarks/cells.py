"""The supports that the selection benchmarks refit, each with its reference baselines.

A cell is ``"set:shots"``; each of its seeds 1..N draws one support (:func:`sample_support`, as
:mod:`benchmarks.accuracy`) and scores the CV-tuned probe and GDA on the eval rows, the
baselines a change to the default has to keep up with.

Example
-------
>>> for data, X, y, record in cell_supports(["dtd:4"], seeds=3, root=None):
...     model = LFA(random_state=record["seed"]).fit(X, y, data.prototypes)
...     record["default"] = 100 * model.score(data.eval_features, data.eval_labels)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from lfa_index import LFA
from lfa_index.core.config import RefineConfig
from lfa_index.files import atomic_write

from .baselines import BASELINES, FewShotTask
from .data import FewShotSet, add_data_argument, load_set, sample_support

RESULTS = Path(__file__).parent / "results"
CELLS = tuple(f"{name}:{shots}" for name in ("caltech101", "banking77", "dtd", "oxford_pets", "ag_news")
              for shots in (4, 16))
"""Every 4- and 16-shot cell of the five shared sets."""

Records = list[dict[str, Any]]

REFERENCES = (("probe", "linear_probe_cv"), ("gda", "gda"))
"""Record key and baseline name of each reference baseline."""


def lfa_with(**settings: Any) -> type[LFA]:
    """:class:`LFA` whose fits use ``RefineConfig(..., **settings)``: fit settings that are not
    constructor parameters (``folds``, ``unit_rows``), passed to this estimator only.

    >>> lfa_with(folds=4)(random_state=1).fit(X, y, prototypes)
    """
    unknown = set(settings) - set(RefineConfig.__dataclass_fields__)
    if unknown:
        raise TypeError(f"RefineConfig has no field(s) {sorted(unknown)}")

    class Configured(LFA):
        def refine_config(self) -> RefineConfig:
            return replace(super().refine_config(), **settings)

    return Configured


def cell_supports(cells: Sequence[str], seeds: int, root: Path | None
                  ) -> Iterator[tuple[FewShotSet, np.ndarray, np.ndarray, dict[str, Any]]]:
    """``(set, support rows, labels, record)`` per cell and seed; the record holds set, shots, seed
    and the reference baselines' eval accuracy (%)."""
    for cell in cells:
        name, shots = cell.split(":")
        data = load_set(name, root=root)
        for seed in range(1, seeds + 1):
            idx = sample_support(data.pool_labels, int(shots), seed)
            X, y = data.pool_features[idx], data.pool_labels[idx]
            task = FewShotTask(X=X, y=y, prototypes=data.prototypes, X_eval=data.eval_features,
                               same_model=data.same_model, seed=seed)
            yield data, X, y, {"set": name, "shots": int(shots), "seed": seed, **{
                key: 100 * float(np.mean(BASELINES[method](task) == data.eval_labels)) for key, method in REFERENCES}}


def save_records(records: Sequence[dict[str, Any]], command: str, name: str,
                 table: Callable[[Sequence[dict[str, Any]]], str]) -> None:
    """Print ``table(records)`` and write ``results/<name>.json`` (command, records, table) at once."""
    text = table(records)
    print(text)
    atomic_write(RESULTS / f"{name}.json", json.dumps({"command": command, "records": list(records), "table": text},
                                                      indent=1))


def cell_benchmark(module: str, description: str, default_name: str,
                   run: Callable[[Sequence[str], int, Path | None], Records],
                   table: Callable[[Sequence[dict[str, Any]]], str], argv: Sequence[str] | None) -> int:
    """The command line of a per-cell benchmark: ``--cells``, ``--seeds``, ``--threads``, ``--name``,
    ``--merge`` (join the records of earlier parts instead of running) and the data folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cells", nargs="+", default=list(CELLS), help="set:shots pairs")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default=None, help=f"results file stem (default {default_name}; "
                        "required with --merge)")
    parser.add_argument("--merge", nargs="+", metavar="STEM", help="join the records of earlier runs instead")
    add_data_argument(parser)
    args = parser.parse_args(argv)
    if args.merge and args.name is None:
        parser.error(f"--merge needs --name, the stem of the merged file (e.g. --name {default_name}): a merge "
                     f"would otherwise overwrite {default_name}.json")
    args.name = args.name or default_name
    command = f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.merge:
        parts = [json.loads((RESULTS / f"{stem}.json").read_text()) for stem in args.merge]
        save_records([r for part in parts for r in part["records"]],
                     " ; ".join([p["command"] for p in parts] + [command]), args.name, table)
        return 0
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        records = run(args.cells, args.seeds, args.data)
    save_records(records, command, args.name, table)
    return 0
