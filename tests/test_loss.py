import math

import numpy as np
import torch

from lfa_index.core.loss import arerank_loss


def _paper_loss(mapped, protos, labels, k, s):
    """Eq. 7 of the paper, written as a plain loop over images and their k nearest prototypes."""
    total = 0.0
    for i in range(len(mapped)):
        z = mapped[i] / np.linalg.norm(mapped[i])
        ys = protos / np.linalg.norm(protos, axis=1, keepdims=True)
        dists = [np.linalg.norm(z - y) for y in ys]
        d_ii = dists[labels[i]]
        nearest = sorted(range(len(ys)), key=lambda j: dists[j])[:k]
        for j in nearest:
            m_ij = (1.0 - ys[labels[i]] @ ys[j]) / s
            total += max(d_ii - dists[j] + m_ij, 0.0)
    return total / (len(mapped) * k)


def test_arerank_loss_equals_a_direct_loop_over_the_paper_formula():
    rng = np.random.default_rng(0)
    for k, s in [(3, 4.0), (1, 4.0), (5, 2.0)]:
        mapped = rng.standard_normal((40, 16))
        protos = rng.standard_normal((9, 16))
        labels = rng.integers(0, 9, 40)
        got = arerank_loss(torch.tensor(mapped, dtype=torch.float64), torch.tensor(protos, dtype=torch.float64),
                           torch.tensor(labels), k=k, scale=s)
        assert math.isclose(float(got), _paper_loss(mapped, protos, labels, k, s), rel_tol=1e-9, abs_tol=1e-12)


def test_arerank_loss_is_zero_when_every_row_sits_on_its_prototype_far_from_others():
    protos = torch.eye(4)
    labels = torch.tensor([0, 1, 2, 3])
    assert float(arerank_loss(protos[labels] * 3.0, protos, labels)) == 0.0


def test_arerank_loss_caps_k_at_the_number_of_classes_and_has_gradients():
    rng = np.random.default_rng(1)
    w = torch.eye(8, requires_grad=True)
    x = torch.tensor(rng.standard_normal((10, 8)), dtype=torch.float32)
    loss = arerank_loss(x @ w, torch.tensor(rng.standard_normal((2, 8)), dtype=torch.float32),
                        torch.tensor(rng.integers(0, 2, 10)), k=3)
    loss.backward()
    assert torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0
