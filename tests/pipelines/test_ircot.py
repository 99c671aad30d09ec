import pytest

from orthrus_rag.rag.testing import passages
from orthrus_rag.pipelines import IRCoT
from orthrus_rag.pipelines.ircot import transcript

Q = "Where was the founder of Velmora born?"


def ids(result):
    return [p.id for p in result.passages]


def chain(retriever, reasoner, **settings):
    """IRCoT answering with the chain's stated answer, so a script needs no reader turn."""
    return IRCoT(retriever, reasoner, answer_from="chain", **settings)


async def test_stops_on_the_answer_sentence(retriever, script):
    reasoner = script([" Velmora was founded by Anton.", " Anton was born in Graz. He liked glass.",
                       " So the answer is: Graz.", "never used"])
    result = await chain(retriever, reasoner, k=2).answer(Q)
    assert result.prediction == "Graz"
    assert len(reasoner.calls) == 3
    assert retriever.queries == [Q, "Velmora was founded by Anton.", "Anton was born in Graz."]
    assert [e.kind for e in result.trace] == ["retrieve", "reason", "retrieve", "reason", "retrieve", "reason"]


async def test_the_query_can_be_the_question_then_the_sentence(retriever, script):
    reasoner = script([" Velmora was founded by Anton.", " So the answer is: Graz."])
    await chain(retriever, reasoner, k=2, query="question+sentence").answer(Q)
    assert retriever.queries == [Q, f"{Q} Velmora was founded by Anton."]


async def test_each_step_continues_the_numbered_steps_after_the_next_number(retriever, script):
    reasoner = script(["First.", " Second.", "So the answer is: x."])
    await chain(retriever, reasoner, k=1, demo_turns=False).answer(Q)
    assert all(call.params.stop == ["\n"] for call in reasoner.calls)
    assert [m["role"] for m in reasoner.calls[0].input] == ["user", "assistant"]
    assert reasoner.calls[0].input[-1] == {"role": "assistant", "content": "1."}
    assert reasoner.calls[2].input[-1] == {"role": "assistant", "content": "1. First.\n2. Second.\n3."}
    assert Q in reasoner.calls[2].input[0]["content"]


def test_transcript_numbers_the_steps():
    assert transcript([]) == "1."
    assert transcript(["A is B.", "B is C."]) == "1. A is B.\n2. B is C.\n3."


async def test_with_fresh_each_step_adds_k_passages_not_seen_yet(retriever, script):
    retriever.results = {Q: passages("a", "b"), "Step one.": passages("b", "a", "c", "e"),
                         "Step two.": passages("a", "d", "c", "e", "f")}
    reasoner = script(["Step one.", "Step two.", "So the answer is: d."])
    result = await chain(retriever, reasoner, k=2, fresh=True, demo_turns=False, passage_order="retrieval").answer(Q)
    assert ids(result) == ["a", "b", "c", "e", "d", "f"]
    assert [call.params for call in retriever.calls] == [2, 4, 6]  # k more than those already held
    last_prompt = reasoner.calls[2].input[0]["content"]
    assert "[6] Title f" in last_prompt and "[7]" not in last_prompt


async def test_each_step_adds_only_the_new_ones_among_its_top_k(retriever, script):
    retriever.results = {Q: passages("a", "b"), "Step one.": passages("b", "c", "e"), "Step two.": passages("a", "b")}
    reasoner = script(["Step one.", "Step two.", "So the answer is: c."])
    result = await chain(retriever, reasoner, k=2).answer(Q)
    assert ids(result) == ["a", "b", "c"]  # step one adds one new passage, step two none
    assert [call.params for call in retriever.calls] == [2, 2, 2]


async def test_respects_the_passage_cap(retriever, script):
    reasoner = script(["One.", "Two.", "Three.", "So the answer is: z."])
    result = await chain(retriever, reasoner, k=5, max_passages=7).answer(Q)
    assert len(result.passages) == 7
    assert ids(result)[5:] == ["One.#0", "One.#1"]
    assert retriever.queries == [Q, "One."]  # once full, no more retrieval


async def test_stops_after_max_steps_and_the_reader_answers(retriever, script):
    reasoner = script(["A is B.", "B is C.", "C is in Oslo.", "Oslo", "unused"])
    result = await chain(retriever, reasoner, k=1, max_steps=3).answer(Q)
    assert len(reasoner.calls) == 4
    assert retriever.queries == [Q, "A is B.", "B is C."]  # no retrieval after the last step
    assert result.prediction == "Oslo"


async def test_the_reader_answers_from_all_passages(retriever, script):
    reasoner = script(["A is B.", "B is C.", "Oslo."])
    result = await IRCoT(retriever, reasoner, k=1, max_steps=2, query="sentence").answer(Q)
    assert result.prediction == "Oslo" and len(reasoner.calls) == 3
    reader_prompt = reasoner.calls[2].input[-1]["content"]
    assert reader_prompt.rstrip().endswith("Answer:")
    assert "[2] A is B. 0" in reader_prompt


async def test_the_reader_has_demonstrations_of_its_own(retriever, script):
    reasoner = script(["So the answer is: Graz.", "Graz"])
    pipeline = IRCoT(retriever, reasoner, k=1, demos="bridge_demos.jsonl", num_demos=2,
                     reader_demos="demos.jsonl", reader_num_demos=1)
    await pipeline.answer(Q)
    chain_turns, reader_turns = reasoner.calls[0].input, reasoner.calls[1].input
    assert [m["role"] for m in reader_turns] == ["user", "assistant", "user"]
    assert pipeline._reader_demos[0].question in reader_turns[0]["content"]
    assert all(d.question not in m["content"] for d in pipeline._demos for m in reader_turns)
    assert pipeline._demos[0].question in chain_turns[0]["content"]


