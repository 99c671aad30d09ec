"""DisconnectMiddleware: a route whose client stops reading its response is cancelled after the write timeout."""
from __future__ import annotations

import asyncio
import logging

from orthrus_rag.serving.disconnect import DisconnectMiddleware

SCOPE = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}


def run_stuck_client(write_timeout_s: float | None, wait_s: float) -> tuple[list[str], bool]:
    """A route that streams for ever to a client whose connection takes the response's start and then nothing
    more: returns what happened to the route and whether the middleware returned within `wait_s`."""
    events: list[str] = []

    async def route(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
        except asyncio.CancelledError:
            events.append("route cancelled")
            raise

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()  # the kernel's and the client's buffers are full: never goes out

    async def main() -> bool:
        try:
            await asyncio.wait_for(DisconnectMiddleware(route, write_timeout_s)(SCOPE, receive, send), wait_s)
            return True
        except asyncio.TimeoutError:
            return False

    return events, asyncio.run(main())


def test_a_write_that_cannot_go_out_cancels_the_route_and_returns(caplog):
    with caplog.at_level(logging.WARNING, logger="orthrus_rag.serving"):
        events, returned = run_stuck_client(write_timeout_s=0.2, wait_s=5)
    assert returned and events == ["route cancelled"]
    assert "server.stream_write_timeout_s" in caplog.text and "/v1/completions" in caplog.text


def test_without_a_write_timeout_a_slow_reader_is_waited_for():
    events, returned = run_stuck_client(write_timeout_s=None, wait_s=0.5)
    assert not returned and events == ["route cancelled"]  # cancelled only by the test's own deadline
