"""Choosing the step count and LFA's options from the support set alone, within a fixed budget.

**The default** (:func:`cross_fitted_evidence` then :func:`choose`). The support is cut into ``K``
class-stratified folds (:attr:`RefineConfig.folds`). For each fold, *one* refinement run on the
other folds follows the schedule of the final fit (``horizon`` steps, see
:func:`~lfa_index.core.solvers.refine.refine`), and at every checkpoint (0, 25, 50, ... steps) every
classifier the run can serve is scored on the held-out fold: the task map or the average of the two
maps, times every prototype mix λ (see :mod:`~lfa_index.core.solvers.prototypes`). Every support row is thus
held out exactly once, and a whole grid of (steps, map, λ) candidates costs ``K`` runs of
``(K−1)/K`` of the rows. The final fit replays the same schedule on all rows and stops at the chosen
step, so each candidate was scored as the final fit will produce it. Variants that need runs of
their own (centred rows, prototypes trained with W) add ``K`` runs each, only when asked for.

**Stable choices** (:func:`choose`). Held-out accuracy is noisy, so a candidate is scored by the
mean hits of its neighbourhood on the (steps, λ) grid (neighbouring checkpoints and mixes change
the classifier little, so their noise averages out where their signal agrees). An option that
changes the classifier (the average map, a variant) must also beat the plain candidate at the same
steps and λ in a paired sign test on the held-out rows, or it stays off.

**The served classifier** (``blend=True``, the default's "auto" mix). The chosen candidate is
served as the average of its standardised scores and those of the discriminant alone
(:func:`~lfa_index.core.solvers.prototypes.blend_with_discriminant`): a hedge against a λ that the noise
of a few hundred held-out rows picked. The discriminant's share is ½ (:data:`BLEND_SHARE`),
or ¼ (:data:`BLEND_SHARE_OUTVOTED`) when the held-out rows show the discriminant alone
significantly worse than the choice (the paired sign test of the options, same steps and map):
that evidence lowers the hedge without removing it, because the fold models see only
``(K−1)/K`` of the rows and the discriminant gains more from the rest than the text prototypes
do. The choice is made on the candidates as they are (choosing among the averages would expose
the hedge to the noise it hedges against); the held-out accuracy and scores reported for the
chosen one are those of the average, i.e. of what is served.

**Bounds.** The horizon is at most :data:`HORIZON` steps and at most one step per support row
(a small support over-fits long runs). With ``C ≤ k + 1`` classes every other class is among
the k nearest prototypes of the ARerank loss, so it has nothing to re-rank and only fits the
support rows: the default keeps β-Procrustes (no refinement; measured on 4-class AG News in
``benchmarks/results/accuracy.md``). With one row per class nothing can be held out
(:data:`ONE_SHOT_STEPS`, :data:`ONE_SHOT_MIX`).

**The paper's preset** (:func:`select_paper_steps`) keeps the paper's single classifier and only
needs a step count: one run on a stratified 75 % of the support, held-out accuracy at
checkpoints (:data:`PAPER_CHECKPOINTS`, up to 400 steps), then a full cosine run of the chosen length.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.model_selection import StratifiedKFold

from ..config import BLEND_SHARE, BLEND_SHARE_OUTVOTED, MIX_GRID, RefineConfig, row_blocks  # noqa: F401
from .beta import significantly_better
from .loss import arerank_loss
from .procrustes import beta_procrustes, orthogonal_procrustes, support_splits
from .prototypes import (
    HybridGrid,
    blend_weight,
    blend_with_discriminant,
    hybrid_key,
    hybrid_prototypes,
    support_prototypes,
    unit,
)
from .refine import Progress, refine

HORIZON = 150
CHECKPOINT_EVERY = 25
# Without refinement the folds cost one SVD each: more of them (training on 7/8 of the support,
# closer to the final fit) and repeats that average their noise.
CLOSED_FORM_FOLDS = 8
CLOSED_FORM_REPEATS = 5
PAPER_CHECKPOINTS: tuple[int, ...] = (25, 50, 100, 200, 300, 400)
# With one row per class nothing can be held out: the public code's 200 steps. One step per support
# row (at most 100), the rule before, lost 0.36 points on average over six encoder pairs, most
# where rows are few (10 classes: 10 steps; `benchmarks/robustness.py`, 1 shot).
ONE_SHOT_STEPS = 200
# ... and, unless the zero-shot map is kept, the support row enters its class prototype with a light
# fixed weight (shrinkage towards the text prototype; a held-out choice is impossible with one row
# per class).
ONE_SHOT_MIX = 0.25
BLEND_SHARES: tuple[float, ...] = (BLEND_SHARE, BLEND_SHARE_OUTVOTED)


@dataclass(frozen=True)
class Variant:
    """A way of fitting that needs refinement runs of its own."""

    center: bool = False
    refine_prototypes: bool = False

    def options_on(self) -> int:
        return int(self.center) + int(self.refine_prototypes)


@dataclass(frozen=True)
class SupportRows:
    """The support rows under one variant: what refinement sees and what the classifier sees."""

    fit: torch.Tensor  # (n, d) or (n, V, d) L2-normalised rows for Procrustes and refinement
    served: torch.Tensor  # (n, d) rows before the map, x − μ of view 0 (x itself without centring)
    beta: float  # β chosen for these rows


@dataclass(frozen=True)
class Candidate:
    """One classifier: a variant, a step count, a map, a prototype mix λ and its support side."""

    variant: Variant
    steps: int
    mapping: str
    mix: float
    kind: str = "discriminant"  # the support prototypes mixed in (see :mod:`~lfa_index.core.solvers.prototypes`)


@dataclass
class Evidence:
    """Held-out hits of every candidate on every support row (each row held out once)."""

    candidates: list[Candidate]
    hits: np.ndarray  # (n_candidates, n_rows): 0/1, or the share of repeats a row was right in
    folds: int
    horizon: int
    checkpoints: tuple[int, ...]
    repeats: int = 1
    best_scores: np.ndarray | None = None  # (n_candidates, n_rows) held-out score of each row's best class
    # with a blend, per discriminant share (BLEND_SHARES): hits and best scores as served
    served_hits: dict[float, np.ndarray] | None = None  # share -> (n_candidates, n_rows)
    served_scores: dict[float, np.ndarray] | None = None  # share -> (n_candidates, n_rows)

    @staticmethod
    def mean(repeats: Sequence["Evidence"]) -> "Evidence":
        """The evidence of repeated cross-validation: each row's share of repeats it was right in."""
        first = repeats[0]

        def average(name: str) -> np.ndarray | None:
            return None if getattr(first, name) is None else np.mean([getattr(e, name) for e in repeats], axis=0)

        def average_shares(name: str) -> dict[float, np.ndarray] | None:
            table = getattr(first, name)
            return None if table is None else {
                share: np.mean([getattr(e, name)[share] for e in repeats], axis=0) for share in table}

        return Evidence(first.candidates, average("hits"), first.folds, first.horizon, first.checkpoints,
                        len(repeats), average("best_scores"), average_shares("served_hits"),
                        average_shares("served_scores"))


