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
from ..errors import InvalidInputError

MIN_WORDS = 4
"""A sentence shorter than this (a heading, "Abstract.") is not a view of its text."""
WINDOW_WORDS = 12
"""Words per span of :func:`windows`: about a short query's length."""
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


def windows(text: str, *, words: int = WINDOW_WORDS, stride: int | None = None) -> list[str]:
    """Overlapping spans of ``words`` words of ``text``, one every ``stride`` words (default half a
    span) and the last one ending with the text; none where the text has no more than ``words`` words.

    Unlike :func:`sentences` they need no punctuation, and they cover every part of a text in pieces of
    one length: pairs of spans lift the aligner more than pairs of sentences on Cranfield's 300-document
    sample (``docs/migration.md``, "Short views").
    """
    words = int(words)
    stride = max(1, words // 2) if stride is None else int(stride)
    if words < 1 or stride < 1:
        raise InvalidInputError(f"windows need words >= 1 and stride >= 1, got words={words}, stride={stride}.")
    tokens = text.split()
    if len(tokens) <= words:
        return []
    starts = list(range(0, len(tokens) - words + 1, stride))
    if starts[-1] + words < len(tokens):
        starts.append(len(tokens) - words)
    return [" ".join(tokens[start:start + words]) for start in starts]


def with_windows(texts: Sequence[str], *, words: int = WINDOW_WORDS, stride: int | None = None,
                 return_sources: bool = False) -> list[str] | tuple[list[str], np.ndarray]:
    """``texts`` followed by the :func:`windows` of each, in the order of ``texts``; with
    ``return_sources``, also the index of the text each row came from (``groups`` of
    :meth:`~lfa_index.EmbeddingAligner.fit`)."""
    texts = check_texts(texts, name="texts")
    views = [(i, span) for i, text in enumerate(texts) for span in windows(text, words=words, stride=stride)]
    return _joined(texts, views, return_sources)


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
