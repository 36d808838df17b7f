"""The FAISS side of an :class:`~lfa_index.AlignedCorpus`: ``normalize(x̂ G + o)`` of every added
image in a FAISS ``IndexIDMap2``, its int64 ids, and a read/write lock (many searches, or one add).
Also the checks of FAISS factory strings and search parameters that :class:`~lfa_index.stores.FaissStore`
shares.

Example
-------
>>> corpus = Corpus.create("IVF1024,PQ32", "nprobe=16", index.class_table_.maps["task"], FaissDevice("cpu"))
>>> corpus.add(images, ids=None)
>>> scores, ids = corpus.search(corpus.query_map.align(queries), k=10, caller="search")
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

import faiss
import numpy as np

from ..arrays import CHUNK_ROWS
from ..core.query_map import QueryMap
from ..core.validation import check_ids
from ..errors import (
    DuplicateIdError,
    EmptyIndexError,
    IdsExhaustedError,
    InvalidInputError,
    InvalidParameterError,
)
from .faiss_device import FaissDevice, faiss_reason

TRAIN_ROWS = 262144  # rows of the first add used to train a corpus index (more for IVF with nlist > 1024)
ID_LIMIT = 2**63  # ids are int64: the last one is 2**63 - 1


class ReadWriteLock:
    """Many concurrent readers or one writer."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class Corpus:
    """Aligned images in a FAISS index with ids; ``next_id`` numbers the images added without ids."""

    def __init__(
        self, index: faiss.Index, query_map: QueryMap, ids: np.ndarray, next_id: int, device: FaissDevice, factory: str,
    ):
        self.index = index
        self.query_map = query_map
        self.ids = ids  # sorted int64 ids held
        self.next_id = next_id
        self.factory = factory
        self._device = device
        self._lock = ReadWriteLock()

    @classmethod
    def create(cls, factory: str, params: str | None, query_map: QueryMap, device: FaissDevice) -> "Corpus":
        """An empty corpus of ``factory`` (under an ``IndexIDMap2``) searched with ``params``."""
        index = faiss.index_factory(query_map.n_features_out, "IDMap2," + factory, faiss.METRIC_INNER_PRODUCT)
        index = device.to_device(index)
        apply_params(index, params, factory, device)
        return cls(index, query_map, np.empty(0, dtype=np.int64), 0, device, factory)

    @classmethod
    def restore(
        cls, index: faiss.Index, next_id: int, query_map: QueryMap, factory: str, params: str | None,
        device: FaissDevice,
    ) -> "Corpus":
        """A corpus as loaded (a checked CPU ``IndexIDMap2``), moved to ``device`` and searched with ``params``."""
        ids = held_ids(index)
        index = device.to_device(index)
        apply_params(index, params, factory, device)
        return cls(index, query_map, ids, next_id, device, factory)

    def __getstate__(self) -> dict[str, Any]:
        """A consistent snapshot (no add runs meanwhile), the index as serialised CPU bytes."""
        with self._lock.read():
            state = dict(self.__dict__, index=faiss.serialize_index(self._device.to_cpu(self.index)))
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.index = self._device.to_device(faiss.deserialize_index(state["index"]))
        self._lock = ReadWriteLock()

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def add(self, x: np.ndarray, ids: Any) -> None:
        """Align and add raw float32 rows ``x`` with ``ids`` (None: consecutive after the largest id)."""
        with self._lock.write():
            new_ids = self._new_ids(ids, len(x))
            if not self.index.is_trained:
                self._train(x)
            for start in range(0, len(x), CHUNK_ROWS):
                chunk = self.query_map.align(x[start : start + CHUNK_ROWS])
                with self._device.guard():
                    self.index.add_with_ids(chunk, new_ids[start : start + CHUNK_ROWS])
            self.ids = np.union1d(self.ids, new_ids)
            self.next_id = max(self.next_id, int(new_ids.max()) + 1)

    def search(self, queries: np.ndarray, k: int, caller: str) -> tuple[np.ndarray, np.ndarray]:
        """Top-``min(k, size)`` aligned rows of aligned ``queries``: ``(scores, ids)``; empty slots -1, -inf."""
        with self._lock.read():
            if self.size == 0:
                raise EmptyIndexError(f"the aligned corpus is empty: call add(X) before {caller}().")
            scores, ids = self._device.search(self.index, queries, min(k, self.size))
        scores[ids < 0] = -np.inf
        return scores, ids

    @contextmanager
    def saved(self) -> Iterator[tuple[faiss.Index, int]]:
        """What a save writes: a CPU copy of the index and ``next_id``; no add runs until the block ends."""
        with self._lock.read():
            yield self._device.to_cpu(self.index), self.next_id

    def _new_ids(self, ids: Any, n_rows: int) -> np.ndarray:
        if ids is None:
            if self.next_id + n_rows > ID_LIMIT:
                raise IdsExhaustedError(
                    f"ids=None numbers new images after the largest id held ({self.next_id - 1}), but int64 ids end "
                    f"at {ID_LIMIT - 1}; pass ids= explicitly (distinct, non-negative, not in the corpus)."
                )
            return np.arange(self.next_id, self.next_id + n_rows, dtype=np.int64)
        arr = check_ids(ids, n_rows, per="image", duplicate_error=DuplicateIdError)
        held = np.intersect1d(arr, self.ids)
        if len(held):
            raise DuplicateIdError(
                f"id(s) {held[:5].tolist()} are already in the corpus; pass new ids, or ids=None for consecutive ones."
            )
        return arr

    def _train(self, x: np.ndarray) -> None:
        # FAISS's k-means keeps at most 256 points per centroid (its max_points_per_centroid):
        # aligning more of a large first add would only cost memory
        ivf = faiss.try_extract_index_ivf(self.index)
        limit = max(TRAIN_ROWS, 256 * ivf.nlist) if ivf is not None else TRAIN_ROWS
        if len(x) > limit:
            x = x[np.sort(np.random.default_rng(0).choice(len(x), limit, replace=False))]
        sample = self.query_map.align(x)
        try:
            with self._device.guard():
                self.index.train(sample)
        except RuntimeError as err:
            raise InvalidInputError(
                f"could not train the {self.factory!r} corpus on the first add's {len(x)} image(s) "
                f"({faiss_reason(err)}); add more images in the first call (IVFn needs at least n, ideally 39·n) "
                "or use factory='Flat'."
            ) from err


