import numpy as np
import pytest
import torch
from synthetic import normalize, planted_gap_problem, random_orthogonal

from lfa_index import LFA
from lfa_index.core.solvers.beta import (
    identity_evidence,
    identity_is_informative,
    select_beta,
    select_beta_unseen,
    significantly_better,
)
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes, support_splits


def f32(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float32)


def test_orthogonal_procrustes_recovers_a_planted_rotation():
    rng = np.random.default_rng(0)
    x = normalize(rng.standard_normal((400, 24)))
    q = random_orthogonal(24, seed=3)
    w = orthogonal_procrustes(torch.tensor(x, dtype=torch.float32), torch.tensor(x @ q, dtype=torch.float32))
    np.testing.assert_allclose(w.numpy(), q, atol=1e-4)


def test_orthogonal_procrustes_is_orthogonal_and_beats_other_orthogonal_maps():
    rng = np.random.default_rng(1)
    x = torch.tensor(normalize(rng.standard_normal((50, 16))), dtype=torch.float32)
    t = torch.tensor(normalize(rng.standard_normal((50, 16))), dtype=torch.float32)
    w = orthogonal_procrustes(x, t)
    torch.testing.assert_close(w.T @ w, torch.eye(16), atol=1e-5, rtol=0)
    best = torch.linalg.matrix_norm(x @ w - t)
    for seed in range(20):
        other = torch.tensor(random_orthogonal(16, seed), dtype=torch.float32)
        assert best <= torch.linalg.matrix_norm(x @ other - t) + 1e-5


def test_beta_one_gives_identity_and_beta_zero_gives_w_op():
    w_op = torch.tensor(random_orthogonal(8, seed=5), dtype=torch.float32)
    torch.testing.assert_close(beta_procrustes(w_op, 1.0), torch.eye(8))
    torch.testing.assert_close(beta_procrustes(w_op, 0.0), w_op)
    torch.testing.assert_close(beta_procrustes(w_op, 0.25), 0.75 * w_op + 0.25 * torch.eye(8))


def test_estimator_with_beta_one_and_no_refinement_is_the_identity(planted):
    x, y, protos, _, _ = planted
    lfa = LFA.paper(beta=1.0, steps=1, lr=1e-12, final_lr=0.0, random_state=0).fit(x, y, protos)
    np.testing.assert_allclose(lfa.W_, np.eye(x.shape[1]), atol=1e-6)
    np.testing.assert_allclose(lfa.transform(x), x / np.linalg.norm(x, axis=1, keepdims=True), atol=1e-5)


def test_estimator_with_beta_zero_and_no_refinement_is_orthogonal_procrustes():
    # More classes than dimensions: XᵀPY has full rank, so W_op is unique.
    x, y, protos, _, _ = planted_gap_problem(n_classes=40, shots=4, d=16)
    lfa = LFA.paper(beta=0.0, steps=1, lr=1e-12, final_lr=0.0, random_state=0).fit(x, y, protos)
    w_op = orthogonal_procrustes(torch.tensor(x), torch.tensor(protos[y]))
    np.testing.assert_allclose(lfa.W_, w_op.numpy(), atol=1e-5)


def test_beta_cross_validation_prefers_identity_when_already_aligned_and_procrustes_under_a_rotation():
    rng = np.random.default_rng(2)
    protos = normalize(rng.standard_normal((10, 32)))
    y = np.repeat(np.arange(10), 8)
    aligned = normalize(protos[y] + 0.45 * rng.standard_normal((80, 32)))
    rotated = aligned @ random_orthogonal(32, seed=9)
    betas = np.round(np.linspace(0, 1, 21), 2)
    aligned_choice = select_beta(f32(aligned), torch.tensor(y), f32(protos), identity_informative=True, guard=False,
                                 betas=betas, random_state=0)
    rotated_choice = select_beta(f32(rotated), torch.tensor(y), f32(protos), identity_informative=False, guard=False,
                                 betas=betas, random_state=0)
    beta_aligned, how = aligned_choice.beta, aligned_choice.how
    beta_rotated, scores = rotated_choice.beta, rotated_choice.scores
    assert how == "cv"
    assert beta_aligned >= 0.5
    assert beta_rotated <= 0.3
    assert scores.shape == (21,) and np.all((scores >= 0) & (scores <= 1))


