"""Choosing LFA's options from the support set alone, on held-out refinement runs.

The step count is chosen exactly as :func:`~lfa_index.core.steps.select_steps` does (same split,
same runs, same random streams), so with every option off the fit is the paper's, bit for bit.
Each of those runs is also scored under the classifiers it can serve without another run: the
task map or the average of the two maps, times every prototype mix λ (see
:mod:`~lfa_index.core.prototypes`). At the chosen count, one more run per option that needs its own
training (prototypes trained with W; rows centred before Procrustes) is made on the same split,
with its own random streams. When the held-out part is small (fewer than
``min_val_rows`` rows), more stratified splits repeat the runs at the chosen count, and the
candidates are scored on all held-out rows together. These extra runs may take at most
``budget`` times the steps of the step search, which keeps the whole fit within about twice the
paper's.

A candidate replaces the plain classifier only when it gets more held-out rows right by a margin
(``margin`` of the rows, at least one), a guard against picking the luckiest of many candidates,
and only when at least ``min_select_rows`` rows were held out in all (fewer cannot tell the
candidates apart: a 4-class support of 4 shots holds out 4 rows). Among candidates with as many
held-out hits, the one with fewer options wins, then the one with the larger prototype mix λ: on
the real sets the held-out hits are noisy while the eval accuracy rises steadily with λ wherever
the support prototypes help at all (``benchmarks/results/accuracy.md``). With one row per class
nothing can be held out, and every "auto" option stays off.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from .loss import arerank_loss
from .procrustes import beta_procrustes, orthogonal_procrustes, support_splits
from .prototypes import class_scores, hybrid_prototypes, support_prototypes
from .refine import RefineResult, refine
from .steps import ONE_SHOT_STEPS, STEP_GRID, EarlyStop

MIX_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
MAPPINGS: tuple[str, ...] = ("task", "average")
MIN_VAL_ROWS = 128
MIN_SELECT_ROWS = 30
MAX_SPLITS = 4
MARGIN = 0.01
BUDGET = 1.0


@dataclass(frozen=True)
class Rows:
    """The support rows under one centring choice: what refinement sees and what the classifier sees."""

    fit: torch.Tensor  # (n, d) or (n, V, d) L2-normalised rows for Procrustes and refinement
    served: torch.Tensor  # (n, d) rows before the map, x − μ of view 0 (x itself without centring)
    beta: float  # β chosen for these rows


@dataclass(frozen=True)
class Config:
    """One classifier: centring, prototype training, map and prototype mix."""

    center: bool
    refine_prototypes: bool
    mapping: str
    mix: float

    def options_on(self) -> int:
        return int(self.center) + int(self.refine_prototypes) + int(self.mapping != "task") + int(self.mix > 0)


@dataclass
class Selection:
    """What :func:`select_options` chose, how, and the held-out scores it chose from."""

    steps: int
    config: Config
    how: str  # "held-out", "one-shot" (nothing to hold out), "too-few-rows" (plain kept) or "fixed"
    splits: int = 0
    val_rows: int = 0
    step_trials: list[tuple[int, float, float]] = field(default_factory=list)  # plain (steps, acc, loss)
    scores: dict[Config, float] = field(default_factory=dict)  # held-out accuracy at the chosen count

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "steps": self.steps, **asdict(self.config), "how": self.how, "splits": self.splits,
            "val_rows": self.val_rows, "step_trials": [list(t) for t in self.step_trials],
            "candidates": [[*asdict(c).values(), a] for c, a in sorted(self.scores.items(), key=lambda kv: -kv[1])],
        }


def map_for(result: RefineResult, mapping: str) -> torch.Tensor:
    """The task map W, or the average (W + W_tt)/2 of the two maps of a refinement run."""
    return result.W if mapping == "task" else (result.W + result.W_tt) / 2


def score_run(
    result: RefineResult,
    *,
    center: bool,
    refined: bool,
    text: torch.Tensor,
    z_train: torch.Tensor,
    y_train: torch.Tensor,
    z_val: torch.Tensor,
    y_val: torch.Tensor,
    mappings: Sequence[str],
    mixes: Sequence[float],
    support_kind: str,
) -> dict[Config, int]:
    """Held-out hits of every (map, λ) classifier one refinement run can serve.

    ``z_train`` / ``z_val`` are the rows the classifier sees before the map, ``text`` the prototypes
    the run started from (``result.prototypes`` replaces them when ``refined``).
    """
    base = result.prototypes if refined else text
    out = {}
    with torch.no_grad():
        for mapping in mappings:
            w = map_for(result, mapping)
            aligned_train, aligned_val = z_train @ w, z_val @ w
            support = None
            for mix in mixes:
                if mix > 0:
                    if support is None:
                        support = support_prototypes(aligned_train, y_train, text.shape[0], support_kind)
                    prototypes, intercept = hybrid_prototypes(base, *support, mix)
                else:
                    prototypes, intercept = base, None
                hits = class_scores(aligned_val, prototypes, intercept).argmax(dim=1).eq(y_val)
                out[Config(center, refined, mapping, float(mix))] = int(hits.sum())
    return out


def _generators(device: torch.device, seed: int) -> tuple[torch.Generator, torch.Generator]:
    gen, coin = torch.Generator(device=device), torch.Generator()
    gen.manual_seed(seed)
    coin.manual_seed(seed + 1)
    return gen, coin


def select_options(
    rows: dict[bool, Rows],
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    refine_options: dict[str, Any],
    generator: torch.Generator,
    coin: torch.Generator,
    random_state: int,
    steps: int | None = None,
    mixes: Sequence[float] = MIX_GRID,
    mappings: Sequence[str] = MAPPINGS,
    refine_prototypes: bool | str = "auto",
    center: bool | str = "auto",
    support_kind: str = "discriminant",
    grid: Sequence[int] = STEP_GRID,
    val_size: float = 0.25,
    patience: int = 2,
    min_val_rows: int = MIN_VAL_ROWS,
    min_select_rows: int = MIN_SELECT_ROWS,
    max_splits: int = MAX_SPLITS,
    margin: float = MARGIN,
    budget: float = BUDGET,
) -> Selection:
    """Choose the step count (``steps=None``) and the options on held-out support rows.

    Extra runs (more splits, trained prototypes) at the chosen count ``s`` may take at most
    ``budget`` × the steps of the step search in all: ``(splits × variants − 1) · s ≤ budget · Σ``.

    Parameters
    ----------
    rows : the support rows without centring (key False) and with it (key True), as far as
        ``center`` needs them; see :class:`Rows`.
    labels : (n,) classes; prototypes : (C, d) L2-normalised text prototypes.
    generator, coin : the fit's random streams; only the step-count runs draw from them, as
        :func:`~lfa_index.core.steps.select_steps` does, so the final refinement that follows
        sees the same streams as the paper's.
    mixes, mappings : candidate λ and maps (a single value fixes the option).
    refine_prototypes, center : True / False fix the option, "auto" tries it at the chosen count.
    """
    base_center = center if isinstance(center, bool) else False
    base_refine = refine_prototypes if isinstance(refine_prototypes, bool) else False
    plain = Config(base_center, base_refine, mappings[0] if len(mappings) == 1 else "task",
                   float(mixes[0]) if len(mixes) == 1 else 0.0)
    first = support_splits(labels.cpu().numpy(), n_splits=1, val_size=val_size, random_state=random_state)
    if first is None:
        return Selection(ONE_SHOT_STEPS if steps is None else int(steps), plain, "one-shot")
    n_val = len(first[0][1])
    device = labels.device
    variants = [(plain.center, plain.refine_prototypes)]
    if refine_prototypes == "auto":
        variants.append((plain.center, True))
    if center == "auto" and True in rows:
        variants.append((True, plain.refine_prototypes))
    splits = first

    def run(split: tuple[np.ndarray, np.ndarray], variant: tuple[bool, bool], count: int, streams) -> tuple[RefineResult, dict]:
        centred, trained = variant
        source = rows[centred]
        tr = torch.as_tensor(split[0], device=device)
        va = torch.as_tensor(split[1], device=device)
        x_train, y_train = source.fit[tr], labels[tr]
        first_view = x_train[:, 0] if x_train.ndim == 3 else x_train
        w0 = beta_procrustes(orthogonal_procrustes(first_view, prototypes[y_train]), source.beta)
        result = refine(w0, x_train, y_train, prototypes, steps=count, generator=streams[0], coin=streams[1],
                        train_prototypes=trained, **refine_options)
        hits = score_run(
            result, center=centred, refined=trained, text=prototypes, z_train=source.served[tr], y_train=y_train,
            z_val=source.served[va], y_val=labels[va], mappings=mappings, mixes=mixes, support_kind=support_kind,
        )
        return result, hits

    # the step count: the paper's search on the first split, base variant, the fit's streams
    y_val = labels[torch.as_tensor(splits[0][1], device=device)]
    step_trials: list[tuple[int, float, float]] = []
    hits_by_count: dict[int, dict[Config, int]] = {}
    stop = EarlyStop(patience)
    for count in (grid if steps is None else (int(steps),)):
        result, hits = run(splits[0], variants[0], count, (generator, coin))
        hits_by_count[count] = hits
        with torch.no_grad():
            aligned = rows[plain.center].served[torch.as_tensor(splits[0][1], device=device)] @ result.W
            base = result.prototypes if plain.refine_prototypes else prototypes
            loss = float(arerank_loss(aligned, base, y_val, k=refine_options.get("k", 3),
                                      scale=refine_options.get("scale", 4.0)))
        paper_like = Config(plain.center, plain.refine_prototypes, "task", 0.0)
        # float32, as select_steps computes it, so that step_trials match the paper's to the bit
        accuracy = float(torch.tensor(float(hits[paper_like if paper_like in hits else plain])) / n_val)
        step_trials.append((count, accuracy, loss))
        if stop.should_stop((accuracy, -loss)):
            break
    chosen_steps = max(step_trials, key=lambda t: (t[1], -t[2], -t[0]))[0]
    if n_val * max_splits < min_select_rows:  # too few rows to choose options: no extra runs, the plain classifier
        scores = {c: n / n_val for c, n in hits_by_count[chosen_steps].items()}
        return Selection(chosen_steps, plain, "too-few-rows", 1, n_val, step_trials, scores)
    # extra runs at the chosen count: as many splits as wanted, within the step budget
    searched = sum(count for count, _, _ in step_trials)
    affordable = int((budget * searched / chosen_steps + 1) // len(variants))
    if affordable < 1 and len(variants) > 2:  # keep the variants, drop the extra splits first
        variants = variants[:2]
        affordable = int((budget * searched / chosen_steps + 1) // len(variants))
    wanted = max(1, math.ceil(min_val_rows / n_val))
    n_splits = max(1, min(max_splits, wanted, affordable))
    if n_splits > 1:
        splits = support_splits(labels.cpu().numpy(), n_splits=n_splits, val_size=val_size, random_state=random_state)
    if affordable < 1:  # not even one more run fits: only what the step search's runs can serve
        variants = variants[:1]

    # every variant at the chosen count, on every split; extra runs draw from their own streams
    totals: dict[Config, int] = dict(hits_by_count[chosen_steps])
    val_rows = n_val
    for j, split in enumerate(splits):
        for v, variant in enumerate(variants):
            if j == 0 and v == 0:
                continue
            _, hits = run(split, variant, chosen_steps, _generators(device, random_state + 7919 * (j * 4 + v + 1)))
            for config, n in hits.items():
                totals[config] = totals.get(config, 0) + n
        if j > 0:
            val_rows += len(split[1])
    best_config = max(totals, key=lambda c: (totals[c], -c.options_on(), c.mix))
    needed = max(1, math.ceil(margin * val_rows))
    enough = val_rows >= min_select_rows
    chosen = best_config if enough and totals[best_config] >= totals[plain] + needed else plain
    scores = {c: n / val_rows for c, n in totals.items()}
    return Selection(chosen_steps, chosen, "held-out", len(splits), val_rows, step_trials, scores)
