from orthrus_rag.pipelines import NoRetrieval


async def test_never_retrieves_and_extracts_the_answer(retriever, script):
    reasoner = script(["Answer: Lisbon.\nIt is in Portugal."])
    result = await NoRetrieval(retriever, reasoner, demo_turns=False).answer("Where is the Tagus estuary?")
    assert result.prediction == "Lisbon" and result.passages == []
    assert retriever.calls == []
    prompt = reasoner.calls[0].input[-1]["content"]
    assert prompt.rstrip().endswith("Question: Where is the Tagus estuary?\nAnswer:")
    assert "Velmora Glassworks" in prompt  # a demonstration is shown


async def test_works_without_a_retriever(script):
    result = await NoRetrieval(None, script(["yes"]), num_demos=0).answer("Is ice cold?")
    assert result.prediction == "yes" and result.num_calls == {"retrieve": 0, "reason": 1}