async def test_a_reader_without_demonstrations_sees_only_the_question(retriever, script):
    reasoner = script(["So the answer is: Graz.", "Graz"])
    await IRCoT(retriever, reasoner, k=1, reader_num_demos=0).answer(Q)
    assert [m["role"] for m in reasoner.calls[1].input] == ["user"]


async def test_a_stated_answer_ends_the_loop_and_the_reader_answers(retriever, script):
    reasoner = script(["A is B.", "So the answer is: B.", "C", "unused"])
    result = await IRCoT(retriever, reasoner, k=1).answer(Q)
    assert result.prediction == "C" and len(reasoner.calls) == 3
    assert retriever.queries == [Q, "A is B."]
    assert reasoner.calls[2].input[-1]["content"].rstrip().endswith("Answer:")


async def test_with_answer_from_chain_the_stated_answer_is_returned(retriever, script):
    reasoner = script(["So the answer is: yes."])
    result = await IRCoT(retriever, reasoner, answer_from="chain").answer(Q)
    assert result.prediction == "yes" and len(reasoner.calls) == 1


async def test_conclude_returns_a_stated_answer_without_a_reader(retriever, script):
    reasoner = script(["A is B.", "So the answer is: B.", "unused"])
    result = await IRCoT(retriever, reasoner, k=1, answer_from="conclude").answer(Q)
    assert result.prediction == "B" and len(reasoner.calls) == 2


async def test_conclude_asks_the_chain_for_its_answer_over_every_passage(retriever, script):
    """Without a stated answer, the last prompt is the step prompt over all passages with the answer sentence begun."""
    retriever.results = {Q: passages("a"), "A is B.": passages("b"), "B is C.": passages("c")}
    reasoner = script(["A is B.", "B is C.", " Oslo.", "unused"])
    result = await IRCoT(retriever, reasoner, k=1, max_steps=2, num_demos=0, answer_from="conclude",
                         passage_order="retrieval").answer(Q)
    assert result.prediction == "Oslo" and len(reasoner.calls) == 3
    user, reply = reasoner.calls[2].input[-2:]
    assert reply == {"role": "assistant", "content": "1. A is B.\n2. B is C.\n3. So the answer is:"}
    assert user["content"] == reasoner.calls[1].input[-2]["content"]  # the same passages as the last step
    assert [p.id for p in result.passages] == ["a", "b"]


@pytest.mark.parametrize("outputs", [["", "unused"], [" \n", "unused"], ["Same.", "Same."]])
async def test_stops_when_nothing_new_is_generated(retriever, script, outputs):
    reasoner = script(outputs + ["unused"] * 5)
    await chain(retriever, reasoner, max_steps=5).answer(Q)
    assert len(reasoner.calls) == (1 if "unused" in outputs else 2) + 1  # the steps, then the reader


def test_bad_settings_are_rejected(retriever, script):
    with pytest.raises(ValueError):
        IRCoT(retriever, script([]), max_steps=0)
    with pytest.raises(ValueError, match="query"):
        IRCoT(retriever, script([]), query="entities")
    with pytest.raises(ValueError, match="answer_from"):
        IRCoT(retriever, script([]), answer_from="last")
    with pytest.raises(ValueError, match="passage_order"):
        IRCoT(retriever, script([]), passage_order="random")


async def test_demo_turns_put_each_worked_example_in_its_own_turns(retriever, script):
    reasoner = script(["So the answer is: Graz."])
    pipeline = chain(retriever, reasoner, k=1, num_demos=2, demo_turns=True)
    await pipeline.answer(Q)
    messages = reasoner.calls[0].input
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3
    first, second = pipeline._demos
    assert first.question in messages[0]["content"] and second.question not in messages[0]["content"]
    assert messages[1]["content"].startswith("1. " + first.reasoning[0])
    assert messages[1]["content"].endswith(f"So the answer is: {first.answer}.")
    assert Q in messages[4]["content"] and first.question not in messages[4]["content"]


async def test_best_last_lists_the_best_passage_nearest_the_question(retriever, script):
    retriever.results = {Q: passages("a", "b", "c")}
    reasoner = script(["So the answer is: Graz."])
    await chain(retriever, reasoner, k=3, passage_order="best_last", num_demos=0).answer(Q)
    prompt = reasoner.calls[0].input[0]["content"]
    assert prompt.index("Title c") < prompt.index("Title b") < prompt.index("Title a") < prompt.index(Q)


async def test_in_retrieval_order_each_step_prompt_extends_the_previous_one(retriever, script):
    """The prefix-cache layout: new passages are appended, so a step's prompt starts with the last one's passages."""
    retriever.results = {Q: passages("a", "b"), "Step one.": passages("c", "a"), "Step two.": passages("d", "b")}
    reasoner = script(["Step one.", "Step two.", "So the answer is: d."])
    await chain(retriever, reasoner, k=2, num_demos=0, passage_order="retrieval").answer(Q)
    prompts = [call.input[0]["content"] for call in reasoner.calls]
    for before, after in zip(prompts, prompts[1:]):
        passages_before = before[: before.index("Question:")].rstrip()
        assert after.startswith(passages_before)
