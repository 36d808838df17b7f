"""Reporting: baselines, k-shot tables and the alignment diagnostics behind the report's figures."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import baselines as bench_baselines
from benchmarks import data as bench_data
from lfa_index import LFA, AlignedIndex, LabelError, baselines
from lfa_index.reporting import (
    FewShotTask,
    alignment_section,
    alignment_stages,
    class_positions,
    run_few_shot,
    sample_support,
    write_report,
)
from lfa_index.reporting.evaluation import FewShotResults

OPTIONS = dict(steps=20, device="cpu", random_state=0)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def problem():
    from synthetic import planted_gap_problem

    return planted_gap_problem(n_classes=6, shots=8, d=16, n_test=12, seed=3)


@pytest.fixture(scope="module")
def fitted(problem):
    X, y, P, _, _ = problem
    names = [f"class {i}" for i in range(len(P))]
    return AlignedIndex(lfa=LFA(**OPTIONS)).fit(X, y, P, names)


# ----------------------------------------------------------------------------- baselines
def test_baselines_match_the_benchmark_baselines(problem):
    bench = bench_baselines
    X, y, P, X_test, _ = problem
    np.testing.assert_array_equal(baselines.zero_shot(P, X_test), bench.zero_shot(P, X_test))
    np.testing.assert_array_equal(baselines.nearest_class_mean(X, y, X_test), bench.nearest_class_mean(X, y, X_test))
    np.testing.assert_array_equal(baselines.knn(X, y, X_test), bench.knn(X, y, X_test))
    np.testing.assert_array_equal(baselines.linear_probe(X, y, X_test), bench.linear_probe(X, y, X_test))


def test_sample_support_matches_the_benchmark_sampler():
    bench = bench_data
    labels = np.repeat(np.arange(5), [3, 7, 1, 9, 4])
    for shots, seed in ((1, 0), (4, 2), (16, 1)):
        np.testing.assert_array_equal(sample_support(labels, shots, seed), bench.sample_support(labels, shots, seed))


def test_sample_support_takes_at_most_shots_rows_per_class():
    labels = np.repeat(np.arange(4), [2, 6, 6, 6])
    idx = sample_support(labels, 4, seed=0)
    assert np.bincount(labels[idx]).tolist() == [2, 4, 4, 4]
    assert len(np.unique(idx)) == len(idx)


def test_nearest_class_mean_recovers_separated_clusters():
    rng = np.random.default_rng(0)
    centres = np.eye(4, 8)
    y = np.repeat(np.arange(4), 5)
    X = centres[y] + 0.05 * rng.standard_normal((20, 8))
    assert (baselines.nearest_class_mean(X, y, centres) == np.arange(4)).all()


# ----------------------------------------------------------------------------- alignment diagnostics
def test_stages_reproduce_the_estimator_hubness_before_and_after_refinement(fitted):
    stages = alignment_stages(fitted)
    ranks = stages.true_prototype_ranks("support")
    assert np.mean(ranks["beta_procrustes"] > 0) == pytest.approx(fitted.lfa_.hubness_init_, abs=1e-6)
    assert np.mean(ranks["lfa"] > 0) == pytest.approx(fitted.lfa_.hubness_, abs=1e-6)


def test_lfa_stage_on_eval_rows_agrees_with_the_text_prototype_classifier(problem):
    # the stages rank rows against the aligned text prototypes: the classifier when λ = 0 and the
    # prototypes are not trained
    X, y, P, X_test, y_test = problem
    names = [f"class {i}" for i in range(len(P))]
    options = dict(OPTIONS, prototype_mix=0.0, mapping="task", refine_prototypes=False)
    plain = AlignedIndex(lfa=LFA(**options)).fit(X, y, P, names)
    stages = alignment_stages(plain, X_test, [f"class {i}" for i in y_test])
    predicted = class_positions(plain, plain.predict(X_test))
    assert stages.accuracy("eval")["lfa"] == pytest.approx(np.mean(predicted == y_test))


def test_alignment_closes_the_planted_modality_gap(fitted):
    gaps = alignment_stages(fitted).modality_gap("support")
    assert gaps["identity"] > 0.3
    assert gaps["beta_procrustes"] < 0.5 * gaps["identity"]
    assert gaps["lfa"] < 0.5 * gaps["identity"]


def test_stages_project_rows_when_the_widths_differ(problem):
    X, y, P, X_test, y_test = problem
    wide = np.concatenate([X, np.zeros((len(X), 8), dtype=np.float32)], axis=1)
    index = AlignedIndex(lfa=LFA(**OPTIONS, projection="shrink")).fit(wide, y, P)
    stages = alignment_stages(index)
    assert not stages.same_space
    assert stages.rows["support"]["identity"].shape == (len(X), P.shape[1])
    widened = alignment_stages(AlignedIndex(lfa=LFA(**OPTIONS, projection="widen")).fit(wide, y, P))
    assert not widened.same_space
    assert widened.rows["support"]["identity"].shape == (len(X), wide.shape[1])
    assert widened.prototypes.shape == (P.shape[0], wide.shape[1])
    assert np.mean(stages.true_prototype_ranks("support")["lfa"] > 0) == pytest.approx(index.lfa_.hubness_, abs=1e-6)


def test_class_positions_reads_names_and_integers_and_rejects_unknown_labels(fitted, problem):
    assert class_positions(fitted, ["class 2", "class 0"]).tolist() == [2, 0]
    assert class_positions(fitted, np.array([1, 5])).tolist() == [1, 5]
    with pytest.raises(LabelError):
        class_positions(fitted, ["no such class"])
    with pytest.raises(LabelError):
        class_positions(fitted, np.array([6]))


# ----------------------------------------------------------------------------- tables
def test_run_few_shot_scores_every_method_and_keeps_the_first_seed_index(problem):
    X, y, P, X_test, y_test = problem
    task = FewShotTask("planted", X, y, X_test, y_test, P, [str(i) for i in range(len(P))], same_model=True)
    results = run_few_shot(task, shots=(1, 4), seeds=(0, 1), lfa_options={"steps": 10, "device": "cpu"})
    assert set(results.indexes) == {1, 4}
    for k in (1, 4):
        for m in results.methods:
            assert len(results.accuracy[(k, m)]) == 2
            assert all(0.0 <= a <= 1.0 for a in results.accuracy[(k, m)])
    # zero-shot uses no support row: one score everywhere
    assert len({a for k in (1, 4) for a in results.accuracy[(k, "zero_shot")]}) == 1
    # the kept index is the seed-0 fit on the seed-0 support draw
    idx = sample_support(y, 4, 0)
    again = AlignedIndex(lfa=LFA(steps=10, device="cpu", random_state=0)).fit(X[idx], y[idx], P)
    expected = np.mean(again.predict(X_test) == y_test)
    assert results.accuracy[(4, "lfa")][0] == pytest.approx(expected)


def test_zero_shot_is_left_out_across_models(problem):
    X, y, P, X_test, y_test = problem
    task = FewShotTask("planted", X, y, X_test, y_test, P, [str(i) for i in range(len(P))], same_model=False)
    results = run_few_shot(task, shots=(2,), seeds=(0,), lfa_options={"steps": 5, "device": "cpu"})
    assert "zero_shot" not in results.methods
    assert "zero-shot" not in results.table()


def test_table_shows_mean_and_spread_over_seeds_and_na_for_missing_cells():
    task = FewShotTask("t", np.zeros((1, 2)), np.zeros(1, int), np.zeros((1, 2)), np.zeros(1, int), np.eye(2),
                       ["a", "b"], True)
    results = FewShotResults(task, (1, 4), (0, 1), ("nearest_class_mean", "lfa"))
    results.accuracy[(1, "nearest_class_mean")] = [0.5, 0.7]
    results.accuracy[(1, "lfa")] = [0.9, 0.9]
    lines = results.table().splitlines()
    assert lines[0].split() == ["shots", "class", "mean", "LFA"]
    assert "60.0 ± 10.0" in lines[2] and "90.0 ± 0.0" in lines[2]
    assert lines[3].split() == ["4", "n/a", "n/a"]
    assert results.to_dict()["accuracy"]["1"]["lfa"]["mean"] == pytest.approx(0.9)


# ----------------------------------------------------------------------------- report files
def test_report_writes_readable_pngs_and_a_page_that_shows_them(fitted, problem, tmp_path):
    _, _, _, X_test, y_test = problem
    section = alignment_section(fitted, tmp_path, name="planted", eval_embeddings=X_test,
                                eval_labels=[f"class {i}" for i in y_test])
    page = write_report(tmp_path, [section], results={"ok": 1})
    files = [f for f, _ in section.figures]
    assert files == [
        "planted_modality_gap.png", "planted_hubness.png", "planted_similarity.png", "planted_per_class.png"
    ]
    html = page.read_text()
    for f in files:
        data = (tmp_path / f).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
        assert f'src="{f}"' in html
    assert (tmp_path / "results.json").is_file()
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_modality_gap_figure_gives_lfa_the_accuracy_the_page_reports(fitted, problem, tmp_path, monkeypatch):
    """One number per model: the LFA panel shows the index's classifier, not the nearest text prototype."""
    from lfa_index.reporting import figures

    _, _, _, X_test, y_test = problem
    shown = {}
    draw = figures.modality_gap_figure
    monkeypatch.setattr(figures, "modality_gap_figure",
                        lambda stages, **kw: shown.update(kw) or draw(stages, **kw))
    section = alignment_section(fitted, tmp_path, name="planted", eval_embeddings=X_test,
                                eval_labels=[f"class {i}" for i in y_test])
    page_line = next(line for line in section.lines if line.startswith("Eval accuracy"))
    assert f"LFA {100 * shown['classifier_accuracy']:.1f}%" in page_line
    stages = alignment_stages(fitted, X_test, [f"class {i}" for i in y_test])
    gaps, rows = stages.modality_gap("support"), stages.mean_row_norm("support")
    for stage in gaps:  # the gap is at least the difference of the two means' norms
        assert gaps[stage] >= abs(rows[stage] - stages.mean_prototype_norm("support")) - 1e-6
