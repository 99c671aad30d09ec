"""The README's pipeline example runs as written."""
from pathlib import Path

from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block(heading: str) -> str:
    section = README.read_text().split(heading, 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_readme_pipeline_example():
    namespace: dict = {}
    exec(readme_block("## Writing a pipeline"), namespace)
    retriever, reasoner = ScriptedRetriever(), ScriptedReasoner(["Oslo", "Bergen"])
    answer = await namespace["DraftThenCheck"](retriever, reasoner).answer("Where?")
    assert retriever.queries == ["Where?", "Where? Oslo"]
    assert answer.prediction == "Bergen"
    assert [event.kind for event in answer.trace] == ["retrieve", "reason", "retrieve", "reason"]
