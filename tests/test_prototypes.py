"""Hybrid prototypes: class means, GDA's shared precision, the discriminant and the mix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.baselines import gda_discriminant
from lfa_index.core.solvers.prototypes import (
    blend_with_discriminant,
    class_means,
    class_scores,
    hybrid_prototypes,
    precision_times,
    shared_precision,
    support_prototypes,
)


def rows(n_classes=6, shots=5, d=10, seed=0, spread=0.6):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_classes, d))
    y = np.repeat(np.arange(n_classes), shots)
    x = centres[y] + spread * rng.standard_normal((len(y), d)) * rng.uniform(0.2, 2.0, d)  # anisotropic spread
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return torch.tensor(x, dtype=torch.float64), torch.tensor(y), centres


def test_class_means_average_each_class_and_mark_classes_without_rows():
    z = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0]])
    means, seen = class_means(z, torch.tensor([0, 0, 2]), 4)
    torch.testing.assert_close(means, torch.tensor([[2.0, 1.0], [0.0, 0.0], [0.0, 4.0], [0.0, 0.0]]))
    assert seen.tolist() == [True, False, True, False]


def test_shared_precision_is_gdas_shrunk_estimator_and_the_identity_without_spread():
    z, y, _ = rows()
    means, _ = class_means(z, y, 6)
    r = (z - means[y]).numpy()
    cov = np.cov(r, rowvar=False)
    n, d = z.shape
    expected = d * np.linalg.inv((n - 1) * cov + np.trace(cov) * np.eye(d))
    np.testing.assert_allclose(shared_precision(z, y, means).numpy(), expected, rtol=1e-6)
    one_shot = z[::5]
    torch.testing.assert_close(shared_precision(one_shot, y[::5], one_shot), torch.eye(d, dtype=z.dtype))


@pytest.mark.parametrize("shots,d", [(5, 10), (2, 40), (3, 200)])
def test_the_precision_is_applied_without_forming_it_in_the_row_space_and_the_feature_space(shots, d):
    """Woodbury's identity (fewer rows than dimensions) and the Cholesky solve give v P exactly."""
    z, y, _ = rows(shots=shots, d=d, seed=3)
    means, _ = class_means(z, y, 6)
    torch.testing.assert_close(precision_times(z, y, means, means), means @ shared_precision(z, y, means),
                               rtol=1e-9, atol=1e-9)


def test_full_discriminant_mix_ranks_like_the_gda_baseline():
    z, y, _ = rows(seed=1)
    queries, _, _ = rows(seed=2, shots=20)
    directions, bias, seen = support_prototypes(z, y, 6, "discriminant")
    assert bool(seen.all())
    # unit mean norm: the support side sits on the scale of unit text prototypes
    assert float(directions.norm(dim=1).mean()) == pytest.approx(1.0)
    weights, gda_bias = gda_discriminant(z.numpy(), y.numpy(), 6)
    ours = class_scores(queries, directions, bias).numpy()
    theirs = queries.numpy() @ weights.T + gda_bias
    np.testing.assert_array_equal(ours.argmax(1), theirs.argmax(1))
    # same classifier up to one positive factor and a class-independent constant
    ours_c, theirs_c = ours - ours.mean(1, keepdims=True), theirs - theirs.mean(1, keepdims=True)
    factor = float(np.sum(ours_c * theirs_c) / np.sum(theirs_c**2))
    assert factor > 0
    np.testing.assert_allclose(ours_c, factor * theirs_c, atol=1e-5 * np.abs(ours_c).max())


def test_mean_support_prototypes_are_unit_class_means_without_bias():
    z, y, _ = rows()
    means, bias, _ = support_prototypes(z, y, 6, "mean")
    expected = torch.nn.functional.normalize(class_means(z, y, 6)[0], dim=1)
    torch.testing.assert_close(means, expected)
    assert not bias.any()


