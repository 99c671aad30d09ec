import pytest

from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever
from pipelines import PIPELINES, build_pipeline


@pytest.mark.parametrize("name", ["no_retrieval", "standard_rag", "ircot", "iter_retgen", "self_ask"])
async def test_every_pipeline_builds_and_answers(name):
    pipeline = build_pipeline(name, ScriptedRetriever(), ScriptedReasoner(lambda _: "So the answer is: yes."))
    assert isinstance(pipeline, PIPELINES[name])
    answers = await pipeline.run(["q1", "q2"], progress=False)
    assert [a.prediction for a in answers] == ["yes", "yes"]


def test_settings_are_passed_and_reported():
    pipeline = build_pipeline("ircot", ScriptedRetriever(), ScriptedReasoner([]), k=3, final_reader=True)
    assert pipeline.settings()["k"] == 3 and pipeline.settings()["final_reader"] is True


def test_unknown_names_and_settings_are_clear_errors():
    with pytest.raises(KeyError, match="known"):
        build_pipeline("nope", None, ScriptedReasoner([]))
    with pytest.raises(TypeError, match="no setting"):
        build_pipeline("standard_rag", None, ScriptedReasoner([]), top_k=3)
