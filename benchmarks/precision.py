"""The arithmetic of refinement: float32 against bf16-mixed, per step and per fit, at the same accuracy.

``precision="auto"`` (the default) runs refinement's matrix products in bfloat16 on a CPU that
multiplies bfloat16 natively (:func:`lfa_index.core.device.uses_bf16`). This benchmark prints what
that buys and what it costs:

* **step**: seconds per refinement step (:func:`~lfa_index.core.solvers.refine.refine`, 60 timed
  steps after 5 warm-up steps) on random unit rows, for support shapes of the benchmarks
  (rows × width × classes, the 40-row 1,280-d MobileNet support included);
* **fit**: the default fitted with ``precision="float32"`` and with ``"bf16-mixed"`` on the same
  supports of the shared sets (:func:`benchmarks.cells.cell_supports`, as
  :mod:`benchmarks.fold_count`): accuracy on the eval rows and fit seconds, beside the CV probe and GDA.

Usage
-----
    .venv/bin/python -m benchmarks.precision                      # shapes + 8 cells × 5 seeds, 1 thread
    .venv/bin/python -m benchmarks.precision --cells dtd:4 --seeds 2

Prints tables and writes ``benchmarks/results/precision.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

from lfa_index.core.config import RefineConfig
from lfa_index.core.device import native_bf16_cpu
from lfa_index.core.solvers.refine import refine
from lfa_index.files import atomic_write

from .cells import cell_supports, lfa_with
from .data import add_data_argument
from .fold_count import CELLS

RESULTS = Path(__file__).parent / "results"
SHAPES: tuple[tuple[int, int, int], ...] = (
    (40, 1280, 10), (160, 1280, 10), (160, 512, 10), (308, 384, 77), (752, 512, 47), (1232, 384, 77),
    (1232, 64, 77), (2387, 384, 77), (1232, 768, 77))
"""(rows, width, classes) of the timed refinement steps."""
PRECISIONS = ("float32", "bf16-mixed")
TIMED_STEPS, WARM_STEPS = 60, 5


def step_seconds(rows: int, width: int, classes: int, precision: str) -> float:
    """Seconds per refinement step at this shape and arithmetic (random unit rows and prototypes)."""
    g = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(rows, width, generator=g), dim=1)
    p = F.normalize(torch.randn(classes, width, generator=g), dim=1)
    y = torch.randint(classes, (rows,), generator=g)
    config = RefineConfig(precision=precision)

    def run(steps: int) -> None:
        refine(torch.eye(width), x, y, p, steps=steps, generator=torch.Generator().manual_seed(1),
               coin=torch.Generator().manual_seed(2), config=config)

    run(WARM_STEPS)
    start = time.perf_counter()
    run(TIMED_STEPS)
    return (time.perf_counter() - start) / TIMED_STEPS


def steps_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| Rows | Width | Classes | float32 (ms/step) | bf16-mixed (ms/step) | float32 / bf16 |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['rows']} | {r['width']} | {r['classes']} | {1e3 * r['float32']:.2f} | "
                     f"{1e3 * r['bf16-mixed']:.2f} | {r['float32'] / r['bf16-mixed']:.2f} |")
    return "\n".join(lines)


def fit_records(cells: Sequence[str], seeds: int, root: Path | None) -> list[dict[str, Any]]:
    """One record per (cell, seed): the reference baselines and the default in each arithmetic."""
    records = []
    for data, X, y, rec in cell_supports(cells, seeds, root):
        for precision in PRECISIONS:
            start = time.perf_counter()
            model = lfa_with(precision=precision)(random_state=rec["seed"]).fit(X, y, data.prototypes)
            rec[precision] = {"accuracy": 100 * model.score(data.eval_features, data.eval_labels),
                              "seconds": time.perf_counter() - start, "summary": model.summary_}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    return records


def fits_table(records: Sequence[dict[str, Any]]) -> str:
    lines = ["| Set | Shots | Seeds | CV probe | GDA | float32 | bf16-mixed | bf16 − float32 (worst seed) | "
             "fit s, float32 | fit s, bf16 | ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in dict.fromkeys((r["set"], r["shots"]) for r in records):
        cell = [r for r in records if (r["set"], r["shots"]) == key]
        acc = {p: np.array([r[p]["accuracy"] for r in cell]) for p in PRECISIONS}
        sec = {p: float(np.mean([r[p]["seconds"] for r in cell])) for p in PRECISIONS}
        diff = acc["bf16-mixed"] - acc["float32"]
        lines.append(f"| {key[0]} | {key[1]} | {len(cell)} | {np.mean([r['probe'] for r in cell]):.2f} | "
                     f"{np.mean([r['gda'] for r in cell]):.2f} | {acc['float32'].mean():.2f} | "
                     f"{acc['bf16-mixed'].mean():.2f} | {diff.mean():+.2f} ({diff.min():+.2f}) | "
                     f"{sec['float32']:.2f} | {sec['bf16-mixed']:.2f} | {sec['float32'] / sec['bf16-mixed']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", default=list(CELLS), help="set:shots pairs (none: steps only)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..N")
    parser.add_argument("--threads", type=int, default=1)
    add_data_argument(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        shapes = [dict(rows=n, width=d, classes=c, **{p: step_seconds(n, d, c, p) for p in PRECISIONS})
                  for n, d, c in SHAPES]
        text = steps_table(shapes)
        print(text, flush=True)
        records = fit_records(args.cells, args.seeds, args.data) if args.cells else []
    fits = fits_table(records) if records else ""
    print(fits)
    atomic_write(RESULTS / "precision.json", json.dumps({
        "command": "python -m benchmarks.precision " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": platform.machine(), "native_bf16_cpu": native_bf16_cpu(), "torch": torch.__version__,
        "threads": args.threads, "steps": shapes, "fits": records, "steps_table": text, "fits_table": fits},
        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
