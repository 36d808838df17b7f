"""Hypothesis strategies and checks shared by the property suites (tests/test_properties_*.py).

Generated inputs include the nasty ones: NaN/inf, zero rows, huge (1e19) and tiny (1e-22) norms,
denormals, values beyond float32, wrong shapes, empty arrays, odd dtypes (float16/64, int, bool,
object, lists, torch tensors) and non-contiguous or read-only layouts.
"""

from __future__ import annotations

import copy
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st


def cases(n: int) -> settings:
    """``n`` reproducible cases (derandomized, no example database), no deadline.

    A failing case is reported as generated, not shrunk (shrinking cases that fit estimators takes
    minutes); set ``LFA_HYPOTHESIS_SHRINK=1`` to shrink it.
    """
    phases = tuple(Phase) if os.environ.get("LFA_HYPOTHESIS_SHRINK") else (Phase.explicit, Phase.generate)
    return settings(
        max_examples=n, deadline=None, derandomize=True, database=None, print_blob=True, phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


DEFECTS = ("none", "none", "none", "nan", "inf", "zero_row", "huge", "tiny", "denormal", "beyond_float32")
DTYPES = ("float32", "float32", "float64", "float16", "int64", "int32", "bool", "object", "list", "torch")
LAYOUTS = ("c", "c", "fortran", "strided", "readonly", "reversed")
SHAPES = ("ok", "ok", "ok", "ok", "wrong_dim", "one_d", "three_d", "no_rows", "no_features")


def inject(x: np.ndarray, defect: str, row: int, every_row: bool) -> np.ndarray:
    """``x`` (float64) with one defect in one row (or in every row)."""
    x = np.array(x, dtype=np.float64)
    if defect == "none" or x.ndim < 2 or x.size == 0:
        return x
    target = x if every_row else x[row % len(x) : row % len(x) + 1]
    if defect == "nan":
        target[..., 0] = np.nan
    elif defect == "inf":
        target[..., -1] = -np.inf
    elif defect == "zero_row":
        target[...] = 0.0
    else:
        target *= {"huge": 1e19, "tiny": 1e-22, "denormal": 1e-41, "beyond_float32": 1e300}[defect]
    return x


def convert(x: np.ndarray, dtype: str) -> Any:
    """``x`` (float64) as the given kind of input."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if dtype in ("int64", "int32"):
            finite = np.nan_to_num(x, nan=0.0, posinf=1e9, neginf=-1e9)
            return np.round(np.clip(finite * 4, -1e9, 1e9)).astype(dtype)
        if dtype == "bool":
            return x > 0
        if dtype == "object":
            return x.astype(object)
        if dtype == "list":
            return x.tolist()
        if dtype == "torch":
            return torch.from_numpy(x.astype(np.float32))
        return x.astype(dtype)


def lay_out(x: Any, layout: str) -> Any:
    """``x`` as a Fortran-ordered, strided, read-only or reversed view (numpy inputs only)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0:
        return x
    if layout == "fortran":
        return np.asfortranarray(x)
    if layout == "strided":
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == "readonly":
        x = x.copy()
        x.setflags(write=False)
        return x
    if layout == "reversed":
        return x[::-1]
    return x


@st.composite
def matrices(
    draw: Any, dim: int, *, max_rows: int = 6, shapes: tuple[str, ...] = SHAPES,
    defects: tuple[str, ...] = DEFECTS, dtypes: tuple[str, ...] = DTYPES, base: np.ndarray | None = None,
) -> Any:
    """A query-like matrix of ``dim`` columns (rows near ``base`` rows when given), maybe nasty."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, max_rows))
    kind = draw(st.sampled_from(shapes))
    shape = {
        "ok": (n, dim), "wrong_dim": (n, dim + draw(st.sampled_from([-1, 1, 3]))), "one_d": (dim,),
        "three_d": (n, 2, dim), "no_rows": (0, dim), "no_features": (n, 0),
    }[kind]
    x = rng.standard_normal(shape)
    if base is not None and kind == "ok":
        x = base[rng.integers(0, len(base), n)] + 0.3 * x
    x = inject(x, draw(st.sampled_from(defects)), draw(st.integers(0, 100)), draw(st.booleans()))
    return lay_out(convert(x, draw(st.sampled_from(dtypes))), draw(st.sampled_from(LAYOUTS)))


# ------------------------------------------------------------------------------ checks
def snapshot(x: Any) -> Any:
    """A deep copy of an input, to check later that a call left it unchanged."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    return copy.deepcopy(x)


def assert_unchanged(x: Any, before: Any) -> None:
    """``x`` holds what it held when ``before = snapshot(x)`` was taken."""
    if isinstance(x, torch.Tensor):
        x, before = x.numpy(), before.numpy()
    if isinstance(x, np.ndarray):
        assert x.dtype == before.dtype and x.shape == before.shape
        if x.dtype.kind in "fc":
            np.testing.assert_array_equal(x, before)  # NaN == NaN here
        else:  # object arrays: the same objects (NaN != NaN, but a NaN is itself)
            assert all(a is b or a == b for a, b in zip(x.ravel().tolist(), before.ravel().tolist()))
    else:
        assert x == before or repr(x) == repr(before)


def as_float64(x: Any) -> np.ndarray:
    """An input as float64 numbers (what the library sees before its own float32 conversion)."""
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    return np.asarray(x, dtype=np.float64)


def reference_scores(index: Any, x: Any) -> np.ndarray:
    """Aligned scores (n, C) in float64, computed from the estimator's maps without any folding:
    ``z = (normalize(proj(normalize(x))) − μ) W`` (W_tt for classes added from text), score
    ``(z·q + b)/||z||``."""
    lfa = index.lfa_
    x = as_float64(x)
    x = x / np.abs(x).max(axis=1, keepdims=True)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if lfa.projection_side_ == "image":
        x = x @ np.asarray(lfa.projection_, dtype=np.float64).T
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if lfa.center_:
        x = x - np.asarray(lfa.feature_mean_, dtype=np.float64)
    prototypes, intercept = index.prototypes_.astype(np.float64), index.intercept_.astype(np.float64)
    out = np.empty((len(x), len(index.classes_)))
    for mapping, mask in (("task", ~index.is_new_class_), ("tt", index.is_new_class_)):
        z = x @ np.asarray(lfa.W_ if mapping == "task" else lfa.W_tt_, dtype=np.float64)
        out[:, mask] = (z @ prototypes[mask].T + intercept[mask]) / np.linalg.norm(z, axis=1, keepdims=True)
    return out


def positions(index: Any, labels: np.ndarray) -> np.ndarray:
    """Positions in ``classes_`` of labels answered by ``index``."""
    where = {label: i for i, label in enumerate(index.classes_.tolist())}
    return np.array([where[label] for label in np.asarray(labels).ravel().tolist()]).reshape(np.shape(labels))


def assert_answers(index: Any, x: Any, k: int = 3) -> None:
    """predict / search / decision_function / predict_proba of valid queries ``x`` are well formed and
    equal the float64 reference: right shapes, finite scores, labels from ``classes_``, predictions
    equal to ``search(k=1)[1][:, 0]`` and scoring best under the reference."""
    n, n_classes = len(as_float64(x)), len(index.classes_)
    predicted = index.predict(x)
    scores, labels = index.search(x, k)
    top1 = index.search(x, 1)[1][:, 0]
    decision = index.decision_function(x)
    proba = index.predict_proba(x)
    assert predicted.shape == (n,) and scores.shape == labels.shape == (n, min(k, n_classes))
    assert decision.shape == proba.shape == (n, n_classes)
    assert np.isfinite(scores).all() and np.isfinite(decision).all() and np.isfinite(proba).all()
    assert set(predicted.tolist()) <= set(index.classes_.tolist())
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    assert np.array_equal(predicted, top1) and np.array_equal(predicted, labels[:, 0])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-4)
    reference = reference_scores(index, x)
    tol = 2e-4 * max(1.0, float(np.abs(reference).max()))
    np.testing.assert_allclose(decision, reference, atol=tol)
    np.testing.assert_allclose(scores, np.sort(reference, axis=1)[:, ::-1][:, : scores.shape[1]], atol=tol)
    best = reference.max(axis=1)
    assert (reference[np.arange(n), positions(index, predicted)] >= best - tol).all()


def same_answers(a: Any, b: Any, x: np.ndarray, k: int = 3) -> None:
    """Two indexes answer ``x`` identically: predict, decision_function, search."""
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    np.testing.assert_array_equal(a.decision_function(x), b.decision_function(x))
    for got, expected in zip(a.search(x, k), b.search(x, k)):
        np.testing.assert_array_equal(got, expected)


def data_dir(path: Path) -> Path:
    """The folder holding the files of the saved index at ``path`` (named by its manifest)."""
    return path / json.loads((path / "manifest.json").read_text())["data"]


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """``[bytes]``: how far resident memory rose above its level at the start of the block (Linux: the
    peak, VmHWM, is reset first; elsewhere 0). Allocations that are never touched do not count."""
    measured = [0]

    def peak_kib() -> int | None:
        try:
            with open("/proc/self/status") as status:
                return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
        except (OSError, StopIteration):
            return None

    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current resident size
        start = peak_kib()
    except OSError:
        start = None
    yield measured
    end = peak_kib()
    if start is not None and end is not None:
        measured[0] = 1024 * (end - start)
