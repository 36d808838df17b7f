"""EmbeddingAligner: query a store of old-model embeddings with a new model, without re-embedding it.

Fitting runs LFA's machinery in torch (:mod:`lfa_index.core.solvers.migration`, :mod:`lfa_index.core.solvers.matching`);
serving is numpy: one ``d_new × d_old`` map and a mean, saved in the index's safe format
(:mod:`.aligner_format`).
"""

from __future__ import annotations

import sys
import time
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import CHUNK_ROWS, l2_normalize
from ..compat import BaseEstimator, TransformerMixin
from ..core import LFA
from ..core.config import RefineConfig
from ..core.state import fit_or_restore
from ..core.validation import (
    BOOLEAN,
    Interval,
    StrOptions,
    check_embeddings,
    check_is_fitted,
    check_param,
    validate_params,
)
from ..errors import DimensionMismatchError, InvalidParameterError, MissingExtraError, ShapeError

_DEFAULT = RefineConfig()
MAP_KINDS = ("orthogonal", "all")
REFINE_PARAMS: tuple[str, ...] = ("k", "margin_scale", "lr", "weight_decay", "final_lr", "noise_std", "dropout",
                                  "batch_fraction")
"""The refinement settings the aligner shares with :class:`~lfa_index.LFA` (same names, rules and defaults)."""


