"""Choosing the step count and the options on the support set: one fit path, a bounded budget,
cross-fitted held-out rows, stable choices, options only on a significant gain, zero-shot kept
where a small support cannot show anything better."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import normalize, planted_gap_problem, random_orthogonal

import lfa_index.core.solvers.selection as selection
import lfa_index.core.solvers.supervised as supervised
from lfa_index import LFA, InvalidParameterError
from lfa_index.core.config import RefineConfig
from lfa_index.core.solvers.beta import BETA_GRID, select_beta
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes
from lfa_index.core.solvers.refine import refine
from lfa_index.core.solvers.selection import (
    HORIZON,
    Candidate,
    Evidence,
    Variant,
    checkpoints_for,
    choose,
    horizon_for,
    support_folds,
)

PLAIN = Variant()


def test_the_paper_preset_is_the_papers_algorithm_composed_from_the_core_functions():
    x, y, p, _, _ = planted_gap_problem(seed=3)
    paper = LFA.paper(steps=40, random_state=5, device="cpu").fit(x, y, p)  # the CPU composition below
    # the estimator L2-normalises its inputs (a last-bit change that a chaotic top-k would amplify)
    xt, yt, pt = F.normalize(torch.tensor(x), dim=1), torch.tensor(y), F.normalize(torch.tensor(p), dim=1)
    beta = select_beta(xt, yt, pt, identity_informative=True, guard=False, betas=BETA_GRID, random_state=5)
    w0 = beta_procrustes(orthogonal_procrustes(xt, pt[yt]), beta.beta)
    gen, coin = torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)
    result = refine(w0, xt, yt, pt, steps=40, generator=gen, coin=coin, config=RefineConfig(precision="float32"))
    np.testing.assert_array_equal(paper.W_, result.W.numpy())
    np.testing.assert_array_equal(paper.W_tt_, result.W_tt.numpy())  # the paper's W_tt: the moving average
    assert paper.beta_ == beta.beta and paper.prototype_mix_ == 0.0 and not paper.intercept_.any()


def test_the_default_with_every_option_off_is_the_paper_fit_bit_for_bit():
    x, y, p, xt, _ = planted_gap_problem(n_test=10, seed=3)
    paper = LFA.paper(steps=30, random_state=5).fit(x, y, p)
    off = LFA(steps=30, random_state=5, projection="shrink", prototype_mix=0.0, mapping="task",
              refine_prototypes=False, keep_zero_shot=False, new_class_map="ema",
              precision="float32").fit(x, y, p)
    for name in ("W_", "W_tt_", "W_avg_", "prototypes_", "intercept_"):
        np.testing.assert_array_equal(getattr(off, name), getattr(paper, name))
    np.testing.assert_array_equal(off.decision_function(xt), paper.decision_function(xt))


def twin_prototype_problem(seed=0, d=24, n_classes=16, shots=8):
    """Images cluster by class, but classes come in pairs whose text prototypes are nearly the same:
    the text cannot tell twins apart, the support rows can, so the hybrid prototypes should win."""
    rng = np.random.default_rng(seed)
    centres = normalize(rng.standard_normal((n_classes, d)))

    def draw(n):
        labels = np.repeat(np.arange(n_classes), n)
        return normalize(centres[labels] + 0.25 * rng.standard_normal((len(labels), d))).astype(np.float32), labels

    x, y = draw(shots)
    xt, yt = draw(30)
    twins = centres[np.arange(n_classes) // 2 * 2]  # class 2k+1 borrows the prototype of class 2k
    text = normalize(twins + 0.02 * rng.standard_normal((n_classes, d))).astype(np.float32)
    return x, y, text, xt, yt


def test_hybrid_prototypes_switch_on_where_the_support_carries_the_classes():
    x, y, text, xt, yt = twin_prototype_problem()
    paper = LFA.paper(steps=50, random_state=0).fit(x, y, text)
    auto = LFA(random_state=0).fit(x, y, text)
    assert auto.prototype_mix_ >= 0.5
    # the discriminant brings class biases, and so does the average with it; plain class means bring none
    assert auto.intercept_.any() == (auto.support_kind_ == "discriminant" or bool(auto.discriminant_weight_))
    assert auto.score(xt, yt) > paper.score(xt, yt) + 0.1
    assert auto.selection_["how"] == "held-out" and auto.selection_["rows"] == len(y)


@pytest.mark.parametrize("unit_rows", [False, True])
def test_the_hybrid_grid_scores_and_spreads_every_hybrid_as_its_own_prototypes_do(unit_rows):
    """Held-out scoring builds every (kind, λ) hybrid from the base's and each kind's λ = 1 scores; each
    must match the hybrid's own prototypes (`classifier`, `class_scores`, `score_spread`), with a class
    that has no support rows (it keeps its text prototype and the mean bias)."""
    from lfa_index.core.solvers.prototypes import HybridGrid, class_scores, hybrid_key, score_spread

    rng = np.random.default_rng(7)
    aligned = torch.tensor(rng.standard_normal((60, 12)))
    labels = torch.tensor(np.repeat(np.arange(5), 12))  # class 5 of 6 has no rows
    base = F.normalize(torch.tensor(rng.standard_normal((6, 12))), dim=1)
    queries = torch.tensor(rng.standard_normal((9, 12)))
    kinds, mixes = ("discriminant", "mean"), (0.0, 0.25, 0.5, 0.75, 1.0)
    grid = HybridGrid.of(aligned, labels, base, kinds, mixes, blend=True, unit_rows=unit_rows)
    scored = grid.scores(queries)
    for kind in kinds:
        for mix in mixes:
            key = hybrid_key(kind, mix)
            own = selection.classifier(aligned, labels, base, mix, kind, unit_rows=unit_rows)
            np.testing.assert_allclose(scored[key].numpy(), class_scores(queries, *own).numpy(), atol=1e-12)
            assert grid.spread(key) == pytest.approx(float(score_spread(aligned, *own)), rel=1e-9)
    alone = selection.classifier(aligned, labels, base, 1.0, "discriminant", unit_rows=unit_rows)
    np.testing.assert_allclose(scored[grid.alone].numpy(), class_scores(queries, *alone).numpy(), atol=1e-12)
    assert grid.spread(grid.alone) == pytest.approx(float(score_spread(aligned, *alone)), rel=1e-9)


def same_space_problem(n_classes, shots, seed=0, d=32, noise=0.9):
    """Images and prototypes from one model: rows scatter around their own prototype (zero-shot works)."""
    rng = np.random.default_rng(seed)
    protos = normalize(rng.standard_normal((n_classes, d))).astype(np.float32)

    def draw(n):
        labels = np.repeat(np.arange(n_classes), n)
        return normalize(protos[labels] + noise * rng.standard_normal((len(labels), d))).astype(np.float32), labels

    x, y = draw(shots)
    xt, yt = draw(100)
    return x, y, protos, xt, yt


@pytest.mark.parametrize("n_classes", [4, 24])
def test_a_same_model_one_shot_support_keeps_the_zero_shot_accuracy(n_classes):
    """4 classes: too few to test (C! < 1/α), the evidence only has to point the right way; 24 noisy
    classes (zero-shot ≈ 30 %): enough for the permutation test (with 12 such classes it falls below
    the 10⁻³ level on 3 seeds of 10, and those fits take Procrustes: see core/solvers/beta.py)."""
    for seed in range(3):
        x, y, p, xt, yt = same_space_problem(n_classes, shots=1, seed=seed)
        zero_shot = np.mean((xt @ p.T).argmax(1) == yt)
        lfa = LFA(random_state=seed).fit(x, y, p)
        assert lfa.beta_ == 1.0 and lfa.beta_selection_.endswith("identity kept")
        assert lfa.prototype_mix_ == 0.0
        assert lfa.score(xt, yt) >= zero_shot - 0.02
        if n_classes <= 4:  # every other class is a neighbour of the loss: nothing to refine
            assert lfa.steps_ == 0
            np.testing.assert_array_equal(lfa.predict(xt), (xt @ p.T).argmax(1))


def test_a_rotated_space_at_one_shot_drops_the_uninformative_identity():
    x, y, p, xt, yt = same_space_problem(12, shots=1, seed=1, noise=0.3)
    rotated = x @ random_orthogonal(x.shape[1], seed=4).astype(np.float32)
    lfa = LFA(random_state=0).fit(rotated, y, p)
    # projection-free but unrelated: the identity ranks the true classes at chance or the class-disjoint
    # folds show Procrustes doing better; either way β leaves the identity
    assert lfa.beta_ < 1.0


def test_a_small_same_model_support_keeps_beta_one_unless_procrustes_shows_a_gain():
    x, y, p, _, _ = same_space_problem(4, shots=4, seed=2)
    kept = LFA(random_state=0).fit(x, y, p)
    assert kept.beta_ == 1.0 and kept.beta_selection_ == "cv, identity kept"
    paper = LFA.paper(steps=5, random_state=0).fit(x, y, p)
    assert paper.beta_selection_ == "cv"
    # a planted rotation is a gain every split shows: the guard lets β go
    x, y, p, _, _ = planted_gap_problem(rotation_mix=1.0, noise=0.2, seed=2)
    moved = LFA(steps=5, random_state=0).fit(x, y, p)
    assert moved.beta_ < 0.5 and moved.beta_selection_ == "cv"


@pytest.mark.parametrize("n_classes,shots", [(4, 4), (6, 1), (12, 2), (10, 8), (40, 10)])
def test_a_default_fit_runs_at_most_folds_plus_one_schedules_bounded_by_the_support_size(monkeypatch, n_classes,
                                                                                        shots):
    x, y, p, _, _ = planted_gap_problem(n_classes=n_classes, shots=shots, d=16, seed=1)
    ran = []
    original = supervised.refine

    def counting(*args, **kwargs):
        ran.append(kwargs["steps"])
        return original(*args, **kwargs)

    monkeypatch.setattr(supervised, "refine", counting)
    monkeypatch.setattr(selection, "refine", counting)
    lfa = LFA(random_state=0).fit(x, y, p)
    n = len(y)
    horizon = horizon_for(n, n_classes, k=3)
    assert horizon == (0 if n_classes <= 4 else min(HORIZON, n))
    if shots == 1:  # nothing held out: only the final run, the public code's 200 steps
        assert ran == [selection.ONE_SHOT_STEPS] and lfa.steps_ == selection.ONE_SHOT_STEPS
        return
    assert sum(ran) <= (RefineConfig().folds + 1) * horizon
    assert lfa.steps_ <= horizon


def test_every_support_row_is_held_out_exactly_once_and_never_seen_by_its_fold():
    y = np.repeat(np.arange(5), 6)
    y = np.concatenate([y, [5]])  # a class with one row always trains
    folds = support_folds(y, RefineConfig().folds, random_state=0)
    held = np.concatenate([va for _, va in folds])
    assert sorted(held) == sorted(np.flatnonzero(y != 5))
    for train, val in folds:
        assert not set(train) & set(val) and 30 in train
        assert set(y[val]) == set(range(5))
    assert support_folds(np.arange(7), RefineConfig().folds, random_state=0) is None


def _evidence(hits_by_candidate: dict[Candidate, np.ndarray]) -> Evidence:
    candidates = list(hits_by_candidate)
    return Evidence(candidates, np.stack([hits_by_candidate[c] for c in candidates]), 3, 100, (0, 50, 100))


def _grid(base: np.ndarray, mapping="task", variant=PLAIN):
    return {Candidate(variant, s, mapping, m): base.copy() for s in (0, 50, 100) for m in (0.0, 0.5, 1.0)}


def test_a_lucky_isolated_candidate_loses_to_a_consistently_good_neighbourhood():
    rng = np.random.default_rng(0)
    base = rng.random(400) < 0.6
    grid = _grid(base)
    for s in (50, 100):
        for m in (0.5, 1.0):
            better = base.copy()
            better[np.flatnonzero(~base)[:12]] = True  # +12 rows everywhere in this corner
            grid[Candidate(PLAIN, s, "task", m)] = better
    spike = base.copy()
    spike[np.flatnonzero(~base)[:20]] = True  # +20 rows at one isolated candidate
    grid[Candidate(PLAIN, 0, "task", 0.0)] = spike
    chosen = choose(_evidence(grid), PLAIN).chosen
    assert (chosen.steps, chosen.mix) in {(50, 0.5), (50, 1.0), (100, 0.5), (100, 1.0)}


def test_an_option_needs_a_significant_paired_gain_over_the_plain_classifier():
    rng = np.random.default_rng(1)
    base = rng.random(300) < 0.6
    grid = _grid(base)
    slight = base.copy()
    slight[np.flatnonzero(~base)[:3]] = True  # 3 more rows right: noise
    grid.update(_grid(slight, mapping="average"))
    assert choose(_evidence(grid), PLAIN).chosen.mapping == "task"
    clear = base.copy()
    clear[np.flatnonzero(~base)[:40]] = True  # 40 more rows right, none lost: a real gain
    grid.update(_grid(clear, mapping="average"))
    assert choose(_evidence(grid), PLAIN).chosen.mapping == "average"


def test_the_discriminant_keeps_half_the_served_average_unless_held_out_rows_show_it_significantly_worse():
    rng = np.random.default_rng(2)
    base = rng.random(300) < 0.6

    def evidence(alone_hits: np.ndarray) -> Evidence:
        grid = _grid(base)
        for s in (0, 50, 100):  # the discriminant alone (λ = 1) at every step count
            grid[Candidate(PLAIN, s, "task", 1.0)] = alone_hits
        ev = _evidence(grid)
        # as served, per share: ½ gets every row right, ¼ none, so the reported figure shows which one
        ev.served_hits = {selection.BLEND_SHARE: np.ones_like(ev.hits), selection.BLEND_SHARE_OUTVOTED: 0 * ev.hits}
        ev.served_scores = {selection.BLEND_SHARE: np.ones(ev.hits.shape, np.float32),
                            selection.BLEND_SHARE_OUTVOTED: np.zeros(ev.hits.shape, np.float32)}
        return ev

    slightly = base.copy()
    slightly[np.flatnonzero(base)[:4]] = False  # 4 rows fewer: noise
    near = choose(evidence(slightly), PLAIN)
    assert near.chosen.mix < 1.0 and near.blend_share == selection.BLEND_SHARE
    assert near.accuracy == 1.0 and near.heldout_scores.min() == 1.0 and near.chosen_accuracy == pytest.approx(0.6,
                                                                                                            abs=0.06)
    clearly = base.copy()
    clearly[np.flatnonzero(base)[:40]] = False  # 40 rows fewer, none gained: significantly worse
    far = choose(evidence(clearly), PLAIN)
    assert far.blend_share == selection.BLEND_SHARE_OUTVOTED and far.accuracy == 0.0
    assert far.as_dict()["blend_share"] == selection.BLEND_SHARE_OUTVOTED
    assert choose(_evidence(_grid(base)), PLAIN).blend_share is None  # nothing served averaged: no share


def test_the_choice_is_stable_across_random_states_on_a_clear_problem():
    x, y, text, xt, yt = twin_prototype_problem(seed=3)
    fits = [LFA(random_state=s).fit(x, y, text) for s in range(3)]
    assert len({(lfa.prototype_mix_, lfa.support_kind_) for lfa in fits}) == 1
    accuracies = [lfa.score(xt, yt) for lfa in fits]
    assert max(accuracies) - min(accuracies) < 0.05


def test_checkpoints_cover_the_schedule_and_the_horizon_is_bounded():
    assert checkpoints_for(150) == (0, 25, 50, 75, 100, 125, 150)
    assert checkpoints_for(60) == (0, 25, 50, 60)
    assert checkpoints_for(0) == (0,)
    assert horizon_for(40, 10, k=3) == 40 and horizon_for(4000, 10, k=3) == HORIZON
    assert horizon_for(4000, 4, k=3) == 0


def test_fixed_options_are_used_as_given_without_a_held_out_search():
    x, y, p, _, _ = planted_gap_problem(seed=2)
    lfa = LFA(steps=20, prototype_mix=0.5, support_prototypes="mean", refine_prototypes=True, center=True,
              mapping="average", random_state=0).fit(x, y, p)
    assert lfa.steps_ == 20
    assert (lfa.prototype_mix_, lfa.mapping_, lfa.refine_prototypes_, lfa.center_) == (0.5, "average", True, True)
    assert lfa.refined_prototypes_ is not None and lfa.feature_mean_.any()
    assert not lfa.intercept_.any()  # the mean support prototypes carry no bias
    np.testing.assert_allclose(np.linalg.norm(lfa.refined_prototypes_, axis=1), 1.0, atol=1e-5)


def offset_problem(offset_size, seed=0, d=24, n_classes=12, shots=60):
    """Image rows: rotated prototypes plus a shared offset (a modality gap); zero-mean prototypes."""
    rng = np.random.default_rng(seed)
    protos = normalize(rng.standard_normal((n_classes, d))).astype(np.float32)
    rotation = random_orthogonal(d, seed + 1)
    offset = normalize(rng.standard_normal(d)) * offset_size

    def draw(n):
        labels = np.repeat(np.arange(n_classes), n)
        rows = protos[labels] @ rotation + offset + 0.4 * rng.standard_normal((len(labels), d))
        return normalize(rows).astype(np.float32), labels

    x, y = draw(shots)
    xt, yt = draw(20)
    return x, y, protos, xt, yt


def test_centring_asked_for_as_auto_is_tried_on_the_folds_and_kept_on_a_gain():
    x, y, p, xt, yt = offset_problem(2.5)
    only_centring = dict(steps=50, prototype_mix=0.0, mapping="task", refine_prototypes=False, random_state=0)
    auto = LFA(center="auto", **only_centring).fit(x, y, p)
    plain = LFA(**only_centring).fit(x, y, p)
    assert not plain.center_
    assert auto.center_ and auto.feature_mean_.any()
    assert auto.score(xt, yt) > plain.score(xt, yt) + 0.1


def test_options_that_need_an_affine_query_side_refuse_the_papers_shrinking_projection():
    x, y, p, _, _ = planted_gap_problem(d=24, seed=5)
    narrow = p[:, :16]
    with pytest.raises(InvalidParameterError, match="projection='widen'"):
        LFA(projection="shrink", center=True, steps=5).fit(x, y, narrow)
    with pytest.raises(InvalidParameterError, match="projection='widen'"):
        LFA(projection="shrink", prototype_mix=0.5, support_prototypes="discriminant", steps=5).fit(x, y, narrow)
    means = LFA(projection="shrink", prototype_mix=0.5, steps=5, random_state=0).fit(x, y, narrow)
    assert means.support_kind_ == "mean" and not means.intercept_.any()  # class means need no affine side
    auto = LFA(projection="shrink", steps=5, random_state=0).fit(x, y, narrow)
    assert auto.projection_side_ == "image" and not auto.center_ and not auto.intercept_.any()
    with pytest.raises(InvalidParameterError, match="projection='widen'"):  # narrower rows projected up
        LFA(projection="to_text", center=True, steps=5).fit(x[:, :16], y, p)
    up = LFA(projection="to_text", steps=5, random_state=0).fit(x[:, :16], y, p)
    assert up.projection_side_ == "image" and up.W_.shape == (24, 24) and not up.center_ and not up.intercept_.any()


def test_unsupervised_fits_refuse_options_that_need_labels():
    x, _, p, _, _ = planted_gap_problem(seed=6)
    with pytest.raises(InvalidParameterError, match="need labels"):
        LFA(center=True, steps=5, n_rounds=1).fit(x, None, p)
    unsupervised = LFA(steps=5, n_rounds=1, random_state=0).fit(x, None, p)
    assert unsupervised.selection_ is None and unsupervised.prototype_mix_ == 0.0


def test_paper_preset_turns_every_option_off_and_projects_the_image_rows_to_the_text_width():
    params = LFA.paper(beta=0.3).get_params()
    assert params["beta"] == 0.3 and params["projection"] == "to_text"
    assert (params["prototype_mix"], params["refine_prototypes"], params["center"], params["mapping"]) == \
        (0.0, False, False, "task")
    assert (params["keep_zero_shot"], params["new_class_map"]) == (False, "ema")


def test_the_paper_presets_auto_steps_come_from_one_held_out_run():
    x, y, p, _, _ = planted_gap_problem(seed=4)
    lfa = LFA.paper(steps="auto", random_state=0).fit(x, y, p)
    tried = [t[0] for t in lfa.step_trials_]
    assert tried == list(selection.PAPER_CHECKPOINTS)
    best = max(t[1] for t in lfa.step_trials_)
    assert dict((t[0], t[1]) for t in lfa.step_trials_)[lfa.steps_] == best
    assert len(lfa.loss_curve_) == lfa.steps_


def test_the_fit_ends_with_a_summary_of_its_choices(capsys):
    x, y, text, _, _ = twin_prototype_problem()
    lfa = LFA(random_state=0, verbose=True).fit(x, y, text)
    printed = capsys.readouterr().err
    assert lfa.summary_ in printed and lfa.summary_.startswith("LFA fit: β=")
    assert f"{lfa.steps_} steps" in lfa.summary_ and "held-out" in lfa.summary_ and lfa.fit_seconds_ > 0


def test_the_default_serves_its_held_out_choice_averaged_with_the_discriminant_alone():
    x, y, text, xt, yt = twin_prototype_problem(seed=2)
    auto = LFA(random_state=0).fit(x, y, text)
    w = auto.discriminant_weight_
    assert auto.selection_["how"] == "held-out" and 0 < w < 1
    # rebuild the served vectors from the fitted map: (1 − w)·hybrid(λ, kind) + w·discriminant
    z = torch.as_tensor(auto.query_map("task").mapped(x))
    labels = torch.as_tensor(np.searchsorted(auto.classes_, y))
    base = torch.as_tensor(auto.text_prototypes_, dtype=torch.float64)
    chosen = selection.classifier(z, labels, base, auto.prototype_mix_, auto.support_kind_)
    disc = selection.classifier(z, labels, base, 1.0, "discriminant")
    bias = (1 - w) * (0 if chosen[1] is None else chosen[1]) + w * disc[1]
    np.testing.assert_allclose(auto.prototypes_, (1 - w) * chosen[0] + w * disc[0], atol=1e-5)
    np.testing.assert_allclose(auto.intercept_, bias, atol=1e-5)
    # the held-out figures describe what is served, next to the chosen candidate's own
    assert auto.selection_["chosen_accuracy"] is not None
    assert "averaged with the discriminant" in auto.summary_ and "as served" in auto.summary_
    assert len(auto.heldout_scores_) == len(y)
    # a warm start keeps serving the average, at the share chosen before
    share = auto.selection_["blend_share"]
    assert share in (selection.BLEND_SHARE, selection.BLEND_SHARE_OUTVOTED)
    auto.set_params(warm_start=True).fit(x, y, text)
    assert auto.discriminant_weight_ is not None and auto.selection_["blend_share"] == share


def test_the_paper_a_fixed_mix_and_one_shot_fits_serve_their_classifier_as_it_is():
    x, y, text, _, _ = twin_prototype_problem(seed=2)
    assert LFA.paper(steps=10, random_state=0).fit(x, y, text).discriminant_weight_ is None
    assert LFA(prototype_mix=0.5, steps=10, random_state=0).fit(x, y, text).discriminant_weight_ is None
    assert LFA(support_prototypes="mean", random_state=0).fit(x, y, text).discriminant_weight_ is None
    one = np.unique(y, return_index=True)[1]
    assert LFA(random_state=0).fit(x[one], y[one], text).discriminant_weight_ is None


def gap_problem(seed, n_classes=40, shots=4, d=48, n_test=20):
    """One space for rows and prototypes, with a shared offset between sentences and short names (a
    modality gap) that zero-shot pays for on every class, seen or not."""
    rng = np.random.default_rng(seed)
    protos = normalize(rng.standard_normal((n_classes, d)))
    offset = normalize(rng.standard_normal(d)) * 2.0

    def draw(n):
        labels = np.repeat(np.arange(n_classes), n)
        rows = normalize(protos[labels] + offset + 0.4 * rng.standard_normal((len(labels), d)))
        return rows.astype(np.float32), labels

    return draw(shots), draw(n_test), protos.astype(np.float32)


def test_classes_added_from_text_beat_zero_shot_where_the_fitted_classes_show_a_map_that_carries_over():
    """Base-to-new: fitted on even classes, scored on odd ones by their text prototypes under W_tt."""
    gains = []
    for seed in range(4):
        (x, y), (xt, yt), protos = gap_problem(seed)
        base, new = y % 2 == 0, yt % 2 == 1
        lfa = LFA(random_state=seed, steps=0).fit(x[base], y[base] // 2, protos[0::2])
        new_protos = protos[1::2]
        zero_shot = np.mean((xt[new] @ new_protos.T).argmax(1) == yt[new] // 2)
        ours = np.mean(lfa.predict(xt[new], mapping="tt", text_emb=new_protos) == yt[new] // 2)
        assert lfa.selection_["new_class_beta_selection"] == "class-disjoint-cv, mean directions removed"
        assert ours >= zero_shot
        gains.append(ours - zero_shot)
    assert np.mean(gains) > 0.03


def test_the_progress_bar_counts_every_refinement_step_and_the_summary_names_the_held_out_runs(monkeypatch):
    import tqdm.auto

    bars = []

    class Spy(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(tqdm.auto, "tqdm", Spy)
    x, y, p, _, _ = planted_gap_problem(seed=5, shots=6)
    lfa = LFA(random_state=0, verbose=True).fit(x, y, p)
    (bar,) = bars
    runs, horizon = lfa.selection_["runs"], lfa.selection_["horizon"]
    assert runs == RefineConfig().folds and bar.n == bar.total == runs * horizon + lfa.steps_
    assert f"{lfa.steps_} steps (+ {runs} held-out run(s) of {horizon})" in lfa.summary_
    assert bar.smoothing == 0  # the mean rate since the first step: no swings at the checkpoints


@pytest.mark.parametrize("shots,trained", [(4, False), (8, True)])
def test_prototypes_are_trained_where_every_class_has_enough_rows(shots, trained):
    x, y, p, _, _ = planted_gap_problem(seed=6, shots=shots)
    lfa = LFA(random_state=0, steps=20).fit(x, y, p)
    assert lfa.refine_prototypes_ is trained and (lfa.refined_prototypes_ is not None) is trained
    assert ("trained prototypes" in lfa.summary_) is trained