def test_support_splits_are_stratified_and_keep_single_row_classes_in_training():
    y = np.repeat(np.arange(5), 4)
    for train, val in support_splits(y, n_splits=3, val_size=0.25, random_state=0):
        assert set(y[train]) == set(range(5)) and set(y[val]) == set(range(5))
        assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(y)
    # two rows per class: one on each side
    y2 = np.repeat(np.arange(6), 2)
    for train, val in support_splits(y2, n_splits=3, val_size=0.2, random_state=0):
        assert sorted(y2[train]) == sorted(y2[val]) == list(range(6))
    # capped classes with a single row stay in training and are never validated
    mixed = np.array([0, 0, 0, 1, 1, 1, 2, 3])
    for train, val in support_splits(mixed, n_splits=3, val_size=0.3, random_state=0):
        assert {6, 7} <= set(train) and set(mixed[val]) <= {0, 1}
    assert support_splits(np.arange(10), n_splits=3, val_size=0.2, random_state=0) is None


def test_one_shot_beta_is_procrustes_when_the_identity_carries_nothing_and_zero_shot_otherwise():
    rng = np.random.default_rng(3)
    protos = normalize(rng.standard_normal((30, 32)))
    y = torch.arange(30)
    betas = np.round(np.linspace(0, 1, 21), 2)
    # across a projection (or when the support says so) the identity is uninformative: plain Procrustes
    unrelated = normalize(rng.standard_normal((30, 32)))
    choice = select_beta(f32(unrelated), y, f32(protos), identity_informative=False, guard=True, betas=betas,
                         random_state=0)
    assert (choice.beta, choice.scores, choice.how) == (0.0, None, "procrustes, identity uninformative")
    # same model: β is chosen on folds of whole classes, and only a significant gain leaves the identity
    related = normalize(protos + 0.5 * rng.standard_normal((30, 32)))
    assert identity_is_informative(f32(related), y, f32(protos))
    choice = select_beta(f32(related), y, f32(protos), identity_informative=True, guard=True, betas=betas,
                         random_state=0)
    assert choice.how.startswith("class-disjoint-cv") and choice.scores.shape == (21,)
    assert choice.beta == 1.0 or choice.how == "class-disjoint-cv"


def test_the_identity_is_informative_when_zero_shot_ranks_true_classes_above_chance():
    rng = np.random.default_rng(4)
    protos = f32(normalize(rng.standard_normal((4, 32))))
    y = torch.arange(4)
    related = f32(normalize(protos.numpy() + 0.8 * rng.standard_normal((4, 32))))
    assert identity_is_informative(related, y, protos)
    # the true class ranked last everywhere: below chance
    assert not identity_is_informative(protos[[1, 0, 3, 2]] - 2 * protos, y, protos)


def test_a_gain_must_be_significant_on_the_rows_where_two_classifiers_disagree():
    same = np.ones(100, dtype=bool)
    assert not significantly_better(same, same)
    slightly = same.copy()
    reference = same.copy()
    reference[:3] = False
    assert not significantly_better(slightly, reference)  # 3 gains, 0 losses: p = 0.125
    reference[:12] = False
    assert significantly_better(slightly, reference)
    assert significantly_better(np.full(20, 0.9), np.full(20, 0.5))  # shares of repeats work too


def test_unseen_class_beta_holds_out_whole_classes():
    rng = np.random.default_rng(5)
    protos = normalize(rng.standard_normal((12, 16)))
    y = np.repeat(np.arange(12), 3)
    x = normalize(protos[y] @ random_orthogonal(16, 2) + 0.1 * rng.standard_normal((36, 16)))
    choice = select_beta_unseen(f32(x), torch.tensor(y), f32(protos), identity_informative=True, random_state=0)
    assert choice.how == "class-disjoint-cv" and choice.beta <= 0.3  # a rotation carries over to unseen classes


def test_procrustes_is_the_identity_on_every_direction_the_rows_never_show():
    """Few rows leave eq. 4 open; of its solutions W_op is the one nearest the identity."""
    rng = np.random.default_rng(6)
    for n, d in ((5, 64), (40, 64), (30, 48)):
        x, t = f32(normalize(rng.standard_normal((n, d)))), f32(normalize(rng.standard_normal((n, d))))
        w = orthogonal_procrustes(x, t).double()
        torch.testing.assert_close(w.T @ w, torch.eye(d, dtype=torch.float64), atol=1e-5, rtol=0)
        u, s, vh = torch.linalg.svd(x.double().T @ t.double())
        assert float(torch.trace(w.T @ (x.double().T @ t.double()))) == pytest.approx(float(s.sum()), rel=1e-5)
        q, _ = torch.linalg.qr(torch.cat([x.double().T, t.double().T], 1))  # span of the rows and targets
        outside = torch.eye(d, dtype=torch.float64) - q @ q.T
        if 2 * n < d:
            torch.testing.assert_close(outside @ w @ outside, outside, atol=1e-5, rtol=0)
        assert float(torch.trace(w)) >= float(torch.trace(u @ vh)) - 1e-6  # never farther than the SVD's completion


