import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from synthetic import planted_gap_problem

from lfa_index import LFA, DimensionMismatchError, LabelError, max_pool_frames
from lfa_index.core.projection import isometric_embedding_matrix, keeps_distances, random_projection_matrix


def test_sklearn_conventions_get_set_params_and_clone():
    lfa = LFA(beta=0.7, steps=10, random_state=3)
    params = lfa.get_params()
    assert params["beta"] == 0.7 and params["steps"] == 10 and params["random_state"] == 3
    lfa.set_params(beta=0.5)
    assert lfa.beta == 0.5
    copy = clone(lfa)
    assert copy.get_params() == lfa.get_params() and copy is not lfa


def test_init_only_stores_parameters():
    lfa = LFA(beta="not checked until fit")
    assert lfa.beta == "not checked until fit"
    assert not any(k.endswith("_") and not k.startswith("_") for k in vars(lfa))


def test_methods_before_fit_raise_not_fitted(planted):
    x, *_ = planted
    for method in ("predict", "predict_proba", "transform", "decision_function"):
        with pytest.raises(NotFittedError):
            getattr(LFA(), method)(x)


def test_full_lfa_beats_zero_shot_on_a_planted_gap():
    x, y, protos, xt, yt = planted_gap_problem(noise=0.25, n_test=30)
    lfa = LFA(random_state=0).fit(x, y, protos)
    zero_shot = np.mean((xt @ protos.T).argmax(1) == yt)
    assert lfa.score(xt, yt) > zero_shot + 0.3
    proba = lfa.predict_proba(xt)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(proba.argmax(1), lfa.predict(xt))
    z = lfa.transform(xt)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
    assert 0.0 <= lfa.beta_ <= 1.0 and lfa.beta_scores_.shape == (21,)


def test_two_mappings_are_exposed_and_usable(planted):
    x, y, protos, xt, yt = planted
    lfa = LFA(steps=60, mapping="task", random_state=0).fit(x, y, protos)
    np.testing.assert_allclose(lfa.W_avg_, (lfa.W_ + lfa.W_ema_) / 2)  # the average of the paper's two maps
    paper = LFA.paper(steps=60, random_state=0).fit(x, y, protos)
    np.testing.assert_array_equal(paper.W_tt_, paper.W_ema_)  # the paper serves new classes with its W_tt
    for mapping in ("task", "tt", "average"):
        assert lfa.predict(xt, mapping=mapping).shape == (len(xt),)
    # prototypes of other classes can be scored with either map
    scores = lfa.decision_function(xt, mapping="tt", text_emb=protos[:3])
    assert scores.shape == (len(xt), 3)


def test_warm_start_continues_from_the_previous_map(planted):
    x, y, protos, _, _ = planted
    lfa = LFA(steps=20, random_state=0, warm_start=True).fit(x, y, protos)
    first_w, first_beta = lfa.W_.copy(), lfa.beta_
    lfa.set_params(lr=1e-12, final_lr=0.0)
    lfa.fit(x, y, protos)
    np.testing.assert_allclose(lfa.W_, first_w, atol=1e-6)
    assert lfa.beta_ == first_beta


@pytest.mark.parametrize("image_dim,text_dim,side", [(48, 32, "image"), (32, 48, "text")])
def test_disjoint_encoders_are_bridged_by_a_seeded_random_projection(image_dim, text_dim, side):
    x, y, protos, xt, yt = planted_gap_problem(d=max(image_dim, text_dim), n_test=10, seed=5)
    if side == "image":
        protos = protos[:, :text_dim]
    else:
        x, xt = x[:, :image_dim], xt[:, :image_dim]
    lfa = LFA(steps=20, random_state=11, projection="shrink").fit(x, y, protos)
    assert lfa.projection_side_ == side and lfa.projection_kind_ == "shrink"
    assert lfa.projection_.shape == (min(image_dim, text_dim), max(image_dim, text_dim))
    assert lfa.W_.shape == (min(image_dim, text_dim),) * 2
    expected = random_projection_matrix(max(image_dim, text_dim), min(image_dim, text_dim), 11)
    np.testing.assert_array_equal(lfa.projection_, expected)
    assert lfa.predict(xt).shape == (len(xt),)


@pytest.mark.parametrize("image_dim,text_dim", [(320, 256), (256, 320)])
def test_the_paper_projects_the_image_rows_into_the_text_width_down_or_up(image_dim, text_dim):
    """The paper maps the image features into the text space (scikit-learn's Gaussian projection):
    wider image rows are projected down, as "shrink" does, and narrower ones up, never the text.
    (192 rows keep their distances within ±50 % in 252 dimensions: the projection down applies.)"""
    x, y, protos, xt, yt = planted_gap_problem(d=max(image_dim, text_dim), noise=0.1, n_test=10, seed=5)
    x, xt, protos = x[:, :image_dim], xt[:, :image_dim], protos[:, :text_dim]
    lfa = LFA.paper(steps=20, random_state=11).fit(x, y, protos)
    assert lfa.projection_side_ == "image" and lfa.projection_kind_ == "to_text"
    assert lfa.W_.shape == (text_dim, text_dim)
    np.testing.assert_array_equal(lfa.projection_, random_projection_matrix(image_dim, text_dim, 11))
    if image_dim > text_dim:  # the same matrix as "shrink"
        shrunk = LFA(steps=20, random_state=11, projection="shrink", prototype_mix=0.0).fit(x, y, protos)
        np.testing.assert_array_equal(lfa.projection_, shrunk.projection_)
    assert lfa.predict(xt).shape == (len(xt),)


