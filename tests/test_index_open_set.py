"""The open-set score (``score_samples``), the thresholds set on rows with unknowns, and the τ and
encoder SPECs an index keeps: checked against float64 references and brute force."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from lfa_index import LFA, AlignedIndex, InvalidParameterError, LFAIndexError
from lfa_index.index.calibration import heldout_scores, objective_threshold
from lfa_index.reporting import open_set_metrics

pytestmark = pytest.mark.usefixtures("single_threaded")

N_CLASSES, N_KNOWN, DIM = 8, 5, 16


@pytest.fixture(scope="module")
def problem():
    """Classes around random unit centres; the last three are never fitted (out of scope)."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((N_CLASSES, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(per_class: int, noise: float = 1.2) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(N_CLASSES), per_class)
        return (centres[y] + noise * rng.standard_normal((len(y), DIM)) / np.sqrt(DIM)).astype(np.float32), y

    support, labels = draw(6)
    queries, truth = draw(12)
    text = (centres + 0.3 * rng.standard_normal(centres.shape)).astype(np.float32)
    keep = labels < N_KNOWN
    return support[keep], labels[keep], text[:N_KNOWN], text[N_KNOWN:], queries, np.where(truth < N_KNOWN, truth, -1)


@pytest.fixture(scope="module")
def index(problem):
    support, labels, text, _, _, _ = problem
    return AlignedIndex(lfa=LFA(steps=20, device="cpu", random_state=0)).fit(support, labels, text)


