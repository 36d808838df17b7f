"""EmbeddingAligner: a new encoder's rows mapped into an old encoder's space, learnt from paired rows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes

from lfa_index import (
    DimensionMismatchError,
    EmbeddingAligner,
    IndexFormatError,
    IndexNotFoundError,
    InvalidParameterError,
    NonFiniteError,
    NotFittedError,
    ShapeError,
)
from lfa_index.arrays import l2_normalize
from lfa_index.persistence import write_index_dir

pytestmark = pytest.mark.usefixtures("single_threaded")


def planted(n=300, d_new=24, d_old=16, noise=0.0, offset=0.0, seed=0, map_seed=0):
    """Pairs ``y = normalize(x Q + noise)`` of a planted semi-orthogonal Q (d_new, d_old) drawn from
    ``map_seed``; ``offset`` puts the new rows in a cone around a shared direction (as e5's)."""
    q = np.linalg.qr(np.random.default_rng(map_seed).standard_normal((d_new, d_new)))[0][:, :d_old]
    rng = np.random.default_rng(seed + 1000)
    x = l2_normalize(rng.standard_normal((n, d_new)))
    y = l2_normalize(x @ q + noise * rng.standard_normal((n, d_old)))
    cone = np.zeros(d_new, dtype=np.float32)
    cone[0] = offset
    return l2_normalize(x + cone), y, q


def partner_top1(aligner, x, y):
    return float(((aligner.transform(x) @ y.T).argmax(axis=1) == np.arange(len(x))).mean())


@pytest.fixture(scope="module")
def fitted():
    x, y, q = planted(noise=0.05)
    return EmbeddingAligner(random_state=0).fit(x, y), x, y, q


def test_a_planted_linear_map_is_recovered_across_widths(fitted):
    aligner, x, y, q = fitted
    assert aligner.W_.shape == (24, 16) and aligner.mean_.shape == (24,)
    assert aligner.n_features_in_ == 24 and aligner.n_features_out_ == 16
    assert partner_top1(aligner, x, y) > 0.97
    x_test, y_test, _ = planted(n=200, noise=0.05, seed=1)  # same Q, other rows
    assert partner_top1(aligner, x_test, y_test) > 0.97
    closed = EmbeddingAligner(steps=0, center=False, random_state=0).fit(x, y)
    other = np.linalg.qr(np.random.default_rng(7).standard_normal((24, 24)))[0][:, :16]
    assert np.linalg.norm(closed.W_ - q) < 0.25 * np.linalg.norm(q) < np.linalg.norm(other - q)


def test_transform_is_unit_float32_rows_and_one_gemv_of_the_served_map(fitted):
    aligner, x, _, _ = fitted
    z = aligner.transform(x[:7] * 3.0)  # any scale: rows are normalised first
    assert z.dtype == np.float32 and z.shape == (7, 16)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(z, l2_normalize((x[:7] - aligner.mean_) @ aligner.W_), rtol=1e-5, atol=1e-6)


def test_a_narrow_cone_is_centred_and_beats_uncentred_procrustes():
    x, y, _ = planted(n=400, d_new=16, d_old=16, noise=0.3, offset=4.0, seed=3, map_seed=3)
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(x, y)
    plain = EmbeddingAligner(steps=0, center=False, random_state=0).fit(x, y)
    assert aligner.center_ and not plain.center_
    assert partner_top1(aligner, x, y) > partner_top1(plain, x, y) + 0.2
    assert aligner.selection_["candidates"]["Procrustes, centred"] > aligner.selection_["candidates"]["Procrustes"]


def test_a_new_model_that_crowds_directions_is_whitened_before_procrustes():
    # the new model squeezes some latent directions (e5's cone, a static model's few strong axes):
    # no orthogonal map undoes that, whitening the new rows first does
    rng = np.random.default_rng(4)
    latent = rng.standard_normal((600, 16))
    x = l2_normalize(latent * np.geomspace(0.05, 1.0, 16))
    y = l2_normalize(latent @ np.linalg.qr(rng.standard_normal((16, 16)))[0])
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(x[:400], y[:400])
    table = aligner.selection_["candidates"]
    assert aligner.method_.startswith("whitened Procrustes")
    assert max(v for k, v in table.items() if k.startswith("whitened")) > table["Procrustes"] + 0.05
    held = x[400:] - aligner.mean_
    norms = np.linalg.norm(held @ aligner.W_, axis=1).mean() / np.linalg.norm(held, axis=1).mean()
    assert norms == pytest.approx(1.0, rel=0.2)  # scaled as an orthogonal map would be
    procrustes = orthogonal_procrustes(x[:400], y[:400])[0]
    plain = (l2_normalize(x[400:] @ procrustes) @ y[400:].T).argmax(axis=1) == np.arange(200)
    assert partner_top1(aligner, x[400:], y[400:]) > plain.mean() + 0.05


def test_the_identity_is_kept_when_both_rows_come_from_one_model():
    rng = np.random.default_rng(5)
    x = l2_normalize(rng.standard_normal((200, 12)))
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(x, l2_normalize(x + 0.01 * rng.standard_normal(x.shape)))
    assert partner_top1(aligner, x, x) == 1.0
    assert aligner.selection_["candidates"]["identity"] > 0.99


def test_refinement_is_chosen_on_held_out_pairs_and_only_when_it_helps(fitted):
    aligner, _, _, _ = fitted
    sel = aligner.selection_
    assert set(sel["step_scores"]) == {str(s) for s in range(25, 301, 25)}
    if aligner.steps_:
        assert sel["heldout_mrr"] > sel["heldout_init_mrr"]
    else:
        assert "not significantly better" in sel["how"]
    assert aligner.summary_.startswith("EmbeddingAligner fit: 24-d -> 16-d")


def test_refinement_helps_where_procrustes_is_not_enough():
    # a non-orthogonal planted map: Procrustes is biased, ARerank refinement can move W off the orthogonal group
    rng = np.random.default_rng(2)
    x = l2_normalize(rng.standard_normal((600, 8)))
    y = l2_normalize(x @ (rng.standard_normal((8, 8)) * np.linspace(0.1, 2.0, 8)))
    aligner = EmbeddingAligner(random_state=0).fit(x[:400], y[:400])
    closed = EmbeddingAligner(steps=0, random_state=0).fit(x[:400], y[:400])
    assert aligner.steps_ > 0
    assert partner_top1(aligner, x[400:], y[400:]) > partner_top1(closed, x[400:], y[400:]) + 0.05


def test_a_query_sample_centres_the_served_map_on_its_mean():
    x, y, _ = planted(n=300, d_new=16, d_old=16, offset=4.0, seed=4, map_seed=4)
    queries = planted(n=50, d_new=16, d_old=16, offset=2.0, seed=9, map_seed=4)[0]
    aligner = EmbeddingAligner(steps=0, center=True, random_state=0).fit(x, y, queries=queries)
    np.testing.assert_allclose(aligner.mean_, l2_normalize(queries).mean(axis=0), rtol=1e-5, atol=1e-6)
    assert "queries' mean" in aligner.summary_
    # held-out pairs cannot score a map served around another mean: no step count is chosen for it
    chosen = EmbeddingAligner(center=True, random_state=0).fit(x, y, queries=queries)
    assert chosen.steps_ == 0 and "cannot score" in chosen.selection_["how"]
    np.testing.assert_array_equal(chosen.W_, aligner.W_)


def test_unpaired_samples_fit_a_map_of_the_right_shape():
    x, y, _ = planted(n=120, d_new=12, d_old=8, seed=6, map_seed=6)
    aligner = EmbeddingAligner(random_state=0, n_rounds=2).fit(x, y[:90], paired=False)
    assert aligner.W_.shape == (12, 8) and not aligner.paired_ and aligner.selection_["rows"] == [120, 90]
    assert aligner.transform(x[:3]).shape == (3, 8)


# ------------------------------------------------------------------------------ persistence
def test_save_and_load_round_trip(fitted, tmp_path):
    aligner, x, _, _ = fitted
    aligner.save(tmp_path / "map")
    loaded = EmbeddingAligner.load(tmp_path / "map")
    np.testing.assert_array_equal(loaded.transform(x), aligner.transform(x))
    assert loaded.get_params() == aligner.get_params()
    assert loaded.summary_ == aligner.summary_ and loaded.selection_ == aligner.selection_
    manifest = json.loads((tmp_path / "map" / "manifest.json").read_text())
    assert manifest["kind"] == "embedding-aligner"
    assert not list((tmp_path / "map").rglob("*.pkl"))


def test_loading_refuses_missing_foreign_and_inconsistent_directories(fitted, tmp_path):
    aligner, _, _, _ = fitted
    with pytest.raises(IndexNotFoundError):
        EmbeddingAligner.load(tmp_path / "nothing")
    doc = {"aligner_format": 1, "params": aligner.get_params(),
           "state": {**json.loads(json.dumps(_state(aligner))), "n_features_in_": 25}}
    write_index_dir(tmp_path / "bad", kind="embedding-aligner", documents={"aligner.json": doc},
                    arrays={"map.safetensors": {"W": aligner.W_, "mean": aligner.mean_}}, faiss_indexes={})
    with pytest.raises(IndexFormatError, match="map.safetensors"):
        EmbeddingAligner.load(tmp_path / "bad")
    write_index_dir(tmp_path / "other", kind="aligned-index", documents={"params.json": {}},
                    arrays={"arrays.safetensors": {"W": aligner.W_}}, faiss_indexes={})
    with pytest.raises(IndexFormatError, match="embedding-aligner"):
        EmbeddingAligner.load(tmp_path / "other")
    aligner.save(tmp_path / "tampered")
    data = next((tmp_path / "tampered").glob("data-*/map.safetensors"))
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(IndexFormatError):
        EmbeddingAligner.load(tmp_path / "tampered")


def _state(aligner):
    from lfa_index.index.aligner_format import STATE

    return {name: getattr(aligner, name) for name in STATE}


SERVE = textwrap.dedent(
    """
    import sys

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "sklearn", "scipy", "tqdm", "ot"}:
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, Blocker())
    import numpy as np
    from lfa_index import EmbeddingAligner
    from lfa_index.stores import FaissStore, search_mapped

    aligner = EmbeddingAligner.load(sys.argv[1])
    data = np.load(sys.argv[2])
    store = FaissStore(dim=aligner.n_features_out_).add(data["old"], ids=np.arange(len(data["old"])))
    ids = search_mapped(aligner, store, data["new"], 5)[1]
    np.savez(sys.argv[3], transform=aligner.transform(data["new"]), ids=ids)
    print("leaked", sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "sklearn", "scipy"}))
    """
)


def test_a_saved_aligner_transforms_and_searches_without_torch(fitted, tmp_path):
    from lfa_index.stores import FaissStore, search_mapped

    aligner, x, y, _ = fitted
    aligner.save(tmp_path / "map")
    np.savez(tmp_path / "inputs.npz", new=x[:20], old=y)
    done = subprocess.run([sys.executable, "-c", SERVE, str(tmp_path / "map"), str(tmp_path / "inputs.npz"),
                           str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "leaked []" in done.stdout
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["transform"], aligner.transform(x[:20]))
    store = FaissStore(dim=16).add(y, ids=np.arange(len(y)))
    np.testing.assert_array_equal(out["ids"], search_mapped(aligner, store, x[:20], 5)[1])


# ------------------------------------------------------------------------------ typed errors
def test_inputs_and_parameters_fail_with_typed_errors(fitted):
    aligner, x, y, _ = fitted
    with pytest.raises(NotFittedError):
        EmbeddingAligner().transform(x)
    with pytest.raises(ShapeError, match="paired=False"):
        EmbeddingAligner().fit(x, y[:-1])
    with pytest.raises(DimensionMismatchError, match="24-d"):
        aligner.transform(y)
    with pytest.raises(DimensionMismatchError, match="queries"):
        EmbeddingAligner().fit(x, y, queries=y)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(NonFiniteError):
        EmbeddingAligner().fit(bad, y)
    with pytest.raises(InvalidParameterError, match="center"):
        EmbeddingAligner(center="yes").fit(x, y)
    with pytest.raises(InvalidParameterError, match="maps"):
        EmbeddingAligner(maps="ridge").fit(x, y)
    with pytest.raises(InvalidParameterError, match="paired"):
        EmbeddingAligner().fit(x, y, paired="no")
    state = dict(aligner.__dict__)
    with pytest.raises(ShapeError):
        aligner.fit(x, y[:5])
    assert aligner.__dict__.keys() == state.keys() and aligner.W_ is state["W_"]  # a failed fit changes nothing


def test_groups_hold_each_documents_views_out_together():
    """With groups, no group has pairs on both sides of a fold, and every pair is held out once; the
    aligner refuses groups of the wrong length and groups of unpaired samples."""
    from lfa_index.core.solvers.migration import heldout_folds

    groups = np.repeat(np.arange(40), np.random.default_rng(0).integers(1, 6, 40))
    folds = heldout_folds(len(groups), 3, seed=0, groups=groups)
    assert sorted(np.concatenate([va for _, va in folds]).tolist()) == list(range(len(groups)))
    for train, held in folds:
        assert not set(groups[train]) & set(groups[held])
    singletons = np.arange(30)[::-1]  # one pair per group: the plain folds, whatever the labels
    plain = [held.tolist() for _, held in heldout_folds(30, 3, 0)]
    assert [held.tolist() for _, held in heldout_folds(30, 3, 0, singletons)] == plain
    x, y, _ = planted(n=len(groups), noise=0.05)
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(x, y, groups=[f"doc{g}" for g in groups])
    assert aligner.selection_["heldout_mrr"] > 0.5
    with pytest.raises(ShapeError, match="one label per pair"):
        EmbeddingAligner(steps=0).fit(x, y, groups=groups[:-1])
    with pytest.raises(InvalidParameterError, match="paired=False"):
        EmbeddingAligner(steps=0).fit(x, y, paired=False, groups=groups)


def test_the_intra_group_correlation_recovers_a_planted_share_of_variance_between_groups():
    """Rows = a group effect (variance share ρ) + independent noise: the ANOVA estimate finds ρ, for
    unequal group sizes too; identical rows within groups give 1, groups that share nothing ≈ 0."""
    from lfa_index.core.group_weights import intra_group_correlation

    rng = np.random.default_rng(0)
    counts = rng.integers(2, 30, 400)
    codes = np.repeat(np.arange(400), counts)
    for rho in (0.0, 0.15, 0.5, 0.9):
        between, within = rng.standard_normal((400, 32))[codes], rng.standard_normal((len(codes), 32))
        x = np.sqrt(rho) * between + np.sqrt(1 - rho) * within
        assert intra_group_correlation(x, codes, counts) == pytest.approx(rho, abs=0.03)
    assert intra_group_correlation(rng.standard_normal((400, 8))[codes], codes, counts) == pytest.approx(1.0)


def test_design_weights_count_a_groups_pairs_by_its_design_effect():
    """Each pair of a group of m weighs 1 / (1 + (m − 1)ρ), scaled to mean 1; nothing to weigh
    without groups or with one pair per group."""
    from lfa_index.core.group_weights import design_weights

    x, y, _ = planted(n=120, noise=0.05)
    assert design_weights(x, y, None) == (None, 0.0)
    assert design_weights(x, y, np.arange(120)) == (None, 0.0)
    groups = np.repeat(np.arange(20), np.arange(1, 21))[:120]
    x = x + np.random.default_rng(1).standard_normal((120, 24))[groups]  # rows of a group alike
    weight, rho = design_weights(x, y, groups)
    assert 0.1 < rho < 1.0 and weight.mean() == pytest.approx(1.0)
    size = np.bincount(groups)[groups]
    expected = 1.0 / (1.0 + (size - 1) * rho)
    np.testing.assert_allclose(weight, expected / expected.mean(), rtol=1e-12)


@pytest.mark.parametrize("kind, center, penalty", [("orthogonal", True, None), ("orthogonal", False, 0.25),
                                                   ("whitened", True, 1.0), ("forward", True, 0.1),
                                                   ("scores", False, 0.1)])
def test_a_pair_of_weight_two_counts_as_the_same_pair_twice(kind, center, penalty):
    """Weights act as repeated rows in every closed form: integer weights fit the map of the rows repeated."""
    import torch

    from lfa_index.core.solvers.migration import Recipe

    x, y, _ = planted(n=60, noise=0.2, d_old=24 if penalty and kind == "orthogonal" else 16)  # β: one width
    repeats = np.random.default_rng(0).integers(1, 4, 60)
    recipe = Recipe(kind, center, penalty)
    weighted = recipe.fit(torch.from_numpy(x).double(), torch.from_numpy(y).double(),
                          torch.from_numpy(repeats.astype(np.float64)))
    repeated = recipe.fit(torch.from_numpy(np.repeat(x, repeats, axis=0)).double(),
                          torch.from_numpy(np.repeat(y, repeats, axis=0)).double())
    torch.testing.assert_close(weighted.W, repeated.W)
    torch.testing.assert_close(weighted.mean, repeated.mean)


def test_refinement_draws_pairs_in_proportion_to_their_weight():
    """Pairs of weight 0 are never drawn: refining on pairs half of which follow another map moves
    towards the first map further when the others weigh nothing."""
    import torch

    from lfa_index.core.config import RefineConfig
    from lfa_index.core.solvers.migration import refine_pairs, semi_orthogonal_procrustes

    x, y, q = planted(n=200, noise=0.05)
    _, y_other, _ = planted(n=200, noise=0.05, map_seed=5)
    y[100:] = y_other[100:]
    weight = torch.cat([torch.ones(100), torch.zeros(100)]).double()
    fits = {}
    for name, w in (("weighted", weight), ("equal", None)):
        gen, coin = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
        start = semi_orthogonal_procrustes(torch.from_numpy(x).double(), torch.from_numpy(y).double())  # between both
        fits[name], _ = refine_pairs(start, torch.from_numpy(x).double(), torch.from_numpy(y).double(), steps=300,
                                     generator=gen, coin=coin, config=RefineConfig(lr=0.02), weight=w)
    x_test, y_test, _ = planted(n=200, noise=0.05, seed=1)
    top1 = {name: float(((l2_normalize(x_test @ w.numpy()) @ y_test.T).argmax(1) == np.arange(200)).mean())
            for name, w in fits.items()}
    assert top1["weighted"] > top1["equal"] + 0.1, top1  # measured 0.625 against 0.505


def test_grouped_pairs_are_weighted_by_default_and_the_summary_says_so():
    """groups bring design-effect weights (selection_ and summary_ give ρ); "equal" and no groups do not,
    and a weighted fit is not the equal one."""
    x, y, _ = planted(n=240, noise=0.3)
    groups = np.repeat(np.arange(30), np.arange(1, 31) * 240 // 465 + 1)[:240]  # groups of 1 to 15 pairs
    x = l2_normalize(x + 0.5 * np.random.default_rng(2).standard_normal((30, 24))[groups])
    weighted = EmbeddingAligner(steps=0, random_state=0).fit(x, y, groups=groups)
    rho = weighted.selection_["group_correlation"]
    assert 0.0 < rho < 1.0 and f"design effect (ρ={rho:.2f})" in weighted.summary_
    equal = EmbeddingAligner(steps=0, random_state=0, group_weights="equal").fit(x, y, groups=groups)
    assert equal.selection_["group_correlation"] is None and "design effect" not in equal.summary_
    assert EmbeddingAligner(steps=0, random_state=0).fit(x, y).selection_["group_correlation"] is None
    assert not np.allclose(weighted.W_, equal.W_)
    with pytest.raises(InvalidParameterError, match="group_weights"):
        EmbeddingAligner(group_weights="kish").fit(x, y, groups=groups)


def test_heldout_scoring_draws_pairs_and_gallery_only_beyond_its_caps():
    """Up to the caps every held-out pair is ranked among every old row; beyond them a seeded draw
    of each, with every scored pair's partner in the gallery; ranks come out the same in blocks."""
    import torch

    from lfa_index.core.solvers.migration import Scoring, heldout_folds, reciprocal_ranks

    folds = heldout_folds(90, 3, seed=0)
    whole = Scoring.of(folds, 90, seed=0)
    assert [(tr.tolist(), va.tolist()) for tr, va in whole.folds] == [(tr.tolist(), va.tolist()) for tr, va in folds]
    assert whole.gallery.tolist() == list(range(90)) and whole.position.tolist() == list(range(90))
    drawn = Scoring.of(folds, 90, seed=0, max_scored=10, max_gallery=45)
    assert len(drawn.gallery) == 45 and len(set(drawn.gallery.tolist())) == 45
    for (train, held), (train_all, held_all) in zip(drawn.folds, folds):
        assert train.tolist() == train_all.tolist() and len(held) == 10 and set(held) <= set(held_all)
        assert (drawn.position[held] >= 0).all() and (drawn.gallery[drawn.position[held]] == held).all()
    again = Scoring.of(folds, 90, seed=0, max_scored=10, max_gallery=45)
    assert again.gallery.tolist() == drawn.gallery.tolist()
    generator = torch.Generator().manual_seed(0)
    mapped, gallery = torch.randn(50, 8, generator=generator), torch.randn(70, 8, generator=generator)
    partners = torch.randint(70, (50,), generator=generator)
    np.testing.assert_array_equal(reciprocal_ranks(mapped, gallery, partners, block=7),
                                  reciprocal_ranks(mapped, gallery, partners, block=1000))


def test_the_fit_summary_says_when_held_out_pairs_were_drawn(monkeypatch):
    from lfa_index.core.solvers import migration

    x, y, _ = planted(n=120, noise=0.05)
    whole = EmbeddingAligner(steps=0, random_state=0).fit(x, y)
    assert "scored among" not in whole.summary_ and whole.selection_["scored_pairs"] == 120
    monkeypatch.setattr(migration, "MAX_SCORED", 10)
    monkeypatch.setattr(migration, "MAX_GALLERY", 60)
    drawn = EmbeddingAligner(steps=0, random_state=0).fit(x, y)
    assert "(120 pairs, 3 folds; 30 of them scored among 60 rows)" in drawn.summary_
    assert (drawn.selection_["scored_pairs"], drawn.selection_["gallery_rows"]) == (30, 60)


def test_a_closed_form_replaces_a_simpler_one_only_where_held_out_pairs_show_it_clearly():
    """simplest_as_good: the one-standard-error rule with the sign test refinement must pass, in the
    order of simplicity (uncentred first; Procrustes, β rising, whitened by falling shrinkage)."""
    from lfa_index.core.solvers.migration import Recipe, simplest_as_good, simplicity

    order = sorted([Recipe("whitened", True, 3.0), Recipe("identity", False), Recipe("whitened", False, 1.0),
                    Recipe("orthogonal", False, 0.5), Recipe("whitened", False, 3.0), Recipe("orthogonal", False)],
                   key=simplicity)
    assert [r.name for r in order] == ["Procrustes", "β-Procrustes, β=0.5", "whitened Procrustes, shrinkage 3",
                                       "whitened Procrustes, shrinkage 1", "identity",
                                       "whitened Procrustes, shrinkage 3, centred"]
    plain, centred, whitened = Recipe("orthogonal", False), Recipe("orthogonal", True), Recipe("whitened", False, 1.0)
    base = np.full(40, 0.5)
    narrow = base.copy()
    narrow[:6], narrow[6:10] = 1.0, 0.45  # higher mean, 6 gains against 4 losses: p = 0.38
    clear = base.copy()
    clear[:20] = 1.0  # 20 gains, no loss
    pooled = {plain: base, centred: narrow, whitened: clear}
    assert simplest_as_good(list(pooled), {plain: base, centred: narrow, whitened: base}, centred) == plain
    assert simplest_as_good(list(pooled), pooled, whitened) == whitened
    assert simplest_as_good(list(pooled), {plain: base, centred: clear, whitened: clear}, centred) == whitened


def test_few_pairs_of_an_orthogonal_map_keep_procrustes_and_the_selection_names_the_best():
    """60 noisy pairs of a planted orthogonal map: some closed form scores a little higher on held-out
    pairs by chance, but not clearly, so Procrustes is kept and ``selection_["how"]`` says which."""
    x, y, _ = planted(n=60, d_new=16, d_old=16, noise=0.4, seed=6, map_seed=6)
    aligner = EmbeddingAligner(steps=0, random_state=0).fit(x, y)
    table = aligner.selection_["candidates"]
    assert aligner.method_ == "Procrustes" and not aligner.center_
    best = max(table, key=table.get)
    assert best != "Procrustes" and table[best] > table["Procrustes"]
    assert aligner.selection_["how"] == f"simplest closed form as good on held-out pairs (best: {best})"
    refined = EmbeddingAligner(random_state=0).fit(x, y).selection_["how"]  # refinement adds its own verdict
    assert refined.startswith(f"simplest closed form as good on held-out pairs (best: {best}); ")
    assert f"Procrustes (kept over {best}, not clearly better on held-out pairs)" in aligner.summary_


def test_a_dead_dimension_of_the_old_model_changes_nothing_it_fits():
    """all-MiniLM-L6-v2 writes 1e-33 in two of its dimensions: those entries change no cosine and are
    held at zero (their products with gradients would be subnormal, 10-100x slower on a CPU), so the
    aligner fits the same numbers as on rows where they are exactly zero."""
    x, y, _ = planted(n=120, noise=0.05)
    dead, zeroed = y.copy(), y.copy()
    dead[:, 3] = 1e-33 * np.random.default_rng(5).uniform(0.5, 1.5, len(y))
    zeroed[:, 3] = 0.0
    first = EmbeddingAligner(steps=25, random_state=0).fit(x, dead)
    second = EmbeddingAligner(steps=25, random_state=0).fit(x, zeroed)
    np.testing.assert_array_equal(first.W_, second.W_)
    np.testing.assert_array_equal(first.mean_, second.mean_)