def test_mix_zero_is_the_text_prototypes_and_mix_one_the_support_side():
    z, y, _ = rows()
    text = torch.nn.functional.normalize(torch.randn(6, z.shape[1], dtype=torch.float32), dim=1)
    support = support_prototypes(z, y, 6, "discriminant")
    q0, b0 = hybrid_prototypes(text, *support, 0.0)
    torch.testing.assert_close(q0, text)
    assert not b0.any()
    q1, b1 = hybrid_prototypes(text, *support, 1.0)
    torch.testing.assert_close(q1, support[0].float())
    torch.testing.assert_close(b1, support[1].float())
    qh, bh = hybrid_prototypes(text, *support, 0.25)
    torch.testing.assert_close(qh, (0.75 * text.double() + 0.25 * support[0]).float())
    assert q0.dtype == qh.dtype == torch.float32


def test_classes_without_support_rows_keep_their_text_prototype_and_the_mean_bias():
    z, y, _ = rows()
    keep = y < 4
    text = torch.nn.functional.normalize(torch.randn(6, z.shape[1], dtype=torch.float64), dim=1)
    support = support_prototypes(z[keep], y[keep], 6, "discriminant")
    q, b = hybrid_prototypes(text, *support, 0.5)
    torch.testing.assert_close(q[4:], text[4:])
    torch.testing.assert_close(b[4:], b[:4].mean().expand(2))


@pytest.mark.parametrize("mix, share", [(0.25, 0.5), (0.0, 0.25), (0.0, 0.75)])
def test_the_blend_ranks_as_the_weighted_average_of_the_standardised_scores(mix, share):
    z, y, _ = rows(seed=3)
    queries, _, _ = rows(seed=4, shots=20)
    text = torch.nn.functional.normalize(torch.randn(6, z.shape[1], dtype=torch.float64,
                                                     generator=torch.Generator().manual_seed(0)), dim=1)
    support = support_prototypes(z, y, 6, "discriminant")
    q_mix, b_mix = hybrid_prototypes(text, *support, mix)
    chosen = (q_mix, b_mix if mix else None)  # λ = 0: the text prototypes, no bias
    disc = hybrid_prototypes(text, *support, 1.0)
    q, b, w = blend_with_discriminant(z, chosen, disc, share)

    def standardised(classifier):
        on_support = class_scores(z, *classifier)
        spread = (on_support - on_support.mean(1, keepdim=True)).std()
        return class_scores(queries, *classifier) / spread

    weighted = (1 - share) * standardised(chosen) + share * standardised(disc)
    # one positive factor apart: the blend is that weighted average, rescaled to weights summing to one
    blended = class_scores(queries, q, b)
    factor = float((blended * weighted).sum() / (weighted * weighted).sum())
    assert factor > 0
    torch.testing.assert_close(blended, factor * weighted)
    assert 0 < w < 1
    torch.testing.assert_close(q, (1 - w) * chosen[0] + w * disc[0])
    torch.testing.assert_close(b, (1 - w) * (0 if chosen[1] is None else chosen[1]) + w * disc[1])
    _, _, at_half = blend_with_discriminant(z, chosen, disc)
    assert w == pytest.approx(at_half) if share == 0.5 else (w < at_half) == (share < 0.5)


def test_the_blend_of_the_discriminant_with_itself_or_of_a_flat_classifier_changes_nothing():
    z, y, _ = rows(seed=5)
    disc = hybrid_prototypes(torch.zeros(6, z.shape[1], dtype=torch.float64), *support_prototypes(z, y, 6), 1.0)
    q, b, w = blend_with_discriminant(z, disc, disc)
    torch.testing.assert_close(q, disc[0])
    torch.testing.assert_close(b, disc[1])
    assert w == pytest.approx(0.5)
    flat = torch.zeros(6, z.shape[1], dtype=torch.float64)  # ranks nothing: no scale to standardise by
    q, b, w = blend_with_discriminant(z, (flat, None), disc)
    assert w == 0.0 and not q.any() and not b.any()
