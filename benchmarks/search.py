"""Search throughput and memory of AlignedIndex against plain FAISS and the naive aligned path.

Sections
--------
classify   ``predict`` on n queries over C classes (d-dim, synthetic) against a raw
           ``faiss.IndexFlatIP`` search of the same queries over C raw prototypes (the floor: target
           >= 0.95x), against the naive ``normalize(x W) · Yᵀ`` argmax (torch, chunked) and the core
           ``LFA.predict``; also ``search(k=5)``, which computes cosines.
corpus     an ``AlignedCorpus`` of N synthetic clustered image embeddings: add time, ``search_text`` and
           ``search`` (image) queries per second, flat and IVF (recall@10 against flat), peak memory.
unaligned  ``search_unaligned`` over a raw flat ``FaissStore`` of the same corpus: recall@10 against
           re-indexing (the aligned flat corpus) for several over-fetch factors, and on the real
           CLIP sets (corpus = eval images, queries = class-name prototypes).

Usage
-----
    .venv/bin/python -m benchmarks.search                    # C=1000, d=512, 100k queries, 1M corpus
    .venv/bin/python -m benchmarks.search --quick            # small sizes, seconds
    .venv/bin/python -m benchmarks.search --device cuda      # torch on CUDA; FAISS on GPU with faiss-gpu

Prints a table and writes ``benchmarks/results/search.json`` (``search_quick.json`` with --quick,
``search_<device>.json`` on another device).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import faiss
import numpy as np
import torch

from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.core.validation import check_query_matrix
from lfa_index.files import atomic_write
from lfa_index.index import faiss_gpu_available
from lfa_index.stores import FaissStore, search_unaligned

RESULTS = Path(__file__).parent / "results"


# ------------------------------------------------------------------ measuring
def reset_peak_memory() -> None:
    """Reset the process's peak RSS (Linux >= 4.0); a no-op elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_memory_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed_runs(fns: dict[str, Callable[[], Any]], repeats: int, device: str, seed: int = 0) -> dict[str, list[float]]:
    """Wall times of each function, ``repeats`` rounds; each round runs all of them in a fresh
    random order, so load drifts on a shared machine hit every path alike."""
    for fn in fns.values():  # warm-up
        fn()
    rng = np.random.default_rng(seed)
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in rng.permutation(names):
            sync(device)
            # torch and FAISS each bring an OpenMP runtime whose idle threads spin for a while after
            # a parallel region; let them fall asleep so a call does not pay for the previous one's
            time.sleep(0.2)
            start = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def median_seconds(fns: dict[str, Callable[[], Any]], repeats: int, device: str) -> dict[str, float]:
    return {name: float(np.median(t)) for name, t in timed_runs(fns, repeats, device).items()}


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth)]))


