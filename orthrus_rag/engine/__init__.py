"""The heterogeneous-batching engine: generation and embedding in one inference loop."""
from orthrus_rag.engine.config import EngineConfig
from orthrus_rag.engine.errors import (EngineDeadError, EngineError, InvalidRequestError, QueueFullError,
                                       RequestAbortedError)
from orthrus_rag.engine.request import (EmbedOutput, GenerateOutput, PoolingParams, RequestTimings, SamplingParams,
                                        Usage)

__all__ = ["EmbedOutput", "EngineConfig", "EngineDeadError", "EngineError", "GenerateOutput", "InvalidRequestError",
           "PoolingParams", "QueueFullError", "RequestAbortedError", "RequestTimings", "SamplingParams", "Usage"]
from orthrus_rag.engine.async_engine import AsyncEngine  # noqa: E402
from orthrus_rag.engine.engine import LLMEngine  # noqa: E402

__all__ += ["AsyncEngine", "LLMEngine"]
from orthrus_rag.engine.protocol import EngineLike  # noqa: E402,F401 - the engine as the layers above see it
