"""LFA's fitted state: declared once (FittedState), returned whole by the solvers, checked on restore."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from synthetic import planted_gap_problem

from lfa_index import LFA
from lfa_index.core.state import FITTED_ARRAYS, FITTED_VALUES, FittedState
from lfa_index.errors import InputTypeError, InvalidInputError, InvalidParameterError, NonFiniteError, ShapeError


@pytest.fixture(scope="module")
def fitted():
    x, y, protos, xt, _ = planted_gap_problem(noise=0.25, n_test=10)
    return LFA(steps=5, random_state=0, device="cpu", refine_prototypes=True).fit(x, y, protos), xt


def test_the_saved_lists_are_the_fields_of_the_fitted_state_and_a_fit_sets_every_one(fitted):
    lfa, _ = fitted
    assert set(FITTED_ARRAYS) | set(FITTED_VALUES) == {f.name for f in fields(FittedState)}
    assert not set(FITTED_ARRAYS) & set(FITTED_VALUES)
    assert all(hasattr(lfa, name) for name in FITTED_ARRAYS + FITTED_VALUES)
    assert all(name.endswith("_") for name in FITTED_ARRAYS + FITTED_VALUES)


def test_a_restored_state_answers_as_the_fitted_estimator(fitted):
    lfa, xt = fitted
    values, arrays = lfa.fitted_state()
    restored = LFA.from_fitted_state(lfa.get_params(), values, arrays)
    np.testing.assert_array_equal(restored.decision_function(xt), lfa.decision_function(xt))
    assert restored.summary_ == lfa.summary_ and restored.step_trials_ == lfa.step_trials_


def _restore(lfa, params=None, values=None, arrays=None):
    saved_values, saved_arrays = lfa.fitted_state()
    return LFA.from_fitted_state({**lfa.get_params(), **(params or {})}, {**saved_values, **(values or {})},
                                 {**saved_arrays, **(arrays or {})})


@pytest.mark.parametrize("change, error, message", [
    (lambda a, v: ({"W_tt_": a["W_tt_"][:-1]}, {}), ShapeError, "W_tt_ has shape"),
    (lambda a, v: ({"prototypes_": a["prototypes_"][:, :-1]}, {}), ShapeError, "prototypes_ has shape"),
    (lambda a, v: ({"intercept_": a["intercept_"][:-1]}, {}), ShapeError, "intercept_ has shape"),
    (lambda a, v: ({"refined_prototypes_": a["refined_prototypes_"][1:]}, {}), ShapeError, "refined_prototypes_"),
    (lambda a, v: ({}, {"classes_": v["classes_"][:-1]}), ShapeError, "prototypes_ has shape"),
    (lambda a, v: ({}, {"n_features_in_": v["n_features_in_"] + 1}), ShapeError, "image embeddings"),
    (lambda a, v: ({"W_avg_": a["W_avg_"].astype(np.int32)}, {}), InputTypeError, "W_avg_ must be a float array"),
    (lambda a, v: ({"W_": None}, {}), InputTypeError, "W_ must be a float array"),
    (lambda a, v: ({"feature_mean_": a["feature_mean_"] * np.nan}, {}), NonFiniteError, "feature_mean_ holds NaN"),
    (lambda a, v: ({}, {"beta_": float("inf")}), NonFiniteError, "beta_"),
    (lambda a, v: ({}, {"mapping_": "both"}), InvalidInputError, "mapping_ must be one of"),
    (lambda a, v: ({}, {"support_kind_": "median"}), InvalidInputError, "support_kind_ must be one of"),
    (lambda a, v: ({}, {"projection_side_": "both"}), InvalidInputError, "projection_side_ must be one of"),
    (lambda a, v: ({}, {"center_": "yes"}), InvalidInputError, "center_ must be true or false"),
    (lambda a, v: ({}, {"n_features_in_": True}), InvalidInputError, "n_features_in_ must be a positive integer"),
], ids=["W_tt short", "prototypes narrow", "intercept short", "refined short", "classes short", "width",
        "integer map", "no map", "NaN mean", "infinite beta", "unknown mapping", "unknown kind", "unknown side",
        "center as text", "width as bool"])
def test_from_fitted_state_refuses_a_state_no_fit_leaves(fitted, change, error, message):
    lfa, _ = fitted
    values, arrays = lfa.fitted_state()
    arrays_change, values_change = change(arrays, values)
    with pytest.raises(error, match=message):
        _restore(lfa, values=values_change, arrays=arrays_change)


@pytest.mark.parametrize("params", [{"temperature": 0.0}, {"mapping": "both"}, {"steps": -1}])
def test_from_fitted_state_refuses_parameters_outside_their_constraints(fitted, params):
    lfa, _ = fitted
    with pytest.raises(InvalidParameterError, match=next(iter(params))):
        _restore(lfa, params=params)
