"""The one engine contract of the server: AsyncEngine and the Ray Serve replica client both implement every member
of ServedEngine, and ServedEngine names every member of the engine that the serving code uses."""
import asyncio
import re
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from orthrus_rag.engine import EngineConfig
from orthrus_rag.serving.ray_serve import ReplicaClient, ReplicaInfo
from orthrus_rag.serving.served_engine import ServedEngine

SERVING = Path(__file__).resolve().parents[2] / "orthrus_rag" / "serving"
MEMBERS = sorted(typing._get_protocol_attrs(ServedEngine))  # typing.get_protocol_members from Python 3.13 on


class Board:
    """The stats actor, as the client polls it."""

    def __init__(self):
        self.live = SimpleNamespace(remote=self._live)

    async def _live(self, max_age_s):
        return {}, {}


async def replica_client() -> ReplicaClient:
    spec = SimpleNamespace(plan=SimpleNamespace(engine=EngineConfig()))
    return ReplicaClient(None, spec, ReplicaInfo(tokenizer=None, embedding_dims={None: 8}, context_length=64),
                         Board(), ({}, {}))


def test_the_contract_holds_what_serving_needs():
    assert {"tokenizer", "generate", "embed", "stats", "stream_outputs", "embedding_dim", "context_length",
            "config", "health", "step_logs", "shutdown"} <= set(MEMBERS)


def test_the_local_engine_implements_it(engine):
    assert isinstance(engine, ServedEngine)
    assert list(engine.step_logs()) == ["engine"]


async def test_the_replica_client_implements_it():
    client = await replica_client()
    assert isinstance(client, ServedEngine)
    client.shutdown()  # stops its poll of the stats actor
    await asyncio.wait([client._poller], timeout=5)
    assert client._poller.cancelled()


@pytest.mark.parametrize("missing", MEMBERS)
async def test_an_engine_lacking_any_member_does_not_pass(missing):
    client = await replica_client()
    members = {name: getattr(client, name) for name in MEMBERS if name != missing}
    client.shutdown()
    assert not isinstance(SimpleNamespace(**members), ServedEngine)


def test_serving_uses_no_engine_member_outside_the_contract():
    """Every `engine.<member>` the app, routes and middlewares read (ray_serve.py's replicas hold the AsyncEngine
    itself, not the contract) is a member of ServedEngine."""
    used = set()
    for path in SERVING.rglob("*.py"):
        if path.name != "ray_serve.py":
            used |= set(re.findall(r"(?<![\w.])(?:state\.|self\.)?engine\.(\w+)", path.read_text(encoding="utf-8")))
    assert used, "the pattern no longer finds the serving code's engine calls"
    assert used <= set(MEMBERS), f"members used but not in ServedEngine: {sorted(used - set(MEMBERS))}"
