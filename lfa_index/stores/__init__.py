"""Vector stores for aligned prototypes and corpora: FAISS in process; Milvus, Qdrant, Chroma and LanceDB beyond it.

:class:`VectorStore` is the small protocol; :class:`FaissStore`, :class:`MilvusStore`,
:class:`QdrantStore`, :class:`ChromaStore` and :class:`LanceDBStore` implement it. Each engine's
client is imported only when its store is opened (``pip install 'lfa-index[milvus]'``, ``[qdrant]``,
``[chroma]``, ``[lancedb]``). The functions of :mod:`.aligned` put an AlignedIndex's prototypes or
corpora in any store; :func:`search_mapped` searches a store of old-model rows with new-model queries through an
EmbeddingAligner (:mod:`.migrated`); :func:`open_store` opens one from a URI (``SCHEME:LOCATION#COLLECTION``,
:mod:`.uri`), as the ``lfa-index`` commands do.

Example
-------
>>> from lfa_index.stores import MilvusStore, prototype_dim, write_prototypes, classify
>>> store = write_prototypes(index, MilvusStore("vectors.db", "prototypes", dim=prototype_dim(index)))
>>> classify(index, store, queries)
>>> open_store("milvus:./vectors.db#prototypes").count()
"""

from ..errors import CollectionNotFoundError, MissingExtraError, SchemaError, StoreUnavailableError, StoreURIError
from .aligned import (
    MAPPING_FIELD,
    add_aligned,
    classify,
    classify_rows,
    prototype_dim,
    search_aligned,
    search_classes,
    search_unaligned,
    support_from_store,
    write_prototypes,
)
from .base import VectorStore
from .chroma import ChromaStore
from .faiss_store import FaissStore
from .lancedb_store import LanceDBStore
from .migrated import search_mapped, search_mapped_exact
from .milvus import MilvusStore
from .qdrant import QdrantStore
from .uri import StoreURI, open_store, parse_store_uri

__all__ = [
    "VectorStore",
    "FaissStore",
    "MilvusStore",
    "QdrantStore",
    "ChromaStore",
    "LanceDBStore",
    "MAPPING_FIELD",
    "prototype_dim",
    "write_prototypes",
    "classify",
    "classify_rows",
    "search_classes",
    "add_aligned",
    "search_aligned",
    "search_unaligned",
    "support_from_store",
    "search_mapped",
    "search_mapped_exact",
    "open_store",
    "parse_store_uri",
    "StoreURI",
    "StoreUnavailableError",
    "StoreURIError",
    "CollectionNotFoundError",
    "SchemaError",
    "MissingExtraError",
]
