"""Refinement's arithmetic: ``precision="auto"`` resolves by the device and the CPU, the paper preset pins float32."""

import numpy as np
import pytest
import torch

from lfa_index import LFA
from lfa_index.core.config import RefineConfig
from lfa_index.core.device import native_bf16_cpu, uses_bf16
from lfa_index.errors import InvalidParameterError


@pytest.mark.parametrize("native", [True, False])
def test_auto_takes_bf16_on_a_cpu_only_where_it_multiplies_bf16_natively(monkeypatch, native):
    monkeypatch.setattr("lfa_index.core.device.native_bf16_cpu", lambda: native)
    assert uses_bf16("auto", torch.device("cpu")) is native
    assert uses_bf16("auto", torch.device("cuda")) is False  # GPUs keep float32 (measured there)
    assert uses_bf16("float32", torch.device("cpu")) is False
    assert uses_bf16("bf16-mixed", torch.device("cpu")) is True


def test_the_default_is_auto_and_the_paper_preset_is_float32():
    assert RefineConfig().precision == "auto" and LFA().precision == "auto"
    assert LFA.paper().precision == "float32"
    assert LFA.paper(precision="bf16-mixed").precision == "bf16-mixed"  # still a parameter


def test_an_unknown_precision_is_refused_with_the_choices():
    X = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    with pytest.raises(InvalidParameterError, match="precision"):
        LFA(precision="fp16").fit(X, np.repeat(np.arange(4), 2), X[:4])


def _fit(precision):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(6, 32))
    y = np.repeat(np.arange(6), 8)
    X = (centres[y] + 0.6 * rng.normal(size=(48, 32))).astype(np.float32)
    return LFA(steps=20, random_state=0, precision=precision, device="cpu").fit(X, y, centres.astype(np.float32))


def test_auto_fits_exactly_as_the_arithmetic_it_resolves_to():
    resolved = "bf16-mixed" if native_bf16_cpu() else "float32"
    np.testing.assert_array_equal(_fit("auto").W_, _fit(resolved).W_)


def test_bf16_and_float32_refine_to_different_but_close_maps():
    w32, w16 = _fit("float32").W_, _fit("bf16-mixed").W_
    assert not np.array_equal(w32, w16)  # the arithmetic really changed
    assert np.abs(w32 - w16).max() < 0.05 * np.abs(w32).max()
