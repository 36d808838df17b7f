"""AlignedIndex as a scikit-learn composite: it owns an LFA estimator (nested parameters, clone,
cross-validation), scores accuracy, breaks exact ties one way and reads one snapshot per call."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from test_index import OPTIONS, make_task

from lfa_index import LFA, AlignedIndex, InvalidParameterError

pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def task():
    return make_task(n_classes=10)


# ------------------------------------------------------------------ composition
def test_the_index_fits_a_clone_of_its_estimator(task):
    support, labels, text, _, _ = task
    lfa = LFA(**OPTIONS)
    index = AlignedIndex(lfa=lfa).fit(support, labels, text)
    assert index.lfa is lfa and index.lfa_ is not lfa and not hasattr(lfa, "W_")
    assert index.lfa_.get_params() == lfa.get_params()
    np.testing.assert_array_equal(index.lfa_.W_, LFA(**OPTIONS).fit(support, labels, text).W_)


def test_no_estimator_means_the_default_lfa(task):
    support, labels, text, _, _ = task
    index = AlignedIndex().fit(support, labels, text)
    assert index.lfa is None and index.lfa_.get_params() == LFA().get_params()


def test_nested_parameters_set_params_and_clone_come_from_scikit_learn():
    index = AlignedIndex(lfa=LFA(**OPTIONS))
    params = index.get_params()
    assert params["lfa__beta"] == 0.5 and params["lfa"] is index.lfa and set(params) >= {"lfa", "lfa__steps"}
    assert [name for name in params if "__" not in name] == ["lfa"]  # a classifier: no corpus parameters
    copy = clone(index).set_params(lfa__beta=0.25, lfa__steps=7)
    assert copy.lfa.beta == 0.25 and copy.lfa.steps == 7
    assert index.lfa.beta == 0.5 and index.lfa.steps == 5  # the original is untouched
    assert "lfa=LFA(beta=0.25" in repr(copy)


def test_an_unfitted_index_pickles_for_parallel_model_selection():
    copy = pickle.loads(pickle.dumps(AlignedIndex(lfa=LFA(**OPTIONS))))
    assert copy.get_params()["lfa__beta"] == 0.5 and copy.get_params()["lfa__steps"] == 5


@pytest.mark.parametrize("params, name", [({"lfa": "LFA()"}, "lfa"), ({"lfa": LFA(beta=3.0)}, "beta")])
def test_the_parameter_table_is_checked_at_fit(task, params, name):
    support, labels, text, _, _ = task
    with pytest.raises(InvalidParameterError, match=name):
        AlignedIndex(**params).fit(support, labels, text)


# ------------------------------------------------------------------ scikit-learn model selection
def test_score_is_the_accuracy_of_predict(task):
    support, labels, text, queries, query_labels = task
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    assert index.score(queries, query_labels) == pytest.approx(np.mean(index.predict(queries) == query_labels))


def test_cross_val_score_passes_the_prototypes_as_a_fit_parameter(task):
    support, labels, text, _, _ = task
    folds = StratifiedKFold(n_splits=2, shuffle=True, random_state=0)
    scores = cross_val_score(AlignedIndex(lfa=LFA(**OPTIONS)), support, labels, cv=folds, params={"text_emb": text})
    expected = [
        AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[train], labels[train], text).score(support[test], labels[test])
        for train, test in folds.split(support, labels)
    ]
    np.testing.assert_allclose(scores, expected)
    names = [f"class {i}" for i in range(len(text))]
    named = cross_val_score(AlignedIndex(lfa=LFA(**OPTIONS)), support, np.array(names)[labels], cv=folds,
                            params={"text_emb": text, "class_names": names})
    np.testing.assert_allclose(named, expected)


def test_grid_search_tunes_nested_lfa_parameters(task):
    support, labels, text, _, _ = task
    search = GridSearchCV(AlignedIndex(lfa=LFA(**OPTIONS)), {"lfa__beta": [0.0, 1.0]}, cv=2)
    search.fit(support, labels, text_emb=text)
    assert search.best_params_["lfa__beta"] in (0.0, 1.0) and search.best_estimator_.lfa_.beta_ in (0.0, 1.0)


# ------------------------------------------------------------------ exact ties
def test_predict_and_search_break_exact_ties_alike_at_the_lowest_position(task):
    support, labels, text, queries, _ = task
    tied = text.copy()
    tied[5] = tied[3]  # classes 3 and 5 share one prototype: equal folded vectors, equal scores
    # the paper's classifier as its code runs it (the tie weakens these ten names' geometry below the guard's level)
    index = AlignedIndex(lfa=LFA.paper(text_check=False, **OPTIONS)).fit(support, labels, tied)
    x = np.concatenate([queries, support])
    scores, top = index.search(x, 3)
    np.testing.assert_array_equal(index.predict(x), top[:, 0])
    hit = np.isin(top[:, 0], (3, 5))
    assert hit.any() and (top[hit, 0] == 3).all() and (top[hit, 1] == 5).all()
    np.testing.assert_array_equal(scores[hit, 0], scores[hit, 1])
    # three equal classes added from text: ties within the W_tt group, across two groups
    index.add_classes(np.repeat(tied[7:8], 3, axis=0))
    scores, top = index.search(x, len(index.classes_))
    np.testing.assert_array_equal(index.predict(x), top[:, 0])
    np.testing.assert_array_equal(index.predict(x, reject_below=-1e6), top[:, 0])
    for row in top:
        added = [position for position in row if position >= 10]
        assert added == [10, 11, 12]


# ------------------------------------------------------------------ snapshots
def test_aligned_prototypes_reads_one_snapshot_while_classes_are_added(task):
    support, labels, text, _, _ = task
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    stop, errors = threading.Event(), []

    def add_classes():
        try:
            for _ in range(30):
                index.add_classes(text[:2])
        except Exception as err:  # surfaced below
            errors.append(err)
        finally:
            stop.set()

    thread = threading.Thread(target=add_classes)
    thread.start()
    while not stop.is_set():
        exported = index.aligned_prototypes()
        assert (np.abs(exported).sum(axis=1) > 0).all()  # every row is a folded class, none left empty
    thread.join()
    assert not errors and index.aligned_prototypes().shape[0] == len(text) + 60
