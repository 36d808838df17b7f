"""Vector stores for aligned prototypes and corpora: FAISS in process, Milvus beyond it.

:class:`VectorStore` is the small protocol; :class:`FaissStore` and :class:`MilvusStore` implement
it (pymilvus is imported only when a MilvusStore is opened: ``pip install 'lfa-index[milvus]'``).
The functions of :mod:`.aligned` put an AlignedIndex's prototypes or corpora in any store.

Example
-------
>>> from lfa_index.stores import MilvusStore, prototype_dim, write_prototypes, classify
>>> store = write_prototypes(index, MilvusStore("vectors.db", "prototypes", dim=prototype_dim(index)))
>>> classify(index, store, queries)
"""

from .aligned import (
    MAPPING_FIELD,
    add_aligned,
    classify,
    prototype_dim,
    search_aligned,
    search_classes,
    search_raw,
    support_from_store,
    write_prototypes,
)
from .base import VectorStore
from .errors import MissingExtraError, SchemaError, StoreUnavailableError
from .faiss_store import FaissStore
from .milvus import MilvusStore

__all__ = [
    "VectorStore",
    "FaissStore",
    "MilvusStore",
    "MAPPING_FIELD",
    "prototype_dim",
    "write_prototypes",
    "classify",
    "search_classes",
    "add_aligned",
    "search_aligned",
    "search_raw",
    "support_from_store",
    "StoreUnavailableError",
    "SchemaError",
    "MissingExtraError",
]
