"""LabelSpace: class labels ↔ positions, names or indices, the unknown label, rejection, saving."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lfa_index import InvalidParameterError, LabelError, LabelSpace, ShapeError

NAMES = ["cat", "dog", "bird"]


def test_string_labels_make_a_space_of_names():
    space, y = LabelSpace.from_fit(np.array(["dog", "cat", "dog"]), NAMES, n_rows=3, n_classes=3)
    assert space.kind == "name" and space.unknown_label is None and y.tolist() == [1, 0, 1]
    assert space.labels(np.array([[2, 0]])).tolist() == [["bird", "cat"]]


def test_integer_labels_index_the_rows_even_with_names():
    space, y = LabelSpace.from_fit(torch.tensor([2, 0]), NAMES, n_rows=2, n_classes=3)
    assert space.kind == "index" and space.unknown_label == -1 and y.tolist() == [2, 0]
    assert space.labels(np.array([1])).dtype == np.int64 and space.name_of(1) == "dog"
    assert LabelSpace.from_fit(None, None, n_rows=2, n_classes=3)[0].kind == "index"


def test_positions_take_labels_of_the_space_only_and_lookup_takes_class_names_too():
    names = LabelSpace("name", 3, NAMES)
    with pytest.raises(LabelError, match="class names"):
        names.positions([0, 1])
    with pytest.raises(LabelError, match="zebra"):
        names.positions(["cat", "zebra"])
    indices = LabelSpace("index", 3, NAMES)
    assert indices.lookup(["bird", "cat"]).tolist() == [2, 0] and indices.lookup(np.array([1])).tolist() == [1]
    with pytest.raises(LabelError, match="0..2"):
        indices.lookup(np.array([3]))
    with pytest.raises(ShapeError, match="one label per row"):
        names.positions(["cat"], n_rows=2)
    assert LabelSpace("index", 3).lookup(["2", "0"]).tolist() == [2, 0]  # no names: indices as text


def test_reject_gives_the_unknown_label_below_the_threshold():
    scores = np.array([0.9, 0.1, 0.5])
    assert LabelSpace("index", 3).reject(np.array([0, 1, 2]), scores, 0.5).tolist() == [0, -1, 2]
    assert LabelSpace("name", 3, NAMES).reject(np.array(NAMES, dtype=object), scores, 0.5).tolist() == [
        "cat", None, "bird"
    ]
    top_k = LabelSpace("index", 3).reject(np.array([[0, 1], [2, 0]]), np.array([[0.9, 0.2], [0.6, 0.4]]), 0.5, None)
    assert top_k.tolist() == [[0, None], [2, None]]


def test_extend_appends_classes_with_new_names_only():
    space = LabelSpace("name", 3, NAMES).extend(1, ["zebra"])
    assert space.labels(np.array([3])).tolist() == ["zebra"]
    with pytest.raises(LabelError, match="already exist"):
        space.extend(1, ["cat"])
    with pytest.raises(InvalidParameterError, match="names are required"):
        space.extend(1)
    with pytest.raises(InvalidParameterError, match="class_names=None"):
        LabelSpace("index", 3).extend(1, ["zebra"])
    assert LabelSpace("index", 3).extend(2).classes.tolist() == [0, 1, 2, 3, 4]


def test_a_space_saves_as_json_and_reads_back():
    space = LabelSpace("name", 3, NAMES)
    again = LabelSpace.from_json(space.to_json(), 3)
    assert again.kind == "name" and again.names == NAMES
    with pytest.raises(ShapeError):
        LabelSpace.from_json(space.to_json(), 4)
