"""Property-based checks (hypothesis) of store write-backs, in every engine installed: rows added with fields
of any kind (any text, int64 extremes, any finite float, bools), then one field written for any subset of them.
Every value reads back exactly (type and value) or was refused with a typed error before any write; the
field written holds its new values on those rows only; vectors and every other field are untouched."""

from __future__ import annotations

import importlib.util
import itertools
import math

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from properties import cases
from store_tasks import ENGINES, engine_store

from lfa_index.errors import InvalidInputError, SchemaError

pytestmark = pytest.mark.usefixtures("single_threaded")
INSTALLED = [name for name, module in ENGINES.items() if module is None or importlib.util.find_spec(module) is not None]
KINDS = {
    "str": st.text(max_size=12),
    "int": st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 2**53 + 1, 2**63 - 1, -(2**63)])),
    "float": st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                       st.sampled_from([0.1, -0.0, 5e-324, 1e308, 1 / 3])),
    "bool": st.booleans(),
}
_names = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("stores")


def exact(value):
    """A value as (type, bits): 1 and 1.0, 0.0 and -0.0, True and 1 differ."""
    return type(value), value.hex() if isinstance(value, float) else value


def lossy(engine, values) -> bool:
    """Values this engine cannot keep exactly, which it must refuse (Chroma stores -0.0 as 0.0)."""
    return engine == "chroma" and any(isinstance(v, float) and v == 0 and math.copysign(1, v) < 0 for v in values)


@st.composite
def columns(draw, n_rows: int):
    """1 to 3 fields, each of one kind (a LanceDB column holds one type), one value per row."""
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=3))
    return {f"f{i}": draw(st.lists(KINDS[kind], min_size=n_rows, max_size=n_rows)) for i, kind in enumerate(kinds)}


def scanned(store, names):
    out = {}
    for ids, _, fields in store.scan(names, batch_size=5):
        for j, i in enumerate(ids.tolist()):
            out[i] = {name: exact(fields[name][j]) for name in names}
    return out


@cases(150)
@given(engine=st.sampled_from(INSTALLED), n_rows=st.integers(1, 9), data=st.data())
def test_a_written_field_changes_on_its_rows_only_and_every_other_value_reads_back_exactly(root, engine, n_rows, data):
    fields = data.draw(columns(n_rows))
    ids = np.array(data.draw(st.lists(st.integers(0, 2**62), min_size=n_rows, max_size=n_rows, unique=True)))
    x = np.random.default_rng(n_rows).standard_normal((n_rows, 3)).astype(np.float32)
    store = engine_store(engine, root, f"prop_{next(_names)}", 3)
    try:
        if any(lossy(engine, values) for values in fields.values()):
            with pytest.raises(InvalidInputError):
                store.add(x, ids, fields=fields)
            assert store.count() == 0
            event("refused: add")
            return
        store.add(x, ids, fields=fields)
        before = scanned(store, sorted(fields))
        assert before == {int(i): {k: exact(v[j]) for k, v in fields.items()} for j, i in enumerate(ids.tolist())}
        # one field, new or held, written on a subset of the rows; a held field keeps its kind
        name = data.draw(st.sampled_from([*sorted(fields), "written"]))
        kind = data.draw(st.sampled_from(sorted(KINDS))) if name == "written" else type(fields[name][0]).__name__
        rows = data.draw(st.lists(st.sampled_from(ids.tolist()), min_size=1, max_size=n_rows, unique=True))
        values = data.draw(st.lists(KINDS[kind], min_size=len(rows), max_size=len(rows)))
        if lossy(engine, values):
            with pytest.raises(InvalidInputError):
                store.set_field(rows, name, values)
            assert scanned(store, sorted(fields)) == before
            event("refused: set_field")
            return
        store.set_field(rows, name, values)
        expected = {i: dict(before[i]) for i in before}
        for i, value in zip(rows, values):
            expected[i][name] = exact(value)
        rest = [i for i in ids.tolist() if i not in rows]
        if name == "written" and rest:  # rows not written lack the new field: a scan of it is refused, then filled
            with pytest.raises(SchemaError):
                list(store.scan(["written"]))
            more = data.draw(st.lists(KINDS[kind], min_size=len(rest), max_size=len(rest)).filter(
                lambda vs: not lossy(engine, vs)))
            store.set_field(rest, name, more)
            for i, value in zip(rest, more):
                expected[i][name] = exact(value)
        assert scanned(store, sorted(expected[int(ids[0])])) == expected
        np.testing.assert_array_equal(store.get(ids), x)
    finally:
        if hasattr(store, "drop"):
            store.drop()
        store.close()
