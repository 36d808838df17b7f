import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from synthetic import planted_gap_problem

from lfa_index import (
    LFA,
    DimensionMismatchError,
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    NonFiniteError,
    ShapeError,
    ZeroNormError,
)
from lfa_index.core.validation import check_array, check_number


@pytest.fixture
def data():
    x, y, protos, _, _ = planted_gap_problem(n_classes=4, shots=5, d=8)
    return x, y, protos


def fit(x, y, p, **kw):
    return LFA(steps=3, random_state=0, **kw).fit(x, y, p)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(data, bad):
    x, y, p = data
    x = x.copy()
    x[2, 3] = bad
    with pytest.raises(NonFiniteError, match="NaN or infinite"):
        fit(x, y, p)
    p2 = p.copy()
    p2[0, 0] = bad
    with pytest.raises(NonFiniteError):
        fit(data[0], y, p2)


def test_zero_norm_rows_are_rejected(data):
    x, y, p = data
    x = x.copy()
    x[4] = 0
    with pytest.raises(ZeroNormError, match="zero-norm"):
        fit(x, y, p)
    p = p.copy()
    p[1] = 0
    with pytest.raises(ZeroNormError):
        fit(data[0], y, p)


@pytest.mark.parametrize("labels_change", ["too_big", "negative", "float", "string"])
def test_bad_labels_are_rejected(data, labels_change):
    x, y, p = data
    y = y.copy()
    if labels_change == "too_big":
        y[0] = len(p)
    elif labels_change == "negative":
        y[0] = -1
    elif labels_change == "float":
        y = y.astype(float)
        y[0] = 0.5
    else:
        y = y.astype(str)
    with pytest.raises(LabelError):
        fit(x, y, p)


def test_integer_valued_float_labels_are_accepted(data):
    x, y, p = data
    fit(x, y.astype(np.float64), p)


def test_fewer_than_two_classes_is_rejected(data):
    x, y, p = data
    with pytest.raises(InvalidInputError, match="at least 2 classes"):
        fit(x, np.zeros(len(x), dtype=int), p[:1])


def test_row_count_mismatch_is_rejected(data):
    x, y, p = data
    with pytest.raises(ShapeError, match="one label per embedding row"):
        fit(x, y[:-1], p)


def test_differing_dims_without_projection_are_rejected(data):
    x, y, p = data
    with pytest.raises(DimensionMismatchError, match="projection='auto'"):
        fit(x, y, np.hstack([p, p]), projection=False)


@pytest.mark.parametrize("beta", [-0.1, 1.5, "high"])
def test_beta_outside_unit_interval_is_rejected(data, beta):
    with pytest.raises(InvalidParameterError, match="beta"):
        LFA(beta=beta).fit(*data)


@pytest.mark.parametrize("steps", [-5, 2.5, "many"])
def test_negative_or_fractional_steps_are_rejected(data, steps):
    with pytest.raises(InvalidParameterError, match="steps"):
        LFA(steps=steps).fit(*data)


def test_zero_steps_is_beta_procrustes_alone(data):
    lfa = LFA.paper(steps=0, beta=0.0, random_state=0).fit(*data)
    assert lfa.steps_ == 0 and lfa.loss_curve_ == []


def test_empty_x_is_rejected(data):
    _, _, p = data
    with pytest.raises(ShapeError, match="empty"):
        fit(np.zeros((0, p.shape[1]), dtype=np.float32), np.zeros(0, dtype=int), p)


def test_wrong_rank_is_rejected(data):
    x, y, p = data
    with pytest.raises(ShapeError):
        fit(x[0], y, p)


def test_errors_are_value_errors():
    for err in (NonFiniteError, ZeroNormError, ShapeError, LabelError, DimensionMismatchError):
        assert issubclass(err, ValueError)
    assert issubclass(InvalidParameterError, TypeError) and issubclass(InvalidParameterError, ValueError)


@pytest.mark.parametrize(
    "convert",
    [
        lambda a: a,  # float32 and C-contiguous: the fit reads it without a copy
        lambda a: a.astype(np.float16),
        lambda a: a.astype(np.float64),
        lambda a: np.asfortranarray(a),
        lambda a: np.repeat(a, 2, axis=1)[:, ::2],  # non-contiguous view
        lambda a: torch.tensor(a),
        lambda a: torch.tensor(a, dtype=torch.float64).T.contiguous().T,
        lambda a: a.tolist(),
    ],
)
def test_many_input_kinds_are_accepted_and_never_modified(data, convert):
    x, y, p = data
    xx, pp = convert(x), convert(p)
    before_x = np.array(xx, dtype=np.float64, copy=True)
    before_p = np.array(pp, dtype=np.float64, copy=True)
    lfa = fit(xx, y, pp)
    lfa.predict(xx)
    np.testing.assert_array_equal(np.array(xx, dtype=np.float64), before_x)
    np.testing.assert_array_equal(np.array(pp, dtype=np.float64), before_p)
    reference = fit(x, y, p)
    if np.asarray(xx).dtype == np.float16:  # lossy: the fit may move a little
        assert np.mean(lfa.predict(x) == reference.predict(x)) >= 0.9
    else:
        np.testing.assert_allclose(lfa.W_, reference.W_, atol=1e-5)


