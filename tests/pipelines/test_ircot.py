import pytest

from orthrus_rag.rag.testing import passages
from pipelines import IRCoT

Q = "Where was the founder of Velmora born?"


def ids(result):
    return [p.id for p in result.passages]


async def test_stops_on_the_answer_sentence(retriever, script):
    reasoner = script(["Velmora was founded by Anton.\n", "Anton was born in Graz. He liked glass.",
                       "So the answer is: Graz.", "never used"])
    result = await IRCoT(retriever, reasoner, k=2).answer(Q)
    assert result.prediction == "Graz"
    assert len(reasoner.calls) == 3
    assert retriever.queries == [Q, "Velmora was founded by Anton.", "Anton was born in Graz."]
    assert [e.kind for e in result.trace] == ["retrieve", "reason", "retrieve", "reason", "retrieve", "reason"]


async def test_the_reasoning_so_far_is_continued_one_line_at_a_time(retriever, script):
    reasoner = script(["First.", "Second.", "So the answer is: x."])
    await IRCoT(retriever, reasoner, k=1).answer(Q)
    assert all(call.params.stop == ["\n"] for call in reasoner.calls)
    assert [m["role"] for m in reasoner.calls[0].input] == ["user"]
    assert reasoner.calls[2].input[-1] == {"role": "assistant", "content": "First.\nSecond.\n"}
    assert Q in reasoner.calls[2].input[0]["content"]


async def test_new_passages_are_deduplicated_by_id(retriever, script):
    retriever.results = {Q: passages("a", "b"), "Step one.": passages("b", "c"), "Step two.": passages("a", "d")}
    reasoner = script(["Step one.", "Step two.", "So the answer is: d."])
    result = await IRCoT(retriever, reasoner, k=2).answer(Q)
    assert ids(result) == ["a", "b", "c", "d"]
    last_prompt = reasoner.calls[2].input[0]["content"]
    assert "[4] Title d" in last_prompt and "[5]" not in last_prompt


async def test_respects_the_passage_cap(retriever, script):
    reasoner = script(["One.", "Two.", "Three.", "So the answer is: z."])
    result = await IRCoT(retriever, reasoner, k=5, max_passages=7).answer(Q)
    assert len(result.passages) == 7
    assert ids(result)[5:] == ["One.#0", "One.#1"]
    assert retriever.queries == [Q, "One."]  # once full, no more retrieval


async def test_stops_after_max_steps_and_answers_from_the_last_sentence(retriever, script):
    reasoner = script(["A is B.", "B is C.", "C is in Oslo.", "unused"])
    result = await IRCoT(retriever, reasoner, k=1, max_steps=3).answer(Q)
    assert len(reasoner.calls) == 3
    assert retriever.queries == [Q, "A is B.", "B is C."]  # no retrieval after the last step
    assert result.prediction == "C is in Oslo"


async def test_final_reader_answers_from_all_passages(retriever, script):
    reasoner = script(["A is B.", "B is C.", "Oslo."])
    result = await IRCoT(retriever, reasoner, k=1, max_steps=2, final_reader=True).answer(Q)
    assert result.prediction == "Oslo" and len(reasoner.calls) == 3
    reader_prompt = reasoner.calls[2].input[-1]["content"]
    assert reader_prompt.rstrip().endswith("Answer:")
    assert "[2] A is B. 0" in reader_prompt


async def test_final_reader_is_not_called_when_an_answer_was_stated(retriever, script):
    reasoner = script(["So the answer is: yes."])
    result = await IRCoT(retriever, reasoner, final_reader=True).answer(Q)
    assert result.prediction == "yes" and len(reasoner.calls) == 1


@pytest.mark.parametrize("outputs", [["", " \n"], ["Same.", "Same."]])
async def test_stops_when_nothing_new_is_generated(retriever, script, outputs):
    reasoner = script(outputs + ["unused"] * 5)
    await IRCoT(retriever, reasoner, max_steps=5).answer(Q)
    assert len(reasoner.calls) == len(outputs)


async def test_an_empty_line_is_kept_and_the_step_tried_again(retriever, script):
    reasoner = script(["First.", "", "So the answer is: x.", "unused"])
    result = await IRCoT(retriever, reasoner, k=1).answer(Q)
    assert result.prediction == "x" and len(reasoner.calls) == 3
    assert reasoner.calls[1].input[-1]["content"] == "First.\n"
    assert reasoner.calls[2].input[-1]["content"] == "First.\n\n"
    assert retriever.queries == [Q, "First."]


def test_bad_settings_are_rejected(retriever, script):
    with pytest.raises(ValueError):
        IRCoT(retriever, script([]), max_steps=0)
