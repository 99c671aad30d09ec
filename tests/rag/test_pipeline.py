import asyncio
import time

import pytest

from orthrus_rag.engine import SamplingParams
from orthrus_rag.rag import Answer, Pipeline
from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever


class RetrieveThenReason(Pipeline):
    async def answer(self, question: str) -> Answer:
        passages = await self.retrieve(question, 2)
        text = await self.reason(f"Q: {question}", SamplingParams(max_tokens=4))
        return Answer(question, text, passages)


class Echo(Pipeline):
    async def answer(self, question: str) -> Answer:
        return Answer(question, await self.reason(question, SamplingParams()))


class Calls(Echo):
    async def answer(self, question: str) -> Answer:
        first = await super().answer(question)
        await self.reason("again", SamplingParams())
        return first


def echo(delay=0.0):
    return ScriptedReasoner(lambda text: text.upper(), delay=delay)


async def test_answer_records_the_trace_in_order():
    pipeline = RetrieveThenReason(ScriptedRetriever(), ScriptedReasoner(["Rome"]))
    result = await pipeline.answer("where?")
    assert result.prediction == "Rome" and [p.id for p in result.passages] == ["where?#0", "where?#1"]
    assert [e.kind for e in result.trace] == ["retrieve", "reason"]
    retrieve, reason = result.trace
    assert retrieve.input == "where?" and retrieve.output == "where? 0 | where? 1"
    assert reason.input == "Q: where?" and reason.output == "Rome"
    assert reason.prompt_tokens == 2 and reason.completion_tokens == 1
    assert 0 <= retrieve.start_s <= retrieve.end_s <= reason.start_s <= reason.end_s <= result.latency_s
    assert result.num_calls == {"retrieve": 1, "reason": 1}


async def test_each_answer_gets_its_own_trace():
    pipeline = Echo(None, echo())
    first, second = await pipeline.answer("a"), await pipeline.answer("b")
    assert [e.input for e in first.trace] == ["a"] and [e.input for e in second.trace] == ["b"]


async def test_nested_answer_calls_share_one_trace():
    result = await Calls(None, echo()).answer("q")
    assert [e.input for e in result.trace] == ["q", "again"]


async def test_retrieve_without_retriever_is_a_clear_error():
    with pytest.raises(RuntimeError, match="without a retriever"):
        await RetrieveThenReason(None, echo()).answer("q")


async def test_reason_without_reasoner_is_a_clear_error():
    with pytest.raises(RuntimeError, match="without a reasoner"):
        await RetrieveThenReason(ScriptedRetriever(), None).answer("q")


async def test_answer_must_return_an_answer():
    class Wrong(Pipeline):
        async def answer(self, question):
            return question
    with pytest.raises(TypeError, match="must return an Answer"):
        await Wrong(None, echo()).answer("q")


async def test_run_keeps_input_order_and_caps_concurrency():
    reasoner = ScriptedReasoner(lambda text: text.upper(), delay=0.01)
    questions = [f"q{i}" for i in range(20)]
    answers = await Echo(None, reasoner).run(questions, concurrency=3, progress=False)
    assert [a.prediction for a in answers] == [q.upper() for q in questions]
    assert reasoner.in_flight.peak == 3
    assert all(a.latency_s >= 0.01 for a in answers)
    assert max(a.queue_s for a in answers) > 0.02  # later questions waited for a slot


async def test_run_without_a_limit_starts_everything_at_once():
    reasoner = echo(delay=0.01)
    await Echo(None, reasoner).run([str(i) for i in range(12)], concurrency=None, progress=False)
    assert reasoner.in_flight.peak == 12


async def test_run_follows_the_arrival_schedule():
    started = {}

    class Stamp(Pipeline):
        async def answer(self, question):
            started[question] = time.perf_counter() - t0
            return Answer(question, question)

    arrivals = [0.0, 0.3, 0.1, 0.2]
    t0 = time.perf_counter()
    answers = await Stamp(None, echo()).run(["a", "b", "c", "d"], arrivals=arrivals, progress=False)
    assert [a.prediction for a in answers] == ["a", "b", "c", "d"]
    for question, offset in zip("abcd", arrivals):
        assert offset <= started[question] < offset + 0.09
    assert sorted(started, key=started.get) == ["a", "c", "d", "b"]


async def test_run_records_a_failing_questions_error_and_answers_the_rest():
    class Fails(Pipeline):
        async def answer(self, question):
            if question == "bad":
                raise ValueError("boom")
            return Answer(question, question.upper())

    answers = await Fails(None, echo()).run(["a", "bad", "c"], progress=False)
    assert [a.prediction for a in answers] == ["A", "", "C"]
    assert [a.error for a in answers] == [None, "ValueError: boom", None]
    assert answers[1].question == "bad" and answers[1].latency_s >= 0


async def test_cancelling_a_run_cancels_every_question_in_flight():
    class Slow(Pipeline):
        async def answer(self, question):
            await asyncio.sleep(10)

    start = time.perf_counter()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(Slow(None, echo()).run(["a", "b", "c"], progress=False), 0.2)
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("kwargs, error", [({"concurrency": 0}, ValueError), ({"arrivals": [0.0]}, ValueError),
                                           ({"arrivals": [0.0, -1.0]}, ValueError)])
async def test_run_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        await Echo(None, echo()).run(["a", "b"], progress=False, **kwargs)


def test_settings_lists_plain_public_attributes():
    pipeline = Echo(None, echo())
    pipeline.k, pipeline._hidden = 4, 1
    assert pipeline.settings() == {"k": 4}
