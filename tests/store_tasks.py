"""The small task the store tests check every store against: a support set, queries, a corpus, an index."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.stores import VectorStore, support_from_store

NAMES = [f"class_{i}" for i in range(12)]


def make_task(d_img=32, d_txt=24, n_classes=12, shots=4, n_queries=300, seed=0, offset=0.0):
    """Support images around a random linear image of their class's text prototype, plus queries.

    ``offset`` scales a random offset shared by every image, as CLIP's (it makes centring matter)."""
    rng = np.random.default_rng(seed)
    text = rng.standard_normal((n_classes, d_txt)).astype(np.float32)
    mix = rng.standard_normal((d_txt, d_img)).astype(np.float32)
    shift = offset * rng.standard_normal(d_img) if offset else 0.0
    labels = np.repeat(np.arange(n_classes), shots)
    support = text[labels] @ mix + shift + 0.8 * rng.standard_normal((len(labels), d_img))
    query_labels = rng.integers(0, n_classes, n_queries)
    queries = text[query_labels] @ mix + shift + 0.8 * rng.standard_normal((n_queries, d_img))
    return support.astype(np.float32), labels, text, queries.astype(np.float32)


def fit_named(task: tuple, options: dict[str, Any]) -> AlignedIndex:
    """An index fitted on the task with the classes named by ``NAMES``."""
    support, labels, text, _ = task
    return AlignedIndex(lfa=LFA(**options)).fit(support, np.array(NAMES)[labels], text, class_names=NAMES)


def random_corpus() -> tuple[np.ndarray, np.ndarray]:
    """1500 raw 32-d images and 25 24-d text queries."""
    rng = np.random.default_rng(7)
    return rng.standard_normal((1500, 32)).astype(np.float32), rng.standard_normal((25, 24)).astype(np.float32)


def own_corpus_search(index, images, ids, text_queries, k):
    """The images in a flat AlignedCorpus of the index: the exact aligned search."""
    return AlignedCorpus(index).add(images, ids=ids).search_text(text_queries, k=k)


def check_support_from_store(store: VectorStore, task: tuple, options: dict[str, Any]) -> None:
    """Labelled support rows added to ``store`` in shuffled order come back by label and fit the same index."""
    support, labels, text, queries = task
    names = np.array(NAMES)[labels]
    shuffled = np.random.default_rng(3).permutation(len(support))
    store.add(support[shuffled], ids=shuffled, fields={"label": names[shuffled]})
    X, y = support_from_store(store, label_field="label", batch_size=7)
    np.testing.assert_array_equal(X, support)
    np.testing.assert_array_equal(y, names)
    from_store = AlignedIndex(lfa=LFA(**options)).fit(X, y, text, class_names=NAMES)
    direct = AlignedIndex(lfa=LFA(**options)).fit(support, names, text, class_names=NAMES)
    np.testing.assert_array_equal(from_store.predict(queries), direct.predict(queries))


# ------------------------------------------------------------------------------ every engine
ENGINES = {  # engine -> client module (None: FAISS, always there)
    "faiss": None, "milvus": "pymilvus", "qdrant": "qdrant_client", "chroma": "chromadb", "lancedb": "lancedb",
}
_tags = itertools.count()


def engine_store(engine: str, root: Path, name: str, dim: int | None = None, **options: Any) -> VectorStore:
    """A store of ``engine`` under ``root`` (one Milvus Lite file and one directory per engine), embedded:
    FAISS in process, Qdrant ``:memory:`` (its directory mode commits each point on its own)."""
    from lfa_index.stores import ChromaStore, FaissStore, LanceDBStore, MilvusStore, QdrantStore

    if engine == "faiss":
        return FaissStore(dim, **options)
    if engine == "milvus":
        return MilvusStore(str(root / "milvus.db"), name, dim, **options)
    if engine == "qdrant":
        return QdrantStore(":memory:", name, dim, **options)
    if engine == "chroma":
        return ChromaStore(root / "chroma", name, dim, **options)
    return LanceDBStore(root / "lancedb", name, dim, **options)


class Stores:
    """The stores one test opens in one engine, all embedded (no server); closed when the test ends.

    Milvus Lite starts a server per file, so its collections share one file per module (``shared``) under
    names tagged per test (:meth:`name`); the other engines live in the test's own ``tmp`` directory."""

    def __init__(self, engine: str, shared: Path, tmp: Path):
        self.engine, self._shared, self._tmp = engine, shared, tmp
        self._tag = next(_tags)
        self._opened: list[VectorStore] = []

    def name(self, name: str) -> str:
        """The collection ``name`` stands for in this test (Milvus: tagged, as its file is shared)."""
        return f"{name}_{self._tag}" if self.engine == "milvus" else name

    def location(self) -> str:
        """Where :meth:`open` keeps persistent collections: what the engine's store takes as ``uri``."""
        if self.engine == "milvus":
            return str(self._shared / "milvus.db")
        return str(self._tmp / self.engine)

    def open(self, name: str, dim: int | None = None, persistent: bool = False, **options: Any) -> VectorStore:
        """A store of collection ``name`` (created with ``dim``, or opened as it is when None). ``persistent``:
        kept where a store of the same name opens it again (Qdrant: a directory, not ``:memory:``; FAISS: the
        ``faiss:DIR#NAME`` store, written by :meth:`persist`)."""
        from lfa_index.stores import QdrantStore, open_store

        if persistent and self.engine == "faiss":
            store = open_store(f"faiss:{self.location()}", name, dim, **options)
        elif persistent and self.engine == "qdrant":
            store = QdrantStore(self.location(), name, dim, **options)
        else:
            root = self._shared if self.engine == "milvus" else self._tmp
            store = engine_store(self.engine, root, self.name(name), dim, **options)
        self._opened.append(store)
        return store

    def persist(self, store: VectorStore) -> None:
        """Write ``store`` where it opens again and close it: FAISS saves (it lives in memory), the others write
        through already."""
        if self.engine == "faiss":
            store.save()
        store.close()

    def close(self) -> None:
        for store in self._opened:
            store.close()
