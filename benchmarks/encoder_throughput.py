"""Text embedding throughput of the offline encoders, on real Banking77 sentences.

Each encoder SPEC embeds the first N sentences of Banking77's train.csv (no cache) after one
warm-up call on other sentences (which loads the model: its time is reported apart). The engines
are limited to ``--threads`` threads (OpenMP, Rayon, onnxruntime and torch). Texts per CPU-second
is reported beside texts per second: on a shared machine it is the steadier figure.

    python -m benchmarks.encoder_throughput                          # 256 sentences, 1 thread
    python -m benchmarks.encoder_throughput --specs e5-small static-64 --threads 2

Prints a table and writes benchmarks/results/encoder_throughput.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import time
from pathlib import Path

from benchmarks.data import add_data_argument, data_root
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"
DEFAULT_SPECS = ("e5-small", "e5-small:passage", "static-64", "paraphrase-minilm-l3", "minilm")


def banking77_texts(root: Path | None) -> list[str]:
    with open(data_root(root) / "text" / "banking77" / "train.csv", newline="", encoding="utf-8") as f:
        return [row["text"] for row in csv.DictReader(f)]


def limit_threads(threads: int) -> None:
    """Thread caps the engines read when they start (before any model is loaded)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = str(threads)


def measure(spec: str, texts: list[str], warmup: list[str], threads: int, repeats: int) -> dict:
    from lfa_index.adapters import OnnxSentenceSource, make_encoder

    source = make_encoder(spec, progress=False, device="cpu")
    if isinstance(source, OnnxSentenceSource):
        source.num_threads = threads
    t0 = time.perf_counter()
    source.embed_texts(warmup)
    load_s = time.perf_counter() - t0
    seconds, cpu_seconds = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = source.embed_texts(texts)
        seconds.append(time.perf_counter() - t0)
        cpu_seconds.append(time.process_time() - c0)
    median = statistics.median(seconds)
    return {"spec": spec, "name": source.name, "dim": int(out.shape[1]), "n_texts": len(texts),
            "load_and_warmup_s": round(load_s, 3), "seconds": [round(s, 4) for s in seconds],
            "texts_per_s": round(len(texts) / median, 1),
            "texts_per_cpu_s": round(len(texts) / statistics.median(cpu_seconds), 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--specs", nargs="+", default=list(DEFAULT_SPECS), metavar="SPEC")
    parser.add_argument("--n", type=int, default=256, help="sentences embedded per timed run (default 256)")
    parser.add_argument("--threads", type=int, default=1, help="engine threads (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median counts (default 3)")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    texts = banking77_texts(args.data)
    timed, warmup = texts[: args.n], texts[-16:]
    rows = [measure(spec, timed, warmup, args.threads, args.repeats) for spec in args.specs]
    print(f"{'spec':<22} {'dim':>4} {'load+warm-up s':>15} {'texts/s':>9} {'texts/CPU-s':>12}   "
          f"({args.n} Banking77 sentences, {args.threads} thread(s), median of {args.repeats})")
    for r in rows:
        print(f"{r['spec']:<22} {r['dim']:>4} {r['load_and_warmup_s']:>15.2f} {r['texts_per_s']:>9.1f} "
              f"{r['texts_per_cpu_s']:>12.1f}")
    RESULTS.mkdir(exist_ok=True)
    report = {"threads": args.threads, "n_texts": args.n, "repeats": args.repeats,
              "machine": platform.processor() or platform.machine(), "rows": rows}
    atomic_write(RESULTS / "encoder_throughput.json", (json.dumps(report, indent=2) + "\n").encode())


if __name__ == "__main__":
    main()
