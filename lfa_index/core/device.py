"""Where torch computes (``"auto"`` picks CUDA when torch sees a GPU), and in which arithmetic."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ..errors import InvalidParameterError

if TYPE_CHECKING:
    import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` picks CUDA when torch sees a GPU, else the CPU; anything else is passed to torch."""
    import torch

    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise InvalidParameterError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise InvalidParameterError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError(
            f"device={device!r} was asked for but torch sees no CUDA GPU; use device='cpu' or 'auto'."
        )
    return resolved


@functools.lru_cache(maxsize=None)
def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX tiles), as torch's CPU
    kernels detect it."""
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def uses_bf16(precision: str, device: torch.device) -> bool:
    """Whether refinement on ``device`` runs its matrix products in bfloat16 (``precision`` of
    :class:`~lfa_index.core.config.RefineConfig`).

    ``"auto"`` takes bfloat16 on a CPU that multiplies it natively: there a step of the ARerank loss
    takes 1.3–2.8× less time per step (1.15× at d = 64) at the same accuracy (``benchmarks/precision.py``); elsewhere,
    CUDA included, float32. Emulated bfloat16 would be slower than float32.
    """
    if precision == "auto":
        return device.type == "cpu" and native_bf16_cpu()
    return precision == "bf16-mixed"
