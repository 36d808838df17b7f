import math

import numpy as np
import pytest
import torch

from lfa_index.core.solvers.loss import ARGMAX_MIN_SCORES, PARTIAL_SORT_CLASSES, arerank_loss, nearest


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


def _dense_reference(mapped, protos, labels, k, s, margin_gradient=True):
    """The loss written with plain autograd (gathered prototypes), the reference of the sparse backward."""
    z = torch.nn.functional.normalize(mapped, dim=1)
    p = torch.nn.functional.normalize(protos, dim=1)
    idx = (z.detach() @ p.detach().T).topk(k, dim=1).indices
    wanted = torch.cat([labels.unsqueeze(1), idx], dim=1)
    cosines = (p[wanted] * z.unsqueeze(1)).sum(dim=2)
    distances = torch.sqrt(torch.clamp(2 - 2 * cosines, min=1e-12))
    q = p if margin_gradient else p.detach()
    margins = (1 - (q @ q.T)[labels.unsqueeze(1), idx]) / s
    return torch.clamp(distances[:, :1] - distances[:, 1:] + margins, min=0).mean()


def test_the_sparse_backward_gives_the_gradients_of_the_dense_formula():
    rng = np.random.default_rng(2)
    for k in (1, 3):
        mapped = torch.tensor(rng.standard_normal((30, 12)), dtype=torch.float64, requires_grad=True)
        protos = torch.tensor(rng.standard_normal((7, 12)), dtype=torch.float64, requires_grad=True)
        labels = torch.tensor(rng.integers(0, 7, 30))
        ours = torch.autograd.grad(arerank_loss(mapped, protos, labels, k=k), (mapped, protos))
        reference = torch.autograd.grad(_dense_reference(mapped, protos, labels, k, 4.0), (mapped, protos))
        for got, want in zip(ours, reference):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    assert torch.autograd.gradcheck(lambda m: arerank_loss(m, protos.detach(), labels, k=3), (mapped,))


@pytest.mark.parametrize("rows, classes, width, k", [
    (30, 7, 12, 3),  # C² ≤ n·k·d and C ≤ (k+1)·d: Gram-matrix margins, one product for the prototypes' gradient
    (6, 40, 3, 1),   # many classes, few rows: gathered margins, the prototypes' gradient summed row by row
])
@pytest.mark.parametrize("margin_gradient", [True, False])
def test_both_ways_of_computing_margins_and_prototype_gradients_give_the_dense_formula(rows, classes, width, k,
                                                                                     margin_gradient):
    """Constant margins come from the C × C Gram matrix or from gathered pairs, and the prototypes'
    gradient from one (n, C) product or a row-by-row sum, whichever is smaller: each must equal the
    plain-autograd loss and gradients (refinement with trained prototypes takes constant margins)."""
    rng = np.random.default_rng(rows + classes)
    mapped = torch.tensor(rng.standard_normal((rows, width)), dtype=torch.float64, requires_grad=True)
    protos = torch.tensor(rng.standard_normal((classes, width)), dtype=torch.float64, requires_grad=True)
    labels = torch.tensor(rng.integers(0, classes, rows))
    loss = arerank_loss(mapped, protos, labels, k=k, margin_gradient=margin_gradient)
    want = _dense_reference(mapped, protos, labels, k, 4.0, margin_gradient=margin_gradient)
    assert math.isclose(loss.item(), want.item(), rel_tol=1e-12)
    for got, ref in zip(torch.autograd.grad(loss, (mapped, protos)), torch.autograd.grad(want, (mapped, protos))):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rows, classes, width", [(30, 7, 12), (6, 40, 3)])
def test_prototype_gradients_of_bfloat16_rows_with_float32_norms(monkeypatch, rows, classes, width):
    """CUDA's autocast takes row norms in float32 from bfloat16 rows (a bf16-mixed fit with trained
    prototypes failed on an H200: a bfloat16 gradient scattered into float32 weights); the CPU's
    keeps bfloat16, so the float32 norms are imposed here. Both ways of summing the prototypes'
    gradient must run and match the float64 gradients to bfloat16's precision."""
    norm = torch.linalg.vector_norm
    rng = np.random.default_rng(rows)
    mapped64 = torch.tensor(rng.standard_normal((rows, width)), dtype=torch.float64)
    protos = torch.tensor(rng.standard_normal((classes, width)), dtype=torch.float32, requires_grad=True)
    labels = torch.tensor(rng.integers(0, classes, rows))
    want = torch.autograd.grad(arerank_loss(mapped64, protos.double(), labels, margin_gradient=False), protos)[0]
    monkeypatch.setattr(torch.linalg, "vector_norm", lambda *args, **kwargs: norm(*args, **kwargs).float())
    mapped = mapped64.to(torch.bfloat16).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as refinement runs it
        loss = arerank_loss(mapped, protos, labels, margin_gradient=False)
    got = torch.autograd.grad(loss, (mapped, protos))
    assert got[1].dtype == torch.float32
    torch.testing.assert_close(got[1], want.float(), rtol=0.05, atol=0.02)


def test_nearest_is_topk_on_either_side_of_the_argmax_switch():
    """Below ARGMAX_MIN_SCORES scores `nearest` is torch's topk; from it on, arg-max passes (in float32
    for bfloat16 scores) up to PARTIAL_SORT_CLASSES × k columns, topk again from there: the same
    columns, best first, on scores without ties (seeded normal draws)."""
    generator = torch.Generator().manual_seed(0)
    for rows, classes in ((20, 77), (ARGMAX_MIN_SCORES // 77 + 1, 77), (400, 150), (400, 3 * PARTIAL_SORT_CLASSES)):
        scores = torch.randn(rows, classes, generator=generator, dtype=torch.float64)
        for k in (1, 3, 4):
            assert torch.equal(nearest(scores, k), scores.topk(k, dim=1).indices)
            assert torch.equal(nearest(scores.float(), k), scores.float().topk(k, dim=1).indices)
        # bfloat16 (the scores of refinement under autocast) holds the integers up to 256 exactly
        ranks = torch.argsort(torch.rand(rows, classes, generator=generator), dim=1).to(torch.bfloat16)
        assert torch.equal(nearest(ranks, 3), ranks.topk(3, dim=1).indices)


def test_nearest_resolves_ties_to_the_first_column_on_the_arg_max_path():
    """Where `nearest` takes arg-max passes on a CPU, equal scores resolve as ``argmax`` does (the first
    column of equal maxima), so the faster ``max`` it uses there changes no fit: integer scores in
    0..4 over 77 columns tie in every row."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (ARGMAX_MIN_SCORES // 77 + 1, 77), generator=generator).float()
    work, expected = scores.clone(), []
    for _ in range(3):
        best = work.argmax(dim=1, keepdim=True)
        expected.append(best)
        work.scatter_(1, best, float("-inf"))
    assert torch.equal(nearest(scores, 3), torch.cat(expected, dim=1))