def test_a_check_without_copy_returns_the_input_only_where_nothing_would_change():
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    assert check_array(x, name="x", copy=False) is x
    assert check_array(x, name="x") is not x
    read_only = x.copy()
    read_only.flags.writeable = False
    huge = x.copy()
    huge[2] *= 1e20  # rescaled to its largest entry: a copy, the input untouched
    for other in (x.astype(np.float64), np.asfortranarray(x), x[:, ::2], read_only, huge):
        before = other.copy()
        out = check_array(other, name="x", copy=False)
        assert out is not other and not np.shares_memory(out, other) and out.flags.c_contiguous
        np.testing.assert_array_equal(other, before)
    np.testing.assert_allclose(np.abs(check_array(huge, name="x", copy=False)[2]).max(), 1.0)


def test_query_dimension_mismatch_is_rejected(data):
    x, y, p = data
    lfa = fit(x, y, p)
    with pytest.raises(DimensionMismatchError):
        lfa.predict(np.hstack([x, x]))


def test_number_checks_refuse_booleans_and_infinities_and_return_the_number():
    with pytest.raises(InvalidParameterError, match=r"k must be an int in the range \[1, inf\), got True"):
        check_number(True, "k", low=1, integer=True)
    with pytest.raises(InvalidParameterError, match="finite float"):
        check_number(float("inf"), "timeout", low=0.0, low_inclusive=False)
    k = check_number(np.int64(3), "k", low=1, integer=True)
    assert k == 3 and type(k) is int


PARAMETER_MESSAGES = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "blocked":
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("sklearn", "scipy", "torch"):
                    raise ImportError(f"{name} is not installed here")
        sys.meta_path.insert(0, Blocker())
    from lfa_index import LFA, compat
    from lfa_index.errors import InvalidParameterError
    print(compat.validate_parameter_constraints.__module__)
    for params in ({"beta": 1.5}, {"center": 1}, {"k": 0}, {"random_state": True}, {"lr": float("inf")},
                   {"device": 3}):
        try:
            LFA(**params)._validate_params()
        except InvalidParameterError as err:
            print(err)
    """
)


def test_parameter_errors_read_the_same_with_and_without_scikit_learn():
    """scikit-learn's validate_parameter_constraints where it is installed, compat's stand-in in a serving
    environment: the same typed error and the same message."""
    runs = [subprocess.run([sys.executable, "-c", PARAMETER_MESSAGES, mode], capture_output=True, text=True,
                           timeout=120) for mode in ("full", "blocked")]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    (full_module, *full), (blocked_module, *blocked) = (run.stdout.splitlines() for run in runs)
    assert full_module.startswith("sklearn.") and blocked_module == "lfa_index.compat"
    assert len(full) == 6 and full == blocked
    assert full[0] == ("The 'beta' parameter of LFA must be a str among {'auto'} or a finite float in the range "
                       "[0.0, 1.0]. Got 1.5 instead.")



def test_one_fitted_check_names_the_fit_call_of_each_estimator():
    from lfa_index import AlignedIndex, EmbeddingAligner, NotFittedError
    from lfa_index.core.validation import check_is_fitted

    for estimator, call in ((LFA(), "fit(X, y, text_emb, class_names) first"),
                            (AlignedIndex(), "fit(X, y, text_emb, class_names) or AlignedIndex.load(path) first"),
                            (EmbeddingAligner(), "fit(X_new, X_old) or EmbeddingAligner.load(path) first")):
        with pytest.raises(NotFittedError, match=call.replace("(", r"\(").replace(")", r"\)")):
            check_is_fitted(estimator)


@pytest.mark.parametrize("texts, allow_empty, error", [
    ("one text", False, "InputTypeError"), (None, True, "InputTypeError"), (["a", 3], True, "InputTypeError"),
    ([], False, "ShapeError"), (["a", " "], False, "InvalidInputError"), ([], True, None), (("a", ""), True, None),
])
def test_one_text_check_serves_sources_and_integrations(texts, allow_empty, error):
    import lfa_index.errors as errors
    from lfa_index.core.validation import check_texts

    if error is None:
        assert check_texts(texts, name="documents", allow_empty=allow_empty) == list(texts)
        return
    with pytest.raises(getattr(errors, error), match="documents"):
        check_texts(texts, name="documents", allow_empty=allow_empty)