@dataclass
class Selection:
    """What :func:`choose` picked and the held-out evidence behind it (JSON-ready via :meth:`as_dict`)."""

    chosen: Candidate
    how: str  # "held-out", "one-shot", "fixed", "no-refinement" or "warm-start"
    horizon: int
    folds: int = 0
    rows: int = 0
    accuracy: float | None = None  # held-out accuracy of the chosen candidate
    reference: float | None = None  # ... of the plain classifier (task map, λ = 0) at its best step count
    scores: dict[Candidate, float] = field(default_factory=dict)
    heldout_scores: np.ndarray | None = None  # (n_rows,) each row's best held-out score, chosen candidate as served
    chosen_accuracy: float | None = None  # held-out accuracy of the chosen candidate before the blend, if blended
    blend_share: float | None = None  # the discriminant's share of the served average (None: no blend)
    runs: int = 0  # held-out refinement runs behind the evidence (variants × folds), each of ``horizon`` steps

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.chosen.steps, "mapping": self.chosen.mapping, "mix": self.chosen.mix,
            "kind": self.chosen.kind, **asdict(self.chosen.variant), "how": self.how, "horizon": self.horizon,
            "folds": self.folds,
            "rows": self.rows, "accuracy": self.accuracy, "reference": self.reference,
            "chosen_accuracy": self.chosen_accuracy, "blend_share": self.blend_share, "runs": self.runs,
            "candidates": [[c.steps, c.mapping, c.mix, c.kind, c.variant.center, c.variant.refine_prototypes,
                            round(a, 4)] for c, a in sorted(self.scores.items(), key=lambda kv: -kv[1])[:20]],
        }


