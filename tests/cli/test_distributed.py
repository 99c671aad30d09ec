"""`orthrus-rag workers=2`: the questions over two Ray actors give the local run's predictions and metrics."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from orthrus_rag.cli.distributed import merged
from orthrus_rag.cli.answering import RunOutput
from orthrus_rag.cli.run import main
from tests.cli.conftest import run_app, tiny_models  # noqa: F401 - the experiment app's fixtures

pytestmark = pytest.mark.ray
SMALL = ["dataset.limit=5", "pipeline.max_tokens=6", "pipeline.num_demos=0", "pipeline.reader_num_demos=0",
         "pipeline.max_steps=2", "concurrency=2"]
SAME = ("id", "prediction", "passages", "scores", "calls", "error")


def read(folder: Path) -> tuple[dict, list[dict]]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    return json.loads((folder / "results.json").read_text()), rows


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


def test_shards_merge_back_in_question_order():
    questions = list("abcde")
    shards = [RunOutput(questions[0::2], ["A", "C", "E"], 1.0, {"steps": 3, "tokens": {"decode": 5}, "policy": "p"}),
              RunOutput(questions[1::2], ["B", "D"], 2.0, {"steps": 4, "tokens": {"decode": 1}, "policy": "p"})]
    run = merged(questions, shards, 2.5)
    assert run.answers == ["A", "B", "C", "D", "E"] and run.wall_s == 2.5
    assert run.engine_stats == {"steps": 7, "tokens": {"decode": 6}, "policy": "p"}


def test_workers_must_be_a_positive_integer(run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_app(main, "orthrus-rag", *tiny_models, "workers=0", f"hydra.run.dir={tmp_path}")
    assert "workers: expected a positive integer" in capsys.readouterr().err


def test_a_missing_model_on_a_worker_is_a_one_line_error(ray_cluster, run_app, tiny_models, tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_app(main, "orthrus-rag", *tiny_models, "model.name=/nowhere/model", "workers=2",
                f"hydra.run.dir={tmp_path / 'run'}")
    err = capsys.readouterr().err
    assert "orthrus-rag: error:" in err and "/nowhere/model" in err and "Traceback" not in err


class FakeRay:
    """Just enough of ray for `_answer_shards`: refs are (actor, questions); a dead actor's refs raise."""

    class exceptions:
        class RayActorError(Exception):
            pass

        class RayTaskError(Exception):
            pass

    def __init__(self, dead: set):
        self.dead = dead

    def wait(self, refs, num_returns=1):
        return refs[:1], refs[1:]

    def get(self, refs):
        (ref,) = refs
        actor, questions = ref.actor, list(ref.questions)
        if actor.name in self.dead:
            raise self.exceptions.RayActorError(f"{actor.name} died")
        return [RunOutput(questions, [q.upper() for q in questions], 1.0, {"by": actor.name})]


class FakeActor:
    def __init__(self, name):
        self.name = name
        self.answer = type("Method", (), {"remote": lambda _, questions: Ref(self, tuple(questions))})()


@dataclass(frozen=True)
class Ref:
    actor: FakeActor
    questions: tuple


def test_a_dead_workers_shard_is_answered_by_a_survivor():
    from orthrus_rag.cli.distributed import _answer_shards

    questions, seen = list("abcdefg"), {}
    actors = [FakeActor("w0"), FakeActor("w1"), FakeActor("w2")]
    shards, alive = _answer_shards(FakeRay(dead={"w1"}), actors, questions, lambda i, a: seen.setdefault(i, a))
    assert [a.name for a in alive] == ["w0", "w2"] and set(shards) == {0, 1, 2}
    assert shards[1].answers == ["B", "E"] and shards[1].engine_stats["by"] in ("w0", "w2")
    assert seen == {i: q.upper() for i, q in enumerate(questions)}  # every answer handed over once, by its index
    assert merged(questions, [shards[i] for i in range(3)], 1.0).answers == list("ABCDEFG")


@pytest.mark.parametrize("set_threads,workers,want", [(None, 2, 2), (None, 3, 1), (None, 8, 1), (3, 2, 3)])
def test_workers_share_the_cores_unless_threads_are_set(monkeypatch, set_threads, workers, want):
    from orthrus_rag.engine import EngineConfig
    from orthrus_rag.stack import StackPlan

    plan = StackPlan(EngineConfig(generator="g", embedder=None, num_threads=set_threads), None, None, {})
    assert plan.sharing_cores(4 // workers).engine.num_threads == want
    assert plan.engine.num_threads == set_threads  # the run's own plan is left as it was