def standardise(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    reference = np.asarray(reference, dtype=np.float64)
    return (np.asarray(values, dtype=np.float64) - reference.mean()) / reference.std()


def reference_scores(index: AlignedIndex, queries: np.ndarray) -> np.ndarray:
    """score_samples in float64 numpy: the best aligned score and the nearest aligned support row's
    cosine, standardised by held-out support values (the row's own fold model; its nearest other row)."""
    lfa = index.lfa_
    heldout, _ = heldout_scores(lfa, index.support_embeddings_, index.support_labels_, index.text_embeddings_)
    best = index.decision_function(queries).astype(np.float64).max(axis=1)
    support = index.transform(index.support_embeddings_).astype(np.float64)
    gram = support @ support.T
    np.fill_diagonal(gram, -np.inf)
    nearest = (index.transform(queries).astype(np.float64) @ support.T).max(axis=1)
    return standardise(best, heldout) + standardise(nearest, gram.max(axis=1))


def test_score_samples_is_the_standardised_best_score_plus_the_standardised_nearest_support_row(index, problem):
    queries = problem[4]
    np.testing.assert_allclose(index.score_samples(queries), reference_scores(index, queries), rtol=1e-4, atol=1e-4)


def test_score_samples_ranks_out_of_scope_queries_below_known_ones(index, problem):
    from sklearn.metrics import roc_auc_score

    queries, truth = problem[4], problem[5]
    assert roc_auc_score(truth >= 0, index.score_samples(queries)) > 0.8  # measured 0.87 (best score alone: 0.86)


def test_with_classes_added_from_text_the_score_is_the_standardised_best_score_alone(problem):
    support, labels, text, new_text, queries, _ = problem
    index = AlignedIndex(lfa=LFA(steps=20, device="cpu", random_state=0)).fit(support, labels, text)
    index.add_classes(new_text)
    heldout, _ = heldout_scores(index.lfa_, index.support_embeddings_, index.support_labels_, text)
    best = index.search(queries, 1)[0][:, 0]
    np.testing.assert_allclose(index.score_samples(queries), standardise(best, heldout), rtol=1e-4, atol=1e-4)


def test_rejection_threshold_accepts_the_asked_share_of_held_out_support_rows(index):
    lfa = index.lfa_
    heldout, _ = heldout_scores(lfa, index.support_embeddings_, index.support_labels_, index.text_embeddings_)
    support = index.transform(index.support_embeddings_).astype(np.float64)
    gram = support @ support.T
    np.fill_diagonal(gram, -np.inf)
    reference = standardise(heldout, heldout) + standardise(gram.max(axis=1), gram.max(axis=1))
    for rate in (0.5, 0.9, 1.0):
        tau = index.rejection_threshold(accept_rate=rate)
        assert np.mean(reference >= tau - 1e-5) >= rate and np.min(np.abs(reference - tau)) < 1e-5


def test_the_macro_f1_objective_finds_the_best_threshold_by_brute_force(index, problem):
    queries, truth = problem[4], problem[5]
    labels = np.where(truth >= 0, truth, 99).astype(object)
    labels[truth < 0] = "oos"
    tau = index.rejection_threshold(queries, labels, unknown_label="oos", objective="macro-f1")
    scores, predicted = index.score_samples(queries), index.predict(queries)
    classes = list(range(N_KNOWN)) + [-1]

    def macro_f1(threshold: float) -> float:
        return f1_score(truth, np.where(scores >= threshold, predicted, -1), labels=classes, average="macro",
                        zero_division=0)

    candidates = np.concatenate([np.unique(scores), [scores.max() + 1]])
    best = max(macro_f1(t) for t in candidates)
    assert macro_f1(tau) == pytest.approx(best)
    assert open_set_metrics(truth, predicted, scores, tau)["macro_f1"] == pytest.approx(best)


def test_the_oos_recall_objective_rejects_at_least_the_target_and_no_more_than_it_needs(index, problem):
    queries, truth = problem[4], problem[5]
    labels = np.where(truth >= 0, truth, -7)
    scores = index.score_samples(queries)
    for target in (0.25, 0.5, 0.9, 1.0):
        tau = index.rejection_threshold(queries, labels, unknown_label=-7, objective="oos-recall", oos_recall=target)
        rejected = np.sort(scores[truth < 0][scores[truth < 0] < tau])
        assert len(rejected) >= target * np.sum(truth < 0)
        assert len(rejected) - 1 < target * np.sum(truth < 0)  # one fewer would miss the target


def test_the_accept_rate_objective_looks_at_known_rows_only(index, problem):
    queries, truth = problem[4], problem[5]
    labels = np.where(truth >= 0, truth, -7)
    tau = index.rejection_threshold(queries, labels, unknown_label=-7, accept_rate=0.8)
    assert tau == index.rejection_threshold(queries[truth >= 0], accept_rate=0.8)


def test_objective_threshold_breaks_macro_f1_ties_towards_the_higher_threshold():
    scores = np.array([3.0, 2.0, 1.0, 0.0])
    truth = np.array([0, 0, -1, -1])
    # accepting 2 rows is perfect; accepting none or all is worse
    assert objective_threshold(scores, truth, np.zeros(4, int), "macro-f1") == 2.0


@pytest.mark.parametrize("kwargs, needle", [
    (dict(objective="macro-f1"), "X_val"),
    (dict(objective="oos-recall"), "X_val"),
    (dict(objective="mean"), "objective"),
    (dict(accept_rate=0.0), "accept_rate"),
    (dict(oos_recall=1.5), "oos_recall"),
])
def test_objectives_that_need_out_of_scope_rows_say_so(index, kwargs, needle):
    with pytest.raises(InvalidParameterError, match=needle):
        index.rejection_threshold(**kwargs)


def test_validation_labels_must_be_classes_or_the_unknown_label(index, problem):
    queries, truth = problem[4], problem[5]
    with pytest.raises(LFAIndexError, match="must lie in 0..4"):
        index.rejection_threshold(queries, np.where(truth >= 0, truth, 99), objective="accept-rate")
    with pytest.raises(InvalidParameterError, match="out-of-scope rows"):
        index.rejection_threshold(queries[truth >= 0], truth[truth >= 0], unknown_label=-7, objective="macro-f1")
    with pytest.raises(InvalidParameterError, match="one label per row"):
        index.rejection_threshold(queries, truth[:-1], unknown_label=-1)


def test_threshold_and_encoders_are_saved_and_forgotten_by_a_refit(problem, tmp_path):
    support, labels, text, new_text, queries, _ = problem
    index = AlignedIndex(lfa=LFA(steps=5, device="cpu", random_state=0)).fit(support, labels, text)
    assert index.reject_below_ is None and index.encoders_ == {"document": None, "name": None}
    index.set_reject_below(-1.25).set_encoders(document="minilm", name="openai:text-embedding-3-small")
    loaded = AlignedIndex.load(index.save(tmp_path / "idx"))
    assert loaded.reject_below_ == -1.25
    assert loaded.encoders_ == {"document": "minilm", "name": "openai:text-embedding-3-small"}
    np.testing.assert_array_equal(loaded.score_samples(queries), index.score_samples(queries))
    loaded.add_classes(new_text)
    assert loaded.reject_below_ is None and loaded.encoders_["document"] == "minilm"  # τ was set on other scores
    loaded.set_reject_below(0.5).partial_fit(support[:3], labels[:3])
    assert loaded.reject_below_ is None
    loaded.fit(support, labels, text)
    assert loaded.encoders_ == {"document": None, "name": None}
    with pytest.raises(InvalidParameterError, match="finite"):
        loaded.set_reject_below(float("nan"))
    with pytest.raises(InvalidParameterError, match="SPEC"):
        loaded.set_encoders(document="")


def test_open_set_metrics_count_rejections_as_wrong_in_scope_and_right_out_of_scope():
    truth = np.array([0, 0, 1, 1, -1, -1])
    predicted = np.array([0, 1, 1, 1, 0, 1])
    scores = np.array([5.0, 4.0, 0.0, 3.0, 1.0, 2.5])
    m = open_set_metrics(truth, predicted, scores, 2.0)
    # labelled: [0, 1, -1, 1, -1, 1]
    assert m["in_scope_accuracy"] == 0.5 and m["closed_set_accuracy"] == 0.75 and m["known_accepted"] == 0.75
    assert m["oos_recall"] == 0.5 and m["oos_precision"] == 0.5
    assert m["macro_f1"] == pytest.approx(f1_score(truth, [0, 1, -1, 1, -1, 1], average="macro"))
    assert open_set_metrics(truth, predicted, scores, None)["oos_recall"] == 0.0


def test_the_oos_recall_threshold_sits_halfway_to_the_next_score_so_a_last_bit_change_keeps_its_rows_rejected():
    """τ for "oos-recall" lies midway between the last out-of-scope score it must reject and the next
    score above it (a row scored in another batch, or by a reloaded index, may differ in its last bit);
    with nothing above, a relative margin above the highest."""
    scores = np.array([3.0, 2.5, 1.0, 0.5, 0.25], dtype=np.float32)
    truth = np.array([0, 1, -1, -1, 1])
    tau = objective_threshold(scores, truth, np.zeros(5, int), "oos-recall", oos_recall=1.0)
    assert tau == pytest.approx(1.75)
    assert objective_threshold(scores, truth, np.zeros(5, int), "oos-recall", oos_recall=0.5) == pytest.approx(0.75)
    top = objective_threshold(np.float32([1.0, 2.0]), np.array([-1, -1]), np.zeros(2, int), "oos-recall",
                              oos_recall=1.0)
    assert 2.0 < top and np.nextafter(np.float32(2.0), np.float32(3.0)) < top
