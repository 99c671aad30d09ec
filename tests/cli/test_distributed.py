"""`orthrus-rag workers=2`: the questions over two Ray actors give the local run's predictions and metrics, each
answer handed over as it completes."""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from orthrus_rag.cli.answering import _answer_each
from orthrus_rag.cli.run import main

SMALL = ["dataset.limit=5", "pipeline.max_tokens=6", "pipeline.num_demos=0", "pipeline.reader_num_demos=0",
         "pipeline.max_steps=2", "concurrency=2"]
SAME = ("id", "prediction", "passages", "scores", "calls", "error")


def read(folder: Path) -> tuple[dict, list[dict]]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return json.loads((folder / "results.json").read_text()), rows


@pytest.mark.ray
def test_two_workers_equal_the_local_run(ray_cluster, run_app, tiny_models, tmp_path):
    local, spread = tmp_path / "local", tmp_path / "spread"
    run_app(main, "orthrus-rag", *tiny_models, *SMALL, f"hydra.run.dir={local}")
    run_app(main, "orthrus-rag", *tiny_models, *SMALL, "workers=2", f"hydra.run.dir={spread}")
    (want, want_rows), (got, got_rows) = read(local), read(spread)
    assert [{k: r[k] for k in SAME} for r in got_rows] == [{k: r[k] for k in SAME} for r in want_rows]
    assert got["metrics"] == want["metrics"] and got["n"] == want["n"] == 5 and got["failed"] == 0
    assert got["config"]["workers"] == 2 and got["qps"] > 0
    engines = [r["engine"] for r in (got, want)]  # the counters of both engines, summed, against one engine's
    decoded, prompts = ([e["tokens"]["decode"] for e in engines],
                        [e["tokens"]["prefill"] + e["prefix_cache_hit_tokens"] for e in engines])
    assert decoded[0] == decoded[1] and prompts[0] == prompts[1]  # two engines share fewer cached prefixes


def test_workers_must_be_a_positive_integer(run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_app(main, "orthrus-rag", *tiny_models, "workers=0", f"hydra.run.dir={tmp_path}")
    assert "workers: expected a positive integer" in capsys.readouterr().err


@pytest.mark.ray
def test_a_missing_model_on_a_worker_is_a_one_line_error(ray_cluster, run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_app(main, "orthrus-rag", *tiny_models, "model.name=/nowhere/model", "workers=2",
                f"hydra.run.dir={tmp_path / 'run'}")
    err = capsys.readouterr().err
    assert "orthrus-rag: error:" in err and "/nowhere/model" in err and "Traceback" not in err


class FakeRay:
    """Just enough of ray for `_answer_each`: a ref is (actor, question), done in the order sent (`log` records
    each answer as it is produced); a dead actor's refs raise."""

    class exceptions:
        class RayActorError(Exception):
            pass

        class RayTaskError(Exception):
            pass

    def __init__(self, dead: set):
        self.dead, self.log = dead, []

    def wait(self, refs, num_returns=1):
        return refs[:1], refs[1:]

    def get(self, refs):
        (ref,) = refs
        if ref.actor.name in self.dead:
            raise self.exceptions.RayActorError(f"{ref.actor.name} died")
        self.log.append(f"{ref.actor.name} answered {ref.question}")
        return [ref.question.upper()]


class FakeActor:
    def __init__(self, name):
        self.name = name
        self.answer = type("Method", (), {"remote": lambda _, question: Ref(self, question)})()


@dataclass(frozen=True)
class Ref:
    actor: FakeActor
    question: str


def test_each_answer_is_handed_over_as_it_completes():
    ray, actors = FakeRay(dead=set()), [FakeActor("w0"), FakeActor("w1")]
    answers, alive = _answer_each(ray, actors, list("abcd"), lambda i, a: ray.log.append(f"on_answer({i}, {a})"))
    assert answers == list("ABCD") and alive == actors
    assert ray.log == ["w0 answered a", "on_answer(0, A)", "w1 answered b", "on_answer(1, B)",  # question i on
                       "w0 answered c", "on_answer(2, C)", "w1 answered d", "on_answer(3, D)"]  # actor i mod N


def test_a_dead_workers_questions_are_answered_by_survivors():
    questions, seen = list("abcdefg"), {}
    actors = [FakeActor("w0"), FakeActor("w1"), FakeActor("w2")]
    ray = FakeRay(dead={"w1"})
    answers, alive = _answer_each(ray, actors, questions, lambda i, a: seen.setdefault(i, a))
    assert [a.name for a in alive] == ["w0", "w2"] and answers == list("ABCDEFG")
    assert seen == {i: q.upper() for i, q in enumerate(questions)}  # every answer handed over once, by its index
    assert not any(line.startswith("w1") for line in ray.log)
    with pytest.raises(FakeRay.exceptions.RayActorError):  # no survivor: the run stops
        _answer_each(FakeRay(dead={"w0", "w1", "w2"}), actors, questions, None)


@pytest.mark.ray
def test_answers_reach_on_answer_while_other_questions_are_still_answered(ray_cluster):
    slow = {"a": 0.1, "b": 0.1, "c": 4.0, "d": 0.2}

    class SlowWorker:  # defined here so that Ray ships it to its workers by value
        async def answer(self, question: str) -> str:
            await asyncio.sleep(slow[question])
            return question.upper()

    worker = ray_cluster.remote(num_cpus=0)(SlowWorker)
    actors, seen = [worker.remote(), worker.remote()], {}
    ray_cluster.get([a.answer.remote("a") for a in actors])  # both started
    answers, _ = _answer_each(ray_cluster, actors, list("abcd"), lambda i, a: seen.setdefault(a, time.perf_counter()))
    for actor in actors:
        ray_cluster.kill(actor)
    assert answers == list("ABCD") and list(seen)[-1] == "C"
    assert seen["C"] - max(seen["A"], seen["B"], seen["D"]) > 3.0  # not held back until the slow one is done


@pytest.mark.parametrize("set_threads,workers,want", [(None, 2, 2), (None, 3, 1), (None, 8, 1), (3, 2, 3)])
def test_workers_share_the_cores_unless_threads_are_set(monkeypatch, set_threads, workers, want):
    from orthrus_rag.engine import EngineConfig
    from orthrus_rag.stack import StackPlan

    plan = StackPlan(EngineConfig(generator="g", embedder=None, num_threads=set_threads), None, None, {})
    assert plan.sharing_cores(4 // workers).engine.num_threads == want
    assert plan.engine.num_threads == set_threads  # the run's own plan is left as it was
