"""Where the FAISS indexes of an AlignedIndex live: the GPU of the LFA's torch device when
faiss-gpu sees it, else the CPU; and the one lock GPU searches share.

Example
-------
>>> device = FaissDevice("cuda:0")           # CPU when faiss-gpu or the GPU is missing
>>> index = device.to_device(faiss.IndexFlatIP(64))
>>> scores, ids = device.search(index, queries, 5)
"""

from __future__ import annotations

import threading
import warnings
from contextlib import nullcontext
from typing import Any

import faiss
import numpy as np

from ..errors import InvalidParameterError


def faiss_gpu_available() -> bool:
    """True when the installed FAISS has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def faiss_reason(err: Exception) -> str:
    """The reason of a FAISS error: the last line of its message, after the last ``Error:``."""
    lines = str(err).strip().splitlines()
    last = lines[-1] if lines else type(err).__name__
    return last.split("Error: ")[-1][:300]


def gpu_of(device: Any) -> int | None:
    """The GPU FAISS places indexes on for an LFA ``device`` ("auto", "cpu", "cuda", "cuda:N"), or None.

    Without faiss-gpu (or a GPU) every index stays on the CPU; no torch needed.
    """
    text = str(device)
    if text == "cpu" or not faiss_gpu_available():
        return None
    if text in ("auto", "cuda"):
        return 0
    prefix, _, number = text.partition(":")
    if prefix == "cuda" and number.isdigit():
        return int(number)
    raise InvalidParameterError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}.")


class FaissDevice:
    """Placement of FAISS indexes for one torch device ("auto", "cpu", "cuda", "cuda:N").

    GPU indexes share one ``StandardGpuResources``, which is not thread-safe, even for searches:
    every call on them runs under :meth:`guard`.
    """

    def __init__(self, device: str = "auto"):
        self.gpu = gpu_of(device)
        self._resources: Any = None
        self._resources_lock = threading.Lock()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # copies and pickles get their own locks and GPU resources
        return {"gpu": self.gpu}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.gpu = state["gpu"] if state["gpu"] is None or faiss_gpu_available() else None
        self._resources = None
        self._resources_lock = threading.Lock()
        self._lock = threading.Lock()

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None

    def to_device(self, index: faiss.Index) -> faiss.Index:
        """``index`` moved to the GPU (a copy), or itself on the CPU or when FAISS cannot move it."""
        if not self.on_gpu:
            return index
        with self._resources_lock:
            if self._resources is None:
                self._resources = faiss.StandardGpuResources()
        try:
            return faiss.index_cpu_to_gpu(self._resources, self.gpu, index)
        except RuntimeError as err:  # e.g. a factory string with no GPU implementation (HNSW)
            reason = faiss_reason(err)
            warnings.warn(f"keeping a {type(index).__name__} on the CPU: FAISS cannot move it to the GPU ({reason})")
            return index

    def to_cpu(self, index: faiss.Index) -> faiss.Index:
        """A CPU copy of a GPU index (what ``faiss.write_index`` needs), or ``index`` itself."""
        return faiss.index_gpu_to_cpu(index) if self.on_gpu else index

    def guard(self) -> Any:
        """The lock GPU calls share (a no-op context on the CPU)."""
        return self._lock if self.on_gpu else nullcontext()

    def search(self, index: faiss.Index, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self.guard():
            return index.search(x, k)

    def parameter_space(self) -> Any:
        """``faiss.ParameterSpace`` for this placement (its GPU variant on a GPU)."""
        return faiss.GpuParameterSpace() if self.on_gpu else faiss.ParameterSpace()

    def flat_index(self, vectors: np.ndarray) -> faiss.Index:
        """An exact inner-product index of ``vectors``, on this device."""
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        return self.to_device(index)
