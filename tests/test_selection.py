"""Choosing the options on the support set: the plain fallback is the paper's fit, options win only
on held-out evidence, one shot keeps everything off, and AlignedIndex-free checks of the rules."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import lfa_index.core.estimator as estimator
from lfa_index import LFA, InvalidParameterError
from lfa_index.core.selection import Config, Rows, select_options
from synthetic import normalize, planted_gap_problem, random_orthogonal


def test_the_plain_fallback_is_the_papers_fit_bit_for_bit(monkeypatch):
    x, y, p, xt, _ = planted_gap_problem(n_test=10, seed=3)
    paper = LFA.paper(random_state=5).fit(x, y, p)
    # a margin no candidate can reach keeps the plain classifier
    monkeypatch.setattr(estimator, "select_options", functools.partial(estimator.select_options, margin=2.0))
    auto = LFA(random_state=5, center=False).fit(x, y, p)
    assert auto.selection_["how"] == "held-out"
    assert (auto.prototype_mix_, auto.mapping_, auto.refine_prototypes_, auto.center_) == (0.0, "task", False, False)
    np.testing.assert_array_equal(auto.W_, paper.W_)
    np.testing.assert_array_equal(auto.W_tt_, paper.W_tt_)
    assert auto.steps_ == paper.steps_ and auto.step_trials_ == paper.step_trials_
    np.testing.assert_array_equal(auto.decision_function(xt), paper.decision_function(xt))
    assert not auto.intercept_.any()


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
    auto = LFA(steps=50, random_state=0).fit(x, y, text)
    assert auto.prototype_mix_ > 0
    assert auto.intercept_.any()  # the discriminant brings class biases
    assert auto.score(xt, yt) > paper.score(xt, yt) + 0.1


def test_too_few_held_out_rows_keep_the_plain_classifier_without_extra_runs():
    x, y, text, xt, yt = twin_prototype_problem(n_classes=6, shots=3)  # 6 rows held out, at most 24 over 4 splits
    auto = LFA(steps=50, random_state=0).fit(x, y, text)
    assert auto.selection_["how"] == "too-few-rows" and auto.selection_["splits"] == 1
    assert (auto.prototype_mix_, auto.mapping_, auto.refine_prototypes_, auto.center_) == (0.0, "task", False, False)
    assert not auto.intercept_.any() and not auto.feature_mean_.any()
    np.testing.assert_array_equal(auto.prototypes_, auto.text_prototypes_)


def test_one_shot_keeps_every_option_off_and_refines_for_100_steps():
    x, y, p, _, _ = planted_gap_problem(shots=1, seed=1)
    auto = LFA(random_state=0).fit(x, y, p)
    assert auto.selection_["how"] == "one-shot"
    assert (auto.prototype_mix_, auto.mapping_, auto.refine_prototypes_, auto.center_) == (0.0, "task", False, False)
    assert auto.steps_ == 100 and auto.step_trials_ == []
    paper = LFA.paper(random_state=0).fit(x, y, p)
    np.testing.assert_array_equal(auto.W_, paper.W_)


def test_fixed_options_are_used_as_given_without_a_held_out_search():
    x, y, p, _, _ = planted_gap_problem(seed=2)
    lfa = LFA(steps=20, prototype_mix=0.5, support_prototypes="mean", refine_prototypes=True, center=True,
              mapping="average", random_state=0).fit(x, y, p)
    assert lfa.selection_["how"] == "fixed"
    assert (lfa.prototype_mix_, lfa.mapping_, lfa.refine_prototypes_, lfa.center_) == (0.5, "average", True, True)
    assert lfa.refined_prototypes_ is not None and lfa.feature_mean_.any()
    assert not lfa.intercept_.any()  # the mean support prototypes carry no bias
    np.testing.assert_allclose(np.linalg.norm(lfa.refined_prototypes_, axis=1), 1.0, atol=1e-5)


def test_more_splits_are_held_out_when_one_split_holds_few_rows():
    x, y, p, _, _ = planted_gap_problem(n_classes=6, shots=8, seed=4)
    rows = {False: Rows(torch.tensor(x), torch.tensor(x), 0.2)}
    gen, coin = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    options = dict(refine_options=dict(lr=5e-4), generator=gen, coin=coin, random_state=0, steps=10, center=False)
    few = select_options(rows, torch.tensor(y), torch.tensor(p), min_val_rows=30, budget=10.0, **options)
    assert few.splits == 3 and few.val_rows == 3 * 12  # 12 held-out rows per split, 30 wanted
    capped = select_options(rows, torch.tensor(y), torch.tensor(p), min_val_rows=1000, max_splits=4, budget=10.0,
                            **options)
    assert capped.splits == 4 and capped.val_rows == 4 * 12
    # the budget bounds the extra runs: (splits x 2 variants - 1) x 10 steps <= 3 x 10 steps searched
    budgeted = select_options(rows, torch.tensor(y), torch.tensor(p), min_val_rows=1000, budget=3.0, **options)
    assert budgeted.splits == 2
    many = select_options(rows, torch.tensor(y), torch.tensor(p), min_val_rows=10, **options)
    assert many.splits == 1 and many.val_rows == 12
    assert set(many.scores) >= {Config(False, False, "task", 0.0), Config(False, True, "average", 1.0)}


def offset_problem(offset_size, seed=0, d=24, n_classes=12):
    """Image rows: rotated prototypes plus a shared offset (a modality gap); zero-mean prototypes."""
    rng = np.random.default_rng(seed)
    protos = normalize(rng.standard_normal((n_classes, d))).astype(np.float32)
    rotation = random_orthogonal(d, seed + 1)
    offset = normalize(rng.standard_normal(d)) * offset_size

    def draw(n):
        labels = np.repeat(np.arange(n_classes), n)
        return normalize(protos[labels] @ rotation + offset + 0.4 * rng.standard_normal((len(labels), d))).astype(np.float32), labels

    x, y = draw(12)  # 36 held-out rows: enough to choose options (MIN_SELECT_ROWS)
    xt, yt = draw(20)
    return x, y, protos, xt, yt


def test_centring_is_kept_when_held_out_rows_say_a_shared_offset_hurts_procrustes():
    x, y, p, xt, yt = offset_problem(2.5)
    only_centring = dict(steps=50, prototype_mix=0.0, refine_prototypes=False, mapping="task", random_state=0)
    auto = LFA(**only_centring).fit(x, y, p)
    plain = LFA(center=False, **only_centring).fit(x, y, p)
    assert auto.center_ and auto.feature_mean_.any()
    assert auto.score(xt, yt) > plain.score(xt, yt) + 0.1
    candidates = {tuple(c[:4]): c[4] for c in auto.selection_["candidates"]}
    assert candidates[(True, False, "task", 0.0)] > candidates[(False, False, "task", 0.0)]


def test_options_that_need_an_affine_query_side_refuse_the_papers_shrinking_projection():
    x, y, p, _, _ = planted_gap_problem(d=24, seed=5)
    narrow = p[:, :16]
    with pytest.raises(InvalidParameterError, match="projection='widen'"):
        LFA(projection="shrink", center=True, steps=5).fit(x, y, narrow)
    with pytest.raises(InvalidParameterError, match="projection='widen'"):
        LFA(projection="shrink", prototype_mix=0.5, steps=5).fit(x, y, narrow)
    auto = LFA(projection="shrink", steps=5, random_state=0).fit(x, y, narrow)
    assert auto.projection_side_ == "image" and not auto.center_ and not auto.intercept_.any()


def test_unsupervised_fits_refuse_options_that_need_labels():
    x, _, p, _, _ = planted_gap_problem(seed=6)
    with pytest.raises(InvalidParameterError, match="need labels"):
        LFA(center=True, steps=5, n_rounds=1).fit(x, None, p)
    unsupervised = LFA(steps=5, n_rounds=1, random_state=0).fit(x, None, p)
    assert unsupervised.selection_ is None and unsupervised.prototype_mix_ == 0.0


def test_paper_preset_turns_every_option_off_and_shrinks():
    params = LFA.paper(beta=0.3).get_params()
    assert params["beta"] == 0.3 and params["projection"] == "shrink"
    assert (params["prototype_mix"], params["refine_prototypes"], params["center"], params["mapping"]) == (0.0, False, False, "task")
