"""Short views of longer texts: more pairs for :class:`~lfa_index.EmbeddingAligner` from the same sample.

Queries are short; a sample of documents is not. Pairing each document's first sentence as well
(both models embed it) adds pairs from the queries' own length range at the cost of one short
embedding per document. On Cranfield it lifts the aligner most where pairs are few
(``benchmarks/results/migration.md``, the rows "+ first sentences").
"""

from __future__ import annotations

import re
from typing import Sequence

from ..core.validation import check_texts

MIN_WORDS = 4
"""A sentence shorter than this (a heading, "Abstract.") is not a view of its text."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def first_sentence(text: str, *, min_words: int = MIN_WORDS) -> str | None:
    """The first sentence of ``text`` with at least ``min_words`` words, or None where that is the
    whole text (nothing new to pair) or no sentence is that long."""
    whole = " ".join(text.split())
    for sentence in _SENTENCE_END.split(whole):
        if len(sentence.split()) >= min_words:
            return None if sentence == whole else sentence
    return None


def with_first_sentences(texts: Sequence[str], *, min_words: int = MIN_WORDS) -> list[str]:
    """``texts`` followed by the first sentence of each text that has more than one
    (:func:`first_sentence`), in the order of ``texts``."""
    texts = check_texts(texts, name="texts")
    views = [first_sentence(t, min_words=min_words) for t in texts]
    return list(texts) + [v for v in views if v is not None]
