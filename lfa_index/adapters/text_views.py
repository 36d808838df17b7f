"""Short views of longer texts: more pairs for :class:`~lfa_index.EmbeddingAligner` from the same sample.

Queries are short; a sample of documents is not. Pairing each document's sentences as well (both
models embed them) adds pairs from the queries' own length range and from the store's own domain,
at the cost of one short embedding per sentence. On Cranfield every sentence lifts the aligner
more than the first sentence alone, most where documents are few
(``benchmarks/results/migration.md``, the rows "+ every sentence" and "+ first sentences").
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..core.validation import check_texts

MIN_WORDS = 4
"""A sentence shorter than this (a heading, "Abstract.") is not a view of its text."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(text: str, *, min_words: int = MIN_WORDS) -> list[str]:
    """Every sentence of ``text`` with at least ``min_words`` words, in order; none where that is the
    whole text (nothing new to pair)."""
    whole = " ".join(text.split())
    found = [sentence for sentence in _SENTENCE_END.split(whole) if len(sentence.split()) >= min_words]
    return [] if found == [whole] else found


def first_sentence(text: str, *, min_words: int = MIN_WORDS) -> str | None:
    """The first of :func:`sentences`, or None where there is none."""
    found = sentences(text, min_words=min_words)
    return found[0] if found else None


def with_sentences(texts: Sequence[str], *, min_words: int = MIN_WORDS,
                   return_sources: bool = False) -> list[str] | tuple[list[str], np.ndarray]:
    """``texts`` followed by every sentence of each text that has more than one (:func:`sentences`),
    in the order of ``texts``: the most pairs a sample of documents gives, at one short embedding each.
    With ``return_sources``, also the index of the text each row came from: pass it as ``groups`` to
    :meth:`~lfa_index.EmbeddingAligner.fit`, so that a document's views are held out together."""
    texts = check_texts(texts, name="texts")
    views = [(i, sentence) for i, text in enumerate(texts) for sentence in sentences(text, min_words=min_words)]
    return _joined(texts, views, return_sources)


def _joined(texts: Sequence[str], views: list[tuple[int, str]],
            return_sources: bool) -> list[str] | tuple[list[str], np.ndarray]:
    rows = list(texts) + [view for _, view in views]
    if not return_sources:
        return rows
    return rows, np.concatenate([np.arange(len(texts)), np.array([i for i, _ in views], dtype=np.int64)])


def with_first_sentences(texts: Sequence[str], *, min_words: int = MIN_WORDS,
                         return_sources: bool = False) -> list[str] | tuple[list[str], np.ndarray]:
    """``texts`` followed by the first sentence of each text that has more than one
    (:func:`first_sentence`), in the order of ``texts``; with ``return_sources``, also the index of
    the text each row came from (``groups`` of :meth:`~lfa_index.EmbeddingAligner.fit`)."""
    texts = check_texts(texts, name="texts")
    views = [(i, first_sentence(t, min_words=min_words)) for i, t in enumerate(texts)]
    return _joined(texts, [(i, v) for i, v in views if v is not None], return_sources)
