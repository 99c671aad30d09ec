"""`orthrus-rag-serve server.replicas=N` (N > 1): the same API as a Ray Serve application (docs/serving.md#scaling-out):
an ingress (OpenAIIngress, no CPU reserved: the FastAPI app of `create_app` over a ReplicaClient) in front of N
EngineReplicas (one AsyncEngine each, with its own /v1/rag index and pipelines). Each replica pushes its counters and
new engine steps to a stats actor (StatsBoard) every STATS_PERIOD_S; the ingress polls it for `/metrics`, `/health`
and `/v1/engine/steps`."""
from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import ray
from prometheus_client.core import GaugeMetricFamily, Metric
from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle

from orthrus_rag.cluster import index_lock, summed_stats
from orthrus_rag.engine import EmbedOutput, GenerateOutput, PoolingParams, SamplingParams
from orthrus_rag.engine.output import StepOutput
from orthrus_rag.engine.protocol import Prompt
from orthrus_rag.engine.step_log import StepRecord, newer_than
from orthrus_rag.rag import Answer
from orthrus_rag.serving.errors import APIError
from orthrus_rag.serving.examples import Examples
from orthrus_rag.serving.rag_service import build_rag
from orthrus_rag.serving.settings import ServerSettings
from orthrus_rag.serving.state import RagFn
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan

APP_NAME = "orthrus-rag"
NAMESPACE = "orthrus_rag"  # where the stats actor lives
STATS_PERIOD_S = 0.5
STATS_MAX_AGE_S = 3.0
STEPS_KEPT = 256  # engine steps of each replica the stats actor keeps for GET /v1/engine/steps
INGRESS_MAX_ONGOING = 4096  # HTTP requests in flight on the ingress (Ray Serve's default, 5, would queue the rest)
REPLICA_MAX_ONGOING = 1024  # calls in flight on one replica: the engine batches them (runtime.max_waiting bounds it)
HEALTH_CHECK_PERIOD_S = 2.0
CONSTRUCTOR_RETRIES = 2  # a replica that cannot start is almost always a config mistake: fail fast and say why
UNAVAILABLE = (RayActorError, ReplicaUnavailableError, DeploymentUnavailableError)  # the replica died or went away


# ---- errors -------------------------------------------------------------------------------------------------------
def translated(err: BaseException) -> BaseException:
    """The error a replica call failed with, as the routes know it: the replica's own exception (an EngineError,
    a RagInputError, ...) unwrapped from Ray's, or a 503 when the replica is gone."""
    if isinstance(err, RayTaskError) and isinstance(err.cause, Exception):
        return translated(err.cause)
    if isinstance(err, UNAVAILABLE):
        return APIError(503, f"the engine replica serving this request stopped ({type(err).__name__}); Ray Serve is "
                             "replacing it: retry the request", "server_error", code="replica_unavailable")
    return err


@contextlib.contextmanager
def _translating() -> Iterator[None]:
    try:
        yield
    except (RayTaskError, *UNAVAILABLE) as err:
        raise translated(err) from err


# ---- replica counters -----------------------------------------------------------------------------------------------
@ray.remote(num_cpus=0, max_restarts=-1)
class StatsBoard:
    """The latest `engine.stats()` of each replica, with when it came, and its last STEPS_KEPT engine steps; Ray
    restarts it when it dies (empty: the replicas fill it again within a STATS_PERIOD_S)."""

    def __init__(self):
        self.rows: dict[str, tuple[float, dict]] = {}
        self.steps: dict[str, deque[StepRecord]] = {}

    def put(self, replica: str, stats: dict, steps: list[StepRecord] = ()) -> None:
        self.rows[replica] = (time.monotonic(), stats)
        self.steps.setdefault(replica, deque(maxlen=STEPS_KEPT)).extend(steps)

    def live(self, max_age_s: float) -> tuple[dict[str, dict], dict[str, list[StepRecord]]]:
        """The stats of each replica heard from within `max_age_s`, and its last steps, oldest first."""
        now = time.monotonic()
        self.rows = {r: row for r, row in self.rows.items() if now - row[0] <= max_age_s}
        self.steps = {r: steps for r, steps in self.steps.items() if r in self.rows}
        return {r: stats for r, (_, stats) in self.rows.items()}, {r: list(steps) for r, steps in self.steps.items()}


