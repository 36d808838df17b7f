"""How honest the fit's progress bar is: its remaining-time estimate at 10, 25 and 50 % of the work.

The bar (``LFA(verbose=True)``) counts every refinement step, held-out fold runs included, with
tqdm's mean rate since the first step (``smoothing=0``); its estimate is ``(total − n) / rate``.
This script fits the default on a real support and compares that estimate with the time the fit
then still took (issue 24's target: within ±30 % after 10 % of the work).

    python -m benchmarks.progress_eta [--set banking77] [--shots 16] [--seed 1]

Prints one line per checkpoint.
"""

from __future__ import annotations

import argparse
import time

import tqdm.auto

from lfa_index import LFA

from .data import SET_NAMES, add_data_argument, load_set, sample_support


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="banking77", choices=SET_NAMES)
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    add_data_argument(parser)
    args = parser.parse_args()
    data = load_set(args.set, root=args.data)
    rows = sample_support(data.pool_labels, args.shots, args.seed)
    ticks: list[tuple[float, int, int, float]] = []  # (time, n, total, bar's own estimate of the remaining time)
    plain = tqdm.auto.tqdm

    class Watched(plain):
        def update(self, n: int = 1):  # noqa: D102
            shown = super().update(n)
            if self.total:
                rate = self.format_dict["rate"] or (self.n / max(self.format_dict["elapsed"], 1e-9))
                ticks.append((time.perf_counter(), self.n, self.total, (self.total - self.n) / max(rate, 1e-9)))
            return shown

    tqdm.auto.tqdm = Watched
    try:
        lfa = LFA(random_state=args.seed, verbose=True).fit(data.pool_features[rows], data.pool_labels[rows],
                                                            data.prototypes)
    finally:
        tqdm.auto.tqdm = plain
    end = ticks[-1][0]
    for share in (0.1, 0.25, 0.5):
        at, n, total, estimate = next(t for t in ticks if t[1] >= share * t[2])
        truth = end - at
        print(f"{args.set} {args.shots}-shot, {n}/{total} steps ({share:.0%}): the bar estimated {estimate:.1f} s "
              f"remaining, the fit took {truth:.1f} s more ({100 * (estimate - truth) / max(truth, 1e-9):+.0f} %)")
    print(lfa.summary_)


if __name__ == "__main__":
    main()
