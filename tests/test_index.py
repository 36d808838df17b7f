"""AlignedIndex: exact folded search, label spaces, open-set rejection, new classes, export (its aligned
corpus: test_corpus.py)."""

from __future__ import annotations

import threading

import faiss
import numpy as np
import pytest

import lfa_index.index as index_module
from lfa_index import LFA, AlignedIndex
from lfa_index.core.query_map import QueryMap

OPTIONS = dict(beta=0.5, steps=5, device="cpu", random_state=0)


pytestmark = pytest.mark.usefixtures("single_threaded")


def make_task(d_img=32, d_txt=32, n_classes=12, shots=4, seed=0):
    """Support images clustered around a random rotation of their class prototype, plus queries."""
    rng = np.random.default_rng(seed)
    text = rng.standard_normal((n_classes, d_txt)).astype(np.float32)
    mix = rng.standard_normal((d_txt, d_img)).astype(np.float32)
    labels = np.repeat(np.arange(n_classes), shots)
    support = text[labels] @ mix + 0.8 * rng.standard_normal((len(labels), d_img)).astype(np.float32)
    query_labels = rng.integers(0, n_classes, 300)
    queries = text[query_labels] @ mix + 0.8 * rng.standard_normal((300, d_img)).astype(np.float32)
    return support.astype(np.float32), labels, text, queries.astype(np.float32), query_labels


def reference_cosines(lfa: LFA, x: np.ndarray, prototypes: np.ndarray, w: np.ndarray, intercept=None) -> np.ndarray:
    """``(z·q + b)/||z||`` with ``z = (proj(normalize(x)) − μ) W`` in float64, written out from the
    definition (the paper's aligned cosine when there is no centring and no bias)."""
    x = x.astype(np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if lfa.projection_side_ == "image":
        x = x @ lfa.projection_.astype(np.float64).T
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    if lfa.center_:
        x = x - lfa.feature_mean_.astype(np.float64)
    z = x @ w.astype(np.float64)
    scores = z @ prototypes.astype(np.float64).T
    if intercept is not None:
        scores = scores + intercept.astype(np.float64)
    return scores / np.linalg.norm(z, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def fitted(task):
    support, labels, text, _, _ = task
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)


# ------------------------------------------------------------------ exact folded search
@pytest.mark.parametrize(
    "d_img,d_txt", [(32, 32), (48, 32), (32, 48)], ids=["same-dim", "image-projection", "text-projection"]
)
def test_folded_topk_equals_normalised_topk(d_img, d_txt):
    support, labels, text, queries, _ = make_task(d_img, d_txt, n_classes=40, shots=2, seed=1)
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    ref = reference_cosines(index.lfa_, queries, index.lfa_.prototypes_, index.lfa_.W_, index.lfa_.intercept_)
    k = 7
    ref_top = np.argsort(-ref, axis=1, kind="stable")[:, :k]
    scores, top = index.search(queries, k)
    np.testing.assert_array_equal(top, ref_top)
    np.testing.assert_allclose(scores, np.take_along_axis(ref, ref_top, 1), atol=1e-5)
    np.testing.assert_array_equal(index.predict(queries), ref_top[:, 0])
    # a plain FAISS inner-product store of the exported prototypes gives the same ranking on raw
    # queries (normalised with a trailing 1 when the classifier has biases)
    exported = index.aligned_prototypes()
    assert exported.shape[1] == d_img + int(index.augmented_)
    store = faiss.IndexFlatIP(exported.shape[1])
    store.add(exported)
    np.testing.assert_array_equal(store.search(index.prepare_queries(queries), k)[1], ref_top)


def test_predict_computes_no_query_norms(fitted, task, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("predict() must rank by the folded inner product alone")

    expected = fitted.predict(task[3])
    monkeypatch.setattr(QueryMap, "raw_norms", forbidden)
    np.testing.assert_array_equal(fitted.predict(task[3]), expected)


def test_scores_and_probabilities_match_the_core_estimator(fitted, task):
    queries = task[3]
    np.testing.assert_allclose(fitted.decision_function(queries), fitted.lfa_.decision_function(queries), atol=1e-5)
    np.testing.assert_allclose(fitted.predict_proba(queries), fitted.lfa_.predict_proba(queries), atol=1e-4)
    np.testing.assert_allclose(fitted.predict_proba(queries).sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(fitted.predict(queries), fitted.lfa_.predict(queries))


def test_k_larger_than_the_number_of_classes_returns_every_class(fitted, task):
    scores, labels = fitted.search(task[3][:5], k=100)
    assert labels.shape == (5, 12)
    assert all(sorted(row) == list(range(12)) for row in labels)
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_every_lfa_option_passes_through_to_the_core(task):
    support, labels, text, _, _ = task
    index = AlignedIndex(lfa=LFA(beta=0.25, steps=3, k=2, temperature=0.05, device="cpu", random_state=3))
    index.fit(support, labels, text)
    assert index.lfa_.beta_ == 0.25 and index.lfa_.steps_ == 3 and index.lfa_.k == 2
    assert index.get_params()["lfa__temperature"] == 0.05
    lfa = LFA(beta=0.25, steps=3, k=2, temperature=0.05, device="cpu", random_state=3).fit(support, labels, text)
    np.testing.assert_array_equal(index.lfa_.W_, lfa.W_)


# ------------------------------------------------------------------ label spaces
def test_string_labels_come_back_as_names(task):
    support, labels, text, queries, _ = task
    names = [f"class {i}" for i in range(len(text))]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(names)[labels], text, class_names=names)
    by_index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    assert index.label_space_.kind == "name"
    np.testing.assert_array_equal(index.predict(queries), np.array(names)[by_index.predict(queries)])
    assert index.search(queries, 3)[1][0, 0] in names


def test_the_lfa_is_fitted_on_the_index_labels_and_answers_in_its_classes(task):
    support, labels, text, queries, _ = task
    names = np.array([f"class {i}" for i in range(len(text))])
    by_name = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, names[labels], text, class_names=names)
    by_index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    np.testing.assert_array_equal(by_name.lfa_.classes_, by_name.classes_)
    np.testing.assert_array_equal(by_index.lfa_.classes_, np.arange(len(text)))
    np.testing.assert_array_equal(by_name.lfa_.predict(queries), by_name.predict(queries))
    np.testing.assert_array_equal(by_name.lfa_.W_, by_index.lfa_.W_)  # the same codes reach the solver
    by_name.add_classes(text[:1] + 0.1, ["added"]).partial_fit(support[:4], names[labels[:4]])
    np.testing.assert_array_equal(by_name.lfa_.classes_, by_name.classes_)  # added classes join at the refit


def test_integer_labels_come_back_as_integers_even_with_names(task):
    support, labels, text, queries, _ = task
    names = [f"class {i}" for i in range(len(text))]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text, class_names=names)
    assert index.label_space_.kind == "index" and index.class_names_ == names
    assert index.predict(queries).dtype == np.int64


