"""`POST /v1/embeddings`: one vector per input, as floats or base64 of little-endian float32."""
from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Depends, Request

from orthrus_rag.engine import PoolingParams
from orthrus_rag.rag.pipeline import gather_or_cancel
from orthrus_rag.serving.errors import bad_request
from orthrus_rag.serving.requests import EmbeddingRequest
from orthrus_rag.serving.responses import EmbeddingData, EmbeddingResponse, Usage
from orthrus_rag.serving.limits import shorten_deadline
from orthrus_rag.serving.state import ServerState, get_state

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(req: EmbeddingRequest, request: Request,
                     state: ServerState = Depends(get_state)) -> EmbeddingResponse:
    shorten_deadline(request, req.timeout)
    model, params = pooling_for(state, req.model)
    params.truncate = req.truncate_prompt_tokens
    inputs = split_inputs(req.input)
    if len(inputs) > state.settings.max_embedding_inputs:
        raise bad_request(f"{len(inputs)} inputs in one request; this server embeds at most "
                          f"{state.settings.max_embedding_inputs} per request (server.max_embedding_inputs): send "
                          "them in smaller batches", "input", "too_many_inputs")
    if req.dimensions is not None:
        native = state.engine.embedding_dim(params.model)
        if req.dimensions != native:
            raise bad_request(f"dimensions must be {native} for this model (vectors are not truncated)", "dimensions")
    outputs = await gather_or_cancel([state.engine.embed(x, params) for x in inputs])
    data = [EmbeddingData(index=i, embedding=encode(out.embedding, req.encoding_format))
            for i, out in enumerate(outputs)]
    tokens = sum(out.num_tokens for out in outputs)
    return EmbeddingResponse(data=data, model=model, usage=Usage(prompt_tokens=tokens, total_tokens=tokens))


def pooling_for(state: ServerState, model: str | None) -> tuple[str, PoolingParams]:
    """The served model name and how to pool: the embedder's own settings, or mean over the generator's layers."""
    default = state.embedder_name or state.generator_name
    if model in (None, default):
        e = state.settings.embedding
        return default, PoolingParams(e.pooling, e.normalize, e.model if state.embedder_name else "backbone")
    if model == state.generator_name:
        return model, PoolingParams("mean", True, "backbone")
    known = sorted({default, state.generator_name})
    raise bad_request(f"unknown model {model!r}: embeddings come from one of {known}", "model", "model_not_found")


def split_inputs(value: str | list) -> list[str | list[int]]:
    """One engine input per item: a string, a list of strings, token ids, or a list of token-id lists."""
    if isinstance(value, str):
        return [value]
    return [value] if isinstance(value[0], int) else list(value)  # the schema allows no empty list


def encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    vector = np.asarray(vector, dtype="<f4")
    if encoding_format == "base64":
        return base64.b64encode(vector.tobytes()).decode("ascii")
    return vector.tolist()
