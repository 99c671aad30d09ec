"""Ray Serve replaces a replica whose engine cannot serve: Ray Serve's health probe calls the replica's
check_health, which raises what the engine's health() reports."""
from __future__ import annotations

import threading

import httpx
import pytest

from orthrus_rag.engine import EngineConfig
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.serving.ray_serve import ReplicaSpec
from orthrus_rag.serving.settings import ServerSettings
from orthrus_rag.stack import StackPlan
from tests.serving.test_ray_serve import free_port, replica_names, wait_until

pytestmark = pytest.mark.ray
APP = "orthrus-rag-health"


def test_a_replica_whose_engine_stalls_is_replaced(ray_cluster, tiny_llama_dir, tiny_encoder_dir):
    """A stall bound far below one step's time: while the replica works, health() reports its engine stalled, so the
    probe fails and Ray Serve starts a replacement (the same path as a dead engine thread)."""
    from ray import serve

    from orthrus_rag.serving.ray_serve import deploy, undeploy

    engine = EngineConfig(generator=str(tiny_llama_dir), embedder=str(tiny_encoder_dir), dtype="float32",
                          num_threads=1, stall_timeout_s=1e-6)
    settings = ServerSettings(port=free_port(), replicas=1, num_cpus=0.5, log_level="warning")
    deploy(ReplicaSpec(StackPlan(engine, EmbeddingRecipe(), None, {}), None), settings, APP)
    url, stop = f"http://127.0.0.1:{settings.port}", threading.Event()
    first = replica_names(APP)

    def load() -> None:  # keeps whichever replica is up busy
        while not stop.is_set():
            try:
                httpx.post(f"{url}/v1/completions", timeout=30,
                           json={"prompt": "Count:", "max_tokens": 200, "ignore_eos": True})
            except httpx.HTTPError:
                pass

    worker = threading.Thread(target=load, daemon=True)
    try:
        assert len(first) == 1
        worker.start()
        wait_until(lambda: set(replica_names(APP)) - set(first), 120, "the unhealthy replica was not replaced")
    finally:
        stop.set()
        worker.join(60)
        undeploy(APP)
        serve.shutdown()
