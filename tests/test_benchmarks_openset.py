"""benchmarks/openset.py on a planted problem: every method is scored, held-out τ, the table's verdict."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import openset
from benchmarks.data import FewShotSet

pytestmark = pytest.mark.usefixtures("single_threaded")


def planted_set(n_classes: int = 8, dim: int = 24, seed: int = 0) -> FewShotSet:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_classes, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(n_classes), n)
        x = centres[y] + 0.25 * rng.standard_normal((len(y), dim))
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), y

    pool, pool_y = draw(10)
    evaluation, eval_y = draw(12)
    return FewShotSet("planted", pool, pool_y, evaluation, eval_y, [f"c{i}" for i in range(n_classes)],
                      centres.astype(np.float32), True, "planted")


def test_a_split_scores_every_method_with_held_out_thresholds_and_the_table_says_if_the_target_is_met():
    data = planted_set()
    record = openset.run_split(data, percent=50, shots=4, seed=1)
    assert record["n_known_classes"] == 4
    for method in openset.SERVED + ("max_score", "nearest_row"):
        m = record[method]
        assert 0.5 < m["auroc"] <= 1 and m["tau"] is not None and 0.5 <= m["known_accepted"] <= 1, method
        assert m["n_known"] == 4 * 12 and m["n_unknown"] == 4 * 12
    assert set(record["energy"]) == {"auroc"} and set(record["mahalanobis"]) == {"auroc"}
    rows = openset.summarize([record])
    expected = all(record["default"][k] >= max(record["gda"][k], record["probe"][k]) for k in ("auroc", "macro_f1"))
    assert rows[0]["target_met"] is expected
    table = openset.markdown(rows, {"set": "planted", "seeds": 1, "command": "test"})
    assert "| 50 % | 4 |" in table and ("| yes |" in table) is expected


def test_out_of_domain_rows_join_the_queries_as_out_of_scope():
    data = planted_set()
    ood = planted_set(seed=5).eval_features[:30]
    record = openset.run_split(data, percent=100, shots=4, seed=1, ood=ood)
    assert record["n_known_classes"] == 8 and record["default"]["n_unknown"] == 30


def test_known_classes_are_a_seeded_share():
    a, b = openset.known_classes(77, 25, 3), openset.known_classes(77, 25, 3)
    assert np.array_equal(a, b) and len(a) == 19 and np.all(np.diff(a) > 0)
    assert not np.array_equal(a, openset.known_classes(77, 25, 4))
