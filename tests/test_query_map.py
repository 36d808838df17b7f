"""One query map: the estimator's exact float64 path and the folded float32 path a FAISS index or
a vector store serves are the same map, normalise → project → centre → multiply by W."""

from __future__ import annotations

import numpy as np
import pytest

from lfa_index.core.query_map import QueryMap, prepare_queries


def _map(seed: int, projection: bool, centred: bool) -> tuple[QueryMap, np.ndarray]:
    rng = np.random.default_rng(seed)
    d_in, d = 6, 8
    w = rng.standard_normal((d, d)).astype(np.float32)
    # an isometry R (d, d_in), orthonormal columns ("widen"): unit rows stay unit, as LFA needs to centre
    r = np.linalg.qr(rng.standard_normal((d, d_in)))[0].astype(np.float32) if projection else None
    mean = (0.1 * rng.standard_normal(d)).astype(np.float32) if centred else None
    x = rng.standard_normal((50, d_in if projection else d)).astype(np.float32)
    return QueryMap(w, r, mean), x


@pytest.mark.parametrize("projection", [False, True])
@pytest.mark.parametrize("centred", [False, True])
def test_mapped_is_normalise_project_centre_multiply_in_float64(projection, centred):
    query_map, x = _map(0, projection, centred)
    z = x.astype(np.float64)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    if projection:
        z = z @ query_map.projection.astype(np.float64).T
        z /= np.linalg.norm(z, axis=1, keepdims=True)
    if centred:
        z = z - query_map.mean.astype(np.float64)
    expected = z @ query_map.weights.astype(np.float64)
    np.testing.assert_allclose(query_map.mapped(x), expected, rtol=1e-12, atol=1e-12)
    assert query_map.mapped(x[None]).shape == (1, *expected.shape)  # multi-view rows keep their shape


@pytest.mark.parametrize("projection", [False, True])
@pytest.mark.parametrize("centred", [False, True])
def test_the_folded_map_aligns_and_scores_as_the_exact_map(projection, centred):
    query_map, x = _map(1, projection, centred)
    rng = np.random.default_rng(2)
    prototypes = rng.standard_normal((6, query_map.n_features_out)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(6)).astype(np.float32)
    z = query_map.mapped(x)
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    np.testing.assert_allclose(query_map.align(x), z / norms, atol=1e-5)
    folded = query_map.fold(prototypes, bias)
    assert folded.shape == (6, query_map.n_features_in + 1)  # the bias coordinate
    raw = prepare_queries(x, augmented=True) @ folded.T
    np.testing.assert_allclose(raw / query_map.norms(x)[:, None], (z @ prototypes.T + bias) / norms, atol=1e-4)
    t = query_map.align(x[:3])
    np.testing.assert_allclose(query_map.unalign(t), t @ query_map.matrix.T, rtol=1e-6)


def test_without_offset_or_bias_folded_vectors_keep_the_raw_width_and_queries_are_not_augmented():
    query_map, x = _map(3, projection=False, centred=False)
    assert query_map.offset is None
    prototypes = np.eye(query_map.n_features_out, dtype=np.float32)[:4]
    assert query_map.fold(prototypes, np.zeros(4)).shape == (4, query_map.n_features_in)
    assert prepare_queries(x, augmented=False) is x
