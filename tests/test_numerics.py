"""Embeddings whose norms overflow float32 or fall into its denormal range give the same answers as
ordinary ones: LFA and AlignedIndex use directions only, and agree on what they accept."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import planted_gap_problem

from lfa_index import LFA, AlignedIndex, NonFiniteError, ZeroNormError

OPTIONS = dict(steps=10, random_state=0)


@pytest.fixture(scope="module")
def problem():
    """More classes than dimensions: the Procrustes map is then unique. (With fewer, X^T P has a null
    space whose rotation follows float rounding, so rows equal to the last bit are needed for equal maps.)"""
    return planted_gap_problem(n_classes=12, d=8, n_test=10, seed=7)


@pytest.mark.parametrize("scale", [1e19, 1e20, 1e-22, 1e-40])
def test_support_rows_of_extreme_norm_fit_the_same_classifier(problem, scale):
    x, y, p, xt, yt = problem
    plain = LFA(**OPTIONS).fit(x, y, p)
    scaled = LFA(**OPTIONS).fit(x.astype(np.float64) * scale, y, p)
    np.testing.assert_array_equal(scaled.predict(xt), plain.predict(xt))
    assert np.isfinite(scaled.predict_proba(xt)).all()
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(x.astype(np.float64) * scale, y, p)
    np.testing.assert_array_equal(index.predict(xt), plain.predict(xt))


@pytest.mark.parametrize("scale", [1e-22, 1e-30, 1e20, 1e300])
def test_queries_of_extreme_norm_get_finite_scores_equal_to_ordinary_ones(problem, scale):
    x, y, p, xt, _ = problem
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(x, y, p)
    scores, labels = index.search(xt, 3)
    tiny_scores, tiny_labels = index.search(xt.astype(np.float64) * scale, 3)
    assert np.isfinite(tiny_scores).all()
    np.testing.assert_array_equal(tiny_labels, labels)
    np.testing.assert_allclose(tiny_scores, scores, rtol=1e-5, atol=1e-6)
    lfa_scores = index.lfa_.decision_function(xt.astype(np.float64) * scale)
    np.testing.assert_allclose(lfa_scores, index.lfa_.decision_function(xt), rtol=1e-5, atol=1e-6)


def test_lfa_and_the_index_refuse_the_same_inputs(problem):
    x, y, p, xt, _ = problem
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(x, y, p)
    for bad, error in ((np.zeros_like(xt), ZeroNormError), (np.full_like(xt, np.nan), NonFiniteError),
                       (np.full(xt.shape, 1e39, dtype=np.float64) * np.inf, NonFiniteError)):
        for call in (index.predict, index.lfa_.predict):
            with pytest.raises(error):
                call(bad)


def test_a_fit_that_cannot_fit_in_memory_is_refused_before_any_work(monkeypatch):
    """20,000 classes of one 16-d row fit in a bounded footprint; a width whose d × d maps exceed the
    limit is refused up front, with a typed error naming the limit."""
    from lfa_index import LFA, MemoryLimitError
    from lfa_index.core.memory import fit_memory

    small = fit_memory(20_000, 1, 16, 20_000)
    assert small < 2**30  # scores over 20,000 × 20,000 are taken in blocks of rows: well under 1 GiB
    step = fit_memory(20_000, 1, 16, 40_000) - small  # classes cost O(C·d), not O(C²): linear in C
    assert fit_memory(20_000, 1, 16, 60_000) - fit_memory(20_000, 1, 16, 40_000) == step < 2**25
    monkeypatch.setenv("LFA_INDEX_MEMORY_LIMIT", "64M")
    x = np.zeros((4, 4096), dtype=np.float32)
    x[:, :4] = np.eye(4)
    with pytest.raises(MemoryLimitError, match=r"LFA_INDEX_MEMORY_LIMIT=64M.*raise \$LFA_INDEX_MEMORY_LIMIT"):
        LFA(steps=0).fit(x, [0, 1, 2, 3], x)
    monkeypatch.setenv("LFA_INDEX_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="not a size"):
        LFA(steps=0).fit(x, [0, 1, 2, 3], x)


def _with_a_dead_dimension(rows: np.ndarray, seed: int, scale: float) -> np.ndarray:
    """``rows`` with column 0 replaced by values of ``scale`` (all-MiniLM-L6-v2 writes 1e-33 to 1e-37
    in two of its dimensions for every text)."""
    out = rows.astype(np.float32).copy()
    out[:, 0] = scale * np.random.default_rng(seed).uniform(0.5, 1.5, len(out))
    return out


def test_entries_too_small_to_matter_are_zero_and_the_rest_of_the_unit_row_is_kept():
    import torch
    import torch.nn.functional as F

    from lfa_index.core.solvers.unit_rows import NEGLIGIBLE, unit_rows

    x = torch.from_numpy(_with_a_dead_dimension(np.random.default_rng(0).normal(size=(50, 16)), 1, 1e-33))
    x[0, 1] = 4 * NEGLIGIBLE * x[0].norm()  # above the bound once normalised: kept
    plain, rows = F.normalize(x, dim=1), unit_rows(x)
    assert (rows[:, 0] == 0).all() and (plain[:, 0] != 0).all()
    torch.testing.assert_close(rows[:, 1:], plain[:, 1:], rtol=0, atol=0)


def test_a_dead_dimension_leaves_no_subnormal_number_in_the_loss_gradient():
    """The gradient of the ARerank loss at rows and prototypes with a dead dimension is full of
    subnormal numbers (10-100x slower on x86 CPUs) unless those entries are held at zero."""
    import torch
    import torch.nn.functional as F

    from lfa_index.core.solvers.loss import arerank_loss
    from lfa_index.core.solvers.unit_rows import unit_rows

    rng = np.random.default_rng(3)
    x = torch.from_numpy(_with_a_dead_dimension(rng.normal(size=(400, 32)), 4, 1e-33))
    p = torch.from_numpy(_with_a_dead_dimension(rng.normal(size=(20, 32)), 5, 1e-36))
    labels = torch.from_numpy(rng.integers(0, 20, 400))

    def subnormals(normalise) -> int:
        mapped = normalise(x).requires_grad_(True)
        arerank_loss(mapped, normalise(p), labels).backward()
        grad = mapped.grad
        return int(((grad != 0) & (grad.abs() < torch.finfo(grad.dtype).tiny)).sum())

    assert subnormals(lambda t: F.normalize(t, dim=1)) > 0  # the planted problem is the real one
    assert subnormals(unit_rows) == 0


def test_a_dead_dimension_does_not_change_the_fit(problem):
    """Entries of 1e-33 change no cosine, so zeroing them leaves every fitted number as it was."""
    x, y, p, xt, _ = problem
    dead = LFA(**OPTIONS).fit(_with_a_dead_dimension(x, 1, 1e-33), y, _with_a_dead_dimension(p, 2, 1e-36))
    zeroed = LFA(**OPTIONS).fit(_with_a_dead_dimension(x, 1, 0.0), y, _with_a_dead_dimension(p, 2, 0.0))
    np.testing.assert_array_equal(dead.W_, zeroed.W_)
    np.testing.assert_array_equal(dead.predict(xt), zeroed.predict(xt))
