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

    enabled: bool = True
    pipelines: dict[str, dict[str, Any]] = Field(default_factory=dict)  # name -> the pipeline's own settings
    pipeline: str = "standard_rag"  # used when a request names none; one of `pipelines` (empty: it alone is served)
    corpus: str | None = None  # a .jsonl/.json corpus; None: the embedded demo corpus

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
    dataset_split: Literal["dev", "test", "all"] = "dev"
    dataset_limit: int | None = Field(200, ge=1)  # the first N questions of the split; None: all


class ServerSettings(BaseModel):
    """Every setting's meaning and default: conf/server/default.yaml and docs/serving.md."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_key: str | None = None  # None: no key unless $ORTHRUS_RAG_API_KEY is set (see `from_config`)
    allowed_hosts: list[str] | None = None  # Host headers answered; None: loopback and the bound address (hosts.py)
    metrics_public: bool = False  # with an api_key: true serves /metrics without it
    max_body_bytes: int = Field(1_048_576, ge=1)
    max_embedding_inputs: int = Field(256, ge=1)  # inputs per /v1/embeddings request (400 beyond)
    max_chat_messages: int = Field(256, ge=1)  # messages per /v1/chat/completions request (400 beyond)
    default_max_tokens: int = Field(256, ge=1)  # for a request without max_tokens (less if its prompt leaves less room)
    served_model_name: str | None = None  # None: derived from the generator's name or folder
    served_embedder_name: str | None = None  # None: derived from the embedder's name or folder
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"  # uvicorn's levels
    timeout_graceful_shutdown: float | None = 30.0  # seconds to let in-flight requests finish on shutdown
    request_timeout_s: float | None = Field(600.0, gt=0)  # a /v1 request's deadline (504 past it); None: none
    stream_write_timeout_s: float | None = Field(60.0, gt=0)  # a response its client reads nothing of is cut after
    max_concurrent_per_key: int | None = Field(256, ge=1)  # /v1 requests in flight per API key (429 beyond)
    max_connections: int | None = Field(1024, ge=1)  # connections at once, server-wide (503 beyond); None: no limit
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    rag: RagSettings = Field(default_factory=RagSettings)
    ui: UiSettings = Field(default_factory=UiSettings)
    replicas: int = Field(1, ge=1)  # engine replicas; >1 serves on Ray Serve (orthrus_rag/serving/ray_serve.py)
    ray_address: str | None = None  # the Ray cluster to join; None: a local one (replicas>1 only)
    num_cpus: float = Field(1.0, ge=0)  # CPUs Ray reserves for each replica
    num_gpus: float = Field(0.0, ge=0)  # GPUs Ray gives each replica (1: one accelerator per engine)

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
