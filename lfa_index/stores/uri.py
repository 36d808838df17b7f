"""Store URIs: one string names a vector store and its collection, for the command line and scripts.

Syntax: ``SCHEME:LOCATION#COLLECTION``. SCHEME picks the engine, LOCATION is what that engine's
store takes as ``uri`` (a file, a directory, ``:memory:`` or a server URL, written as the engine
writes it), and COLLECTION, after the last ``#``, names the collection (a table for LanceDB).

==========================================  =====================================================
``faiss:DIR``                               a :class:`FaissStore` saved in directory DIR
``faiss:DIR#NAME``                          the same, in DIR/NAME (one directory per collection)
``milvus:./vectors.db#C``                   Milvus Lite file (embedded)
``milvus:http://host:19530#C``              Milvus server or cluster (token: ``$MILVUS_TOKEN``)
``qdrant::memory:#C``                       Qdrant in process (gone when the process ends)
``qdrant:./dir#C``                          Qdrant local mode on a directory
``qdrant:http://host:6333#C``               Qdrant server (API key: ``$QDRANT_API_KEY``)
``chroma:./dir#C``                          Chroma persistent client on a directory
``chroma::memory:#C``                       Chroma in process
``chroma:http://host:8000#C``               Chroma server
``lancedb:./dir#T``                         LanceDB directory (or ``s3://bucket/path#T``)
``lancedb:db://name#T``                     LanceDB cloud (API key: ``$LANCEDB_API_KEY``)
==========================================  =====================================================

A FAISS store lives in memory once opened: call ``store.save()`` to write changes back to its
directory (the ``lfa-index`` commands that write do). Credentials come from the environment
variables above, never from the URI, so they stay out of shell histories and logs.

Example
-------
>>> store = open_store("milvus:./vectors.db#images")
>>> X, y = support_from_store(store, label_field="label")
>>> new = open_store("faiss:./stores#prototypes", dim=prototype_dim(index))   # created: dim given
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import (
    CollectionNotFoundError,
    DimensionMismatchError,
    InvalidParameterError,
    LFAIndexError,
    StoreURIError,
)
from ._common import check_name, server_address
from .base import VectorStore
from .chroma import ChromaStore
from .faiss_store import FaissStore
from .lancedb_store import LanceDBStore
from .milvus import MilvusStore
from .qdrant import QdrantStore

URI_FORM = "SCHEME:LOCATION#COLLECTION"
URI_EXAMPLES = (
    "faiss:./vectors_faiss, milvus:./vectors.db#images, milvus:http://host:19530#images, qdrant::memory:#images, "
    "qdrant:./qdrant_dir#images, chroma:./chroma_dir#images, lancedb:./lance_dir#images"
)
_FAISS_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}"
_FAISS_NAME_RULE = "1 to 255 letters, digits, '_', '-' or '.', not starting with '.' (a folder directly inside DIR)"
CREDENTIALS = {"milvus": "MILVUS_TOKEN", "qdrant": "QDRANT_API_KEY", "lancedb": "LANCEDB_API_KEY"}
URI_FORMS = """store URI forms (SCHEME:LOCATION#COLLECTION; the collection after the last '#'):
  faiss:DIR[#NAME]                                 a FAISS store saved in directory DIR (or DIR/NAME)
  milvus:FILE.db#C | milvus:http://host:19530#C    Milvus Lite file, or server (token: $MILVUS_TOKEN)
  qdrant::memory:#C | qdrant:DIR#C | qdrant:URL#C  Qdrant in process, local mode, server ($QDRANT_API_KEY)
  chroma:DIR#C | chroma::memory:#C | chroma:URL#C  Chroma persistent, in process, server
  lancedb:DIR#T | lancedb:s3://...#T | lancedb:db://NAME#T   LanceDB ($LANCEDB_API_KEY for db://)"""


@dataclass(frozen=True)
class StoreURI:
    """A parsed store URI: ``scheme`` (engine), ``location`` (its uri) and ``collection`` (None: none given)."""

    scheme: str
    location: str
    collection: str | None


def parse_store_uri(uri: Any) -> StoreURI:
    """Split ``SCHEME:LOCATION#COLLECTION``; :class:`~lfa_index.errors.StoreURIError` names a malformed URI.

    Example
    -------
    >>> parse_store_uri("milvus:http://localhost:19530#images")
    StoreURI(scheme='milvus', location='http://localhost:19530', collection='images')
    """
    if not isinstance(uri, str) or not uri.strip():
        raise StoreURIError(f"a store URI must be a non-empty string of the form {URI_FORM}, got {uri!r}.")
    scheme, colon, rest = uri.strip().partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in OPENERS:
        raise StoreURIError(
            f"store URI {uri!r} does not start with a known scheme ({', '.join(s + ':' for s in OPENERS)}); write "
            f"{URI_FORM}, e.g. {URI_EXAMPLES}."
        )
    location, hash_sign, collection = rest.rpartition("#") if "#" in rest else (rest, "", "")
    if location.startswith("//"):
        server = f"{scheme}:http:{location}" + (f"#{collection}" if hash_sign else "")
        raise StoreURIError(
            f"store URI {uri!r}: write the engine's own address after '{scheme}:', e.g. {server!r} for a server."
        )
    if not location:
        raise StoreURIError(f"store URI {uri!r} names no location after '{scheme}:'; e.g. {_example(scheme)}.")
    try:
        server_address(location)  # a bad port or IPv6 address, whichever engine
    except InvalidParameterError as err:
        raise StoreURIError(f"store URI {uri!r}: {err}") from err
    if hash_sign and not collection:
        raise StoreURIError(
            f"store URI {uri!r} ends with '#' but names no collection after it; write '{scheme}:{location}#NAME'."
        )
    if scheme == "faiss" and collection:  # one directory inside DIR: never '../x' or '/abs', which lead out of it
        try:
            check_name(collection, "a FAISS store name (after '#')", _FAISS_NAME, _FAISS_NAME_RULE)
        except InvalidParameterError as err:
            raise StoreURIError(f"store URI {uri!r}: {err}") from err
    return StoreURI(scheme, location, collection or None)


def open_store(uri: str, collection: str | None = None, dim: int | None = None, **options: Any) -> VectorStore:
    """Open the store a URI names (see the module docstring for the forms).

    Parameters
    ----------
    uri : str
        ``SCHEME:LOCATION#COLLECTION``.
    collection : str or None, default=None
        Collection to use when the URI names none after ``#``.
    dim : int or None, default=None
        Vector dimension: creates a missing collection (FAISS: an empty store saved by ``save()``)
        and is checked against an existing one; None opens only an existing collection.
    **options
        Passed to the engine's store (e.g. ``ef_search=2048`` for Chroma, ``timeout=5``).

    Raises
    ------
    StoreURIError
        Malformed URI, unknown scheme, or no collection named.
    CollectionNotFoundError
        No such collection and no ``dim`` to create it.
    StoreUnavailableError
        The engine cannot be reached or opened.
    Every error of the engine's store is re-raised with the same type, its message prefixed by the URI.

    Example
    -------
    >>> open_store("qdrant:http://qdrant:6333#corpus_raw", timeout=5).count()
    """
    parsed = parse_store_uri(uri)
    name = parsed.collection or collection
    if name is None and parsed.scheme != "faiss":
        what = "a table" if parsed.scheme == "lancedb" else "a collection"
        raise StoreURIError(
            f"store URI {uri!r} names no collection: add '#NAME' ({what}): "
            f"'{parsed.scheme}:{parsed.location}#NAME'."
        )
    try:
        if dim is None and _is_path(parsed.location) and not Path(_local(parsed.location)).exists():
            # reading a missing path must not create an empty database there
            raise CollectionNotFoundError(f"nothing exists at {parsed.location!r}")
        return OPENERS[parsed.scheme](parsed.location, name, dim, options)
    except CollectionNotFoundError as err:
        raise CollectionNotFoundError(
            f"store URI {uri!r} names nothing that exists ({err}); check the location and the name after '#', or "
            "fill the collection first."
        ) from err
    except LFAIndexError as err:
        raise _with_uri(err, uri) from err


def _with_uri(err: LFAIndexError, uri: str) -> LFAIndexError:
    """``err`` again, its message prefixed by the URI (same type, so callers catch what they caught)."""
    try:
        return type(err)(f"store URI {uri!r}: {err}")
    except TypeError:  # an error class with its own constructor: keep it as it is
        return err


def _example(scheme: str) -> str:
    return next(e.strip() for e in URI_EXAMPLES.split(",") if e.strip().startswith(scheme + ":"))


def _is_path(location: str) -> bool:
    return location != ":memory:" and "://" not in location


def _local(location: str) -> str:
    """A path with ``~`` expanded; ``:memory:`` and URLs (``scheme://``) as they are."""
    return os.path.expanduser(location) if _is_path(location) else location


def _credential(scheme: str) -> str | None:
    return os.environ.get(CREDENTIALS[scheme]) or None


# ------------------------------------------------------------------------------ one opener per scheme
def _open_faiss(location: str, name: str | None, dim: int | None, options: dict[str, Any]) -> FaissStore:
    if location == ":memory:":
        raise StoreURIError(
            "a FAISS store URI names a directory (faiss:DIR); for an in-process store use FaissStore(dim) in Python."
        )
    path = Path(_local(location))
    if name is not None:  # a name given apart from the URI: checked as parse_store_uri checks one after '#'
        path = path / check_name(name, "a FAISS store name", _FAISS_NAME, _FAISS_NAME_RULE)
    if path.is_dir() and any(path.iterdir()):
        store = FaissStore.load(path)
        if dim is not None and store.dim != int(dim):
            raise DimensionMismatchError(
                f"{store.location} holds {store.dim}-d vectors but dim={dim} was asked for; use another directory."
            )
        return store
    if path.exists() and not path.is_dir():
        raise StoreURIError(f"{str(path)!r} is a file; a FAISS store URI names a directory (faiss:DIR).")
    if dim is None:
        raise CollectionNotFoundError(f"no FAISS store at {str(path)!r}")
    return FaissStore(int(dim), path=path, **options)


def _open_milvus(location: str, name: str | None, dim: int | None, options: dict[str, Any]) -> MilvusStore:
    options.setdefault("token", _credential("milvus") or "")
    return MilvusStore(_local(location), name, dim, **options)


def _open_qdrant(location: str, name: str | None, dim: int | None, options: dict[str, Any]) -> QdrantStore:
    options.setdefault("api_key", _credential("qdrant"))
    return QdrantStore(_local(location), name, dim, **options)


def _open_chroma(location: str, name: str | None, dim: int | None, options: dict[str, Any]) -> ChromaStore:
    return ChromaStore(_local(location), name, dim, **options)


def _open_lancedb(location: str, name: str | None, dim: int | None, options: dict[str, Any]) -> LanceDBStore:
    options.setdefault("api_key", _credential("lancedb"))
    return LanceDBStore(_local(location), name, dim, **options)


OPENERS: dict[str, Callable[[str, Any, Any, dict[str, Any]], VectorStore]] = {
    "faiss": _open_faiss,
    "milvus": _open_milvus,
    "qdrant": _open_qdrant,
    "chroma": _open_chroma,
    "lancedb": _open_lancedb,
}
