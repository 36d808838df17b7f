"""Are two benchmark result files the same records? The behaviour check of a refactor.

Matches records by (set, shots, seed, method) and compares every field except timings and the
fit summary line (which carries a time): prints the counts, the largest accuracy difference and the
first differing fields. Exit status 0 when identical, 1 otherwise.

Usage
-----
    python -m benchmarks.accuracy ... --out-dir /tmp/after   # the same command as the frozen file's
    python -m benchmarks.same_records benchmarks/results/accuracy.json /tmp/after/accuracy.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

TIMED = frozenset({"seconds", "fit_seconds", "summary"})
KEY = ("set", "shots", "seed", "method")


def records_by_key(path: str | Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The records of a results file, by (set, shots, seed, method); a repeated key is an error."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))["records"]
    keyed = {tuple(r[k] for k in KEY): r for r in records}
    if len(keyed) != len(records):
        raise SystemExit(f"{path}: {len(records) - len(keyed)} records repeat a (set, shots, seed, method) key")
    return keyed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m benchmarks.same_records BEFORE.json AFTER.json")
    before, after = (records_by_key(p) for p in args)
    print(f"records: {len(before)} before, {len(after)} after; same keys: {before.keys() == after.keys()}")
    shared = before.keys() & after.keys()
    worst = max((abs(before[k]["accuracy"] - after[k]["accuracy"]) for k in shared), default=0.0)
    print(f"max |accuracy difference|: {worst}")
    differing = [(k, field) for k in sorted(shared, key=str) for field in sorted(set(before[k]) | set(after[k]))
                 if field not in TIMED and before[k].get(field) != after[k].get(field)]
    print(f"other differing fields (timings and summary lines aside): {len(differing)} {differing[:10]}")
    return 0 if before.keys() == after.keys() and not differing else 1


if __name__ == "__main__":
    sys.exit(main())
