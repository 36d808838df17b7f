"""The ImageNet-sized fit on a GPU, phase by phase: where its time goes and what each option saves.

C=1000 classes, 16 shots x 5 views, d=512, β by cross-validation and 200 refinement steps of the
paper's preset (the issue-21 target: <= 0.3 s on an H100/H200). Each variant is timed after a
warm-up round, best of ``--repeats``; whole fits from numpy, best and median of ``--fit-repeats``;
a short profile of refinement steps lists the top kernels.

    python -m benchmarks.gpu_fit [--repeats 3] [--profile]

Prints tables and writes benchmarks/results/gpu_fit.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from benchmarks.speed import synthetic, time_estimator
from lfa_index import LFA
from lfa_index.core.config import RefineConfig
from lfa_index.core.solvers.beta import select_beta
from lfa_index.core.solvers.loss import nearest
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes
from lfa_index.core.solvers.refine import refine
from lfa_index.files import atomic_write

RESULTS = Path(__file__).parent / "results"


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextmanager
def tf32(enabled: bool):
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def timed(fn, repeats: int) -> float:
    fn()
    _sync()
    best = float("inf")
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fit-repeats", type=int, default=5, help="whole fits timed per precision (best and median)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--device", default="cuda", help="cuda (the check), or cpu for a smoke run")
    parser.add_argument("--classes", type=int, default=1000, help="C (1000: ImageNet-sized)")
    args = parser.parse_args()
    device = torch.device(args.device)
    x, y, p = (t.to(device) for t in synthetic(args.classes, 16, 5, 512))
    x0 = x[:, 0]
    rows = []

    def phases(precision: str, use_tf32: bool) -> dict:
        with tf32(use_tf32):
            beta_s = timed(lambda: select_beta(x0, y, p, identity_informative=False, guard=False, random_state=0),
                           args.repeats)
            beta = select_beta(x0, y, p, identity_informative=False, guard=False, random_state=0).beta
            proc_s = timed(lambda: beta_procrustes(orthogonal_procrustes(x0, p[y]), beta), args.repeats)
            w0 = beta_procrustes(orthogonal_procrustes(x0, p[y]), beta)

            def run():
                gen = torch.Generator(device=device).manual_seed(0)
                refine(w0, x, y, p, steps=args.steps, generator=gen, coin=torch.Generator().manual_seed(1),
                       config=RefineConfig(precision=precision))
            refine_s = timed(run, args.repeats)
        return dict(precision=precision, tf32=use_tf32, beta_cv_s=beta_s, procrustes_s=proc_s, refine_s=refine_s,
                    total_s=beta_s + proc_s + refine_s, ms_per_step=1000 * refine_s / args.steps)

    for precision, use_tf32 in (("float32", False), ("float32", True), ("bf16-mixed", False)):
        row = phases(precision, use_tf32)
        rows.append(row)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)

    for precision, use_tf32 in (("float32", False), ("float32", True), ("bf16-mixed", False)):
        with tf32(use_tf32):
            fits = [time_estimator(args.classes, 16, 5, 512, args.steps, device, precision)
                    for _ in range(args.fit_repeats)]
        fit_s, median_s = min(fits), statistics.median(fits)
        rows.append(dict(precision=precision, tf32=use_tf32, lfa_paper_fit_s=fit_s, lfa_paper_fit_median_s=median_s,
                         lfa_paper_fits_s=fits))
        print(f"LFA.paper(steps={args.steps}).fit from numpy: {precision} tf32={use_tf32} best {fit_s:.4f}s, "
              f"median {median_s:.4f}s of {len(fits)}", flush=True)

    # the default (held-out choices of steps and options, then the final fit), for comparison
    xs, ys, ps = (t.numpy() for t in synthetic(args.classes, 16, 5, 512))
    for precision in ("float32", "bf16-mixed"):
        default = LFA(random_state=0, device=str(device), precision=precision)
        default.fit(xs[:50], ys[:50] % 2, ps[:2])
        _sync()
        start = time.perf_counter()
        default.fit(xs, ys, ps)
        _sync()
        rows.append(dict(precision=precision, default_fit_s=time.perf_counter() - start, summary=default.summary_))
        print(f"LFA().fit from numpy: {precision} {rows[-1]['default_fit_s']:.4f}s  {default.summary_}", flush=True)

    # the pieces of Procrustes: the SVD on the GPU and alternatives
    m = x0.T @ p[y]
    pieces = {
        "svd_gpu_f32": timed(lambda: torch.linalg.svd(m), args.repeats),
        "svd_cpu_f64": timed(lambda: torch.linalg.svd(m.double().cpu()), args.repeats),
        "eigh_gpu_f32": timed(lambda: torch.linalg.eigh(m.T @ m), args.repeats),
        **({"svd_gpu_gesvdj": timed(lambda: torch.linalg.svd(m, driver="gesvdj"), args.repeats),
            "svd_gpu_gesvda": timed(lambda: torch.linalg.svd(m, driver="gesvda"), args.repeats)}
           if device.type == "cuda" else {}),
        "topk_16000x1000": timed(lambda: (x0 @ p.T).topk(3, dim=1), args.repeats),
        "nearest_16000x1000": timed(lambda: nearest(x0 @ p.T, 3), args.repeats),
        "mm_only_16000x1000": timed(lambda: x0 @ p.T, args.repeats),
    }
    u, _, vh = torch.linalg.svd(m.double())
    reference = (u @ vh).float()
    for driver in ("gesvd", "gesvdj", "gesvda") if device.type == "cuda" else ():
        u, _, vh = torch.linalg.svd(m, driver=driver)
        pieces[f"polar_error_{driver}"] = float((u @ vh - reference).abs().max())
    print(" ".join(f"{k}={v * 1000:.3f}ms" if "error" not in k else f"{k}={v:.2e}" for k, v in pieces.items()),
          flush=True)
    if args.profile:  # where a whole LFA.paper fit from numpy spends its time beyond the phases
        import cProfile
        import pstats
        lfa = LFA.paper(steps=args.steps, random_state=0, device=str(device), precision="bf16-mixed")
        lfa.fit(xs, ys, ps)
        profiler = cProfile.Profile()
        profiler.enable()
        lfa.fit(xs, ys, ps)
        _sync()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumtime").print_stats(40)
    profile = None
    if args.profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
        w0 = beta_procrustes(orthogonal_procrustes(x0, p[y]), 0.5)
        gen = torch.Generator(device=device).manual_seed(0)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            refine(w0, x, y, p, steps=20, generator=gen, coin=torch.Generator().manual_seed(1), cuda_graph=False,
                   config=RefineConfig(precision="bf16-mixed"))
            _sync()
        profile = prof.key_averages().table(sort_by="cuda_time_total" if device.type == "cuda" else "cpu_time_total",
                                            row_limit=25)
        print(profile)
    if device.type != "cuda":  # a smoke run: nothing is written
        return
    meta = dict(device_name=torch.cuda.get_device_name(device), torch=torch.__version__, steps=args.steps,
                classes=args.classes)
    atomic_write(RESULTS / "gpu_fit.json", json.dumps({"meta": meta, "rows": rows, "pieces_s": pieces,
                                                        "profile": profile}, indent=1))


if __name__ == "__main__":
    main()