def board_name(app_name: str) -> str:
    return f"{app_name}-stats"


# ---- the ingress's engine -------------------------------------------------------------------------------------------
class ReplicaClient:
    """The engine as the server sees it (a ServedEngine), each call forwarded to one engine replica through Ray
    Serve; also the Prometheus collector of the per-replica families. Made in a running event loop: it polls the
    stats actor from then on, until `shutdown`."""

    def __init__(self, handle: DeploymentHandle, spec: ReplicaSpec, info: ReplicaInfo, board: Any, live: tuple):
        self.handle, self.config, self.board = handle, spec.plan.engine, board
        self.tokenizer, self._dims, self.context_length = info.tokenizer, info.embedding_dims, info.context_length
        self.replica_stats, self._steps = live  # as StatsBoard.live returns them, refreshed by _poll_stats
        self._poller = asyncio.get_running_loop().create_task(self._poll_stats())

    async def generate(self, prompt: Prompt, params: SamplingParams | None = None) -> GenerateOutput:
        return await self._call(self.handle.generate.remote(prompt, params or SamplingParams()))

    async def embed(self, input: Prompt, params: PoolingParams | None = None) -> EmbedOutput:
        return await self._call(self.handle.embed.remote(input, params or PoolingParams()))

    async def rag(self, question: str, pipeline: str | None) -> Answer:
        return await self._call(self.handle.rag.remote(question, pipeline))

    async def stream_outputs(self, prompt: Prompt, params: SamplingParams | None = None) -> AsyncIterator[StepOutput]:
        response = self.handle.options(stream=True).stream_outputs.remote(prompt, params or SamplingParams())
        finished = False
        try:
            with _translating():
                async for out in response:
                    finished = out.finished
                    yield out
        finally:
            if not finished:  # the reader went away: stop the replica's stream, which aborts the engine request
                response.cancel()

    def embedding_dim(self, model: str | None = None) -> int:
        return self._dims[model]

    def health(self) -> str | None:
        """None while some replica reports its counters (Ray Serve replaces a replica whose check_health fails)."""
        return None if self.replica_stats else f"no engine replica has reported in the last {STATS_MAX_AGE_S:.0f} s"

    def stats(self) -> dict:
        """The replicas' counters, summed, as of the last poll (every STATS_PERIOD_S)."""
        return summed_stats(list(self.replica_stats.values()))

    def step_logs(self, since: int = 0, limit: int | None = None) -> dict[str, list[StepRecord]]:
        """Each replica's last engine steps with an id above `since` (the newest `limit`), as of the last poll."""
        return {name: newer_than(steps, since, limit) for name, steps in self._steps.items()}

    def collect(self) -> Iterator[Metric]:
        """`orthrus_replicas`, and per replica `orthrus_replica_running_requests` and `orthrus_replica_engine_steps`."""
        yield GaugeMetricFamily("orthrus_replicas", "Engine replicas reporting their counters", len(self.replica_stats))
        running = GaugeMetricFamily("orthrus_replica_running_requests", "Requests running on each replica",
                                    labels=["replica"])
        steps = GaugeMetricFamily("orthrus_replica_engine_steps", "Engine steps run by each replica",
                                  labels=["replica"])
        for replica, stats in sorted(self.replica_stats.items()):
            running.add_metric([replica], stats.get("running", 0))
            steps.add_metric([replica], stats.get("steps", 0))
        yield running
        yield steps

    def shutdown(self) -> None:
        """Stop polling, from any thread (the replicas' engines stop when Ray Serve deletes the application)."""
        self._poller.get_loop().call_soon_threadsafe(self._poller.cancel)

    async def _poll_stats(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a restarting stats actor: keep the last counters
                self.replica_stats, self._steps = await self.board.live.remote(STATS_MAX_AGE_S)
            await asyncio.sleep(STATS_PERIOD_S)

    @staticmethod
    async def _call(response) -> Any:
        try:
            with _translating():
                return await response
        except asyncio.CancelledError:  # the route was cancelled (client gone): cancel the call on its replica
            response.cancel()
            raise


# ---- the deployments ------------------------------------------------------------------------------------------------
@dataclass
class ReplicaSpec:
    """What every replica builds: the planned engine and `/v1/rag` stack, and the pipeline a request that names
    none gets (None: `/v1/rag` is off)."""

    plan: StackPlan
    rag: str | None


@dataclass
class ReplicaInfo:
    """What the ingress needs to know of the engines behind it (every replica has the same)."""

    tokenizer: Any  # the generator's tokenizer (its chat template renders chat prompts on the ingress)
    embedding_dims: dict[str | None, int]  # embedding size by PoolingParams.model: None and "backbone"
    context_length: int  # the generator's, in tokens


class EngineReplica:
    """One engine replica: an AsyncEngine and the `/v1/rag` pipelines over it, as the ingress calls them; it pushes
    its counters to the stats actor. Each method is one engine call; when the ingress cancels a call (its client went
    away), Ray Serve cancels the coroutine running here, and the engine aborts the request on that cancellation
    (`AsyncEngine` aborts whatever its caller stops waiting for), freeing its KV blocks."""

    async def __init__(self, spec: ReplicaSpec, board: str):  # Ray Serve awaits an async constructor
        self.engine = spec.plan.start_local_engine()
        self._rag: RagFn | None = None
        if spec.rag is not None:
            with index_lock():  # the index is loaded, or built once per machine
                self._rag = await build_rag(self.engine, spec.plan, spec.rag)
        self._board = ray.get_actor(board, namespace=NAMESPACE)
        self._name = ray.get_runtime_context().get_actor_name().rsplit("#", 1)[-1]
        self._pusher = asyncio.get_running_loop().create_task(self._push_stats())

    def info(self) -> ReplicaInfo:
        dims = {model: self.engine.embedding_dim(model) for model in (None, "backbone")}
        return ReplicaInfo(self.engine.tokenizer, dims, self.engine.context_length)

    async def generate(self, prompt: Prompt, params: SamplingParams) -> GenerateOutput:
        return await self.engine.generate(prompt, params)

    async def stream_outputs(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[StepOutput]:
        async with contextlib.aclosing(self.engine.stream_outputs(prompt, params)) as outputs:
            async for out in outputs:  # closed here when the ingress stops reading: the engine aborts the request
                yield out

    async def embed(self, input: Prompt, params: PoolingParams) -> EmbedOutput:
        return await self.engine.embed(input, params)

    async def rag(self, question: str, pipeline: str | None) -> Answer:
        """Called by the ingress only when the spec serves RAG."""
        return await self._rag(question, pipeline)

    def check_health(self) -> None:
        """Ray Serve's periodic probe: raising marks the replica unhealthy, and Ray Serve replaces it."""
        reason = self.engine.health()
        if reason is not None:
            raise RuntimeError(f"the engine replica cannot serve: {reason}")

    async def _push_stats(self) -> None:
        pushed = 0  # the last step id sent
        while True:
            with contextlib.suppress(Exception):
                steps = self.engine.steps(pushed, STEPS_KEPT)
                await self._board.put.remote(self._name, self.engine.stats(), steps)
                pushed = steps[-1].id if steps else pushed
            await asyncio.sleep(STATS_PERIOD_S)

    def __del__(self) -> None:  # Ray Serve calls it when the replica is stopped
        if hasattr(self, "_pusher"):
            self._pusher.cancel()
        if hasattr(self, "engine"):
            self.engine.shutdown()


class OpenAIIngress:
    """The ingress deployment: the project's FastAPI app over a ReplicaClient, built once every replica is up (so
    that a client who waits for /health finds them all)."""

    def __init__(self, engine: DeploymentHandle, spec: ReplicaSpec, settings: ServerSettings, board: str,
                 examples: Examples | None = None):
        self.engine, self.spec, self.settings, self.board, self.examples = engine, spec, settings, board, examples

    async def __serve_build_asgi_app__(self):
        from orthrus_rag.serving.app import create_app

        board = ray.get_actor(self.board, namespace=NAMESPACE)
        while len((live := await board.live.remote(STATS_MAX_AGE_S))[0]) < self.settings.replicas:
            await asyncio.sleep(STATS_PERIOD_S)
        client = ReplicaClient(self.engine, self.spec, await self.engine.info.remote(), board, live)
        app = create_app(client, self.settings, client.rag if self.spec.rag else None, examples=self.examples)
        app.state.server.metrics.registry.register(client)
        return app


def deploy(spec: ReplicaSpec, settings: ServerSettings, app_name: str = APP_NAME,
           examples: Examples | None = None) -> None:
    """Start Ray Serve's HTTP proxy on server.host:server.port and run the application (in a connected Ray): the
    ingress over `settings.replicas` engine replicas, each with `server.num_cpus` torch threads unless
    runtime.num_threads is set; `examples` travel to the ingress as loaded here (None: the ingress loads them as
    `settings.ui` says)."""
    # server.log_level for Ray Serve's logs (uvicorn's `trace` as debug, the most Ray has); one line per request (its
    # access log) at info and debug, as uvicorn
    level = "DEBUG" if settings.log_level == "trace" else settings.log_level.upper()
    logs = {"log_level": level, "enable_access_log": level in ("DEBUG", "INFO")}
    StatsBoard.options(name=board_name(app_name), namespace=NAMESPACE, lifetime="detached",
                       get_if_exists=True).remote()
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port}, logging_config=logs)
    except RuntimeError as error:  # Ray Serve's HTTP proxy did not start
        raise UserError(f"Ray Serve cannot listen on {settings.host}:{settings.port} ({translated(error)}); is "
                        "another server on server.port?") from error
    spec = ReplicaSpec(spec.plan.sharing_cores(int(settings.num_cpus)), spec.rag)
    options = {"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus}
    engines = serve.deployment(EngineReplica, name="EngineReplica", num_replicas=settings.replicas,
                               ray_actor_options=options, max_ongoing_requests=REPLICA_MAX_ONGOING,
                               logging_config=logs, max_constructor_retry_count=CONSTRUCTOR_RETRIES,
                               health_check_period_s=HEALTH_CHECK_PERIOD_S,
                               graceful_shutdown_timeout_s=settings.timeout_graceful_shutdown or 0)
    ingress = serve.deployment(serve.ingress()(OpenAIIngress), name="Ingress", ray_actor_options={"num_cpus": 0},
                               max_ongoing_requests=INGRESS_MAX_ONGOING, logging_config=logs)
    application = ingress.bind(engines.bind(spec, board_name(app_name)), spec, settings, board_name(app_name), examples)
    try:
        serve.run(application, name=app_name, route_prefix="/")
    except RuntimeError as error:  # a replica failed to start
        raise UserError(f"the engine replicas did not start: {_failure(app_name) or error}") from error


def _failure(app_name: str) -> str | None:
    """The error a failed deployment's replica raised (the last line of its message): a UserError's own message,
    or the exception with a hint."""
    with contextlib.suppress(Exception):
        for deployment in serve.status().applications[app_name].deployments.values():
            lines = [line.strip() for line in deployment.message.splitlines() if line.strip()]
            if deployment.status == "DEPLOY_FAILED" and lines:
                user_error = f"{UserError.__module__}.{UserError.__name__}: "
                return lines[-1].removeprefix(user_error) if lines[-1].startswith(user_error) else (
                    f"{lines[-1]} (the replicas' logs above say more; check model.name, embedder.name, runtime.*)")
    return None


def undeploy(app_name: str = APP_NAME) -> None:
    """Delete the application (its replicas shut their engines down) and its stats actor."""
    serve.delete(app_name)
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(board_name(app_name), namespace=NAMESPACE))


def serve_on_ray(spec: ReplicaSpec, settings: ServerSettings, examples: Examples | None = None) -> None:
    """Join (or start) the Ray cluster, serve until SIGINT or SIGTERM, then delete the application."""
    from orthrus_rag.cluster import connect

    connect(settings.ray_address)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            deploy(spec, settings, examples=examples)
            print(f"serving {settings.replicas} engine replicas on Ray Serve at http://{settings.host}:{settings.port}"
                  " (Ctrl-C stops)", flush=True)
            while True:
                time.sleep(3600)
    finally:
        signal.signal(signal.SIGTERM, previous)
        undeploy()
