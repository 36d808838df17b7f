"""The Mantel test of the names' geometry, and the one-shot default that follows it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic import normalize, planted_gap_problem, random_orthogonal

from lfa_index import LFA
from lfa_index.core.solvers.geometry import geometry_evidence, geometry_is_informative


def f32(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def unrelated_support(seed: int, n_classes: int = 40, d_rows: int = 96, d_names: int = 48, n_test: int = 10):
    """One row per class and test rows around it, in a space drawn independently of the names'."""
    rng = np.random.default_rng(seed)
    centres = normalize(rng.standard_normal((n_classes, d_rows)))
    names = normalize(rng.standard_normal((n_classes, d_names)))
    y = np.arange(n_classes)
    x = normalize(centres + 0.6 * rng.standard_normal((n_classes, d_rows)) / np.sqrt(d_rows))
    yt = np.repeat(y, n_test)
    xt = normalize(centres[yt] + 0.6 * rng.standard_normal((len(yt), d_rows)) / np.sqrt(d_rows))
    return x.astype(np.float32), y, names.astype(np.float32), xt.astype(np.float32), yt


@pytest.mark.parametrize("seed", range(20))
def test_one_shot_across_unrelated_spaces_serves_the_class_means(seed):
    """Rows and names with no relation (other widths): the test finds nothing on any of 20 seeds and
    the default predicts exactly as the nearest class mean (cosine) does."""
    x, y, names, xt, yt = unrelated_support(seed)
    assert not geometry_is_informative(f32(x), torch.tensor(y), f32(names), random_state=seed)
    lfa = LFA(random_state=seed).fit(x, y, names)
    assert lfa.selection_["how"] == "one-shot, text uninformative" and lfa.steps_ == 0 and lfa.prototype_mix_ == 1.0
    nearest_mean = np.argmax(xt @ x.T, axis=1)  # one row per class: the class means are the rows
    np.testing.assert_array_equal(lfa.predict(xt), y[nearest_mean])


@pytest.mark.parametrize("seed", range(20))
def test_one_shot_keeps_learning_from_names_whose_geometry_matches(seed):
    """Rows that are a noisy rotation of their names (another model of the same things): the
    evidence is beyond the null at the test's level and the default refines as before."""
    x, y, protos, _, _ = planted_gap_problem(n_classes=40, shots=1, d=48, noise=0.15, rotation_mix=0.0, seed=seed,
                                             n_test=5)
    rotated = (x @ random_orthogonal(48, 1000 + seed)).astype(np.float32)
    assert geometry_is_informative(f32(rotated), torch.tensor(y), f32(protos), random_state=seed)
    lfa = LFA(random_state=seed).fit(rotated, y, protos)
    assert lfa.selection_["how"] == "one-shot" and lfa.steps_ > 0


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_geometry_evidence_is_a_z_score_of_mantels_statistic(device):
    """Against Mantel's statistic and its permutation null computed by hand (same seeded draws);
    invariant to rotating either side; the widths may differ. On a GPU the null is one gather."""
    rng = np.random.default_rng(3)
    names = normalize(rng.standard_normal((12, 20)))
    y = np.repeat(np.arange(12), 2)
    x = normalize(names[y] @ rng.standard_normal((20, 30)) + 0.3 * rng.standard_normal((24, 30)))
    means = np.stack([x[y == c].mean(0) for c in range(12)])
    gx, gt = ((m - m.mean(0)) @ (m - m.mean(0)).T for m in (means, names))
    np.fill_diagonal(gx, 0.0)
    np.fill_diagonal(gt, 0.0)
    draws = np.random.default_rng(1)
    null = np.array([(gx * gt[np.ix_(p, p)]).sum() for p in (draws.permutation(12) for _ in range(200))])
    expected = ((gx * gt).sum() - null.mean()) / null.std()
    z = geometry_evidence(f32(x).to(device), torch.tensor(y, device=device), f32(names).to(device), random_state=1)
    assert z == pytest.approx(expected, rel=1e-4) and z > 3
    rotation = np.linalg.qr(rng.standard_normal((30, 30)))[0]
    rotated = geometry_evidence(f32(x @ rotation).to(device), torch.tensor(y, device=device), f32(names).to(device),
                                random_state=1)
    assert rotated == pytest.approx(z, rel=1e-4)


