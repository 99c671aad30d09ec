"""Cancel a request whose client disconnects before its response starts, or stops reading its response.

A non-streaming route awaits the engine until the whole answer is ready, and nothing in it reads the connection.
This middleware runs the route as its own task and, once the request body has been read, watches the connection:
a disconnect cancels the task, and cancelling the engine call it awaits aborts the engine request and frees its KV
blocks. Once the response has started (a stream), the response watches the connection itself. A response its
client stops reading (a write that cannot go out within `server.stream_write_timeout_s`, the client's and the
kernel's buffers being full) is cancelled the same way, and its connection closed.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLIENT_CLOSED_REQUEST = 499  # the status recorded for a request its client abandoned (never reaches the client)
log = logging.getLogger("orthrus_rag.serving")


class DisconnectMiddleware:
    def __init__(self, app: ASGIApp, write_timeout_s: float | None = None):
        self.app, self.write_timeout_s = app, write_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        call = _Call(receive, send, self.write_timeout_s)
        handler = asyncio.ensure_future(self.app(scope, call.receive, call.send))
        watchers = [asyncio.ensure_future(call.until_disconnected()), asyncio.ensure_future(call.stuck.wait())]
        for task in (handler, *watchers):  # an error nobody awaits any more (after a cancel) is not logged as lost
            task.add_done_callback(_retrieve)
        try:
            await asyncio.wait((handler, *watchers), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this middleware was cancelled (server shutdown): nothing is left running
            handler.cancel()
            raise
        finally:
            for watcher in watchers:
                watcher.cancel()
        if not handler.done():  # the client went away before the response started, or stopped reading it
            handler.cancel()
            await asyncio.wait((handler,))
            if call.stuck.is_set():  # returning with the response unfinished makes the server close the connection
                log.warning("%s %s: the client read nothing for %.3g s (server.stream_write_timeout_s); its request "
                            "was stopped and its connection closed", scope["method"], scope["path"],
                            self.write_timeout_s)
                return
            if handler.cancelled():
                return await call.abandoned()
        await handler  # the result or the route's exception, as without this middleware


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


class _Call:
    """One HTTP exchange: whether the body was read and the response started, the client's disconnect, and a
    response write that could not go out in time (`stuck`)."""

    def __init__(self, receive: Receive, send: Send, write_timeout_s: float | None):
        self._receive, self._send, self.write_timeout_s = receive, send, write_timeout_s
        self.body_read = asyncio.Event()
        self.stuck = asyncio.Event()
        self.started = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self.body_read.set()
        return message

    async def send(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        try:
            await asyncio.wait_for(self._send(message), self.write_timeout_s)
        except asyncio.TimeoutError:
            self.stuck.set()  # the middleware cancels the route, which is waiting here
            await asyncio.Event().wait()

    async def until_disconnected(self) -> None:
        """Returns when the client goes away before the response started; after that it is the response's job."""
        await self.body_read.wait()  # the route owns `receive` until it has read the whole body
        while True:
            message = await self._receive()
            if self.started:  # a started response (a stream) watches the connection itself
                await asyncio.Event().wait()
            if message["type"] == "http.disconnect":
                return

    async def abandoned(self) -> None:
        """Record the abandoned request as 499 for the outer middlewares (the server drops it: the client is gone)."""
        if self.started:
            return
        with contextlib.suppress(Exception):
            await self._send({"type": "http.response.start", "status": CLIENT_CLOSED_REQUEST, "headers": []})
            await self._send({"type": "http.response.body", "body": b""})