class EmbeddingAligner(TransformerMixin, BaseEstimator):
    """Map a new embedding model's rows into an old model's space, learnt from paired rows (LFA).

    ``fit(X_new, X_old)`` takes the same items embedded by both models (any widths; the items need
    not be in the store). ``transform(X_new)`` returns unit rows in the old space, so a store filled
    by the old model answers queries embedded by the new one: ``z = normalize((x̂ − μ) W)``, one
    GEMV per query. Each pair is its own class (LFA's uni-modal setting): centring, (β-, whitened)
    Procrustes and ARerank refinement with in-batch negatives, the options and step count chosen on held-out
    pairs (see :mod:`lfa_index.core.solvers.migration`).

    Parameters
    ----------
    center : bool or "auto", default="auto"
        Subtract the pairs' mean from the new rows before Procrustes (and serve ``x̂ − μ``).
        "auto" tries both on held-out pairs; e5's narrow cone needs it.
    maps : {"orthogonal", "all"}, default="orthogonal"
        Closed forms tried: (β-)Procrustes and whitened Procrustes (the new rows whitened with a
        shrunk covariance first), or also the least-squares maps (ridge regressions,
        forward and score-preserving), which fit the pairs' own distribution and carry over to
        queries worse (see ``docs/migration.md``).
    steps : "auto" or int >= 0, default="auto"
        ARerank refinement steps. "auto" runs one schedule per held-out fold and keeps the best
        checkpoint only if it beats the closed form significantly (paired sign test).
    k, margin_scale, lr, weight_decay, final_lr, noise_std, dropout, batch_fraction :
        Refinement settings, as :class:`~lfa_index.LFA`'s.
    batch_pairs : int, default=1024
        Pairs per refinement step; their old rows are the step's classes (in-batch negatives).
    group_weights : {"design", "equal"}, default="design"
        How pairs that share a ``groups`` label weigh. "design": each pair of a group of m weighs
        ``1 / (1 + (m − 1)ρ)``, ρ the correlation of the rows within groups measured on the pairs
        (Kish's design effect), so a document's many sentences count for less than as many
        documents; "equal": every pair weighs 1. No effect without ``groups``.
    cv_folds : int, default=3
        Held-out folds of the pairs.
    n_rounds : int, default=5
        Sinkhorn/Procrustes rounds of ``fit(..., paired=False)``.
    device : str, default="auto"
        Torch device of the fit ("auto", "cpu", "cuda", "cuda:N").
    random_state : int or None, default=None
        Seed of the folds, batches, noise and dropout.
    verbose : bool, default=False
        Show a progress bar and print the one-line summary.

    Attributes
    ----------
    W_ : ndarray (d_new, d_old)     the map.
    mean_ : ndarray (d_new,)        μ subtracted from the unit new rows (zero without centring).
    n_features_in_ : int            d_new.       n_features_out_ : int   d_old.
    paired_ : bool                  whether the fit had paired rows.
    method_ : str                   the closed form chosen (e.g. "Procrustes, centred").
    center_ : bool                  centring used.   steps_ : int   refinement steps run.
    selection_ : dict               held-out evidence (reciprocal rank of each pair's old row).
    summary_ : str                  one line: what was chosen, the held-out evidence, the time.
    fit_seconds_ : float            wall-clock time of the fit.

    Example
    -------
    >>> aligner = EmbeddingAligner(random_state=0).fit(new_model.embed_texts(sample), old_rows_of_sample)
    >>> store.search(aligner.transform(new_model.embed_texts(["a query"])), k=10)
    >>> aligner.save("new_to_old"); EmbeddingAligner.load("new_to_old")
    """

    _parameter_constraints: dict[str, list[Any]] = {
        "center": [StrOptions({"auto"}), BOOLEAN],
        "maps": [StrOptions(set(MAP_KINDS))],
        "steps": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        **{name: LFA._parameter_constraints[name] for name in REFINE_PARAMS},
        "batch_pairs": [Interval(Integral, 2, None, closed="left")],
        "group_weights": [StrOptions({"design", "equal"})],
        "cv_folds": [Interval(Integral, 2, None, closed="left")],
        "n_rounds": [Interval(Integral, 0, None, closed="left")],
        "device": [str],
        "random_state": [None, Interval(Integral, 0, 2**32 - 1, closed="both")],
        "verbose": [BOOLEAN],
    }

    def __init__(
        self,
        *,
        center: bool | str = "auto",
        maps: str = "orthogonal",
        steps: int | str = "auto",
        k: int = _DEFAULT.k,
        margin_scale: float = _DEFAULT.margin_scale,
        lr: float = _DEFAULT.lr,
        weight_decay: float = _DEFAULT.weight_decay,
        final_lr: float = _DEFAULT.final_lr,
        noise_std: float = _DEFAULT.noise_std,
        dropout: float = _DEFAULT.dropout,
        batch_fraction: float = _DEFAULT.batch_fraction,
        batch_pairs: int = 1024,
        group_weights: str = "design",
        cv_folds: int = 3,
        n_rounds: int = 5,
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.center = center
        self.maps = maps
        self.steps = steps
        self.k = k
        self.margin_scale = margin_scale
        self.lr = lr
        self.weight_decay = weight_decay
        self.final_lr = final_lr
        self.noise_std = noise_std
        self.dropout = dropout
        self.batch_fraction = batch_fraction
        self.batch_pairs = batch_pairs
        self.group_weights = group_weights
        self.cv_folds = cv_folds
        self.n_rounds = n_rounds
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True  # fit needs X_old
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags

    def refine_config(self) -> RefineConfig:
        """The refinement settings of these parameters."""
        return RefineConfig(**{name: getattr(self, name) for name in REFINE_PARAMS})

    # ------------------------------------------------------------------ fitting
    def fit(self, X_new: Any, X_old: Any, *, paired: bool = True, queries: Any = None,
            groups: Any = None) -> "EmbeddingAligner":
        """Learn the map from rows of the same items embedded by the new model and by the old one.

        Parameters
        ----------
        X_new : (n, d_new) new-model embeddings. X_old : (n, d_old) old-model embeddings of the
            same n items, in the same order (any real dtype, numpy or torch).
        paired : bool, default=True
            False: the rows are two unrelated samples (no row pairs with another; n and the old
            sample's size may differ), matched by Sinkhorn (U-LFA). See ``docs/migration.md`` for
            how well that works (it does not, at these sizes).
        queries : (m, d_new) or None
            New-model embeddings of query-like texts in the role queries are embedded with (e5's
            ``"query: "`` prefix), not paired with anything: when the pairs were embedded in
            another role (e5's ``"passage: "``), a centred map is served around their mean. The
            held-out pairs cannot score that map, so ``steps="auto"`` then keeps the closed form.
        groups : (n,) or None
            A label per pair (any hashable values): pairs that share one are held out together when
            the map is chosen, as scikit-learn's ``GroupKFold`` does. Give the source text of each
            view (``lfa_index.adapters.with_sentences(texts, return_sources=True)``): held-out
            sentences then never meet a map fitted on their own document.

        A fit that raises leaves the estimator as it was.
        """
        return fit_or_restore(self, self._fit, X_new, X_old, paired, queries, groups)

    def _fit(self, X_new: Any, X_old: Any, paired: Any, queries: Any, groups: Any = None) -> "EmbeddingAligner":
        started = time.perf_counter()
        validate_params(self.get_params(deep=False), self._parameter_constraints, type(self).__name__)
        check_param(paired, "paired", [BOOLEAN])
        try:
            import torch
            import torch.nn.functional as F
            from tqdm.auto import tqdm

            from ..core.device import resolve_device
            from ..core.group_weights import design_weights
            from ..core.solvers.matching import fit_unpaired
            from ..core.solvers.migration import DEFAULT_KINDS, KINDS, describe, fit_pairs
            from ..core.solvers.selection import generators
            from ..core.solvers.unit_rows import without_negligible
        except ImportError as err:
            raise MissingExtraError(
                f"fitting an EmbeddingAligner needs torch ({err}); `pip install lfa-index` brings it (a saved "
                "aligner transforms without it)."
            ) from err
        x_new = l2_normalize(check_embeddings(X_new, name="X_new"))
        x_old = l2_normalize(check_embeddings(X_old, name="X_old"))
        if paired and len(x_new) != len(x_old):
            raise ShapeError(
                f"X_new has {len(x_new)} rows but X_old has {len(x_old)}; paired rows embed the same items in the "
                "same order (pass paired=False for two unrelated samples)."
            )
        codes = None
        if groups is not None:
            if not paired:
                raise InvalidParameterError("groups label paired rows; with paired=False there is nothing to group.")
            labels = np.asarray(groups)
            if labels.ndim != 1 or len(labels) != len(x_new):
                raise ShapeError(f"groups has shape {labels.shape}, not ({len(x_new)},): one label per pair.")
            codes = np.unique(labels, return_inverse=True)[1].reshape(-1)
        sample = None
        if queries is not None:
            sample = l2_normalize(check_embeddings(queries, name="queries"))
            if sample.shape[1] != x_new.shape[1]:
                raise DimensionMismatchError(
                    f"queries have {sample.shape[1]} features but X_new has {x_new.shape[1]}; embed them with the "
                    "new model."
                )
        device = resolve_device(self.device)
        seed = self.random_state if self.random_state is not None else int(np.random.SeedSequence().entropy % 2**31)
        gen, coin = generators(device, seed)
        # in place on the fresh unit rows of l2_normalize, so the numpy rows below agree on every device
        a = without_negligible(torch.from_numpy(x_new)).to(device)
        b = without_negligible(torch.from_numpy(x_old)).to(device)
        serve_mean = None if sample is None else F.normalize(torch.from_numpy(sample), dim=1).mean(dim=0).to(device)
        if paired:
            weight, rho = design_weights(x_new, x_old, codes) if self.group_weights == "design" else (None, 0.0)
            bar = tqdm(total=0, desc="EmbeddingAligner fit", unit="step", disable=not self.verbose, leave=False)
            try:
                fit = fit_pairs(
                    a, b, centers=(False, True) if self.center == "auto" else (bool(self.center),),
                    kinds=KINDS if self.maps == "all" else DEFAULT_KINDS,
                    steps=None if self.steps == "auto" else int(self.steps), config=self.refine_config(),
                    n_folds=int(self.cv_folds), batch_pairs=int(self.batch_pairs), seed=seed, generator=gen,
                    coin=coin, serve_mean=serve_mean, groups=codes, weight=weight, progress=bar,
                )
            finally:
                bar.close()
            w, mean = fit.W, fit.mean
            self.method_, self.center_, self.steps_ = fit.recipe.name, bool(fit.recipe.center), int(fit.steps)
            self.selection_ = {**describe(fit), "group_correlation": None if weight is None else rho}
            self.loss_curve_ = list(fit.loss_curve)
        else:
            fit = fit_unpaired(a, b, n_rounds=int(self.n_rounds), seed=seed)
            w, mean = fit.W, fit.mean if serve_mean is None else serve_mean
            self.method_, self.center_, self.steps_ = "Gromov-Wasserstein + Sinkhorn/Procrustes rounds", True, 0
            self.selection_ = {"how": "unpaired", "rounds": fit.rounds, "rows": list(fit.rows)}
            self.loss_curve_ = []
        self.W_ = w.detach().cpu().numpy().astype(np.float32)
        self.mean_ = mean.detach().cpu().numpy().astype(np.float32)
        self.n_features_in_, self.n_features_out_ = int(x_new.shape[1]), int(x_old.shape[1])
        self.paired_ = bool(paired)
        self.query_mean_ = sample is not None
        self.fit_seconds_ = time.perf_counter() - started
        self.summary_ = self._summary(len(x_new))
        if self.verbose:
            print(self.summary_, file=sys.stderr)
        return self

    def _summary(self, n_rows: int) -> str:
        parts = [f"{self.n_features_in_}-d -> {self.n_features_out_}-d", self.method_]
        if self.paired_:
            sel = self.selection_ or {}
            if sel.get("heldout_best"):
                parts[-1] += f" (kept over {sel['heldout_best']}, not clearly better on held-out pairs)"
            parts.append(f"{self.steps_} ARerank steps" if self.steps_ else "no refinement")
            if sel.get("heldout_mrr") is not None:
                before = f"closed form {sel['heldout_init_mrr']:.3f}; " if self.steps_ else ""
                scored, gallery = sel.get("scored_pairs", n_rows), sel.get("gallery_rows", n_rows)
                drawn = f"; {scored} of them scored among {gallery} rows" if (scored, gallery) != (n_rows, n_rows) \
                    else ""
                parts.append(f"held-out MRR {sel['heldout_mrr']:.3f} ({before}{n_rows} pairs, {self.cv_folds} folds"
                             f"{drawn})")
            else:
                parts.append(sel.get("how", ""))
            if sel.get("group_correlation") is not None:
                parts.append(f"pairs weighted by their group's design effect (ρ={sel['group_correlation']:.2f})")
        else:
            parts.append(f"unpaired, {self.n_rounds} rounds")
        if self.query_mean_ and self.center_:
            parts.append("served around the queries' mean")
        parts.append(f"{self.fit_seconds_:.1f} s")
        return "EmbeddingAligner fit: " + "; ".join(parts)

    # ------------------------------------------------------------------ serving (numpy)
    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "W_")

    def transform(self, X_new: Any) -> np.ndarray:
        """New-model rows mapped into the old space: unit float32 rows (n, d_old), ``normalize((x̂ − μ) W)``."""
        check_is_fitted(self)
        x = check_embeddings(X_new, name="X_new")
        if x.shape[1] != self.n_features_in_:
            raise DimensionMismatchError(
                f"X_new has {x.shape[1]} features, but this EmbeddingAligner maps {self.n_features_in_}-d rows of the "
                "new model; embed the queries with the model it was fitted on."
            )
        w = np.asarray(self.W_, dtype=np.float32)
        out = np.empty((len(x), w.shape[1]), dtype=np.float32)
        for start in range(0, len(x), CHUNK_ROWS):
            rows = l2_normalize(x[start:start + CHUNK_ROWS]) - self.mean_
            out[start:start + CHUNK_ROWS] = l2_normalize(rows @ w)
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write the fitted aligner to directory ``path`` atomically (safetensors + JSON, sha256 manifest)."""
        check_is_fitted(self)
        from .aligner_format import save_aligner

        return save_aligner(self, path)

    @classmethod
    def load(cls, path: str | Path) -> "EmbeddingAligner":
        """Read an aligner written by :meth:`save` (numpy and safetensors only: no torch needed).

        Raises :class:`~lfa_index.errors.IndexFormatError` for a missing, foreign, corrupted or
        inconsistent directory.
        """
        from .aligner_format import load_aligner

        return load_aligner(cls, path)