# ------------------------------------------------------------------ open set
def test_reject_below_returns_the_sentinel_where_the_open_set_score_is_lower(fitted, task):
    queries = task[3]
    known = fitted.score_samples(queries)
    tau = float(np.median(known))
    pred = fitted.predict(queries, reject_below=tau)
    np.testing.assert_array_equal(pred == -1, known < tau)
    np.testing.assert_array_equal(pred[known >= tau], fitted.predict(queries)[known >= tau])


def test_rejected_names_become_none(task):
    support, labels, text, queries, _ = task
    names = [f"c{i}" for i in range(len(text))]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, np.array(names)[labels], text, class_names=names)
    pred = index.predict(queries, reject_below=float(index.score_samples(queries).max()) + 1.0)
    assert index.unknown_label_ is None and all(p is None for p in pred)


def test_rejection_threshold_on_validation_rows_accepts_the_asked_share_of_them(fitted, task):
    tau = fitted.rejection_threshold(accept_rate=0.9)
    assert fitted.rejection_threshold(accept_rate=0.5) >= tau
    assert fitted.rejection_threshold(task[3], accept_rate=0.9) == pytest.approx(
        float(np.quantile(fitted.score_samples(task[3]), 0.1, method="lower"))
    )


# ------------------------------------------------------------------ new classes and warm refits
def test_added_classes_are_scored_with_the_base_to_new_map(task):
    support, labels, text, queries, _ = task
    base = 8
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[labels < base], labels[labels < base], text[:base])
    index.add_classes(text[base:])
    lfa = index.lfa_
    expected = np.concatenate(
        [
            reference_cosines(lfa, queries, lfa.prototypes_, lfa.W_, lfa.intercept_),
            reference_cosines(lfa, queries, lfa.transform_text(text[base:]), lfa.W_tt_),
        ],
        axis=1,
    )
    np.testing.assert_array_equal(index.classes_, np.arange(len(text)))
    np.testing.assert_array_equal(index.is_new_class_, np.arange(len(text)) >= base)
    np.testing.assert_allclose(index.decision_function(queries), expected, atol=1e-5)
    top = np.argsort(-expected, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(index.search(queries, 4)[1], top)
    np.testing.assert_array_equal(index.predict(queries), top[:, 0])


def test_added_classes_take_names_when_the_index_has_names(task):
    support, labels, text, _, _ = task
    names = [f"c{i}" for i in range(len(text))]
    seen = labels < 8
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[seen], np.array(names)[labels[seen]], text[:8], names[:8])
    index.add_classes(text[8:], class_names=names[8:])
    assert list(index.classes_) == names
    assert index.predict(text[9:10] @ np.eye(32, dtype=np.float32))[0] in names