def apply_params(index: faiss.Index, params: str | None, factory: str, device: FaissDevice) -> None:
    """Set FAISS search parameters (``"nprobe=16"``) on a corpus index; None keeps FAISS's defaults."""
    if params is None:
        return
    check_search_params(params)
    try:
        device.parameter_space().set_index_parameters(index, params)
    except RuntimeError as err:
        raise InvalidParameterError(
            f"params={params!r} does not apply to a {factory!r} index "
            f"({faiss_reason(err)}); e.g. 'nprobe=16' for IVF, 'efSearch=64' for HNSW."
        ) from err


def check_search_params(params: str, name: str = "params") -> None:
    """Raise :class:`InvalidParameterError` unless ``params`` is ``"name=value[,name=value]"`` with each value a
    finite positive number, integers below 2**31 (FAISS reads them as C ints: 0 or 2**32 + 1 would return
    one hit where k were asked for)."""
    for item in params.split(","):
        key, equals, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not key.strip() or not equals or not np.isfinite(number) or number <= 0 or (
            number.is_integer() and number >= 2**31
        ):
            raise InvalidParameterError(
                f"{name}={params!r}: {item!r} must be NAME=VALUE with VALUE a positive number below 2**31, "
                "e.g. 'nprobe=16' for IVF or 'efSearch=64' for HNSW."
            )


def check_factory(factory: str, dim: int, name: str = "factory") -> None:
    """Raise :class:`InvalidParameterError` unless FAISS can build ``factory`` over ``dim``-d vectors, ids
    aside (lfa-index adds its own ``IndexIDMap2``)."""
    try:
        built = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise InvalidParameterError(
            f"{name}={factory!r} cannot index {dim}-d vectors ({faiss_reason(err)}); "
            "use e.g. 'Flat', 'HNSW32' or 'IVF1024,PQ32' (PQm needs m to divide the dimension)."
        ) from err
    if hasattr(faiss.downcast_index(built), "id_map"):
        raise InvalidParameterError(
            f"{name}={factory!r} holds ids itself; lfa-index keeps ids in an IndexIDMap2 around the index: pass "
            f"the factory without IDMap (e.g. {factory.split(',', 1)[-1]!r})."
        )


def held_ids(index: faiss.Index) -> np.ndarray:
    """Sorted int64 ids held by an ``IndexIDMap2``."""
    return np.sort(faiss.vector_to_array(faiss.downcast_index(index).id_map)).astype(np.int64)