def test_the_papers_projection_widens_instead_where_going_down_would_lose_the_rows_distances():
    """192 rows projected from 96 to 32 dimensions: the Johnson-Lindenstrauss bound asks for 252, so
    "to_text" embeds the names in the image width instead (nothing lost); "shrink" (the public code)
    still projects the rows down."""
    x, y, protos, xt, _ = planted_gap_problem(d=96, n_test=10, seed=5)
    protos = protos[:, :32]
    assert not keeps_distances(len(x), 32) and keeps_distances(len(x), 256)
    lfa = LFA.paper(steps=20, random_state=11).fit(x, y, protos)
    assert (lfa.projection_kind_, lfa.projection_side_) == ("widen", "text") and lfa.W_.shape == (96, 96)
    np.testing.assert_array_equal(lfa.projection_, isometric_embedding_matrix(32, 96, 11))
    code = LFA.paper(steps=20, random_state=11, text_check=False, projection="shrink").fit(x, y, protos)
    assert (code.projection_kind_, code.projection_side_) == ("shrink", "image") and code.W_.shape == (32, 32)
    assert lfa.predict(xt).shape == code.predict(xt).shape == (len(xt),)


def test_keeps_distances_is_scikit_learns_johnson_lindenstrauss_bound():
    from sklearn.random_projection import johnson_lindenstrauss_min_dim

    for n, k in [(3, 64), (4, 64), (2999, 384), (3001, 384), (16_000, 1536), (1_281_167, 1536)]:
        assert keeps_distances(n, k) == (k >= johnson_lindenstrauss_min_dim(n, eps=0.5))
    assert keeps_distances(3, 64) and not keeps_distances(4, 64) and keeps_distances(1_281_167, 1536)
    assert keeps_distances(1, 2)  # one row has no distances to keep


@pytest.mark.parametrize("image_dim,text_dim,side", [(48, 32, "text"), (32, 48, "image")])
def test_widening_embeds_the_narrower_side_isometrically_and_keeps_every_dimension(image_dim, text_dim, side):
    x, y, protos, xt, yt = planted_gap_problem(d=max(image_dim, text_dim), n_test=10, seed=5)
    if image_dim > text_dim:
        protos = protos[:, :text_dim]
    else:
        x, xt = x[:, :image_dim], xt[:, :image_dim]
    lfa = LFA(steps=20, random_state=11).fit(x, y, protos)  # projection="auto" widens
    assert lfa.projection_side_ == side and lfa.projection_kind_ == "widen"
    assert lfa.W_.shape == (max(image_dim, text_dim),) * 2
    embedding = lfa.projection_
    assert embedding.shape == (max(image_dim, text_dim), min(image_dim, text_dim))
    np.testing.assert_allclose(embedding.T @ embedding, np.eye(min(image_dim, text_dim)), atol=1e-5)
    assert lfa.predict(xt).shape == (len(xt),)


def test_projection_is_reproducible_from_its_seed():
    a = random_projection_matrix(64, 16, 0)
    np.testing.assert_array_equal(a, random_projection_matrix(64, 16, 0))
    assert not np.array_equal(a, random_projection_matrix(64, 16, 1))
    assert a.dtype == np.float32 and a.shape == (16, 64)
    # Johnson-Lindenstrauss scaling: entries ~ N(0, 1/16)
    assert abs(a.std() - 0.25) < 0.03


def test_max_pool_frames_pools_each_clip_and_normalises():
    rng = np.random.default_rng(0)
    frames = rng.standard_normal((3, 8, 16)).astype(np.float32)
    pooled = max_pool_frames(frames)
    expected = frames.max(axis=1)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(pooled, expected, atol=1e-6)
    assert max_pool_frames(frames[0]).shape == (16,)


def test_a_fit_that_raises_leaves_a_fitted_estimator_as_it_was(planted):
    x, y, p, xt, _ = planted
    lfa = LFA(steps=5, random_state=0).fit(x, y, p)
    before, W = lfa.predict(xt), lfa.W_.copy()
    with pytest.raises(DimensionMismatchError):
        lfa.set_params(projection=False).fit(x, y, p[:, :10])
    with pytest.raises(LabelError, match="class_names must name each"):
        lfa.set_params(projection="auto").fit(x, None, p, class_names=[1, 2])
    np.testing.assert_array_equal(lfa.W_, W)
    np.testing.assert_array_equal(lfa.predict(xt), before)


def test_an_unseeded_fit_leaves_torchs_global_generator_alone(planted):
    torch = pytest.importorskip("torch")
    x, y, p, _, _ = planted
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    LFA(steps=2).fit(x, y, p)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("y", [[0, 1, np.nan, 0, 1, 0], np.array(["a", 1, "a", 1, "a", 1], dtype=object)])
def test_labels_with_a_missing_value_or_of_two_types_are_a_typed_error(y):
    X = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    with pytest.raises(LabelError, match="y cannot be read as class labels"):
        LFA(steps=1).fit(X, y)
