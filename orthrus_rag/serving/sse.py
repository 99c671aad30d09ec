"""Server-sent events: one `data:` line per JSON chunk, ending with `data: [DONE]`."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from orthrus_rag.serving.errors import as_api_error


def event(chunk: BaseModel | dict) -> str:
    body = chunk.model_dump_json() if isinstance(chunk, BaseModel) else json.dumps(chunk, separators=(",", ":"))
    return f"data: {body}\n\n"


def sse_response(chunks: AsyncIterator[BaseModel | dict]) -> StreamingResponse:
    """Events for `chunks`, an error event if they fail after the stream started, then `[DONE]`."""
    async def with_done() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield event(chunk)
        except Exception as err:  # headers are sent already: report the failure inside the stream
            yield event(as_api_error(err).body())
        yield "data: [DONE]\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(with_done(), media_type="text/event-stream", headers=headers)
