"""The live trace: every call of a pipeline, sent to a listener as it happens."""
from __future__ import annotations

import pytest

from orthrus_rag.engine import AsyncEngine, EngineConfig, SamplingParams
from orthrus_rag.rag import Answer, EngineReasoner, Pipeline
from orthrus_rag.rag.live import CallStarted, Reasoned, Retrieved, TextDelta, listening
from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever


class RetrieveThenReason(Pipeline):
    async def answer(self, question: str) -> Answer:
        passages = await self.retrieve(question, 2)
        text = await self.reason(f"Q: {question}", SamplingParams(max_tokens=12, temperature=0))
        return Answer(question, text, passages)


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = AsyncEngine(EngineConfig(generator=str(tiny_llama_dir), embedder=None, dtype="float32", num_threads=1))
    yield engine
    engine.shutdown()


async def test_each_call_is_sent_when_it_starts_and_when_it_ends():
    events = []
    pipeline = RetrieveThenReason(ScriptedRetriever(), ScriptedReasoner(["Rome"]))
    with listening(events.append):
        answer = await pipeline.answer("where?")
    assert [type(e) for e in events] == [CallStarted, Retrieved, CallStarted, Reasoned]
    assert [(e.call, e.kind) for e in events[::2]] == [(0, "retrieve"), (1, "reason")]
    retrieved, reasoned = events[1], events[3]
    assert retrieved.query == "where?" and retrieved.passages == answer.passages
    assert reasoned.text == "Rome" and 0 <= reasoned.start_s <= reasoned.end_s
    assert retrieved.end_s <= reasoned.start_s


async def test_nothing_is_sent_outside_a_listening_block():
    events = []
    with listening(events.append):
        pass
    await RetrieveThenReason(ScriptedRetriever(), ScriptedReasoner(["Rome"])).answer("where?")
    assert events == []


async def test_engine_text_streams_as_deltas_that_join_to_the_answer(engine):
    events = []
    pipeline = RetrieveThenReason(ScriptedRetriever(), EngineReasoner(engine, use_chat_template=False))
    quiet = await pipeline.answer("where?")
    with listening(events.append):
        answer = await pipeline.answer("where?")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    reasoned = events[-1]
    assert len(deltas) > 1 and all(e.call == 1 for e in events if isinstance(e, TextDelta))
    assert "".join(deltas) == reasoned.text == answer.prediction == quiet.prediction
    assert isinstance(reasoned, Reasoned) and reasoned.completion_tokens == 12
    assert reasoned.queue_s >= 0 and reasoned.prefill_s > 0 and reasoned.decode_s > 0
