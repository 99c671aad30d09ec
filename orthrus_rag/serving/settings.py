"""Server settings: the Hydra `server` group (conf/server/*.yaml) validated into typed models."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

API_KEY_ENV = "ORTHRUS_RAG_API_KEY"


class EmbeddingSettings(BaseModel):
    """How `/v1/embeddings` pools for the embedder's served name (the Hydra `embedder` group)."""

    model_config = ConfigDict(extra="forbid")

    pooling: Literal["mean", "last", "cls"] = "mean"
    normalize: bool = True
    model: Literal["backbone"] | None = None  # None: the co-located embedder; "backbone": the generator's layers


class RagSettings(BaseModel):
    """The RAG pipelines behind `/v1/rag`; they retrieve as the `index` group says, as experiments do."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # false: /v1/rag answers 501
    # name -> a `pipeline` group entry (conf/serve.yaml fills it)
    pipelines: dict[str, dict[str, Any]] = Field(default_factory=dict)
    pipeline: str = "standard_rag"  # used when a request names none; one of `pipelines` (empty: it alone is served)
    # .jsonl/.json passages; None: the embedded demo corpus (indexed and searched as the `index` group says)
    corpus: str | None = None

    @field_validator("pipeline")
    @classmethod
    def _served(cls, pipeline: str, info: ValidationInfo) -> str:
        """`pipelines` is declared first, so it is validated (or missing, when it is wrong) by now."""
        served = info.data.get("pipelines")
        if served and pipeline not in served:
            raise PydanticCustomError("pipeline_not_served", "should be one of server.rag.pipelines {served}",
                                      {"served": sorted(served)})
        return pipeline


class UiSettings(BaseModel):
    """The web page at `/` (orthrus_rag/serving/web) and the example questions it offers."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # false: no page at / (the API is unchanged)
    public: bool = False  # with server.api_key: true serves the page's files without the key (its API calls need it)
    dataset: str | None = None  # a question file (.jsonl or .json) offered beside the demo questions; None: none
    dataset_split: Literal["dev", "test", "all"] = "dev"  # the split of `dataset` offered
    dataset_limit: int | None = Field(200, ge=1)  # the first N questions of the split; None: all


class ServerSettings(BaseModel):
    """The `server` group: each setting's one default and meaning (conf/server/default.yaml starts from them,
    orthrus_rag/serving/cli.py registers them; docs/serving.md says what each guards against); override any as
    `server.<field>=<value>`."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"  # loopback only; 0.0.0.0 exposes the server (then set an api_key)
    port: int = Field(8000, ge=0, le=65535)
    # None: no key unless $ORTHRUS_RAG_API_KEY is set (`from_config`); with a key every route but /health needs
    # 'Authorization: Bearer <key>'; an empty key is refused
    api_key: str | None = None
    # Host headers answered (others get 400: no DNS rebinding); None: localhost, 127.0.0.1, ::1 and `host` (for
    # 0.0.0.0 or ::, also this machine's name and addresses: hosts.py); a list such as [rag.example.com,
    # '*.internal'], or ['*'] for any host
    allowed_hosts: list[str] | None = None
    metrics_public: bool = False  # with an api_key: true serves /metrics without it (a scraper without the key)
    max_body_bytes: int = Field(1_048_576, ge=1)  # larger request bodies get 413; a body that is not JSON gets 415
    max_embedding_inputs: int = Field(256, ge=1)  # inputs per /v1/embeddings request (OpenAI takes 2048); 400 beyond
    max_chat_messages: int = Field(256, ge=1)  # messages per /v1/chat/completions request; 400 beyond
    default_max_tokens: int = Field(256, ge=1)  # for a request without max_tokens (less if its prompt leaves less room)
    served_model_name: str | None = None  # None: model.name (a folder by its last component)
    served_embedder_name: str | None = None  # None: embedder.name (a folder by its last component)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"  # uvicorn's levels
    timeout_graceful_shutdown: float | None = 30.0  # seconds in-flight requests get to finish on shutdown
    # seconds a /v1 request may take (a request's own `timeout` field can shorten it); past it the request is stopped
    # in the engine and answered 504; None: no deadline
    request_timeout_s: float | None = Field(600.0, gt=0)
    # a response (a stream) whose client reads nothing for this long is stopped in the engine and its connection
    # closed; None: wait for ever
    stream_write_timeout_s: float | None = Field(60.0, gt=0)
    # /v1 requests in flight per API key (per client address when the server has no key, whatever token a client
    # sends); 429 beyond; None: no limit (listings such as /v1/models and /v1/engine/steps are not counted)
    max_concurrent_per_key: int | None = Field(256, ge=1)
    # open connections at once, server-wide (uvicorn's limit_concurrency); 503 beyond; None: no limit (one process
    # only: Ray Serve's proxy has its own limits)
    max_connections: int | None = Field(1024, ge=1)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)  # from the `embedder` group (cli.py)
    rag: RagSettings = Field(default_factory=RagSettings)
    ui: UiSettings = Field(default_factory=UiSettings)  # the web page at / (docs/web.md)
    # Scale-out (docs/serving.md: Scaling out): replicas > 1 serves the same API on Ray Serve, one ingress with these
    # routes and `replicas` engine replicas, each with its own engine and /v1/rag index; /metrics sums their counters
    replicas: int = Field(1, ge=1)  # engine replicas; 1: this process alone, no Ray
    ray_address: str | None = None  # the Ray cluster to join (auto, ray://head:10001, head:6379); None: a local one
    num_cpus: float = Field(1.0, ge=0)  # CPUs Ray reserves per replica (its torch threads unless runtime sets them)
    num_gpus: float = Field(0.0, ge=0)  # GPUs per replica: 1 puts one engine on each accelerator

    @field_validator("api_key")
    @classmethod
    def _not_blank(cls, key: str | None) -> str | None:
        if key is not None and not key.strip():
            raise PydanticCustomError("blank_api_key", "an empty or blank API key (server.api_key or "
                                                       "$ORTHRUS_RAG_API_KEY) would let anyone in: give a real key, "
                                                       "or none at all")
        return key

    @field_validator("allowed_hosts")
    @classmethod
    def _some_hosts(cls, hosts: list[str] | None) -> list[str] | None:
        if hosts is not None and not [h for h in hosts if h.strip()]:
            raise PydanticCustomError("no_hosts", "should name at least one host ('*' for any), or be null for the "
                                                  "loopback names and the bound address")
        return hosts

    @classmethod
    def from_config(cls, values: dict[str, Any]) -> ServerSettings:
        """Settings from a plain dict (e.g. the resolved Hydra `server` group); the API key falls back to the env."""
        if values.get("api_key") is None and os.environ.get(API_KEY_ENV) is not None:
            values = {**values, "api_key": os.environ[API_KEY_ENV]}
        return cls.model_validate(values)


def served_name(name_or_path: str | None) -> str | None:
    """The name clients use for a model: a shipped name as is, a local folder by its last component."""
    return Path(name_or_path).name if name_or_path and os.sep in name_or_path else name_or_path
