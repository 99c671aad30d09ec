"""The example in pipelines/README.md runs as written."""
import re
from pathlib import Path

from orthrus_rag import pipelines

README = Path(pipelines.__file__).with_name("README.md")


async def test_readme_example_pipeline_and_its_test_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    namespace: dict = {}
    exec(blocks[0], namespace)  # the pipeline
    exec(blocks[-1], namespace)  # its test
    await namespace["test_second_query_carries_the_draft"]()


async def test_readme_example_adds_a_passage_found_again_once():
    from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever, passages

    namespace: dict = {}
    exec(re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0], namespace)
    first, again = passages("a", "b"), passages("b", "c")
    again[0].score = 0.5  # the same passage, scored for the second query
    retriever = ScriptedRetriever({"Where?": first, "Where? Oslo": again})
    answer = await namespace["DraftThenCheck"](retriever, ScriptedReasoner(["Oslo", "Bergen"]), k=2).answer("Where?")
    assert [p.id for p in answer.passages] == ["a", "b", "c"]
