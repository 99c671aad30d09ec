from orthrus_rag.rag.testing import passages
from orthrus_rag.pipelines import StandardRAG


async def test_retrieves_once_with_the_question(retriever, script):
    retriever.results["Who built it?"] = passages("a", "b", "c", "d", "e", "f")
    reasoner = script(['"Anton Reisel".'])
    result = await StandardRAG(retriever, reasoner).answer("Who built it?")
    assert [(c.input, c.params) for c in retriever.calls] == [("Who built it?", 5)]
    assert [p.id for p in result.passages] == ["a", "b", "c", "d", "e"]
    assert result.prediction == "Anton Reisel"
    prompt = reasoner.calls[0].input[-1]["content"]
    assert "[5] Title e: Text of e." in prompt and "Text of f." not in prompt


async def test_k_and_passage_length_are_settings(retriever, script):
    retriever.results["q"] = [passages("a")[0]]
    retriever.results["q"][0].text = " ".join(["word"] * 100)
    reasoner = script(["x"])
    await StandardRAG(retriever, reasoner, k=1, passage_words=10, num_demos=0).answer("q")
    assert retriever.calls[0].params == 1
    assert "[1] Title a: " + " ".join(["word"] * 10) + " ...\n" in reasoner.calls[0].input[-1]["content"]
