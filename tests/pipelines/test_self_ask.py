import pytest

from orthrus_rag.rag.testing import passages
from orthrus_rag.pipelines import SelfAsk

Q = "Where was the founder of Velmora born?"


def ids(result):
    return [p.id for p in result.passages]


async def test_follow_ups_are_retrieved_and_answered_until_the_final_answer(retriever, script):
    retriever.results = {Q: passages("a", "b"), "Who founded Velmora?": passages("a", "c", "d"),
                         "Where was Anton born?": passages("e", "c", "f", "g")}
    reasoner = script([" Who founded Velmora?", "Anton\nmore text",
                       "Follow up: Where was Anton born?", "Graz.",
                       "So the final answer is: Graz.", "never used"])
    result = await SelfAsk(retriever, reasoner, k=2, demo_turns=False).answer(Q)
    assert result.prediction == "Graz"
    assert retriever.queries == [Q, "Who founded Velmora?", "Where was Anton born?"]
    assert [call.params for call in retriever.calls] == [2, 4, 6]  # k more than those already held
    assert ids(result) == ["a", "b", "c", "d", "e", "f"]
    assert [e.kind for e in result.trace] == ["retrieve", "reason", "retrieve", "reason", "reason", "retrieve",
                                              "reason", "reason"]
    # the first line is started as a follow-up; later ones continue the transcript with the intermediate answers
    assert reasoner.calls[0].input[-1] == {"role": "assistant", "content": "Follow up:"}
    assert reasoner.calls[4].input[-1]["content"] == (
        "Follow up: Who founded Velmora?\nIntermediate answer: Anton.\n"
        "Follow up: Where was Anton born?\nIntermediate answer: Graz.\n")
    assert all(reasoner.calls[i].params.stop == ["\n", "Intermediate answer:"] for i in (0, 2, 4))
    # a follow-up is read over the k passages its own retrieval found, not the whole pool
    follow_up_prompt = reasoner.calls[1].input[0]["content"]
    assert "Who founded Velmora?" in follow_up_prompt
    assert "Title c" in follow_up_prompt and "Title b" not in follow_up_prompt


async def test_without_a_final_answer_a_reader_answers_from_all_passages(retriever, script):
    reasoner = script([" Q1?", "x", "Follow up: Q2?", "y", "So the answer is: Rome."])
    result = await SelfAsk(retriever, reasoner, k=1, max_follow_ups=2, demo_turns=False).answer(Q)
    assert result.prediction == "Rome"
    assert len(reasoner.calls) == 5
    final = reasoner.calls[-1].input[0]["content"]
    assert Q in final and all(f"{t}: " in final for t in ("Q1? 0", "Q2? 0"))


async def test_passages_respect_the_cap(retriever, script):
    reasoner = script([" Q1?", "x", "Follow up: Q2?", "y", "Follow up: Q3?", "z", "w"])
    result = await SelfAsk(retriever, reasoner, k=3, max_passages=5).answer(Q)
    assert len(result.passages) == 5


async def test_a_repeated_or_empty_follow_up_ends_the_questions(retriever, script):
    reasoner = script([" Q1?", "x", "Follow up: Q1?", "final read"])
    result = await SelfAsk(retriever, reasoner, k=1).answer(Q)
    assert retriever.queries == [Q, "Q1?"]
    assert result.prediction == "final read"


async def test_a_final_answer_line_without_an_answer_falls_back_to_the_reader(retriever, script):
    reasoner = script([" Q1?", "x", "So the final answer", "Lyon"])
    result = await SelfAsk(retriever, reasoner, k=1).answer(Q)
    assert result.prediction == "Lyon"


def test_bad_settings_are_refused(retriever, script):
    with pytest.raises(ValueError, match="max_follow_ups"):
        SelfAsk(retriever, script([]), max_follow_ups=0)
