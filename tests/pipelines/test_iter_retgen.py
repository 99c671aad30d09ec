import pytest

from orthrus_rag.rag.testing import passages
from orthrus_rag.pipelines import IterRetGen

Q = "Which film came out first, A or B?"


async def test_each_query_is_the_question_plus_the_previous_generation(retriever, script):
    reasoner = script(["A came out in 1950.\nSo the answer is: A.", "  A: 1950. B: 1940.\nSo the answer is: B.",
                       "B came out in 1940.\nA came out in 1950.\nSo the answer is: B."])
    result = await IterRetGen(retriever, reasoner).answer(Q)
    assert retriever.queries == [Q, Q + " A came out in 1950.\nSo the answer is: A.",
                                 Q + " A: 1950. B: 1940.\nSo the answer is: B."]
    assert result.prediction == "B"
    assert len(reasoner.calls) == 3


async def test_passages_are_fresh_each_iteration_and_all_read_are_reported(retriever, script):
    retriever.results = {Q: passages("a", "b"), Q + " g1": passages("c", "a")}
    reasoner = script(["g1", "g2"])
    result = await IterRetGen(retriever, reasoner, k=2, iterations=2).answer(Q)
    assert [p.id for p in result.passages] == ["a", "b", "c"]
    second_prompt = reasoner.calls[1].input[-1]["content"]
    assert "Text of c." in second_prompt and "Text of b." not in second_prompt


async def test_answer_without_a_marker_comes_from_the_last_line(retriever, script):
    result = await IterRetGen(retriever, script(["x", "A is old.\nA"]), iterations=2).answer(Q)
    assert result.prediction == "A"


def test_bad_settings_are_rejected(retriever, script):
    with pytest.raises(ValueError):
        IterRetGen(retriever, script([]), iterations=0)
