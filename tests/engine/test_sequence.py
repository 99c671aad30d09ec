"""A sequence's tokens read by range equal the joined prompt and output."""
from hypothesis import given
from hypothesis import strategies as st

from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sequence import Sequence


@given(st.lists(st.integers(0, 99), max_size=12), st.lists(st.integers(0, 99), max_size=12), st.data())
def test_tokens_by_range_equal_the_joined_lists(prompt, output, data):
    seq = Sequence("r", "generate", prompt, RequestTimings(0.0), 0, output_ids=output)
    end = data.draw(st.integers(0, len(prompt) + len(output) + 2))
    start = data.draw(st.integers(0, end))
    assert seq.tokens(start, end) == seq.token_ids[start:end]
