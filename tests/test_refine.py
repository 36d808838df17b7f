import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import planted_gap_problem

from lfa_index import LFA
from lfa_index.core.config import RefineConfig
from lfa_index.core.solvers.loss import arerank_loss
from lfa_index.core.solvers.metrics import hubness
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes
from lfa_index.core.solvers.refine import ema_momentum, refine


def _generators(seed=0):
    return torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)


def test_refinement_lowers_the_loss_and_the_hubness_on_a_planted_modality_gap():
    x, y, protos, _, _ = planted_gap_problem(noise=0.35, rotation_mix=0.6, seed=0)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    gen, coin = _generators()
    result = refine(w0, x, y, p, steps=300, generator=gen, coin=coin)
    loss_before = float(arerank_loss(x @ w0, p, y))
    loss_after = float(arerank_loss(x @ result.W, p, y))
    hub_before = hubness(F.normalize(x @ w0, dim=1), p, y)
    hub_after = hubness(F.normalize(x @ result.W, dim=1), p, y)
    assert loss_after < 0.8 * loss_before
    assert hub_after < hub_before - 0.03


def test_estimator_reports_lower_hubness_after_refinement(planted):
    x, y, protos, _, _ = planted
    lfa = LFA(steps=200, random_state=0).fit(x, y, protos)
    assert lfa.hubness_ < lfa.hubness_init_
    assert len(lfa.loss_curve_) == 200 and lfa.steps_ == 200


def test_w_tt_starts_at_identity_and_follows_the_log_momentum_schedule():
    x, y, protos, _, _ = planted_gap_problem(d=16)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.5)
    steps = 40
    seen = []
    gen, coin = _generators()
    result = refine(w0, x, y, p, steps=steps, generator=gen, coin=coin, config=RefineConfig(lr=1e-2),
                    callback=lambda t, w, w_tt, trained: seen.append(w.clone()))
    # Replay eq. 9 from the identity with the maps the run went through.
    w_tt = torch.eye(16)
    for t, w in enumerate(seen):
        a = ema_momentum(t, steps)
        w_tt = a * w_tt + (1 - a) * w
    torch.testing.assert_close(result.W_tt, w_tt, atol=1e-5, rtol=0)
    # W_tt only takes the first half of the run: it is frozen once the momentum reaches 1.
    assert ema_momentum(0, steps) == pytest.approx(0.9)
    assert ema_momentum(steps // 2, steps) == pytest.approx(1.0)
    assert ema_momentum(steps - 1, steps) == pytest.approx(1.0)
    momenta = [ema_momentum(t, steps) for t in range(steps)]
    assert all(b >= a for a, b in zip(momenta, momenta[1:]))
    # the log ramp is concave: it rises fastest at the start
    assert momenta[1] - momenta[0] > momenta[10] - momenta[9] > 0
    assert not torch.allclose(result.W_tt, torch.eye(16)) and not torch.allclose(result.W_tt, result.W)


def test_refinement_is_reproducible_from_its_seed(planted):
    x, y, protos, _, _ = planted
    # bit for bit on the CPU; CUDA's reductions are not deterministic (docs/gpu.md)
    a = LFA(steps=30, random_state=7, device="cpu").fit(x, y, protos)
    b = LFA(steps=30, random_state=7, device="cpu").fit(x, y, protos)
    c = LFA(steps=30, random_state=8, device="cpu").fit(x, y, protos)
    np.testing.assert_array_equal(a.W_, b.W_)
    assert not np.array_equal(a.W_, c.W_)


def test_multi_view_support_draws_one_view_per_image_and_uses_view_zero_for_beta():
    x, y, protos, xt, yt = planted_gap_problem(n_test=20, seed=3)
    rng = np.random.default_rng(0)
    views = np.stack([x] + [x + 0.05 * rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)], axis=1)
    lfa = LFA(steps=100, random_state=0).fit(views, y, protos)
    single = LFA(steps=100, random_state=0).fit(x, y, protos)
    assert lfa.beta_ == single.beta_  # β is chosen on view 0 alone
    assert lfa.score(xt, yt) > 0.5
    assert lfa.transform(views).shape == views.shape
    assert lfa.predict(views).shape == (len(x),)


def test_a_shorter_run_on_a_longer_horizon_is_the_start_of_the_longer_run(planted):
    x, y, protos, _, _ = planted
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    seen = {}
    long = refine(w0, x, y, p, steps=60, generator=_generators()[0], coin=_generators()[1],
                  callback=lambda t, w, w_tt, trained: seen.setdefault(t, (w.clone(), w_tt.clone())))
    short = refine(w0, x, y, p, steps=25, horizon=60, generator=_generators()[0], coin=_generators()[1])
    torch.testing.assert_close(short.W, seen[25][0], atol=0, rtol=0)
    torch.testing.assert_close(short.W_tt, seen[25][1], atol=0, rtol=0)
    assert short.loss_curve == long.loss_curve[:25]
    full = refine(w0, x, y, p, steps=25, generator=_generators()[0], coin=_generators()[1])
    assert not torch.equal(full.W, short.W)  # a 25-step schedule anneals; the first 25 steps of 60 do not


def test_one_shot_support_refines_the_public_codes_200_steps_without_a_held_out_split():
    x, y, protos, _, _ = planted_gap_problem(shots=1)
    lfa = LFA(random_state=0).fit(x, y, protos)
    assert lfa.steps_ == 200 and lfa.step_trials_ is None
    assert lfa.selection_["how"] == "one-shot"
    paper = LFA.paper(steps="auto", random_state=0).fit(x, y, protos)
    assert paper.steps_ == min(200, len(y)) and paper.step_trials_ == []  # "auto": one step per row
    assert LFA.paper(random_state=0).fit(x, y, protos).steps_ == 200  # the public code's fixed schedule