def test_partial_fit_is_a_warm_start_on_all_support_so_far(task):
    support, labels, text, queries, _ = task
    half = len(support) // 2
    order = np.random.default_rng(0).permutation(len(support))
    first, second = order[:half], order[half:]
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[first], labels[first], text)
    lfa = LFA(**OPTIONS).fit(support[first], labels[first], text)
    index.partial_fit(support[second], labels[second])
    lfa.set_params(warm_start=True).fit(support[np.r_[first, second]], labels[np.r_[first, second]], text)
    np.testing.assert_allclose(index.lfa_.W_, lfa.W_, atol=1e-6)
    assert len(index.support_embeddings_) == len(support)
    np.testing.assert_array_equal(index.predict(queries), lfa.predict(queries))


def test_partial_fit_with_images_of_an_added_class_makes_it_a_fitted_class(task):
    support, labels, text, _, _ = task
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[labels < 8], labels[labels < 8], text[:8])
    index.add_classes(text[8:])
    index.partial_fit(support[labels == 9], labels[labels == 9])
    np.testing.assert_array_equal(np.flatnonzero(index.is_new_class_), [8, 10, 11])
    assert len(index.lfa_.prototypes_) == 12


# ------------------------------------------------------------------ export
@pytest.mark.parametrize("preset,d_out", [("paper", 32), ("default", 48)])
def test_query_transform_gives_the_core_aligned_embedding(task, preset, d_out):
    support, labels, text, queries, _ = make_task(48, 32)
    extra = dict(projection="shrink", prototype_mix=0.0, refine_prototypes=False, center=False, mapping="task")
    index = AlignedIndex(lfa=LFA(**OPTIONS, **(extra if preset == "paper" else {}))).fit(support, labels, text)
    g = index.query_transform()
    assert g.shape == (48, d_out)
    unit = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    aligned = unit @ g + index.query_offset()
    aligned /= np.linalg.norm(aligned, axis=1, keepdims=True)
    np.testing.assert_allclose(aligned, index.lfa_.transform(queries), atol=1e-5)
    transform = index.query_linear_transform()
    assert isinstance(transform, faiss.LinearTransform) and (transform.d_in, transform.d_out) == (48, d_out)
    np.testing.assert_allclose(transform.apply(unit), unit @ g + index.query_offset(), rtol=1e-4, atol=1e-4)
    # as a FAISS pre-transform: raw images in, aligned normalised vectors stored
    chain = faiss.IndexPreTransform(faiss.IndexFlatIP(d_out))
    chain.prepend_transform(faiss.NormalizationTransform(d_out))
    chain.prepend_transform(transform)
    chain.prepend_transform(faiss.NormalizationTransform(48))
    chain.add(queries)
    np.testing.assert_allclose(chain.index.reconstruct_n(0, 5), aligned[:5], atol=1e-5)


# ------------------------------------------------------------------ concurrency
def test_concurrent_calls_give_the_sequential_answers(task):
    support, labels, text, queries, _ = task
    index = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[labels < 10], labels[labels < 10], text[:10])
    index.add_classes(text[10:])
    calls = {
        "predict": lambda q: index.predict(q),
        "search": lambda q: index.search(q, 3),
        "proba": lambda q: index.predict_proba(q),
        "text": lambda q: index.transform_text(text),
    }
    chunks = np.array_split(queries, 6)
    expected = {(name, i): call(chunk) for name, call in calls.items() for i, chunk in enumerate(chunks)}
    results, errors = {}, []

    def worker(offset):
        try:
            for step in range(10):
                i = (offset + step) % len(chunks)
                for name, call in calls.items():
                    results[(name, i, offset, step)] = call(chunks[i])
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 8 * 10 * len(calls)
    for (name, i, _, _), got in results.items():
        want = expected[(name, i)]
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)


@pytest.mark.skipif(not index_module.faiss_gpu_available(), reason="needs faiss-gpu and a GPU")
def test_gpu_indexes_give_the_cpu_answers(task):
    support, labels, text, queries, _ = task
    cpu = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text)
    gpu = AlignedIndex(lfa=LFA(**{**OPTIONS, "device": "cuda"})).fit(support, labels, text)
    assert gpu._table.device.on_gpu and "Gpu" in type(faiss.downcast_index(gpu._table.groups[0].index)).__name__
    assert (gpu.predict(queries) == cpu.predict(queries)).mean() > 0.99
