"""Every bad input to AlignedIndex raises a typed error whose message says how to fix it."""

from __future__ import annotations

import faiss
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


@pytest.fixture()
def with_corpus(data):
    support, labels, text, queries = data
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text).add(queries, ids=np.arange(10))


QUERY_CALLS = {
    "predict": lambda ix, q: ix.predict(q),
    "search": lambda ix, q: ix.search(q, 2),
    "decision_function": lambda ix, q: ix.decision_function(q),
    "predict_proba": lambda ix, q: ix.predict_proba(q),
    "add": lambda ix, q: ix.add(q),
    "search_corpus": lambda ix, q: ix.search_corpus(q, 2),
}


def fresh(data):
    support, labels, text, _ = data
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text).add(data[3])


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
    assert ix.corpus_size_ == 10  # nothing was added


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


def test_corpus_search_before_any_add(index, data):
    with pytest.raises(EmptyIndexError, match=r"call add\(img_emb\) before search_text"):
        index.search_text(data[2][:1], k=3)
    with pytest.raises(EmptyIndexError, match="before search_corpus"):
        index.search_corpus(data[3], k=3)


def test_k_larger_than_the_corpus_returns_what_exists(with_corpus, data):
    scores, ids = with_corpus.search_text(data[2], k=1000)
    assert ids.shape == (6, 10) and scores.shape == (6, 10)
    with pytest.raises(InvalidParameterError, match="k must"):
        with_corpus.search_text(data[2], k=0)


def test_duplicate_ids_on_add(with_corpus, data):
    with pytest.raises(DuplicateIdError, match=r"already in the corpus"):
        with_corpus.add(data[3][:2], ids=[10, 3])
    with pytest.raises(DuplicateIdError, match="repeat within this batch"):
        with_corpus.add(data[3][:2], ids=[20, 20])
    with pytest.raises(InvalidInputError, match="non-negative"):
        with_corpus.add(data[3][:2], ids=[-1, 30])
    with pytest.raises(ShapeError, match="one id per image"):
        with_corpus.add(data[3][:2], ids=[30])
    assert with_corpus.corpus_size_ == 10


def test_untrainable_first_add_leaves_the_corpus_empty(data):
    support, labels, text, queries = data
    ix = AlignedIndex(lfa=LFA(**OPTIONS), corpus_factory="IVF64,Flat").fit(support, labels, text)
    with pytest.raises(InvalidInputError, match="add more images in the first call"):
        ix.add(queries)
    assert ix.corpus_size_ == 0
    with pytest.raises(EmptyIndexError):
        ix.search_text(text, 2)


def test_use_before_fit():
    with pytest.raises(NotFittedError, match="call fit"):
        AlignedIndex().predict(np.ones((1, 4)))
    with pytest.raises(SklearnNotFittedError):
        AlignedIndex().add(np.ones((1, 4)))


def test_bad_parameters(data):
    support, labels, text, _ = data
    with pytest.raises(TypeError, match="betta"):  # Python's own error for an unknown keyword, as in scikit-learn
        AlignedIndex(betta=0.5)
    with pytest.raises(InvalidParameterError, match="corpus_factory"):
        AlignedIndex(lfa=LFA(**OPTIONS), corpus_factory="NotAnIndex").fit(support, labels, text)
    with pytest.raises(InvalidParameterError, match="corpus_mapping"):
        AlignedIndex(lfa=LFA(**OPTIONS), corpus_mapping="both").fit(support, labels, text)
    with pytest.raises(InvalidParameterError, match="beta"):
        AlignedIndex(lfa=LFA(beta=2.0, steps=3)).fit(support, labels, text)
    with pytest.raises(InvalidParameterError, match="corpus_params"):
        AlignedIndex(lfa=LFA(**OPTIONS), corpus_params="nprobe=4").fit(support, labels, text).add(data[3])


def test_bad_call_arguments(index, data):
    with pytest.raises(InvalidParameterError, match="reject_below"):
        index.predict(data[3], reject_below=float("nan"))
    with pytest.raises(InvalidParameterError, match="accept_rate"):
        index.rejection_threshold(accept_rate=0.0)
    with pytest.raises(InvalidParameterError, match="mapping"):
        index.query_transform("tasks")


def test_search_unaligned_checks_its_index(index, data):
    wrong = faiss.IndexFlatIP(8)
    wrong.add(np.ones((3, 8), dtype=np.float32))
    with pytest.raises(DimensionMismatchError, match="same image model"):
        index.search_unaligned(wrong, data[2][:1])
    with pytest.raises(EmptyIndexError, match="index is empty"):
        index.search_unaligned(faiss.IndexFlatIP(16), data[2][:1])
    with pytest.raises(InvalidParameterError, match="FAISS index"):
        index.search_unaligned(np.ones((3, 16)), data[2][:1])
    raw = faiss.IndexFlatIP(16)
    raw.add(data[3])
    with pytest.raises(InvalidParameterError, match="overfetch"):
        index.search_unaligned(raw, data[2][:1], overfetch=0)
    with pytest.raises(InvalidInputError, match="vectors has 2 rows"):
        index.search_unaligned(raw, data[2][:1], k=5, vectors=data[3][:2])