def test_branch_free_graph_step_refines_like_the_eager_step():
    # The step a CUDA graph replays, run eagerly on the CPU: same loss, optimiser and EMA.
    from lfa_index.core.solvers.refine import Refinement

    x, y, protos, _, _ = planted_gap_problem(noise=0.35, rotation_mix=0.6, seed=0)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    run = Refinement(w0, x, y, p, steps=300, horizon=300, config=RefineConfig())
    opt = torch.optim.AdamW([run.w], lr=5e-4, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=300, eta_min=1e-7)
    torch.manual_seed(0)
    w_tt = torch.eye(x.shape[1])
    for step in range(300):
        weight = torch.tensor(1.0 - ema_momentum(step, 300))
        opt.zero_grad(set_to_none=True)
        run.graph_step(opt, weight)
        sched.step()
        w_tt = (1 - weight) * w_tt + weight * run.w.detach()
    assert float(arerank_loss(x @ run.w.detach(), p, y)) < 0.8 * float(arerank_loss(x @ w0, p, y))
    torch.testing.assert_close(run.w_tt, w_tt, atol=1e-5, rtol=0)


def test_branch_free_graph_step_trains_prototypes_too():
    # The CUDA graph also replays refinement with trained prototypes (the default's held-out runs):
    # its step, run eagerly on the CPU, moves them and lowers the loss as the eager refinement does.
    from lfa_index.core.solvers.refine import Refinement

    x, y, protos, _, _ = planted_gap_problem(noise=0.35, seed=4)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    run = Refinement(w0, x, y, p, steps=200, horizon=200, config=RefineConfig(), train_prototypes=True)
    opt = torch.optim.AdamW([run.w, run.trained], lr=5e-4, weight_decay=5e-4)
    torch.manual_seed(0)
    for step in range(200):
        opt.zero_grad(set_to_none=True)
        run.graph_step(opt, torch.tensor(1.0 - ema_momentum(step, 200)))
    trained = torch.nn.functional.normalize(run.trained.detach(), dim=1)
    assert float((trained - p).norm(dim=1).min()) > 1e-3  # every prototype moved
    eager = refine(w0, x, y, p, steps=200, generator=_generators()[0], coin=_generators()[1], train_prototypes=True)
    start = float(arerank_loss(x @ w0, p, y))
    graph_loss, eager_loss = float(arerank_loss(x @ run.w.detach(), trained, y)), float(
        arerank_loss(x @ eager.W, eager.prototypes, y))
    assert graph_loss < 0.8 * start and abs(graph_loss - eager_loss) < 0.25 * eager_loss


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_refinement_with_trained_prototypes_on_a_cuda_graph_matches_the_eager_run():
    x, y, protos, _, _ = planted_gap_problem(noise=0.35, seed=4)
    x, y, p = (torch.tensor(t, device="cuda") for t in (x, y, protos))
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    losses = {}
    for graph in (True, False):
        gen = torch.Generator(device="cuda").manual_seed(0)
        run = refine(w0, x, y, p, steps=200, generator=gen, coin=torch.Generator().manual_seed(1), cuda_graph=graph,
                     train_prototypes=True)
        torch.testing.assert_close(run.prototypes.norm(dim=1), torch.ones(len(p), device="cuda"), atol=1e-5, rtol=0)
        losses[graph] = float(arerank_loss(x @ run.W, run.prototypes, y))
    assert losses[True] < 0.8 * float(arerank_loss(x @ w0, p, y))
    assert abs(losses[True] - losses[False]) < 0.25 * losses[False]


def test_jointly_trained_prototypes_move_stay_unit_and_lower_the_loss_further():
    x, y, protos, _, _ = planted_gap_problem(noise=0.35, seed=4)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    plain = refine(w0, x, y, p, steps=200, generator=_generators()[0], coin=_generators()[1])
    joint = refine(w0, x, y, p, steps=200, generator=_generators()[0], coin=_generators()[1], train_prototypes=True)
    assert plain.prototypes is None
    torch.testing.assert_close(joint.prototypes.norm(dim=1), torch.ones(len(p)), atol=1e-5, rtol=0)
    assert float((joint.prototypes - p).norm(dim=1).min()) > 1e-3  # every prototype moved
    loss_plain = float(arerank_loss(x @ plain.W, p, y))
    loss_joint = float(arerank_loss(x @ joint.W, joint.prototypes, y))
    assert loss_joint < loss_plain
    # a vanishing learning rate leaves both W and the prototypes where they started
    still = refine(w0, x, y, p, steps=5, config=RefineConfig(lr=1e-12, final_lr=0.0), generator=_generators()[0],
                   coin=_generators()[1], train_prototypes=True)
    torch.testing.assert_close(still.prototypes, p, atol=1e-5, rtol=0)


def test_the_callback_is_called_at_the_asked_steps_only_with_the_run_unchanged():
    x, y, protos, _, _ = planted_gap_problem(seed=2)
    x, y, p = torch.tensor(x), torch.tensor(y), torch.tensor(protos)
    w0 = beta_procrustes(orthogonal_procrustes(x, p[y]), 0.2)
    every, some = {}, {}
    runs = []
    for seen, steps in ((every, None), (some, (3, 10))):
        gen, coin = _generators(4)
        runs.append(refine(w0, x, y, p, steps=10, generator=gen, coin=coin, callback_steps=steps,
                           callback=lambda t, w, w_tt, trained, seen=seen: seen.setdefault(t, w.clone())))
    assert sorted(every) == list(range(1, 11)) and sorted(some) == [3, 10]
    torch.testing.assert_close(some[3], every[3], rtol=0, atol=0)
    torch.testing.assert_close(runs[0].W, runs[1].W, rtol=0, atol=0)
