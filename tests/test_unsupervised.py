import numpy as np
import torch
from synthetic import planted_gap_problem

from lfa_index import LFA
from lfa_index.core.solvers.sinkhorn import sinkhorn_assignments


def test_sinkhorn_assignments_are_soft_and_balanced():
    x, y, protos, _, _ = planted_gap_problem(noise=0.1, rotation_mix=0.0, seed=1)
    q = sinkhorn_assignments(torch.tensor(x), torch.tensor(protos))
    np.testing.assert_allclose(q.sum(1).numpy(), 1.0, atol=1e-5)
    # uniform class marginals: every class receives about n/C of the mass
    np.testing.assert_allclose(q.sum(0).numpy(), len(x) / len(protos), rtol=0.05)


def test_unsupervised_lfa_recovers_the_labels_of_a_well_separated_planted_problem():
    x, y, protos, _, _ = planted_gap_problem(n_classes=8, shots=20, noise=0.15, rotation_mix=0.35, seed=4)
    zero_shot = (x @ protos.T).argmax(1)
    lfa = LFA(steps=50, n_rounds=3, random_state=0).fit(x, None, protos)
    recovered = lfa.assignments_.argmax(1)
    assert lfa.assignments_.shape == (len(x), len(protos))
    np.testing.assert_allclose(lfa.assignments_.sum(1), 1.0, atol=1e-5)
    assert np.mean(recovered == y) >= 0.95
    assert np.mean(lfa.predict(x) == y) >= 0.95
    assert np.mean(lfa.predict(x) == y) > np.mean(zero_shot == y)


def test_a_warm_unsupervised_fit_continues_from_the_task_map_whatever_map_is_served(planted):
    """The served map may be the average with W_ema_; a warm start refines the task map all the same."""
    x, _, p, _, _ = planted
    fits = {m: LFA(mapping=m, steps=5, n_rounds=1, random_state=0, warm_start=True).fit(x, None, p)
            for m in ("task", "average")}
    for lfa in fits.values():
        lfa.fit(x, None, p)
    task = {m: 2 * lfa.W_avg_.astype(np.float64) - lfa.W_ema_ for m, lfa in fits.items()}
    np.testing.assert_allclose(task["average"], task["task"], atol=1e-4)
    np.testing.assert_allclose(fits["task"].W_, task["task"], atol=1e-4)
