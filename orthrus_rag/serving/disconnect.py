"""Cancel a request whose client disconnects before its response starts.

A non-streaming route awaits the engine until the whole answer is ready, and nothing in it reads the connection.
This middleware runs the route as its own task and, once the request body has been read, watches the connection:
a disconnect cancels the task, and cancelling the engine call it awaits aborts the engine request and frees its KV
blocks. Once the response has started (a stream), the response watches the connection itself.
"""
from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLIENT_CLOSED_REQUEST = 499  # the status recorded for a request its client abandoned (never reaches the client)


class DisconnectMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body_read, started = asyncio.Event(), False

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read.set()
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def until_disconnected() -> None:
            """Returns when the client goes away before the response started; after that it is the response's job."""
            await body_read.wait()  # the route owns `receive` until it has read the whole body
            while True:
                message = await receive()
                if started:  # a started response (a stream) watches the connection itself
                    await asyncio.Event().wait()
                if message["type"] == "http.disconnect":
                    return

        handler = asyncio.ensure_future(self.app(scope, receiving, sending))
        watcher = asyncio.ensure_future(until_disconnected())
        for task in (handler, watcher):  # an error nobody awaits any more (after a cancel) is not logged as lost
            task.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            await asyncio.wait((handler, watcher), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # this middleware was cancelled (server shutdown): nothing is left running
            handler.cancel()
            raise
        finally:
            watcher.cancel()
        if not handler.done():  # the client went away before the response started
            handler.cancel()
            await asyncio.wait((handler,))
            if handler.cancelled():
                if not started:  # recorded as 499 by the outer middlewares (the server drops it: the client is gone)
                    with contextlib.suppress(Exception):
                        await send({"type": "http.response.start", "status": CLIENT_CLOSED_REQUEST, "headers": []})
                        await send({"type": "http.response.body", "body": b""})
                return
        await handler  # the result or the route's exception, as without this middleware