def test_wide_and_narrow_procrustes_agree_with_the_full_svd_where_it_is_unique():
    rng = np.random.default_rng(7)
    x = f32(normalize(rng.standard_normal((6, 40))))
    y = f32(normalize(rng.standard_normal((6, 40))))
    w = orthogonal_procrustes(x, y)
    u, _, vh = torch.linalg.svd(x.T @ y)
    r = 6  # rank of xᵀy: the fitted directions are mapped as U Vᵀ maps them
    torch.testing.assert_close(u[:, :r].T @ w, vh[:r], atol=1e-4, rtol=0)


@pytest.mark.parametrize("seed", range(20))
def test_a_planted_pair_of_unrelated_spaces_of_one_width_never_keeps_the_identity_at_one_shot(seed):
    """Two unrelated spaces of one width (a random rotation of a same-model support, 40 classes, 1 shot):
    the identity carries nothing and the default takes Procrustes, on every seed."""
    x, y, protos, xt, yt = planted_gap_problem(n_classes=40, shots=1, d=48, rotation_mix=0.0, seed=seed, n_test=5)
    unrelated = (x @ random_orthogonal(48, 1000 + seed)).astype(np.float32)
    assert not identity_is_informative(f32(unrelated), torch.tensor(y), f32(protos))
    lfa = LFA(random_state=seed, steps=0).fit(unrelated, y, protos)
    assert lfa.beta_ == 0.0 and lfa.beta_selection_ == "procrustes, identity uninformative"
    # the same support in its own space keeps the identity
    assert identity_is_informative(f32(x), torch.tensor(y), f32(protos))
    kept = LFA(random_state=seed, steps=0).fit(x, y, protos)
    assert kept.beta_ == 1.0 and kept.beta_selection_.startswith("class-disjoint-cv")


def test_identity_evidence_is_a_z_score_under_class_permutations():
    """Against a brute-force permutation null: mean 0, Hoeffding's variance, any block size."""
    rng = np.random.default_rng(8)
    n_classes, d = 6, 16
    protos = normalize(rng.standard_normal((n_classes, d)))
    y = np.repeat(np.arange(n_classes), 3)
    x = normalize(protos[y] + 0.7 * rng.standard_normal((len(y), d)))
    sims = x @ protos.T
    z = (sims - sims.mean(1, keepdims=True)) / sims.std(1, keepdims=True)
    import itertools
    perms = itertools.permutations(range(n_classes))
    null = np.array([z[np.arange(len(y)), np.asarray(perm)[y]].sum() for perm in perms])
    observed = z[np.arange(len(y)), y].sum()
    expected = (observed - null.mean()) / null.std()
    assert abs(null.mean()) < 1e-9
    assert identity_evidence(f32(x), torch.tensor(y), f32(protos)) == pytest.approx(expected, rel=1e-4)
    import lfa_index.core.config as config
    small_blocks = pytest.MonkeyPatch()
    small_blocks.setattr(config, "SCORE_BLOCK", 7)  # one class per block
    try:
        assert identity_evidence(f32(x), torch.tensor(y), f32(protos)) == pytest.approx(expected, rel=1e-4)
    finally:
        small_blocks.undo()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (cuSOLVER's gesvda path)")
def test_rank_deficient_matrix_on_cuda_falls_back_to_a_converging_svd():
    # 64-d rows onto 48-d targets through 20 classes: the d x d cross-covariance has 44+ zero singular
    # values, which gesvda refuses to converge on (LinAlgError on an H200); the default driver answers
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((20, 64)), dtype=torch.float32, device="cuda")
    p = torch.zeros((20, 64), dtype=torch.float32, device="cuda")
    p[:, :20] = torch.eye(20, device="cuda")
    w = orthogonal_procrustes(x, p)
    eye = torch.eye(64, device="cuda")
    assert torch.allclose(w.T @ w, eye, atol=1e-4)
    np.testing.assert_allclose(w.cpu().numpy(), orthogonal_procrustes(x.cpu(), p.cpu()).numpy(), atol=1e-3)
