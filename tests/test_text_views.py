"""Short views of texts for the aligner's pairs (lfa_index.adapters.text_views)."""

import pytest

from lfa_index.adapters import first_sentence, sentences, windows, with_first_sentences, with_sentences, with_windows
from lfa_index.errors import InputTypeError, InvalidInputError


@pytest.mark.parametrize("text, expected", [
    ("the boundary layer in shear flow . an experimental study of it follows .", "the boundary layer in shear flow ."),
    ("Abstract. We measure the lift of a thin wing. Then the drag.", "We measure the lift of a thin wing."),
    ("Is it stable?  Yes,\n it is stable in every case we ran!", "Yes, it is stable in every case we ran!"),
    ("one sentence only, with no second one", None),
    ("Short. Tiny.", None),
])
def test_first_sentence_is_the_first_long_enough_sentence_and_none_when_nothing_new(text, expected):
    assert first_sentence(text) == expected


def test_with_first_sentences_keeps_the_texts_then_adds_each_new_view_in_order():
    texts = ["a single plain sentence here", "first part of it is here. and then a second part.",
             "the other text starts here. it goes on."]
    assert with_first_sentences(texts) == texts + ["first part of it is here.", "the other text starts here."]


def test_with_first_sentences_refuses_a_lone_string():
    with pytest.raises(InputTypeError, match="wrap it in a list"):
        with_first_sentences("one text. two sentences here.")


@pytest.mark.parametrize("text, expected", [
    ("Abstract. We measure the lift of a thin wing. Then the drag. It falls as the angle grows.",
     ["We measure the lift of a thin wing.", "It falls as the angle grows."]),
    ("one sentence only, with no second one", []),
    ("Short. Tiny.", []),
    ("only one long sentence here. Tiny.", ["only one long sentence here."]),
])
def test_sentences_are_every_long_enough_sentence_in_order_and_none_when_that_is_the_text(text, expected):
    assert sentences(text) == expected
    assert first_sentence(text) == (expected[0] if expected else None)


def test_with_sentences_keeps_the_texts_then_adds_every_sentence_of_each_in_order():
    texts = ["a single plain sentence here", "first part of it is here. and then a second part.",
             "the other text starts here. it goes on and on."]
    assert with_sentences(texts) == texts + ["first part of it is here.", "and then a second part.",
                                             "the other text starts here.", "it goes on and on."]
    with pytest.raises(InputTypeError, match="wrap it in a list"):
        with_sentences("one text. two sentences here.")


def test_views_can_say_which_text_each_row_came_from():
    texts = ["a single plain sentence here", "first part of it is here. and then a second part."]
    rows, sources = with_sentences(texts, return_sources=True)
    assert rows == with_sentences(texts) and sources.tolist() == [0, 1, 1, 1]
    rows, sources = with_first_sentences(texts, return_sources=True)
    assert rows == with_first_sentences(texts) and sources.tolist() == [0, 1, 1]


@pytest.mark.parametrize("n_words, words, stride, starts", [
    (10, 4, 2, [0, 2, 4, 6]),  # the last span ends with the text
    (11, 4, 2, [0, 2, 4, 6, 7]),  # one more span, so the last word is covered
    (9, 4, None, [0, 2, 4, 5]),  # stride: half a span
    (12, 12, None, []),  # no longer than a span: nothing new
    (13, 12, 6, [0, 1]),
    (3, 1, None, [0, 1, 2]),  # one-word spans step by one word
])
def test_windows_are_overlapping_spans_covering_every_word_and_none_when_the_text_is_one_span(
        n_words, words, stride, starts):
    tokens = [f"w{i}" for i in range(n_words)]
    got = windows("  ".join(tokens), words=words, stride=stride)
    assert got == [" ".join(tokens[s:s + words]) for s in starts]
    assert all(len(span.split()) == words for span in got)


def test_with_windows_keeps_the_texts_then_adds_their_spans_and_says_where_each_came_from():
    texts = ["one two three", "a b c d e f"]
    rows, sources = with_windows(texts, words=4, return_sources=True)
    assert rows == texts + ["a b c d", "c d e f"] and sources.tolist() == [0, 1, 1, 1]
    assert with_windows(texts, words=4) == rows
    with pytest.raises(InvalidInputError, match="stride >= 1"):
        windows("a b c d e", words=4, stride=0)
    with pytest.raises(InputTypeError, match="wrap it in a list"):
        with_windows("a lone string of many words here and there")