def test_two_classes_carry_no_evidence():
    x = f32(normalize(np.eye(2, 4)))
    assert geometry_evidence(x, torch.tensor([0, 1]), f32(normalize(np.eye(2, 3)))) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_four_shots_across_unrelated_spaces_skip_refinement_and_serve_the_support(seed):
    """With 4 rows per class and names unrelated to them, no step is spent on the text: an orthogonal map
    (β = 0) and the support's own classifier (λ = 1), the paper's step count never reached."""
    rng = np.random.default_rng(seed)
    x1, y1, names, xt, yt = unrelated_support(seed, n_test=5)
    x = normalize(np.repeat(x1, 4, axis=0) + 0.3 * rng.standard_normal((4 * len(y1), x1.shape[1])) / 10)
    y = np.repeat(y1, 4)
    lfa = LFA(random_state=seed).fit(x.astype(np.float32), y, names)
    assert lfa.selection_["how"] == "no-refinement, text uninformative"
    assert lfa.steps_ == 0 and lfa.beta_ == 0.0 and lfa.prototype_mix_ == 1.0
    assert lfa.beta_selection_ == "procrustes, text uninformative"
    assert lfa.score(xt, yt) > 0.5  # the support alone separates these classes


def test_many_classes_are_tested_on_a_seeded_subset_with_the_same_verdicts():
    """Past MAX_CLASSES the test reads a seeded subset of classes: same answer on a rerun, and unrelated
    names are still told from a noisy linear image of the rows."""
    from lfa_index.core.solvers.geometry import MAX_CLASSES

    rng = np.random.default_rng(5)
    n_classes = MAX_CLASSES + 150
    x = normalize(rng.standard_normal((n_classes, 48)))
    y = torch.arange(n_classes)
    unrelated = normalize(rng.standard_normal((n_classes, 32)))
    related = normalize(x @ rng.standard_normal((48, 32)) + 0.5 * rng.standard_normal((n_classes, 32)))
    z = geometry_evidence(f32(x), y, f32(unrelated), random_state=2)
    assert z == geometry_evidence(f32(x), y, f32(unrelated), random_state=2)
    assert not geometry_is_informative(f32(x), y, f32(unrelated), random_state=2)
    assert geometry_is_informative(f32(x), y, f32(related), random_state=2)


# ------------------------------------------------------------------ the paper's preset (text_check=True)
@pytest.mark.parametrize("seed", range(10))
def test_the_paper_preset_serves_the_class_means_in_the_rows_own_space_where_the_names_say_nothing(seed):
    """Unrelated names of another (narrower) width: ``LFA.paper()`` neither shrinks the rows nor refines
    towards the names; it predicts exactly as the nearest class mean on the rows as given. With
    ``text_check=False, projection="shrink"`` it is the paper's code: the rows projected to the names'
    width, 200 steps."""
    x, y, names, xt, yt = unrelated_support(seed)
    preset = LFA.paper(random_state=seed).fit(x, y, names)
    assert preset.selection_["how"] == "one-shot, text uninformative" and preset.steps_ == 0
    assert preset.projection_kind_ == "widen" and preset.beta_selection_ == "procrustes, text uninformative"
    np.testing.assert_array_equal(preset.predict(xt), y[np.argmax(xt @ x.T, axis=1)])
    paper_code = LFA.paper(random_state=seed, text_check=False, projection="shrink").fit(x, y, names)
    assert paper_code.projection_kind_ == "shrink" and paper_code.steps_ == 200 and paper_code.prototype_mix_ == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_the_paper_preset_is_the_paper_code_where_the_names_match_the_rows(seed):
    """Names whose geometry matches the rows (a noisy linear image of them, another width): the guard
    stays off and the fit is the paper's code bit for bit."""
    x, y, protos, _, _ = planted_gap_problem(n_classes=40, shots=2, d=288, noise=0.05, rotation_mix=0.0, seed=seed,
                                             n_test=5)
    names = normalize(protos @ np.random.default_rng(seed).standard_normal((288, 256))).astype(np.float32)
    guarded = LFA.paper(steps=20, random_state=seed).fit(x, y, names)
    paper_code = LFA.paper(steps=20, random_state=seed, text_check=False).fit(x, y, names)
    assert guarded.projection_kind_ == "to_text" and guarded.prototype_mix_ == 0.0
    for name in ("W_", "prototypes_", "W_tt_"):
        np.testing.assert_array_equal(getattr(guarded, name), getattr(paper_code, name))


def test_the_guard_needs_three_classes_to_say_anything():
    """Two classes carry no geometry: the test cannot find the names at chance, so the preset runs the paper's fit."""
    from lfa_index.core.solvers.geometry import names_at_chance

    x, y, names, _, _ = unrelated_support(0, n_classes=2)
    assert not names_at_chance(f32(x), torch.tensor(y), f32(names))
    assert LFA.paper(steps=3, random_state=0).fit(x, y, names).projection_kind_ == "to_text"


def test_text_check_takes_auto_or_a_bool():
    from lfa_index.errors import InvalidParameterError

    x, y, names, _, _ = unrelated_support(0, n_classes=4)
    with pytest.raises(InvalidParameterError, match="text_check"):
        LFA(text_check="always").fit(x, y, names)
