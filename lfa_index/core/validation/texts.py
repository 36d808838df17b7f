"""Texts at the public boundary: what an embedding source or a framework integration is asked to embed."""

from __future__ import annotations

from typing import Any

from ...errors import InputTypeError, InvalidInputError, ShapeError


def check_texts(texts: Any, *, name: str = "texts", allow_empty: bool = False) -> list[str]:
    """``texts`` as a list of str, or a typed error.

    A lone string (it would be read as its characters), a non-iterable or an item that is not a str
    raise :class:`InputTypeError`. Unless ``allow_empty`` (a framework may pass no documents, or empty
    ones, to its embedder), an empty list raises :class:`ShapeError` and an empty string
    :class:`InvalidInputError`: it has no meaning to embed.

    >>> check_texts(("a cat", "a dog"), name="documents")
    ['a cat', 'a dog']
    """
    if isinstance(texts, (str, bytes)):
        raise InputTypeError(f"{name} must be a list of strings, got a single {type(texts).__name__}; "
                             "wrap it in a list: [text].")
    try:
        texts = list(texts)
    except TypeError as err:
        raise InputTypeError(f"{name} must be a list of strings, got {type(texts).__name__}.") from err
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise InputTypeError(f"{name} must be a list of strings; item {bad[0]} is {type(texts[bad[0]]).__name__}.")
    if allow_empty:
        return texts
    if not texts:
        raise ShapeError(f"{name} is empty; pass at least one string.")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise InvalidInputError(
            f"{name} holds {len(empty)} empty string(s) (first at index {empty[0]}); an empty text "
            "has no meaning to embed: drop those items."
        )
    return texts
