"""The heterogeneous-batching engine: generation and embedding in one inference loop."""
from orthrus_rag.engine.async_engine import AsyncEngine
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.engine import LLMEngine
from orthrus_rag.engine.errors import (EngineDeadError, EngineError, InvalidRequestError, QueueFullError,
                                       RequestAbortedError)
from orthrus_rag.engine.protocol import EngineLike  # the engine as the layers above see it
from orthrus_rag.engine.request import (EmbedOutput, GenerateOutput, PoolingParams, RequestTimings, SamplingParams,
                                        Usage)

__all__ = ["AsyncEngine", "EmbedOutput", "EngineConfig", "EngineDeadError", "EngineError", "EngineLike",
           "GenerateOutput", "InvalidRequestError", "LLMEngine", "PoolingParams", "QueueFullError",
           "RequestAbortedError", "RequestTimings", "SamplingParams", "Usage"]