def checkpoints_for(horizon: int, every: int = CHECKPOINT_EVERY) -> tuple[int, ...]:
    """0, every, 2·every, ... up to and including ``horizon``."""
    if horizon <= 0:
        return (0,)
    marks = list(range(0, horizon + 1, every))
    return tuple(marks if marks[-1] == horizon else marks + [horizon])


def horizon_for(n_rows: int, n_classes: int, k: int, limit: int = HORIZON) -> int:
    """Steps of the default's schedule: at most ``limit``, one per support row, none when C ≤ k + 1."""
    if n_classes <= k + 1:
        return 0
    return int(min(limit, n_rows))


def support_folds(labels: np.ndarray, n_folds: int, random_state: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Class-stratified folds; classes with one row always train. None when no class has two rows."""
    counts = np.bincount(labels)
    multi = np.flatnonzero(counts[labels] >= 2)
    if len(multi) == 0:
        return None
    singles = np.flatnonzero(counts[labels] < 2)
    k = int(min(n_folds, counts[counts >= 2].min()))
    folds = StratifiedKFold(n_splits=k, shuffle=True, random_state=random_state)
    return [(np.sort(np.concatenate([multi[tr], singles])), multi[va])
            for tr, va in folds.split(np.zeros(len(multi)), labels[multi])]


def generators(device: torch.device, seed: int) -> tuple[torch.Generator, torch.Generator]:
    """The two random streams of a run: one on ``device`` (batches, noise), one on the CPU (coin flips)."""
    gen, coin = torch.Generator(device=device), torch.Generator()
    gen.manual_seed(seed)
    coin.manual_seed(seed + 1)
    return gen, coin


def map_for(W: torch.Tensor, W_tt: torch.Tensor, mapping: str) -> torch.Tensor:
    """The task map W, or the average (W + W_tt)/2 of the two maps of a refinement run."""
    return W if mapping == "task" else (W + W_tt) / 2


def classifier(aligned_support: torch.Tensor, labels: torch.Tensor, base: torch.Tensor, mix: float,
               support_kind: str, support: tuple | None = None, *, unit_rows: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Class vectors and biases of the hybrid with weight ``mix`` (``base`` alone at λ = 0)."""
    if mix <= 0:
        return base, None
    if support is None:
        support = support_prototypes(unit(aligned_support, unit_rows), labels, base.shape[0], support_kind)
    return hybrid_prototypes(base, *support, mix)


def served_classifier(aligned_support: torch.Tensor, labels: torch.Tensor, base: torch.Tensor, mix: float,
                      support_kind: str, *, share: float | None, unit_rows: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor | None, float | None]:
    """:func:`classifier`, then (``share`` not None) its average with the discriminant alone.

    ``share`` is the discriminant's share of the standardised scores. Returns ``(q, b, w)``:
    ``w`` is the discriminant's weight in the average (None without one).
    """
    vectors, bias = classifier(aligned_support, labels, base, mix, support_kind, unit_rows=unit_rows)
    if share is None:
        return vectors, bias, None
    discriminant = classifier(aligned_support, labels, base, 1.0, "discriminant", unit_rows=unit_rows)
    return blend_with_discriminant(aligned_support, (vectors, bias), discriminant, share)


def cross_fitted_evidence(
    rows: dict[Variant, SupportRows],
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    horizon: int,
    checkpoints: Sequence[int],
    mixes: Sequence[float],
    mappings: Sequence[str],
    kinds: Sequence[str],
    config: RefineConfig,
    random_state: int,
    folds: Sequence[tuple[np.ndarray, np.ndarray]],
    progress: Progress | None = None,
    blend: bool = False,
) -> Evidence:
    """Hits of every (variant, steps, map, λ) candidate on every support row, held out once.

    ``folds`` are (train, held-out) row indices from :func:`support_folds`. With ``blend`` each
    candidate is also scored as served (:func:`served_classifier`) at every discriminant share of
    :data:`BLEND_SHARES`: ``served_hits`` and ``served_scores``.
    """
    y = labels.cpu().numpy()
    device = labels.device
    unit_rows = config.unit_rows
    candidates = [Candidate(v, s, m, float(mix), kind) for v in rows for s in checkpoints for m in mappings
                  for kind in kinds for mix in mixes]
    slot = {c: i for i, c in enumerate(candidates)}
    hits = np.zeros((len(candidates), len(y)), dtype=bool)
    best_scores = np.zeros((len(candidates), len(y)), dtype=np.float32)
    shares = BLEND_SHARES if blend else ()
    served_hits = {share: np.zeros((len(candidates), len(y)), dtype=bool) for share in shares} or None
    served_scores = {share: np.zeros((len(candidates), len(y)), dtype=np.float32) for share in shares} or None
    marks = set(checkpoints)
    for v_index, (variant, source) in enumerate(rows.items()):
        for f, (train_idx, val_idx) in enumerate(folds):
            tr = torch.as_tensor(train_idx, device=device)
            va = torch.as_tensor(val_idx, device=device)
            x_train, y_train = source.fit[tr], labels[tr]
            first_view = x_train[:, 0] if x_train.ndim == 3 else x_train
            w0 = beta_procrustes(orthogonal_procrustes(first_view, prototypes[y_train]), source.beta)
            z_train, z_val, y_val = source.served[tr], source.served[va], labels[va]

            def score(step: int, W: torch.Tensor, W_tt: torch.Tensor, trained: torch.Tensor | None = None) -> None:
                base = prototypes if trained is None else trained
                with torch.no_grad():
                    for mapping in mappings:
                        w = map_for(W, W_tt, mapping)
                        aligned_train, aligned_val = z_train @ w, z_val @ w
                        norms = aligned_val.norm(dim=1).clamp(min=torch.finfo(aligned_val.dtype).tiny)
                        grid = HybridGrid.of(aligned_train, y_train, base, kinds, mixes, blend=blend,
                                             unit_rows=unit_rows)
                        weights = {key: {share: blend_weight(grid.spread(key), grid.spread(grid.alone), share)
                                         for share in shares} for key in grid.keys} if blend else {}
                        for block in row_blocks(len(val_idx), prototypes.shape[0]):  # (rows, classes) in blocks
                            rows, truth = val_idx[block], y_val[block]
                            scored = grid.scores(unit(aligned_val[block], unit_rows))
                            discriminant_val = scored[grid.alone] if blend else None
                            for key, hybrid_val in scored.items():
                                if key not in grid.keys:
                                    continue
                                best, predicted = hybrid_val.max(dim=1)
                                hit, top = predicted.eq(truth).cpu().numpy(), (best / norms[block]).cpu().numpy()
                                served = {}
                                for share, w in weights.get(key, {}).items():
                                    best, predicted = ((1 - w) * hybrid_val + w * discriminant_val).max(dim=1)
                                    served[share] = (predicted.eq(truth).cpu().numpy(),
                                                     (best / norms[block]).cpu().numpy())
                                for kind, mix in [(k, m) for k in kinds for m in mixes if hybrid_key(k, m) == key]:
                                    row = slot[Candidate(variant, step, mapping, float(mix), kind)]
                                    hits[row, rows], best_scores[row, rows] = hit, top
                                    for share, (served_hit, served_top) in served.items():
                                        served_hits[share][row, rows] = served_hit
                                        served_scores[share][row, rows] = served_top

            if 0 in marks:
                score(0, w0, torch.eye(w0.shape[0], dtype=w0.dtype, device=device))
            if horizon > 0:
                gen, coin = generators(device, random_state + 7919 * (1 + f + len(folds) * v_index))

                def at_checkpoint(step: int, W: torch.Tensor, W_tt: torch.Tensor, trained: torch.Tensor | None) -> None:
                    if step in marks:
                        score(step, W, W_tt, trained)

                refine(w0, x_train, y_train, prototypes, steps=horizon, horizon=horizon, generator=gen, coin=coin,
                       config=config, train_prototypes=variant.refine_prototypes, progress=progress,
                       callback=at_checkpoint, callback_steps=marks)
    return Evidence(candidates, hits, len(folds), horizon, tuple(checkpoints), best_scores=best_scores,
                    served_hits=served_hits, served_scores=served_scores)


def _preference(c: Candidate) -> tuple:
    """Tie-break among equal scores: fewer options, the discriminant, the larger λ, more steps."""
    return (-c.variant.options_on(), c.mapping == "task", c.kind == "discriminant", c.mix, c.steps)


def choose(evidence: Evidence, plain: Variant, plain_mapping: str = "task") -> Selection:
    """The candidate with the best neighbourhood-smoothed held-out hits, options only on a significant gain.

    ``plain`` is the variant without the options that were asked for as "auto", ``plain_mapping``
    the map served unless the other one is significantly better (the one asked for, else the task
    map). Among step counts
    as good as the chosen one (within one paired standard error of its held-out hits, same map
    and λ), the longest wins: on a flat stretch of the schedule the choice would otherwise follow
    the noise, and the full schedule is the paper's.
    """
    totals = evidence.hits.sum(axis=1).astype(np.float64)
    steps = sorted({c.steps for c in evidence.candidates})
    mixes = sorted({c.mix for c in evidence.candidates})
    where = {c: i for i, c in enumerate(evidence.candidates)}

    def smoothed(c: Candidate) -> float:
        i, j = steps.index(c.steps), mixes.index(c.mix)
        around = [where.get(Candidate(c.variant, steps[a], c.mapping, mixes[b], c.kind))
                  for a in range(max(0, i - 1), min(len(steps), i + 2))
                  for b in range(max(0, j - 1), min(len(mixes), j + 2))]
        return float(np.mean([totals[k] for k in around if k is not None]))

    def best(pool: list[Candidate]) -> Candidate:
        return max(pool, key=lambda c: (round(smoothed(c), 9), _preference(c)))

    plain_pool = [c for c in evidence.candidates if c.variant == plain and c.mapping == plain_mapping]
    chosen = best(evidence.candidates)
    if chosen.variant != plain or chosen.mapping != plain_mapping:
        reference = Candidate(plain, chosen.steps, plain_mapping, chosen.mix, chosen.kind)
        if reference not in where or not significantly_better(evidence.hits[where[chosen]],
                                                               evidence.hits[where[reference]]):
            chosen = best(plain_pool)
    chosen = _longest_as_good(evidence, chosen, where)
    n_rows = evidence.hits.shape[1]
    paper_like = best([c for c in plain_pool if c.mix == 0.0]) if 0.0 in mixes else None
    scores = {c: float(totals[where[c]] / n_rows) for c in evidence.candidates}
    reference = None if paper_like is None else scores[paper_like]
    if evidence.served_hits is None:
        return Selection(chosen, "held-out", evidence.horizon, evidence.folds, n_rows, scores[chosen], reference,
                         scores, None if evidence.best_scores is None else evidence.best_scores[where[chosen]])
    share = discriminant_share(evidence, chosen, where)
    return Selection(
        chosen, "held-out", evidence.horizon, evidence.folds, n_rows,
        float(evidence.served_hits[share][where[chosen]].mean()), reference, scores,
        evidence.served_scores[share][where[chosen]], scores[chosen], share,
    )


def discriminant_share(evidence: Evidence, chosen: Candidate, where: dict[Candidate, int]) -> float:
    """The discriminant's share of the served average: :data:`BLEND_SHARE_OUTVOTED` when the
    held-out rows show the discriminant alone (same variant, steps and map) significantly worse
    than ``chosen``, else :data:`BLEND_SHARE`."""
    alone = Candidate(chosen.variant, chosen.steps, chosen.mapping, 1.0, "discriminant")
    if alone in where and significantly_better(evidence.hits[where[chosen]], evidence.hits[where[alone]]):
        return BLEND_SHARE_OUTVOTED
    return BLEND_SHARE


def _longest_as_good(evidence: Evidence, chosen: Candidate, where: dict[Candidate, int]) -> Candidate:
    """The longest step count whose hits are within one paired standard error of ``chosen``'s."""
    mine = evidence.hits[where[chosen]]
    for s in sorted({c.steps for c in evidence.candidates if c.steps > chosen.steps}, reverse=True):
        other = Candidate(chosen.variant, s, chosen.mapping, chosen.mix, chosen.kind)
        if other in where:
            difference = mine - evidence.hits[where[other]]
            if difference.sum() <= np.sqrt(np.count_nonzero(difference)):
                return other
    return chosen


def select_paper_steps(
    x: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    *,
    beta: float,
    config: RefineConfig,
    random_state: int,
    checkpoints: Sequence[int] = PAPER_CHECKPOINTS,
    progress: Progress | None = None,
) -> tuple[int, list[tuple[int, float, float]]]:
    """The paper's classifier needs only a step count: one held-out run, checkpoints up to the last.

    A stratified 25 % of the support is held out; the map is refined on the rest for
    ``max(checkpoints)`` steps of one cosine schedule and scored at each checkpoint by held-out
    top-1 accuracy (ties: lower held-out ARerank loss, then fewer steps). Returns the chosen count
    and the trials ``(steps, accuracy, loss)``; at 1 shot (nothing to hold out) one step per
    support row, at most :data:`ONE_SHOT_STEPS`, and no trials.
    """
    splits = support_splits(labels.cpu().numpy(), n_splits=1, val_size=0.25, random_state=random_state)
    if splits is None:
        return int(min(ONE_SHOT_STEPS, len(labels))), []
    (train_idx, val_idx), = splits
    tr = torch.as_tensor(train_idx, device=x.device)
    va = torch.as_tensor(val_idx, device=x.device)
    x_train, y_train = x[tr], labels[tr]
    x_val = x[va, 0] if x.ndim == 3 else x[va]
    y_val = labels[va]
    first_view = x_train[:, 0] if x_train.ndim == 3 else x_train
    w0 = beta_procrustes(orthogonal_procrustes(first_view, prototypes[y_train]), beta)
    trials: list[tuple[int, float, float]] = []
    marks = set(checkpoints)

    def at_checkpoint(step: int, W: torch.Tensor, W_tt: torch.Tensor, trained: torch.Tensor | None) -> None:
        if step in marks:
            with torch.no_grad():
                mapped = x_val @ W
                accuracy = float((F.normalize(mapped, dim=1) @ prototypes.T).argmax(1).eq(y_val).float().mean())
                loss = float(arerank_loss(mapped, prototypes, y_val, k=config.k, scale=config.margin_scale))
            trials.append((step, accuracy, loss))

    gen, coin = generators(labels.device, random_state + 104729)
    horizon = max(checkpoints)
    refine(w0, x_train, y_train, prototypes, steps=horizon, horizon=horizon, generator=gen, coin=coin,
           config=config, progress=progress, callback=at_checkpoint)
    chosen = max(trials, key=lambda t: (t[1], -t[2], -t[0]))[0]
    return int(chosen), trials
