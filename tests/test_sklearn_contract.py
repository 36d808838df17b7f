"""LFA is a scikit-learn classifier and transformer: the full estimator checks, any hashable labels,
uni-modal fits without text_emb, binary decision scores, and probabilities that rank as scores."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer
from sklearn.utils.estimator_checks import check_estimator
from synthetic import planted_gap_problem

from lfa_index import LFA, LabelError, ShapeError

EXPECTED_FAILED_CHECKS = {
    "check_estimators_dtypes": "its integer data holds all-zero rows; LFA aligns directions and an all-zero row has "
                               "none, so it raises ZeroNormError instead of fitting on it",
}


def test_lfa_passes_scikit_learns_estimator_checks():
    check_estimator(LFA(steps=5, random_state=0, device="cpu"), expected_failed_checks=EXPECTED_FAILED_CHECKS)


def test_any_hashable_labels_with_class_names_naming_the_text_emb_rows():
    x, y, p, xt, yt = planted_gap_problem(n_classes=4, n_test=10, seed=1)
    names = np.array(["cat", "dog", "owl", "yak"])
    by_index = LFA(steps=20, random_state=0).fit(x, y, p)
    by_name = LFA(steps=20, random_state=0).fit(x, names[y], p, class_names=names)
    np.testing.assert_array_equal(by_name.classes_, names)
    np.testing.assert_array_equal(by_name.predict(xt), names[by_index.predict(xt)])
    assert by_name.score(xt, names[yt]) == by_index.score(xt, yt)
    with pytest.raises(LabelError, match="class_names="):
        LFA(steps=5).fit(x, names[y], p)  # strings need class_names= to say which row is which


def test_without_prototypes_the_class_means_are_the_targets():
    x, y, _, xt, yt = planted_gap_problem(n_classes=5, n_test=20, seed=2)
    labels = np.array([f"class {i}" for i in range(5)])
    lfa = LFA(steps=20, random_state=0).fit(x, labels[y])
    assert list(lfa.classes_) == sorted(labels)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    means = np.stack([unit[y == c].mean(axis=0) for c in range(5)])
    nearest_mean = np.mean(((xt / np.linalg.norm(xt, axis=1, keepdims=True)) @ means.T).argmax(1) == yt)
    assert lfa.score(xt, labels[yt]) >= nearest_mean - 0.05
    assert lfa.fit_transform(x, labels[y]).shape == x.shape


def test_binary_decision_scores_are_one_column_and_probabilities_rank_as_scores():
    x, y, p, xt, _ = planted_gap_problem(n_classes=2, n_test=20, seed=3)
    lfa = LFA(steps=10, random_state=0).fit(x, y, p)
    decision = lfa.decision_function(xt)
    assert decision.shape == (len(xt),)
    np.testing.assert_array_equal(lfa.predict(xt), (decision > 0).astype(int))
    proba = lfa.predict_proba(xt)
    assert np.all(np.diff(proba[np.argsort(decision), 1]) >= 0)  # never ranked the other way (ties may saturate)
    several = LFA(steps=10, random_state=0).fit(*planted_gap_problem(n_classes=6, seed=4)[:3])
    queries = planted_gap_problem(n_classes=6, n_test=20, seed=4)[3]
    scores, proba = several.decision_function(queries), several.predict_proba(queries)
    ordered = np.take_along_axis(proba, np.argsort(scores, axis=1), axis=1)
    assert np.all(np.diff(ordered, axis=1) >= 0)


def test_continuous_targets_and_wrong_sample_weights_are_refused():
    x, y, p, _, _ = planted_gap_problem(n_classes=3, seed=5)
    with pytest.raises(LabelError, match="Unknown label type"):
        LFA(steps=5).fit(x, y + 0.5, p)
    lfa = LFA(steps=5, random_state=0).fit(x, y, p)
    with pytest.raises(ShapeError, match="sample_weight"):
        lfa.score(x, y, sample_weight=np.ones(3))


def test_lfa_works_inside_scikit_learn_tools():
    x, y, _, _, _ = planted_gap_problem(n_classes=4, shots=12, seed=6)
    scores = cross_val_score(make_pipeline(Normalizer(), LFA(steps=10, random_state=0)), x, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.6
