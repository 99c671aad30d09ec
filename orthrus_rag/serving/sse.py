"""Server-sent events: one `data:` line per JSON chunk, ending with `data: [DONE]`."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from orthrus_rag.serving.errors import as_api_error

DONE = "data: [DONE]\n\n"


def event(chunk: BaseModel | dict) -> str:
    body = chunk.model_dump_json() if isinstance(chunk, BaseModel) else json.dumps(chunk, separators=(",", ":"))
    return f"data: {body}\n\n"


async def with_done(chunks: AsyncIterator[BaseModel]) -> AsyncIterator[str]:
    """Events for `chunks`, an error event if they fail after the stream started, then `[DONE]`."""
    try:
        async for chunk in chunks:
            yield event(chunk)
    except Exception as err:  # headers are sent already: report the failure inside the stream
        yield event(as_api_error(err).body())
    yield DONE


def sse_response(chunks: AsyncIterator[BaseModel]) -> StreamingResponse:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(with_done(chunks), media_type="text/event-stream", headers=headers)
