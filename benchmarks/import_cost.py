"""What ``import lfa_index`` costs: wall time and peak RSS of a fresh interpreter, and which heavy
modules it pulls in (torch must not be one of them).

Usage
-----
    .venv/bin/python -m benchmarks.import_cost              # this checkout
    PYTHONPATH=/path/to/other/checkout .venv/bin/python -m benchmarks.import_cost --label other

Prints one line per repeat and the median; writes ``benchmarks/results/import_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"
PROBE = (
    "import resource, sys, time\n"
    "t = time.perf_counter()\n"
    "import lfa_index\n"
    "dt = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
    "heavy = sorted(m for m in ('torch', 'sklearn', 'scipy', 'ot', 'pandas', 'pyarrow', 'faiss') if m in sys.modules)\n"
    "print(f'{dt:.3f} {rss:.0f} ' + ','.join(heavy))\n"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args()
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
        runs.append({"seconds": float(out[0]), "rss_mib": float(out[1]), "modules": out[2] if len(out) > 2 else ""})
        print(runs[-1], flush=True)
    summary = {"label": args.label, "median_seconds": statistics.median(r["seconds"] for r in runs),
               "median_rss_mib": statistics.median(r["rss_mib"] for r in runs), "modules": runs[-1]["modules"],
               "runs": runs}
    print(f"{args.label}: import lfa_index {summary['median_seconds']:.2f} s, peak RSS {summary['median_rss_mib']:.0f} "
          f"MiB, heavy modules: {summary['modules']}")
    path = RESULTS / "import_cost.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    previous[args.label] = summary
    atomic_write(path, json.dumps(previous, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
