"""Where torch computes: ``"auto"`` picks CUDA when torch sees a GPU."""

from __future__ import annotations

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
