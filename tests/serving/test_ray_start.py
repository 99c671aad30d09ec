"""Ray Serve that cannot start says why in one line."""
from __future__ import annotations

import socket

import pytest

from orthrus_rag.engine import EngineConfig
from orthrus_rag.rag.embedding import EmbeddingRecipe
from orthrus_rag.serving.ray_serve import ReplicaSpec
from orthrus_rag.serving.settings import ServerSettings
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan

pytestmark = pytest.mark.ray
APP = "orthrus-rag-start"


def test_a_port_in_use_is_a_clear_error(ray_cluster, tiny_llama_dir, tiny_encoder_dir):
    from ray import serve

    from orthrus_rag.serving.ray_serve import deploy, undeploy

    engine = EngineConfig(generator=str(tiny_llama_dir), embedder=str(tiny_encoder_dir), dtype="float32",
                          num_threads=1)
    serve.shutdown()  # no Serve left running by another test: its HTTP proxy would be kept, on its own port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = ServerSettings(port=port, replicas=2, num_cpus=0.5, log_level="warning")
        try:
            with pytest.raises(UserError, match=rf"cannot listen on 127\.0\.0\.1:{port} .*Failed to bind.*"
                                                r"server\.port"):
                deploy(ReplicaSpec(StackPlan(engine, EmbeddingRecipe(), None, {}), None), settings, APP)
        finally:
            undeploy(APP)
            serve.shutdown()
