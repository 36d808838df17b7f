"""The pieces of ``benchmarks/migration.py``: the metrics, the baselines, CSLS matching and the Cranfield loader."""

from __future__ import annotations

import os

import numpy as np
import pytest

from benchmarks import migration as mb
from benchmarks.migration_data import load_cranfield, ndcg_recall
from lfa_index.arrays import l2_normalize


def test_ndcg_and_recall_of_a_perfect_a_reversed_and_a_known_ranking():
    qrels = {0: {0: 3, 1: 1}, 1: {2: 2}}
    perfect = np.array([[1.0, 0.5, 0.0, -1.0], [0.0, 0.1, 1.0, 0.2]])
    assert ndcg_recall(perfect, qrels, k=2, depth=2) == (1.0, 1.0)
    swapped = np.array([[0.5, 1.0, 0.0, -1.0], [1.0, 0.1, 0.0, 0.2]])  # grades 1, 3 on query 0; miss on query 1
    dcg = 1.0 + 7.0 / np.log2(3)
    ideal = 7.0 + 1.0 / np.log2(3)
    ndcg, recall = ndcg_recall(swapped, qrels, k=2, depth=2)
    assert ndcg == pytest.approx((dcg / ideal + 0.0) / 2)
    assert recall == pytest.approx((1.0 + 0.0) / 2)


def test_the_baselines_recover_a_planted_orthogonal_map():
    rng = np.random.default_rng(0)
    q = np.linalg.qr(rng.standard_normal((16, 16)))[0]
    x = l2_normalize(rng.standard_normal((200, 16)))
    y = x @ q
    mapped = mb.baselines(x, y, x[:20])
    for name, z in mapped.items():
        assert (mb.scores(z, y).argmax(axis=1) == np.arange(20)).all(), name
    np.testing.assert_allclose(mb.procrustes(x, y), q, atol=1e-4)


def test_csls_mutual_neighbours_of_a_space_with_itself_are_the_identity():
    x = l2_normalize(np.random.default_rng(1).standard_normal((50, 8)))
    src, tgt = mb.csls_pairs(x, x)
    np.testing.assert_array_equal(src, np.arange(50))
    np.testing.assert_array_equal(tgt, np.arange(50))


@pytest.mark.skipif(not os.environ.get("LFA_SHARED_DATA"), reason="needs $LFA_SHARED_DATA (retrieval/cranfield)")
def test_cranfield_loads_1400_documents_225_queries_and_their_graded_judgements():
    data = load_cranfield()
    assert len(data.documents) == 1400 and len(data.queries) == 225 and all(data.documents)
    assert sorted(data.qrels) == list(range(225))
    grades = [g for judged in data.qrels.values() for g in judged.values()]
    assert len(grades) == 1837 and set(grades) <= {1, 2, 3, 4, 5}  # used as given (one judgement reads 5)
