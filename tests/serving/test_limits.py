"""The deadline middleware on its own: a started response that ends itself gets its grace, any other is cut."""
import asyncio

import pytest

from orthrus_rag.serving.limits import SCOPE_KEY, LimitsMiddleware


def late_route(grace_s: float, late_s: float):
    """Starts its response, then sends its last chunk `late_s` after the start (past a shorter deadline)."""
    async def route(scope, receive, send):
        scope[SCOPE_KEY].grace_s = grace_s
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(late_s)
        await send({"type": "http.response.body", "body": b"the error event", "more_body": False})
    return route


async def served(route, timeout_s: float) -> list[dict]:
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        await asyncio.sleep(60)

    scope = {"type": "http", "path": "/v1/rag", "headers": [], "client": ("127.0.0.1", 1)}
    await LimitsMiddleware(route, timeout_s, None, None)(scope, receive, send)
    return sent


@pytest.mark.parametrize("grace_s, ends", [(1.0, True), (0.0, False)])
async def test_a_started_stream_ends_itself_within_its_grace_or_is_cut(grace_s, ends):
    sent = await served(late_route(grace_s, late_s=0.3), timeout_s=0.1)  # 0.2 s late, as on a loaded machine
    assert sent[0]["type"] == "http.response.start"
    assert any(m.get("body") == b"the error event" for m in sent) == ends


async def test_the_grace_does_not_outlast_itself():
    start = asyncio.get_running_loop().time()
    sent = await served(late_route(0.2, late_s=5.0), timeout_s=0.1)
    assert asyncio.get_running_loop().time() - start < 2 and len(sent) == 1  # cut at deadline + grace


def held_route(release: asyncio.Event):
    """Answers 200 once `release` is set: a request in flight until then."""
    async def route(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})
    return route


async def status(limits, address: str, authorization: str) -> int:
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        await asyncio.sleep(60)

    scope = {"type": "http", "path": "/v1/completions", "client": (address, 1),
             "headers": [(b"authorization", authorization.encode())]}
    await limits(scope, receive, send)
    return sent[0]["status"]


async def until_in_flight(limits: LimitsMiddleware, count: int) -> None:
    while sum(limits.in_flight.values()) < count:
        await asyncio.sleep(0.01)


async def test_without_a_server_key_requests_count_by_address_whatever_token_they_send():
    release = asyncio.Event()
    limits = LimitsMiddleware(held_route(release), None, 1, None)
    first = asyncio.ensure_future(status(limits, "127.0.0.1", "Bearer a"))
    await asyncio.wait_for(until_in_flight(limits, 1), 5)
    assert await status(limits, "127.0.0.1", "Bearer b") == 429  # another token: the same client address
    other = asyncio.ensure_future(status(limits, "127.0.0.2", "Bearer a"))  # the same token: another address
    await asyncio.wait_for(until_in_flight(limits, 2), 5)
    release.set()
    assert (await first, await other) == (200, 200)


async def test_with_a_server_key_its_holders_share_the_limit_and_others_are_refused_holding_no_slot():
    from orthrus_rag.serving.auth import AuthMiddleware

    release = asyncio.Event()
    limits = LimitsMiddleware(held_route(release), None, 1, "k")
    app = AuthMiddleware(limits, "k", metrics_public=False, ui_public=False)
    first = asyncio.ensure_future(status(app, "127.0.0.1", "bearer k"))  # the scheme in any case
    await asyncio.wait_for(until_in_flight(limits, 1), 5)
    assert await status(app, "127.0.0.2", "Bearer k") == 429
    wrong = [await asyncio.wait_for(status(app, "127.0.0.1", value), 5) for value in ("Bearer x", "Basic k", "k", "")]
    assert wrong == [401, 401, 401, 401] and sum(limits.in_flight.values()) == 1  # answered at once, never counted
    release.set()
    assert await first == 200
