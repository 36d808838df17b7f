"""Every bad input to AlignedIndex raises a typed error whose message says how to fix it (AlignedCorpus:
test_corpus.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

from lfa_index import (
    LFA,
    AlignedIndex,
    DimensionMismatchError,
    DuplicateIdError,
    EmptyIndexError,
    InvalidInputError,
    InvalidParameterError,
    LabelError,
    LFAIndexError,
    NonFiniteError,
    NotFittedError,
    ShapeError,
    ZeroNormError,
)
from lfa_index.stores import FaissStore, search_unaligned

OPTIONS = dict(beta=0.5, steps=3, device="cpu", random_state=0)
NAMES = [f"class {i}" for i in range(6)]


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    text = rng.standard_normal((6, 16)).astype(np.float32)
    labels = np.repeat(np.arange(6), 3)
    support = (text[labels] + 0.3 * rng.standard_normal((18, 16))).astype(np.float32)
    queries = rng.standard_normal((10, 16)).astype(np.float32)
    return support, labels, text, queries


@pytest.fixture(scope="module")
def index(data):
    support, labels, text, _ = data
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(NAMES)[labels], text, class_names=NAMES)


QUERY_CALLS = {
    "predict": lambda ix, q: ix.predict(q),
    "search": lambda ix, q: ix.search(q, 2),
    "decision_function": lambda ix, q: ix.decision_function(q),
    "predict_proba": lambda ix, q: ix.predict_proba(q),
}


def fresh(data):
    support, labels, text, _ = data
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)


def test_errors_subclass_the_core_hierarchy_and_builtins():
    assert issubclass(DuplicateIdError, InvalidInputError) and issubclass(DuplicateIdError, ValueError)
    assert issubclass(EmptyIndexError, LFAIndexError) and issubclass(EmptyIndexError, ValueError)
    assert issubclass(NotFittedError, LFAIndexError) and issubclass(NotFittedError, SklearnNotFittedError)


@pytest.mark.parametrize("call", QUERY_CALLS, ids=list(QUERY_CALLS))
def test_query_dimension_mismatch(data, call):
    with pytest.raises(DimensionMismatchError, match="same image model"):
        QUERY_CALLS[call](fresh(data), np.ones((3, 15), dtype=np.float32))


@pytest.mark.parametrize("call", QUERY_CALLS, ids=list(QUERY_CALLS))
def test_empty_query_batch(data, call):
    with pytest.raises(ShapeError, match="empty batch"):
        QUERY_CALLS[call](fresh(data), np.ones((0, 16), dtype=np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("call", QUERY_CALLS, ids=list(QUERY_CALLS))
def test_non_finite_query_rows(data, call, bad):
    queries = data[3].copy()
    queries[4, 7] = bad
    ix = fresh(data)
    with pytest.raises(NonFiniteError, match=r"1 row\(s\) \(first: \[4\]\)"):
        QUERY_CALLS[call](ix, queries)


def test_zero_and_one_dimensional_queries(index, data):
    queries = data[3].copy()
    queries[2] = 0
    with pytest.raises(ZeroNormError, match="zero-norm"):
        index.predict(queries)
    with pytest.raises(ShapeError, match="reshape"):
        index.predict(data[3][0])
    with pytest.raises(InvalidInputError, match="real numbers"):
        index.predict(np.array([["a"] * 16]))


def test_labels_not_in_class_names(data):
    support, labels, text, _ = data
    bad = np.array(NAMES)[labels].astype(object)
    bad[3] = "zebra"
    with pytest.raises(LabelError, match="zebra"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, bad, text, class_names=NAMES)
    with pytest.raises(LabelError, match="class_names"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(NAMES)[labels], text)
    with pytest.raises(LabelError, match="0..5"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels + 1, text)


def test_partial_fit_labels_must_be_known_classes(index, data):
    with pytest.raises(LabelError, match="add_classes"):
        index.partial_fit(data[0][:2], ["class 0", "zebra"])
    with pytest.raises(LabelError, match="class names"):
        index.partial_fit(data[0][:2], [0, 1])


def test_bad_class_names(data):
    support, labels, text, _ = data
    with pytest.raises(ShapeError, match="one name per row"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text, class_names=NAMES[:5])
    with pytest.raises(LabelError, match="distinct"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text, class_names=["a"] * 6)
    with pytest.raises(InvalidParameterError, match="strings"):
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text, class_names=list(range(6)))


def test_add_classes_needs_new_distinct_names(index, data):
    with pytest.raises(InvalidParameterError, match="names are required"):
        index.add_classes(data[2][:1])
    with pytest.raises(LabelError, match="already exist"):
        index.add_classes(data[2][:1], class_names=["class 0"])
    with pytest.raises(DimensionMismatchError, match="same text model"):
        index.add_classes(np.ones((1, 8), dtype=np.float32), class_names=["new"])


def test_use_before_fit():
    with pytest.raises(NotFittedError, match="call fit"):
        AlignedIndex().predict(np.ones((1, 4)))
    with pytest.raises(SklearnNotFittedError):
        AlignedIndex().search(np.ones((1, 4)))


def test_bad_parameters(data):
    support, labels, text, _ = data
    with pytest.raises(TypeError, match="betta"):  # Python's own error for an unknown keyword, as in scikit-learn
        AlignedIndex(betta=0.5)
    with pytest.raises(TypeError, match="corpus_factory"):  # the corpus is its own object: AlignedCorpus
        AlignedIndex(lfa=LFA(**OPTIONS), corpus_factory="Flat")
    with pytest.raises(InvalidParameterError, match="beta"):
        AlignedIndex(lfa=LFA(beta=2.0, steps=3)).fit(support, labels, text)
    with pytest.raises(InvalidParameterError, match="lfa"):
        AlignedIndex(lfa="LFA()").fit(support, labels, text)


def test_bad_call_arguments(index, data):
    with pytest.raises(InvalidParameterError, match="reject_below"):
        index.predict(data[3], reject_below=float("nan"))
    with pytest.raises(InvalidParameterError, match="accept_rate"):
        index.rejection_threshold(accept_rate=0.0)
    with pytest.raises(InvalidParameterError, match="mapping"):
        index.query_transform("tasks")


def test_search_unaligned_checks_its_store(index, data):
    wrong = FaissStore(dim=8).add(np.ones((3, 8), dtype=np.float32), ids=np.arange(3))
    with pytest.raises(DimensionMismatchError, match="holds 8-d vectors"):
        search_unaligned(index, wrong, data[2][:1])
    with pytest.raises(EmptyIndexError, match="is empty"):
        search_unaligned(index, FaissStore(dim=16), data[2][:1])
    with pytest.raises(InvalidInputError, match="VectorStore"):
        search_unaligned(index, np.ones((3, 16)), data[2][:1])
    raw = FaissStore(dim=16).add(data[3], ids=np.arange(10))
    with pytest.raises(InvalidParameterError, match="overfetch"):
        search_unaligned(index, raw, data[2][:1], overfetch=0)
    with pytest.raises(DimensionMismatchError, match="same text model"):
        search_unaligned(index, raw, np.ones((1, 8), dtype=np.float32))
    with pytest.raises(InvalidParameterError, match="mapping"):
        search_unaligned(index, raw, data[2][:1], mapping="both")
