"""Short views of texts for the aligner's pairs (lfa_index.adapters.text_views)."""

import pytest

from lfa_index.adapters import first_sentence, with_first_sentences
from lfa_index.errors import InputTypeError


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