# ------------------------------------------------------------------ data
def normalize(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic_task(n_classes: int, dim: int, shots: int, seed: int = 0):
    """Class prototypes, and an image sampler: class c draws ``normalize((m_c + 0.7 e) R D)`` where
    m_c, e have a decaying spectrum (std ∝ i^-1/2, as real embeddings have), R is a random rotation
    and D a fixed distortion standing in for the modality gap that LFA learns to undo."""
    rng = np.random.default_rng(seed)
    spectrum = (np.arange(1, dim + 1) ** -0.5).astype(np.float32)
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
    distortion = (np.eye(dim) + 0.3 * rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32)
    means = rng.standard_normal((n_classes, dim)).astype(np.float32) * spectrum
    prototypes = normalize(means @ rotation)

    def images(n: int, seed: int, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng(seed)
        labels = r.integers(0, n_classes, n) if labels is None else labels
        out = np.empty((n, dim), dtype=np.float32)
        for s in range(0, n, 65536):
            part = labels[s : s + 65536]
            noise = 0.7 * r.standard_normal((len(part), dim)).astype(np.float32) * spectrum
            out[s : s + 65536] = normalize((means[part] + noise) @ rotation @ distortion)
        return out, labels

    support_labels = np.repeat(np.arange(n_classes), shots)
    support, _ = images(len(support_labels), seed + 1, support_labels)
    return prototypes, support, support_labels, images


def fit_index(prototypes, support, labels, device: str, **options) -> AlignedIndex:
    lfa = LFA(beta=0.5, steps=20, device=device, random_state=0, **options)
    return AlignedIndex(lfa=lfa).fit(support, labels, prototypes)


# ------------------------------------------------------------------ sections
def bench_classify(args, device: str) -> dict[str, Any]:
    prototypes, support, labels, images = synthetic_task(args.classes, args.dim, shots=2)
    start = time.perf_counter()
    index = fit_index(prototypes, support, labels, device, **PAPER_OPTIONS)  # plain classifier: naive path below
    fit_s = time.perf_counter() - start
    # a classifier with class biases and centring (issue-4 options, fixed): folded vectors get d+1 coordinates
    biased = fit_index(prototypes, support, labels, device, prototype_mix=0.5, center=True, refine_prototypes=False,
                       mapping="task")
    assert biased.augmented_
    queries, _ = images(args.queries, seed=1)

    raw = faiss.IndexFlatIP(args.dim)
    raw.add(prototypes)
    if device == "cuda" and faiss_gpu_available():
        raw = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, raw)
    tdev = torch.device(device)
    w = torch.as_tensor(index.lfa_.W_, device=tdev)
    protos_t = torch.as_tensor(index.lfa_.prototypes_, device=tdev)

    def naive() -> np.ndarray:
        out = []
        for s in range(0, len(queries), 65536):
            z = torch.nn.functional.normalize(torch.from_numpy(queries[s : s + 65536]).to(tdev) @ w, dim=1)
            out.append((z @ protos_t.T).argmax(dim=1).cpu())
        return torch.cat(out).numpy()

    fns = {
        "raw_faiss_flat_ip": lambda: raw.search(queries, 1),
        "predict": lambda: index.predict(queries),
        "search_k5": lambda: index.search(queries, 5),
        "naive_normalise_xW_dot_Y": naive,
        "core_LFA_predict": lambda: index.lfa_.predict(queries),
        "predict_biased_centred": lambda: biased.predict(queries),
    }
    runs = timed_runs(fns, args.repeats, device)
    seconds = {name: float(np.median(t)) for name, t in runs.items()}
    agree = float(np.mean(index.predict(queries) == naive()))
    # what predict adds to the FAISS search: one pass of input checks (timed alone, noise-free-ish)
    check = {"check": lambda: check_query_matrix(queries, name="X", dim=args.dim)}
    validation = timed_runs(check, args.repeats, device)["check"]
    qps = {name: args.queries / s for name, s in seconds.items()}
    return {
        "classes": args.classes, "dim": args.dim, "queries": args.queries, "fit_s": fit_s,
        "seconds": seconds, "queries_per_s": qps, "runs_s": runs,
        # throughput ratio: median over rounds of raw time / predict time measured in the same round
        "predict_vs_raw_faiss": float(np.median(np.array(runs["raw_faiss_flat_ip"]) / np.array(runs["predict"]))),
        "predict_vs_raw_faiss_min_times": min(runs["raw_faiss_flat_ip"]) / min(runs["predict"]),
        "query_check_s": float(np.median(validation)),
        "predict_vs_raw_faiss_from_overhead": (
            seconds["raw_faiss_flat_ip"] / (seconds["raw_faiss_flat_ip"] + float(np.median(validation)))
        ),
        "predict_vs_naive": seconds["naive_normalise_xW_dot_Y"] / seconds["predict"],
        "predict_vs_core": seconds["core_LFA_predict"] / seconds["predict"],
        "predict_agrees_with_naive": agree,
        "predict_biased_centred_vs_raw_faiss": float(np.median(np.array(runs["raw_faiss_flat_ip"])
                                                               / np.array(runs["predict_biased_centred"]))),
        "predict_biased_agrees_with_its_estimator": float(np.mean(biased.predict(queries[:20000])
                                                                  == biased.lfa_.predict(queries[:20000]))),
    }


def bench_corpus(args, device: str) -> dict[str, Any]:
    prototypes, support, labels, images = synthetic_task(args.classes, args.dim, shots=2)
    text_classes = np.random.default_rng(2).integers(0, args.classes, args.corpus_queries)
    text_queries = prototypes[text_classes]
    corpus, corpus_labels = images(args.corpus, seed=4)
    image_queries, image_classes = images(args.corpus_queries, seed=5)
    results: dict[str, Any] = {"corpus": args.corpus, "dim": args.dim, "queries": args.corpus_queries, "k": 10}
    truth = {}
    index = fit_index(prototypes, support, labels, device)

    def one(name: str, factory: str, params: str | None) -> None:
        reset_peak_memory()
        base = peak_memory_mb()
        aligned = AlignedCorpus(index, factory=factory, params=params)
        start = time.perf_counter()
        aligned.add(corpus)
        add_s = time.perf_counter() - start
        seconds = median_seconds(
            {"search_text": lambda: aligned.search_text(text_queries, 10),
             "search_corpus": lambda: aligned.search(image_queries, 10)},
            args.corpus_repeats, device,
        )
        _, text_ids = aligned.search_text(text_queries, 10)
        _, image_ids = aligned.search(image_queries, 10)
        if name == "flat":
            truth["text"], truth["image"] = text_ids, image_ids
        results[name] = {
            "factory": factory, "params": params, "add_s": add_s,
            "search_text_qps": args.corpus_queries / seconds["search_text"],
            "search_corpus_qps": args.corpus_queries / seconds["search_corpus"],
            "recall10_text_vs_flat": recall_at(text_ids, truth["text"]),
            "recall10_image_vs_flat": recall_at(image_ids, truth["image"]),
            "same_class10_text": float(np.mean(corpus_labels[text_ids] == text_classes[:, None])),
            "same_class10_image": float(np.mean(corpus_labels[image_ids] == image_classes[:, None])),
            "peak_rss_mb_over_inputs": peak_memory_mb() - base,
        }
        print(f"  corpus {name}: {results[name]}", flush=True)
        if name == "flat":
            results["unaligned"] = bench_unaligned(index, corpus, text_queries, text_ids, args)

    one("flat", "Flat", None)
    for factory in args.ivf_factory:
        one(factory, factory, f"nprobe={args.nprobe}")
    results["inputs_mb"] = (corpus.nbytes + text_queries.nbytes + image_queries.nbytes) / 2**20
    return results


def bench_unaligned(
    index: AlignedIndex, corpus: np.ndarray, text_queries: np.ndarray, truth: np.ndarray, args
) -> dict[str, Any]:
    """search_unaligned over a raw flat store vs the aligned (re-indexed) flat corpus."""
    raw = FaissStore(dim=corpus.shape[1]).add(corpus, ids=np.arange(len(corpus)))
    out = {}
    for overfetch in args.overfetch:
        start = time.perf_counter()
        _, ids = search_unaligned(index, raw, text_queries, k=10, overfetch=overfetch)
        seconds = time.perf_counter() - start
        out[str(overfetch)] = {
            "recall10_vs_reindex": recall_at(ids, truth), "queries_per_s": len(text_queries) / seconds
        }
    del raw
    return out


def bench_unaligned_real(args) -> dict[str, Any]:
    """Real CLIP sets: corpus = eval images in a raw flat FaissStore, queries = class-name prototypes."""
    from benchmarks.data import CLIP_SETS, load_set, sample_support

    out = {}
    for name in CLIP_SETS:
        data = load_set(name, root=args.data)
        support = sample_support(data.pool_labels, 16, seed=1)
        index = AlignedIndex(lfa=LFA(steps=args.real_steps, device="cpu", random_state=1)).fit(
            data.pool_features[support], data.pool_labels[support], data.prototypes
        )
        _, truth = AlignedCorpus(index).add(data.eval_features).search_text(data.prototypes, 10)  # re-indexed
        images = data.eval_features
        raw = FaissStore(dim=images.shape[1]).add(images, ids=np.arange(len(images)))
        out[name] = {"corpus": len(data.eval_features), "queries": data.n_classes}
        for overfetch in args.overfetch:
            _, ids = search_unaligned(index, raw, data.prototypes, k=10, overfetch=overfetch)
            out[name][f"recall10_overfetch_{overfetch}"] = recall_at(ids, truth)
        print(f"  unaligned {name}: {out[name]}", flush=True)
    return out


# ------------------------------------------------------------------ report
def print_report(report: dict[str, Any]) -> None:
    c = report.get("classify")
    if c:
        print(f"\nclassification: C={c['classes']}, d={c['dim']}, {c['queries']} queries ({c['meta']['device']})")
        print(f"{'path':<28}{'seconds':>10}{'queries/s':>14}{'vs predict':>12}")
        for name, s in c["seconds"].items():
            print(f"{name:<28}{s:>10.3f}{c['queries_per_s'][name]:>14,.0f}{c['seconds']['predict'] / s:>11.2f}x")
        print(f"predict throughput = {c['predict_vs_raw_faiss']:.3f}x raw FAISS (median of paired rounds; "
              f"{c['predict_vs_raw_faiss_min_times']:.3f}x on best times; input checks take "
              f"{c['query_check_s'] * 1e3:.1f} ms "
              f"= {c['predict_vs_raw_faiss_from_overhead']:.3f}x), {c['predict_vs_naive']:.2f}x naive, "
              f"{c['predict_vs_core']:.2f}x core; agrees with naive on {c['predict_agrees_with_naive']:.4%}")
        print("with class biases and centring (d+1 folded vectors): "
              f"{c['predict_biased_centred_vs_raw_faiss']:.3f}x raw FAISS; agrees with its estimator on "
              f"{c['predict_biased_agrees_with_its_estimator']:.4%}")
    k = report.get("corpus")
    if k:
        print(f"\ncorpus: N={k['corpus']:,}, d={k['dim']}, {k['queries']} queries, k=10 "
              f"(inputs {k['inputs_mb']:.0f} MB)")
        print(f"{'index':<30}{'add s':>8}{'text q/s':>10}{'image q/s':>11}{'recall@10 text/image':>22}"
              f"{'same class@10':>15}{'peak MB':>9}")
        for name in ["flat"] + [n for n in k if isinstance(k[n], dict) and "factory" in k[n] and n != "flat"]:
            r = k[name]
            print(f"{r['factory'] + ('' if not r['params'] else ' ' + r['params']):<30}{r['add_s']:>8.1f}"
                  f"{r['search_text_qps']:>10,.0f}{r['search_corpus_qps']:>11,.0f}"
                  f"{r['recall10_text_vs_flat']:>14.3f}/{r['recall10_image_vs_flat']:.3f}"
                  f"{r['same_class10_text']:>10.3f}/{r['same_class10_image']:.3f}{r['peak_rss_mb_over_inputs']:>9,.0f}")
        print("search_unaligned (raw flat store) recall@10 vs re-indexing:",
              ", ".join(f"overfetch {o}: {v['recall10_vs_reindex']:.3f} ({v['queries_per_s']:,.0f} q/s)"
                        for o, v in k["unaligned"].items()))
    u = report.get("unaligned_real")
    if u:
        print("\nsearch_unaligned recall@10 vs re-indexing, real CLIP sets (16-shot fit, corpus = eval images):")
        for name, r in u.items():
            if name == "meta":
                continue
            recalls = ", ".join(f"{k.split('_')[-1]}x {v:.3f}" for k, v in r.items() if k.startswith("recall"))
            print(f"  {name:<12} N={r['corpus']:>5}: {recalls}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--corpus", type=int, default=1_000_000)
    parser.add_argument("--corpus-queries", type=int, default=1000)
    parser.add_argument("--ivf-factory", nargs="+", default=["IVF1024,PQ32np", "IVF1024,SQ8"],
                        help="FAISS factories of the IVF corpora ('np' skips FAISS's polysemous training, unused here)")
    parser.add_argument("--nprobe", type=int, default=16)
    parser.add_argument("--overfetch", type=int, nargs="+", default=[1, 2, 5, 10, 50])
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds of the classification paths")
    parser.add_argument("--corpus-repeats", type=int, default=3, help="timed rounds of the corpus searches")
    parser.add_argument("--real-steps", type=int, default=200, help="LFA steps of the real-data fits")
    parser.add_argument("--threads", type=int, default=None, help="FAISS/torch threads (default: all cores)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sections", nargs="+", default=["classify", "corpus", "unaligned_real"],
                        choices=["classify", "corpus", "unaligned_real"])
    parser.add_argument("--quick", action="store_true",
                        help="C=200, 20k queries, 50k corpus, IVF64 PQ32x4np/SQ8, 50 real steps")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=None, metavar="DIR",
                        help="shared data folder of the unaligned_real section (default $LFA_SHARED_DATA)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.classes, args.queries, args.corpus, args.corpus_queries = 200, 20_000, 50_000, 200
        args.ivf_factory, args.repeats, args.real_steps = ["IVF64,PQ32x4np", "IVF64,SQ8"], 3, 50
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU")
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    meta = {
        "command": "python -m benchmarks.search " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": args.device, "faiss_gpu": faiss_gpu_available(), "cpu_count": os.cpu_count(),
        "faiss_threads": faiss.omp_get_max_threads(), "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
                     "faiss": faiss.__version__},
        "load_average_at_start": os.getloadavg(),
    }
    report: dict[str, Any] = {}
    started = time.perf_counter()
    if "classify" in args.sections:
        report["classify"] = bench_classify(args, args.device)
        print(f"  classify: predict = {report['classify']['predict_vs_raw_faiss']:.3f}x raw FAISS", flush=True)
    if "corpus" in args.sections:
        report["corpus"] = bench_corpus(args, args.device)
    if "unaligned_real" in args.sections:
        report["unaligned_real"] = bench_unaligned_real(args)
    meta["runtime_s"] = time.perf_counter() - started
    meta["load_average_at_end"] = os.getloadavg()
    for section in args.sections:
        report[section]["meta"] = meta  # each section keeps the run that produced it
    print_report(report)
    suffix = "_quick" if args.quick else ("" if args.device == "cpu" else f"_{args.device}")
    out = args.out or RESULTS / f"search{suffix}.json"
    if out.exists():
        # a run of some sections updates those and keeps the others from earlier runs
        report = {**json.loads(out.read_text()), **report}
    atomic_write(out, json.dumps(report, indent=1))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
